"""Scenarios: each takes the context, the tool and the run index, and returns samples (a dict of
figure name to value or list of values; names starting with `_` are diagnostics). They measure
speed and cost; whether old and new commands overlapped is the tests' verdict (tests/faults.rs,
tests/signals.rs, the chaos suite), not the benchmark's."""

import datetime
import json
import os
import signal
import subprocess
import time

from .common import (RENEW_DEADLINE_S, RETRY_PERIOD_S, TTL_S, BenchError, Unsupported, clean_env, mono, ms,
                     wait_until)
from .procs import DeathWatch, History, Procs, cpu_ns, memory_kb, private_kb, pss_anon_kb, resident_pages, stop, tool_processes, wait_exit
from .servers import EtcdApi, etcd_requests, handover_traffic


class Context:
    def __init__(self, args, workdir, etcd, stamp, second=None, second_options=""):
        self.args = args
        self.workdir = workdir
        self.etcd = etcd  # a servers.Server
        self.etcd_api = EtcdApi(etcd)
        self.second = second  # the other store (a servers.Server), when one is measured
        self.second_options = second_options  # appended to its endpoint (its template's `endpoint-options`)
        self.stamp = str(stamp)
        self.procs = Procs(stamp)
        self.seq = 0

    def run_dir(self, scenario, tool, i):
        self.seq += 1
        d = self.workdir / f"{self.seq:04d}-{scenario}-{tool.key}-{i}"
        d.mkdir(parents=True)
        return d

    def lease(self, scenario, i):
        return f"{scenario}-{i}-{self.seq}"

    def endpoint(self, tool, lease):
        """The store's endpoint for `tool`."""
        if tool.store != "etcd":
            return self.second.endpoint(lease, self.second_options)
        return self.etcd.endpoint_url

    def request_counter(self, tool):
        """A function counting the requests `tool`'s store has received so far, in a comparison
        with another store that can count its requests (ZooKeeper, PostgreSQL, MySQL); else None."""
        if self.second is None or self.second.requests() is None:
            return None
        if tool.store != "etcd":
            return self.second.requests
        return lambda: etcd_requests(self.etcd_api)

    def start(self, tool, endpoint, lease, child_name, mode, run_dir, extra=()):
        history = run_dir / "history"
        argv = tool.argv(endpoint, lease, [self.stamp, child_name, mode], extra)
        env = clean_env({"BENCH_HISTORY": str(history), **getattr(tool, "env", {})})
        return self.procs.spawn(argv, run_dir / f"{child_name}.stderr", env)

    def started(self, history, name, timeout=15):
        r = history.wait("start", name, timeout)
        self.procs.stamp_pids.add(r["pid"])
        return r

    def started_or_refused(self, history, name, wrapper, run_dir, timeout=15):
        """`started`, but a wrapper that exits 125 (a configuration error) before its child
        starts raises Unsupported with the first line it wrote."""
        def settled():
            if history.find("start", name):
                return True
            return wrapper.poll() is not None
        wait_until(settled, timeout)
        if not history.find("start", name) and wrapper.poll() == 125:
            lines = (run_dir / f"{name}.stderr").read_text().strip().splitlines()
            raise Unsupported(lines[0] if lines else f"{name} exited 125")
        return self.started(history, name, 1)

    def wait_in_line(self, tool, lease, count, timeout=15):
        if tool.store != "etcd":
            def standing():
                return self.second.in_line(lease) >= count
        else:
            def standing():
                return self.etcd_api.count_prefix(tool.prefix(lease)) >= count
        if not wait_until(standing, timeout, step=0.01):
            raise BenchError(f"{count} candidates did not stand in line for {lease}")


def scenario_uncontended(ctx, tool, i, _shared):
    d = ctx.run_dir("uncontended", tool, i)
    h = History(d / "history")
    lease = ctx.lease("uncontended", i)
    t0 = mono()
    p = ctx.start(tool, ctx.endpoint(tool, lease), lease, "c", "exit", d)
    rc, exited = wait_exit(p, 15)
    if rc != 0:
        raise BenchError(f"{tool.label} exited {rc} (see {d})")
    start = ctx.started(h, "c", 1)
    return {"uncontended": ms(start["t"] - t0), "uncontended_exit": ms(exited - t0)}


