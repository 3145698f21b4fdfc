#!/usr/bin/env python3
"""Benchmarks leader-exec side by side with `etcdctl lock` on one etcd, and writes BENCHMARKS.md.

    python3 bench/run.py             # full run of every store: >= 7 runs per scenario and tool; writes
                                     # bench/POSTGRES.md, bench/ZOOKEEPER.md, bench/MYSQL.md,
                                     # bench/PGBOUNCER.md, then BENCHMARKS.md
    python3 bench/run.py --smoke     # one run per scenario, small numbers, writes target/bench/SMOKE.md
                                     # (and target/bench/SMOKE-postgres.md, SMOKE-zookeeper.md,
                                     # SMOKE-mysql.md, SMOKE-pgbouncer.md for the
                                     # other stores the store list marks for benchmarks, each
                                     # skipped when that store does not start here)
    python3 bench/run.py --store postgres   # leader-exec on PostgreSQL beside leader-exec on etcd,
                                            # writes bench/POSTGRES.md
    python3 bench/run.py --store zookeeper  # leader-exec on ZooKeeper beside leader-exec on etcd,
                                            # writes bench/ZOOKEEPER.md
    python3 bench/run.py --store mysql      # leader-exec on MySQL (Debian's MariaDB) beside
                                            # leader-exec on etcd, writes bench/MYSQL.md
    python3 bench/run.py --store pgbouncer  # leader-exec on PostgreSQL through pgbouncer (transaction
                                            # mode) beside leader-exec on etcd, writes bench/PGBOUNCER.md
    python3 bench/run.py --report-from bench/results.json   # render again, measure nothing
                                            # (BENCHMARKS.md's each-store table also takes a store
                                            # measured apart since, e.g. bench/MYSQL.json)

The runner builds leader-exec (`cargo build --release --locked`), the test harness's server
launcher (`cargo build --example bench-servers`: bench/servers.rs, which starts the stores of the
one store list, tests/stores.rs, and TCP proxies, exactly as the tests do) and a tiny child program
(bench/stamp.rs, with rustc). Store data goes on tmpfs when /dev/shm has room, so that the figures
measure the tools and not the disk. Every scenario runs for both tools in alternation
(leader-exec, etcdctl, leader-exec, ...), so that a noisy machine affects both alike. Every figure
is measured from outside the tools: the child (stamp) records its own start, end and signal
instants on CLOCK_MONOTONIC; the runner and the harness's proxies record when they launched,
killed or cut something on the same clock; deaths are observed through pidfds; the stores' own
counters count requests.

The parts: bench/lib/scenarios.py (scenarios that return samples), stats.py (figures, targets,
statistics), report.py with bench/templates/ (the reports' prose), servers.py (the harness's
servers), procs.py, tools.py. Whether commands overlap is not measured here: the integration tests
and the fault-injection suite (tests/chaos) own that verdict.

Standard library only (Python 3.11). Processes are killed by pid only, every wait is bounded.
"""

import argparse
import datetime
import json
import os
import platform
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from lib.common import ROOT, BenchError, Unsupported, clean_env
from lib.procs import History, machine_busy, wait_exit
from lib.report import report, report_store, run_times, store_template
from lib.scenarios import SCENARIOS, STORE_SCENARIOS, Context
from lib.servers import (EtcdApi, Server, benchmarked_stores, build_servers, etcd_expiry_lag, servers_binary,
                         store_list)
from lib.tools import SCRAPE_RATE, SCRAPED_SCENARIOS, Etcdctl, LeaderExec, ScrapedLeaderExec, StoreLeaderExec


def build(args):
    if args.binary:
        binary = Path(args.binary).resolve()
    else:
        print("bench: cargo build --release --locked", file=sys.stderr, flush=True)
        subprocess.run(["cargo", "build", "--release", "--locked"], cwd=ROOT, check=True)
        binary = ROOT / "target" / "release" / "leader-exec"
    return binary