def handover_chain(ctx, tool, d, lease, count, name, counted=0):
    """A chain of `count` handovers on one lease with exactly one waiter at each: the holder's
    child finishes, the waiter's child starts, a new waiter joins behind the new holder, and so
    on. etcd's counters are read around the first `counted` handovers. Returns the figures."""
    h = History(d / "history")
    endpoint = ctx.endpoint(tool, lease)
    counter = None
    if tool.store != "etcd":
        # etcd's counters say nothing about another store: its own, where it has them.
        counter = ctx.request_counter(tool)
        if counter is None:
            counted = 0
    wrappers = [ctx.start(tool, endpoint, lease, f"{name}0", "hold", d)]
    current = ctx.started(h, f"{name}0")
    out = {"latency": [], "requests": [], "events": [], "traffic": []}
    for k in range(1, count + 1):
        wrappers.append(ctx.start(tool, endpoint, lease, f"{name}{k}", "hold", d))
        ctx.wait_in_line(tool, lease, 2)
        time.sleep(0.1)  # the waiter's watch on the holder's key is in place
        if k <= counted:
            before, t_before = (counter() if counter else ctx.etcd_api.metrics()), mono()
            time.sleep(0.1)  # etcd has finished serving the scrape
        os.kill(current["pid"], signal.SIGUSR1)
        ended = h.wait("end", current["name"], 5)
        following = ctx.started(h, f"{name}{k}")
        out["latency"].append(ms(following["t"] - ended["t"]))
        if k <= counted and counter:
            time.sleep(0.3)
            n = counter() - before
            out["requests"].append(n)
            out["traffic"].append({"requests": n})
        elif k <= counted:
            time.sleep(0.3)  # the new leader's own follow-up requests, if any
            traffic = handover_traffic(before, ctx.etcd_api.metrics(), (mono() - t_before) / 1e9)
            out["requests"].append(traffic["requests"])
            out["events"].append(traffic["watch_events"])
            out["traffic"].append(traffic)
        current = following
    os.kill(current["pid"], signal.SIGUSR1)
    for p in wrappers:
        rc, _ = wait_exit(p, 10)
        if rc != 0:
            raise BenchError(f"{tool.label} exited {rc} (see {d})")
    return out


def scenario_handover(ctx, tool, i, _shared):
    d = ctx.run_dir("handover", tool, i)
    chain = handover_chain(ctx, tool, d, ctx.lease("handover", i), ctx.args.chain, "h", counted=1)
    return {
        "handover": chain["latency"],
        "handover_requests": chain["requests"],
        "store_handover_requests": chain["requests"],
        "handover_events": chain["events"],
        "_traffic": chain["traffic"],
    }


def scenario_semaphore(ctx, tool, i, _shared):
    """`--max-holders 2`: two holders and one waiter; the oldest holder's child finishes and the
    waiter's child starts beside the other holder; a new waiter joins, and so on."""
    d = ctx.run_dir("semaphore", tool, i)
    h = History(d / "history")
    lease = ctx.lease("semaphore", i)
    endpoint = ctx.endpoint(tool, lease)
    extra = ("--max-holders", "2")
    # The store's requests are counted around the first handover of each run, as in the
    # handover scenario (etcd: its /metrics, renewals excluded; another store: its own counter).
    counter = ctx.request_counter(tool) if tool.store != "etcd" else None
    counts = tool.store == "etcd" or counter is not None
    wrappers = [ctx.start(tool, endpoint, lease, f"s{k}", "hold", d, extra) for k in range(2)]
    # A store that does not take N > 1 in this build refuses it at once (exit 125): n/a.
    holders = [ctx.started_or_refused(h, f"s{k}", wrappers[k], d) for k in range(2)]
    latency, requests = [], []
    for k in range(2, 2 + ctx.args.chain):
        wrappers.append(ctx.start(tool, endpoint, lease, f"s{k}", "hold", d, extra))
        ctx.wait_in_line(tool, lease, 3)
        time.sleep(0.1)  # the waiter's watch is in place
        counted = counts and k == 2
        if counted:
            before, t_before = (counter() if counter else ctx.etcd_api.metrics()), mono()
            time.sleep(0.1)  # etcd has finished serving the scrape
        oldest = holders.pop(0)
        os.kill(oldest["pid"], signal.SIGUSR1)
        ended = h.wait("end", oldest["name"], 5)
        following = ctx.started(h, f"s{k}")
        latency.append(ms(following["t"] - ended["t"]))
        if counted:
            time.sleep(0.3)  # the new holder's own follow-up requests, if any
            if counter:
                requests.append(counter() - before)
            else:
                traffic = handover_traffic(before, ctx.etcd_api.metrics(), (mono() - t_before) / 1e9)
                requests.append(traffic["requests"])
        holders.append(following)
    for holder in holders:
        os.kill(holder["pid"], signal.SIGUSR1)
    for p in wrappers:
        rc, _ = wait_exit(p, 10)
        if rc != 0:
            raise BenchError(f"{tool.label} exited {rc} (see {d})")
    return {"semaphore": latency, **({"semaphore_requests": requests} if requests else {})}