def build_stamp(workdir):
    out = workdir / "stamp"
    subprocess.run(["rustc", "--edition", "2021", "-O", "-o", str(out), str(ROOT / "bench" / "stamp.rs")],
                   check=True)
    return out


def command_output(argv):
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=30, env=clean_env())
        return (p.stdout + p.stderr).strip()
    except Exception as e:  # noqa: BLE001 - reported as text
        return f"({e})"


def machine_info(binary):
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    commit = command_output(["git", "-C", str(ROOT), "describe", "--always", "--dirty", "--abbrev=12"])
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gb": round(mem_gb, 1),
        "kernel": platform.release(),
        "leader_exec": command_output([str(binary), "--version"]) + f" (commit {commit})",
        "etcd": command_output(["etcd", "--version"]).splitlines()[0],
        "etcdctl": " / ".join(command_output(["etcdctl", "version"]).splitlines()),
        "rustc": command_output(["rustc", "--version"]),
        "python": platform.python_version(),
    }


def default_etcd_data():
    """/dev/shm when it can take etcd's preallocated 64 MB WAL files comfortably (containers often
    give it only 64 MB), else the system's temporary directory."""
    try:
        if shutil.disk_usage("/dev/shm").free >= 512 * 2**20:
            return "/dev/shm"
    except OSError:
        pass
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="one run per scenario, small numbers, no verdicts")
    ap.add_argument("--runs", type=int, help="runs per scenario and tool (default 7, smoke 1)")
    ap.add_argument("--fast-runs", type=int,
                    help="runs of the sub-second scenarios: uncontended, check (default 51, smoke 1)")
    ap.add_argument("--chain", type=int, help="handovers per run of the handover scenario (default 30, smoke 2)")
    ap.add_argument("--waiters", type=int, help="waiters on one lease (default 200, smoke 20)")
    ap.add_argument("--handovers", type=int, help="handovers measured per waiters run (default 5, smoke 2)")
    ap.add_argument("--memory-waiters", type=int,
                    help="waiters of the held lease, on this host, in the hold scenario's memory per instance "
                    "(default 10, smoke 3; 0: the tool alone only)")
    ap.add_argument("--hold-seconds", type=float, help="CPU window while holding (default 10, smoke 2)")
    ap.add_argument("--binary", help="use this leader-exec instead of building target/release/leader-exec")
    ap.add_argument("--baseline", help="another leader-exec binary (an older build) to run as a third tool, "
                    "for before/after comparisons of a change")
    ap.add_argument("--unchecked", action="store_true",
                    help="with --store postgres or pgbouncer: also run this build's start without its checks "
                    "(LEADER_EXEC_BENCH_UNCHECKED=1; the binary must be built with --features bench-unchecked, "
                    "see docs/development.md) as another tool in the same alternation")
    ap.add_argument("--baseline-note", default="", help="how the baseline was built, printed in the report")
    ap.add_argument("--scraped", action="store_true",
                    help="run the same binary with --http and a scraper at 10 requests/s as the third tool, "
                    "in the step-down and hold scenarios (instead of --baseline)")
    ap.add_argument("--only", help="comma-separated scenarios: " + ",".join(s[0] for s in SCENARIOS))
    ap.add_argument("--out", help="report file (default BENCHMARKS.md, smoke target/bench/SMOKE.md)")
    ap.add_argument("--etcd-data", default=default_etcd_data(),
                    help="parent directory of etcd's data dir (default /dev/shm, a tmpfs, when it has room)")
    ap.add_argument("--store",
                    help="measure one store: etcd (leader-exec beside etcdctl lock, writes BENCHMARKS.md) or "
                    "another store of the store list (tests/stores.rs: postgres, zookeeper, mysql, pgbouncer): leader-exec on it "
                    "beside leader-exec on etcd, in the scenarios " + ", ".join(STORE_SCENARIOS) + ", writes "
                    "bench/POSTGRES.md, bench/ZOOKEEPER.md, bench/MYSQL.md or bench/PGBOUNCER.md. Without --store a run measures "
                    "every store, the "
                    "other stores first, and BENCHMARKS.md has them all in one table from that run")
    ap.add_argument("--etcd-only", action="store_true",
                    help="without --store: measure etcd beside etcdctl only (BENCHMARKS.md's each-store table "
                    "then takes the other stores from their last runs, bench/POSTGRES.json, ...)")
    ap.add_argument("--seed", type=int, default=6, help="seed for the kill/cut phases")
    ap.add_argument("--report-from", metavar="JSON",
                    help="measure nothing: write the report again from the raw results of an earlier run")
    args = ap.parse_args()
    if args.report_from:
        return rerender(Path(args.report_from), args.out)
    for tool in ("etcd", "etcdctl", "rustc", "cargo"):
        if not shutil.which(tool):
            sys.exit(f"bench: {tool} not found (apt-get install etcd-server etcd-client; rustup)")
    servers = build_servers()
    listed = benchmarked_stores(servers)
    if args.store and args.store not in listed:
        sys.exit(f"bench: --store {args.store}: not a store the benchmarks measure ({', '.join(listed)})")
    smoke = args.smoke
    args.runs = args.runs or (1 if smoke else 7)
    args.fast_runs = args.fast_runs or (1 if smoke else 51)
    args.chain = args.chain or (2 if smoke else 30)
    args.waiters = args.waiters or (20 if smoke else 200)
    args.handovers = args.handovers or (2 if smoke else 5)
    if args.memory_waiters is None:
        args.memory_waiters = 3 if smoke else 10
    args.hold_seconds = args.hold_seconds or (2.0 if smoke else 10.0)
    only = set(args.only.split(",")) if args.only else None
    # `--store S` measures one store (beside etcd); without it, a run goes through every store of
    # the list: the other stores first (bench/POSTGRES.md, ...), then etcd beside etcdctl, whose
    # report (BENCHMARKS.md) puts every store in one table from this run's results.
    others = [s for s in listed if s != "etcd"]
    stores = [args.store] if args.store else ([s for s in listed if s != "etcd" and not args.etcd_only]
                                              + ["etcd"])

    binary = build(args)
    failed = False
    for store in stores:
        failed |= measure(args, binary, servers, store, only, [] if args.etcd_only else others)
    if failed:
        sys.exit(1)