def scenario_crash(ctx, tool, i, shared):
    d = ctx.run_dir("crash", tool, i)
    h = History(d / "history")
    lease = ctx.lease("crash", i)
    a = ctx.start(tool, ctx.endpoint(tool, lease), lease, "a", "hold", d)
    a_start = ctx.started(h, "a")
    b = ctx.start(tool, ctx.endpoint(tool, lease), lease, "b", "hold", d)
    ctx.wait_in_line(tool, lease, 2)
    # Kill at a random phase relative to the renewals (the same phase for both tools in a pair).
    time.sleep(0.5 + shared["phase"])
    death = DeathWatch(a_start["pid"])
    t_kill = mono()
    os.kill(a.pid, signal.SIGKILL)
    b_start = ctx.started(h, "b", TTL_S + 10)
    # Whether the old child was gone first is the tests' and the chaos suite's verdict
    # (tests/faults.rs, tests/chaos): here only how long after the kill it went.
    old_stopped = ms(death.died - t_kill) if death.died else None
    ctx.procs.kill_stamp(a_start["pid"])
    wait_exit(a, 5)
    os.kill(b_start["pid"], signal.SIGUSR1)
    rc, _ = wait_exit(b, 10)
    if rc != 0:
        raise BenchError(f"{tool.label} (b) exited {rc} (see {d})")
    return {
        "failover": (b_start["t"] - t_kill) / 1e9,
        "_old_child_gone_after_kill_ms": old_stopped,
    }


def scenario_partition(ctx, tool, i, shared):
    d = ctx.run_dir("partition", tool, i)
    h = History(d / "history")
    lease = ctx.lease("partition", i)
    proxy = ctx.etcd.proxy()
    try:
        a = ctx.start(tool, proxy.endpoint, lease, "a", "hold", d)
        a_start = ctx.started(h, "a")
        b = ctx.start(tool, ctx.etcd.endpoint_url, lease, "b", "hold", d)
        ctx.wait_in_line(tool, lease, 2)
        time.sleep(0.5 + shared["phase"])
        death = DeathWatch(a_start["pid"])
        t_cut = proxy.cut()
        b_start = ctx.started(h, "b", TTL_S + 10)
        a_signal = h.find("signal", "a")
        ctx.procs.kill_stamp(a_start["pid"])
        # leader-exec exits 75 by itself; etcdctl lock waits for an unlock that cannot reach etcd.
        rc_a = stop(a, grace=5, sig=signal.SIGKILL) if tool.kind == "etcdctl" else wait_exit(a, 10)[0]
        if tool.kind == "leader-exec" and rc_a != 75:
            raise BenchError(f"leader-exec (a) exited {rc_a}, expected 75 (see {d})")
        os.kill(b_start["pid"], signal.SIGUSR1)
        rc, _ = wait_exit(b, 10)
        if rc != 0:
            raise BenchError(f"{tool.label} (b) exited {rc} (see {d})")
    finally:
        proxy.stop()
    return {
        "failover_cut": (b_start["t"] - t_cut) / 1e9,
        "_old_child_signalled_after_cut_s": (a_signal["t"] - t_cut) / 1e9 if a_signal else None,
        "_gap_ms": ms(b_start["t"] - death.died) if death.died else None,
    }