def report_path(args, store):
    """Where a store's report goes: --out names the report of the store measured (of etcd in a
    smoke run of both)."""
    if store != "etcd":
        if args.out and args.store == store:
            return Path(args.out)
        if args.smoke:
            return ROOT / "target" / "bench" / f"SMOKE-{store}.md"
        return ROOT / "bench" / f"{store_template(store)['report']}.md"
    if args.out:
        return Path(args.out)
    return ROOT / "target" / "bench" / "SMOKE.md" if args.smoke else ROOT / "BENCHMARKS.md"


def measure(args, binary, servers, store, only, other_stores):
    """Runs the scenarios against one store and writes its report; returns whether a run failed.
    etcd: leader-exec and etcdctl lock (and a --baseline or --scraped third tool). Another store
    (PostgreSQL, ZooKeeper): leader-exec on it and leader-exec on etcd, in alternation, in
    STORE_SCENARIOS. The stores are the test harness's, served by bench-servers."""
    smoke = args.smoke
    out = report_path(args, store)
    (ROOT / "target" / "bench").mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="run-", dir=ROOT / "target" / "bench"))
    stamp = build_stamp(workdir)
    etcd = second = None
    title = store_template(store)["title"]
    le, ctl = LeaderExec(binary), Etcdctl()
    extra = [LeaderExec(Path(args.baseline).resolve(), "baseline", "leader-exec (baseline)")] if args.baseline else []
    if args.scraped:
        extra = [ScrapedLeaderExec(binary, "baseline", "leader-exec --http, scraped")]
        args.baseline = f"{binary} --http 127.0.0.1:PORT"
        args.baseline_note = args.baseline_note or (
            f"the same binary serving metrics, with a scraper GETting /metrics {SCRAPE_RATE} times a second "
            f"(step-down and hold scenarios only)")
    ctx = None
    rng = random.Random(args.seed)
    results = {}  # figure → tool → [values]
    extras = {}  # scenario → tool → [dict of diagnostics]
    notes = []
    loads = {}
    failures = []
    started_at = datetime.datetime.now(datetime.timezone.utc)
    info = machine_info(binary)  # before measuring: the commit measured is the one checked out now
    print(f"bench: work dir {workdir}", file=sys.stderr, flush=True)
    try:
        etcd = Server(servers, "etcd", workdir, args.etcd_data)
        if store != "etcd":
            try:
                second = Server(servers, store, workdir, args.etcd_data)
            except BenchError as e:
                if not (smoke and not args.store):
                    raise
                # A smoke run goes through every store; one not installed here is skipped.
                print(f"bench: {e}: its smoke run is skipped", file=sys.stderr, flush=True)
                return False
            info[store] = second.version
        ctx = Context(args, workdir, etcd, stamp, second, store_template(store)["endpoint-options"])
        for name, fn, both, quick in SCENARIOS:
            if only and name not in only:
                continue
            if second:
                if name not in STORE_SCENARIOS:
                    continue
                tools = [StoreLeaderExec(binary, store, title), le]
                # Third and fourth tools in the same alternation: an older build on the same
                # store (--baseline), and this build's start without checks (--unchecked).
                if args.baseline:
                    tools.append(StoreLeaderExec(Path(args.baseline).resolve(), store, title,
                                                 f"{store}-baseline", f"leader-exec (baseline) on {title}"))
                if args.unchecked:
                    tools.append(StoreLeaderExec(binary, store, title, f"{store}-unchecked",
                                                 f"leader-exec on {title}, no checks",
                                                 {"LEADER_EXEC_BENCH_UNCHECKED": "1"}))
            else:
                tools = ([le, ctl] if both else [le]) + [
                    t for t in extra if not isinstance(t, ScrapedLeaderExec) or name in SCRAPED_SCENARIOS
                ]
            shared = {}
            if name == "check":
                if subprocess.run([str(binary), "check", "--help"], capture_output=True).returncode != 0:
                    notes.append("`leader-exec check` is not in this build (`leader-exec check --help` fails): "
                                 "the check figure is skipped.")
                    continue
                d = ctx.run_dir("check-holder", le, 0)
                lease = ctx.lease("check", 0)
                holder = ctx.start(le, etcd.endpoint_url, lease, "a", "hold", d)
                a = ctx.started(History(d / "history"), "a")
                shared["check_holder"] = {"lease": lease, "token": a["token"]}
            if name == "crash" and not second:
                # etcd's own share of a crash failover, for the notes: leases nobody renews.
                try:
                    results["etcd_expiry"] = {"etcd": etcd_expiry_lag(EtcdApi(etcd), 3 if smoke else 20)}
                except Exception as e:  # noqa: BLE001 - recorded
                    failures.append(f"etcd expiry reference: {e}")
            if name == "crash" and second:
                # The other store's own share, where it expires leases by itself.
                try:
                    lag = second.expiry_lag(3 if smoke else 20)
                    if lag is not None:
                        results["store_expiry"] = {store: lag}
                except Exception as e:  # noqa: BLE001 - recorded
                    failures.append(f"{title} expiry reference: {e}")
            busy0, load0, t0 = machine_busy(), os.getloadavg()[0], time.monotonic()
            runs = args.fast_runs if quick else args.runs
            refused = set()  # tools that refused this scenario's options: n/a, not run again
            for i in range(runs):
                shared["phase"] = rng.random()
                for tool in tools:
                    if tool.key in refused:
                        continue
                    print(f"bench: {name} run {i + 1}/{runs}: {tool.label}", file=sys.stderr, flush=True)
                    try:
                        figures = fn(ctx, tool, i, shared)
                    except Unsupported as e:
                        refused.add(tool.key)
                        notes.append(f"{name}: n/a for {tool.label}, which refuses the scenario's options in "
                                     f"this build: `{e}`")
                        ctx.procs.cleanup()
                        continue
                    except Exception as e:  # noqa: BLE001 - recorded, the run goes on
                        traceback.print_exc()
                        failures.append(f"{name} run {i + 1} ({tool.label}): {e}")
                        ctx.procs.cleanup()
                        continue
                    diag = {}
                    for k, v in figures.items():
                        if k.startswith("_"):
                            diag[k[1:]] = v
                        else:
                            vals = v if isinstance(v, list) else [v]
                            results.setdefault(k, {}).setdefault(tool.key, []).extend(vals)
                    extras.setdefault(name, {}).setdefault(tool.key, []).append(diag)
            busy1 = machine_busy()
            loads[name] = {
                "load1_start": load0,
                "load1_end": os.getloadavg()[0],
                "machine_busy": (busy1[0] - busy0[0]) / max(1, busy1[1] - busy0[1]),
                "seconds": time.monotonic() - t0,
            }
            if name == "check":
                os.kill(a["pid"], signal.SIGUSR1)
                wait_exit(holder, 10)
    finally:
        if ctx:
            ctx.procs.cleanup()
        for server in (etcd, second):
            if server:
                server.stop()
    finished_at = datetime.datetime.now(datetime.timezone.utc)
    raw = {"args": vars(args), "argv": sys.argv[1:], "store": store, "other_stores": other_stores, "machine": info, "results": results,
           "extras": extras, "loads": loads, "failures": failures, "notes": notes,
           "started_at": started_at.isoformat(), "finished_at": finished_at.isoformat()}
    out.parent.mkdir(parents=True, exist_ok=True)
    raw_path = (out.with_suffix(".json") if (smoke or args.out or second) else ROOT / "bench" / "results.json")
    raw_path.write_text(json.dumps(raw, indent=1, default=str) + "\n")
    common = (args, sys.argv[1:], info, results, extras, loads, failures, notes, started_at, finished_at, raw_path)
    out.write_text(report_store(store, *common) if second else report(*common, stores=other_stores))
    print(f"bench: wrote {out} and {raw_path}", file=sys.stderr)
    if failures:
        print("bench: failures:\n  " + "\n  ".join(failures), file=sys.stderr)
        print(f"bench: the children's records and the tools' stderr are in {workdir}", file=sys.stderr)
        return True
    shutil.rmtree(workdir, ignore_errors=True)
    return False