def parse_log_time(text):
    """RFC 3339 UTC with milliseconds → Unix ns."""
    dt = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return int(dt.timestamp() * 1e3) * 1_000_000


def scenario_stepdown(ctx, tool, i, _shared):
    d = ctx.run_dir("stepdown", tool, i)
    h = History(d / "history")
    lease = ctx.lease("stepdown", i)
    proxy = ctx.etcd.proxy()
    try:
        a = ctx.start(tool, proxy.endpoint, lease, "a", "hold", d, extra=["-v", "--log-format", "json"])
        ctx.started(h, "a")
        time.sleep(0.5)  # the command's start-up requests are done; what comes next is a renewal
        proxy.black_hole_after_next_request()
        sig = h.wait("signal", "a", RENEW_DEADLINE_S + RETRY_PERIOD_S + 5)
        rc, _ = wait_exit(a, 10)
        if rc != 75:
            raise BenchError(f"leader-exec exited {rc}, expected 75 (see {d})")
        last_request_sent_at, last_request_at, first_answer_at = proxy.last_request()
    finally:
        proxy.stop()
    if last_request_sent_at is None or first_answer_at is None:
        raise BenchError("the last renewal or its answer did not pass the proxy")
    answered_in = first_answer_at - last_request_sent_at
    if answered_in >= RETRY_PERIOD_S * 1e9:
        raise BenchError(f"the last renewal was answered only after {ms(answered_in):.0f} ms")
    # leader-exec's deadline is the renewal's send instant (read just before it writes the
    # request) + --renew-deadline; the kernel stamped the request as it was written.
    deadline = last_request_sent_at + int(RENEW_DEADLINE_S * 1e9)
    # Cross-check: leader-exec's own `stepping-down` log line (millisecond resolution).
    offset = time.time_ns() - mono()
    logged = None
    for line in (d / "a.stderr").read_text().splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("event") == "stepping-down":
            logged = parse_log_time(event["time"]) - offset
    return {
        "stepdown": ms(sig["t"] - deadline),
        "_log_to_signal_ms": ms(sig["t"] - logged) if logged else None,
        "_renewal_answered_in_ms": ms(answered_in),
        "_proxy_read_the_renewal_after_ms": ms(last_request_at - last_request_sent_at),
    }


def scenario_hold(ctx, tool, i, _shared):
    d = ctx.run_dir("hold", tool, i)
    h = History(d / "history")
    lease = ctx.lease("hold", i)
    a = ctx.start(tool, ctx.endpoint(tool, lease), lease, "a", "hold", d)
    a_start = ctx.started(h, "a")
    time.sleep(1.5)  # past start-up and the first renewal
    procs = tool_processes(a.pid, exclude={a_start["pid"]})
    # Requests reaching the store while holding: in the store comparisons (in BENCHMARKS.md the
    # 200-waiter scenario counts renewals).
    counter = ctx.request_counter(tool)
    r0 = counter() if counter else None
    c0, t0 = sum(cpu_ns(p) for p in procs), mono()
    time.sleep(ctx.args.hold_seconds)
    c1, t1 = sum(cpu_ns(p) for p in procs), mono()
    r1 = counter() if counter else None
    if tool_processes(a.pid, exclude={a_start["pid"]}) != procs:
        raise BenchError(f"{tool.label} started or lost a process while holding (see {d})")
    mem = [memory_kb(p) for p in procs]
    try:
        frames = [resident_pages(p) for p in procs]
        distinct = len(set().union(*frames)) * os.sysconf("SC_PAGE_SIZE") / 2**20 if all(frames) else None
    except OSError:
        distinct = None
    shared = memory_with_waiters(ctx, tool, lease, d, procs)
    os.kill(a_start["pid"], signal.SIGUSR1)
    rc, _ = wait_exit(a, 10)
    if rc != 0:
        raise BenchError(f"{tool.label} exited {rc} (see {d})")
    return {
        **shared,
        "rss": sum(r for r, _, _ in mem) / 1024,
        "pss": sum(p for _, p, _ in mem) / 1024,
        "anon": sum(a for _, _, a in mem) / 1024,
        **({"distinct": distinct} if distinct is not None else {}),
        "cpu": (c1 - c0) / 1e6 / ((t1 - t0) / 1e9),
        **({"store_requests": (r1 - r0) / ((t1 - t0) / 1e9)} if counter else {}),
        "_per_process_rss_pss_anon_mb": [[round(v / 1024, 2) for v in m] for m in mem],
    }