def list_order(stores):
    """`stores` in the store list's order (tests/stores.rs, read through an existing
    bench-servers build; without one, as given)."""
    try:
        names = [s["name"] for s in store_list(servers_binary())]
    except (OSError, subprocess.SubprocessError, ValueError, KeyError):
        return stores
    return sorted(stores, key=lambda s: names.index(s) if s in names else len(names))


def rerender(raw_path, out):
    """Writes the report of an earlier run again from its raw results (after the text changed)."""
    raw = json.loads(raw_path.read_text())
    args = argparse.Namespace(**raw["args"])
    store = raw.get("store", "etcd")
    if not hasattr(args, "store"):
        args.store = None
    out = Path(out) if out else report_path(args, store)
    when = run_times(raw, raw_path)
    common = (args, raw.get("argv", []), raw["machine"], raw["results"], raw["extras"], raw["loads"],
              raw["failures"], raw["notes"], *when, raw_path.resolve())
    if store != "etcd":
        out.write_text(report_store(store, *common))
    else:
        # The other stores measured at the time (older results: the ones with a template), and
        # any store measured apart since (`--store S` wrote bench/S.json after this run).
        templated = sorted(p.name.removesuffix(".md.in") for p in (ROOT / "bench" / "templates").glob("*.md.in")
                           if not p.name.startswith(("report", "notes")))
        others = raw.get("other_stores") or templated
        others = list_order(others + [s for s in templated if s not in others
                                      and (ROOT / "bench" / f"{store_template(s)['report']}.json").exists()])
        out.write_text(report(*common, stores=others))
    print(f"bench: wrote {out} from {raw_path}", file=sys.stderr)


if __name__ == "__main__":
    main()