def memory_with_waiters(ctx, tool, lease, d, holder_procs):
    """Memory per instance on a host that runs several instances of the same tool: the holder and
    `--memory-waiters` waiters of the same lease, all on this machine, so that they share the
    binary's pages (PSS divides each shared page among them). The figures per instance differ in
    kind from the figures of the tool alone (one holding instance, nobody to share its pages
    with): the report names them apart."""
    n = ctx.args.memory_waiters
    if not n:
        return {}
    waiters = [ctx.start(tool, ctx.endpoint(tool, lease), lease, f"m{j}", "hold", d) for j in range(1, n + 1)]
    try:
        ctx.wait_in_line(tool, lease, n + 1, timeout=60)
        time.sleep(1.0)  # past each waiter's start-up: its watch (or look at the line) is in place
        per_waiter = [[memory_kb(p) + (private_kb(p),) for p in tool_processes(w.pid, exclude=set())]
                      for w in waiters]
        anon_once = [sum(pss_anon_kb(p) for p in tool_processes(w.pid, exclude=set())) for w in waiters]
        holder = [memory_kb(p) for p in holder_procs]
    finally:
        for w in waiters:  # they withdraw (TERM) together, then each is waited for
            try:
                os.kill(w.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for w in waiters:
            stop(w, grace=10)
    pss = sum(p for _, p, _ in holder) + sum(p for procs in per_waiter for _, p, _, _ in procs)
    return {
        "pss_per_instance": pss / (n + 1) / 1024,
        "waiter_anon": sum(a for procs in per_waiter for _, _, a, _ in procs) / n / 1024,
        "waiter_anon_once": sum(anon_once) / n / 1024,
        "waiter_private": sum(u for procs in per_waiter for *_, u in procs) / n / 1024,
    }


def scenario_waiters(ctx, tool, i, _shared):
    d = ctx.run_dir("waiters", tool, i)
    # The one-waiter reference, in the same run just before the line is built, so that both see
    # the same machine: other work on a shared machine comes and goes between scenarios.
    # On another store its requests are counted for the one waiter too (etcd's: BENCHMARKS.md).
    counter = ctx.request_counter(tool) if tool.store != "etcd" else None
    reference = handover_chain(ctx, tool, d, ctx.lease("waiters-reference", i), ctx.args.handovers, "r",
                               counted=ctx.args.handovers if counter else 0)
    h = History(d / "history")
    lease = ctx.lease("waiters", i)
    endpoint = ctx.endpoint(tool, lease)
    n = ctx.args.waiters
    holder = ctx.start(tool, endpoint, lease, "w0", "hold", d)
    current = ctx.started(h, "w0")
    wrappers = {"w0": holder}
    for j in range(1, n + 1):
        wrappers[f"w{j}"] = ctx.start(tool, endpoint, lease, f"w{j}", "hold", d)
        if j % 25 == 0:  # don't launch hundreds at once on a small machine
            ctx.wait_in_line(tool, lease, j + 1, timeout=60)
    ctx.wait_in_line(tool, lease, n + 1, timeout=120)
    time.sleep(1.0)
    # What the line costs etcd while nothing happens: renewals, over several renewal periods.
    # Another store: every request (PostgreSQL: each waiter's look at the line).
    periodic = None
    if counter:
        periodic = counter if ctx.second.periodic_requests() is None else ctx.second.periodic_requests
    before, t0 = (periodic() if periodic else ctx.etcd_api.metrics()), mono()
    time.sleep(2.0 if ctx.args.smoke else 10.0)
    if periodic:
        idle_n = periodic() - before
        idle = {"renewals_per_s": idle_n / ((mono() - t0) / 1e9), "requests": idle_n}
    else:
        idle = handover_traffic(before, ctx.etcd_api.metrics(), (mono() - t0) / 1e9)
    out = {"waiters_latency": [], "waiters_requests": [], "waiters_events": [], "_traffic": [],
           "waiters_reference": reference["latency"],
           "store_waiters_reference_requests": reference["requests"],
           "waiters_renewals": idle["renewals_per_s"], "_idle_requests_per_s": idle["requests"] / ((mono() - t0) / 1e9)}
    seen = {r["name"] for r in h.records() if r["kind"] == "start"}
    for _ in range(ctx.args.handovers):
        before = counter() if counter else ctx.etcd_api.metrics()
        t_before = mono()
        time.sleep(0.1)  # etcd has finished serving the scrape
        os.kill(current["pid"], signal.SIGUSR1)
        ended = h.wait("end", current["name"], 5)
        nxt = wait_until(
            lambda: next((r for r in h.records() if r["kind"] == "start" and r["name"] not in seen), None), 15
        )
        if nxt is None:
            raise BenchError(f"no waiter took over within 15 s (see {d})")
        ctx.procs.stamp_pids.add(nxt["pid"])
        seen.add(nxt["name"])
        time.sleep(0.3)
        if counter:
            traffic = {"requests": counter() - before, "watch_events": 0}
        else:
            traffic = handover_traffic(before, ctx.etcd_api.metrics(), (mono() - t_before) / 1e9)
        out["waiters_latency"].append(ms(nxt["t"] - ended["t"]))
        out["waiters_requests"].append(traffic["requests"])
        out.setdefault("store_waiters_requests", []).append(traffic["requests"])
        out["waiters_events"].append(traffic["watch_events"])
        out["_traffic"].append(traffic)
        wrappers.pop(current["name"])
        current = nxt
    # Tear down: the waiters withdraw (TERM), then the last holder's child finishes.
    leader = wrappers.pop(current["name"])
    for p in wrappers.values():
        try:
            os.kill(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    for p in wrappers.values():
        stop(p, grace=20)
    os.kill(current["pid"], signal.SIGUSR1)
    stop(leader, grace=10)
    return out


def scenario_check(ctx, tool, i, shared):
    """`leader-exec check` against a running leader; for reference, one `etcdctl get`."""
    holder = shared["check_holder"]
    t0 = mono()
    if tool.kind == "leader-exec":
        argv = [tool.binary, "check", "--endpoints", ctx.etcd.endpoint_url, "--lease", holder["lease"],
                "--token", holder["token"]]
    else:
        argv = ["etcdctl", "--endpoints", ctx.etcd.endpoint_url, "get", "--prefix", "--keys-only",
                "--sort-by=CREATE", "--order=ASCEND", "--limit=1", f"/leader-exec/{holder['lease']}/"]
    p = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, env=clean_env(), timeout=15)
    t1 = mono()
    if p.returncode != 0:
        raise BenchError(f"{argv[0]} {argv[1] if tool.kind == 'leader-exec' else 'get'} exited "
                         f"{p.returncode}: {p.stderr.decode().strip()}")
    return {"check": ms(t1 - t0)}


# (name, function, both tools?, quick?) — quick scenarios take under a second a run and get
# --fast-runs runs, the others --runs.
SCENARIOS = [
    ("uncontended", scenario_uncontended, True, True),
    ("handover", scenario_handover, True, False),
    ("semaphore", scenario_semaphore, False, False),
    ("check", scenario_check, True, True),
    ("hold", scenario_hold, True, False),
    ("stepdown", scenario_stepdown, False, False),
    ("crash", scenario_crash, True, False),
    ("partition", scenario_partition, True, False),
    ("waiters", scenario_waiters, True, False),
]

# Scenarios run against another store (--store postgres, --store zookeeper, ...): the others
# measure etcd-specific paths (the step-down's black hole scans etcd's gRPC frames; etcdctl and the
# partition compare with etcdctl lock). The waiters scenario counts a store's requests where it
# can (PostgreSQL: pg_stat_statements; MySQL: the performance schema's statement digests;
# ZooKeeper: packets), etcd's from its /metrics.
STORE_SCENARIOS = ("uncontended", "handover", "semaphore", "crash", "hold", "waiters")
