"""The stores the runner measures, started by the test harness: one `bench-servers` process
(bench/servers.rs, built with `cargo build --example bench-servers`) per store, which starts the
store and TCP proxies on free loopback ports and obeys line commands. The store list is the
tests' (tests/stores.rs), read through `bench-servers --list`. Besides, etcd's own HTTP API:
its /metrics (requests by method, watch events) and, for the expiry reference, its JSON gateway."""

import base64
import http.client
import json
import random
import re
import select
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

from .common import ROOT, TTL_S, BenchError, clean_env, mono


def servers_binary():
    return ROOT / "target" / "debug" / "examples" / "bench-servers"


def build_servers():
    """Builds bench-servers (the harness is test code: a debug build, like the tests')."""
    subprocess.run(["cargo", "build", "--locked", "--quiet", "--example", "bench-servers"], cwd=ROOT, check=True)
    return servers_binary()


def store_list(binary):
    """The store list (tests/stores.rs): [{"name", "bench", "chaos"}], in the list's order."""
    out = subprocess.run([str(binary), "--list"], capture_output=True, text=True, check=True, timeout=30)
    return json.loads(out.stdout)["stores"]


def benchmarked_stores(binary):
    """Names of the stores the benchmarks measure, etcd first."""
    return [s["name"] for s in store_list(binary) if s["bench"]]


class Server:
    """One store served by bench-servers. Every call is one command line and one answer line,
    bounded in time; the process (and so the store and its proxies) ends when its stdin closes."""

    def __init__(self, binary, name, workdir, data_parent=None):
        self.name = name
        env = clean_env({"TMPDIR": str(data_parent)} if data_parent else None)
        self.log = Path(workdir) / f"servers-{name}.log"
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([str(binary), name], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=log, env=env, text=True, bufsize=1)
        self.lock = threading.Lock()
        hello = self._answer(120)
        self.endpoint_url, self.version = hello["endpoint"], hello["version"]

    def _answer(self, timeout):
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            raise BenchError(f"bench-servers {self.name} did not answer within {timeout} s (see {self.log})")
        answer = json.loads(line)
        if "error" in answer:
            raise BenchError(f"bench-servers {self.name}: {answer['error']}")
        return answer

    def call(self, command, timeout=60):
        with self.lock:
            self.proc.stdin.write(command + "\n")
            self.proc.stdin.flush()
            return self._answer(timeout)

    @property
    def port(self):
        return int(re.search(r":(\d+)(/|$)", self.endpoint_url).group(1))

    def endpoint(self, lease=None, options=""):
        """The `--endpoints` value for leader-exec (`options`, e.g. `?sslmode=disable`, appended)."""
        return self.endpoint_url + options

    def proxy(self):
        return ServerProxy(self)

    def in_line(self, lease):
        return self.call(f"in-line {lease}")["count"]

    def requests(self):
        return self.call("requests")["requests"]

    def periodic_requests(self):
        return self.call("periodic")["requests"]

    def expiry_lag(self, count):
        return self.call(f"expiry {count} {TTL_S * 1000}", timeout=TTL_S + 60)["lags"]

    def stop(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


class ServerProxy:
    """A harness TCP proxy in front of a store: cut, frozen, healed, or black-holed after the next
    request. Fault instants are CLOCK_MONOTONIC ns, read by bench-servers just before the fault."""

    def __init__(self, server):
        self.server = server
        answer = server.call("proxy")
        self.id, self.endpoint = answer["proxy"], answer["endpoint"]

    def cut(self):
        return self.server.call(f"cut {self.id}")["at"]

    def black_hole_after_next_request(self):
        self.server.call(f"black-hole {self.id}")

    def last_request(self):
        """(kernel receive instant of the last request let through, when the proxy read it, when
        the first answer came back): CLOCK_MONOTONIC ns or None."""
        a = self.server.call(f"last-request {self.id}")
        return a["sent"], a["read"], a["answer"]

    def stop(self):
        self.server.call(f"drop {self.id}")


# ---------------------------------------------------------------------------------------------
# etcd's own HTTP API


class EtcdApi:
    """etcd's /metrics and JSON gateway at a client endpoint."""

    def __init__(self, server):
        self.endpoint = server.endpoint_url
        self.client_port = server.port

    def count_prefix(self, prefix):
        """Number of keys under `prefix`, through etcd's JSON gateway."""
        key = prefix.encode()
        end = key[:-1] + bytes([key[-1] + 1])
        body = json.dumps({
            "key": base64.b64encode(key).decode(),
            "range_end": base64.b64encode(end).decode(),
            "count_only": True,
        }).encode()
        req = urllib.request.Request(self.endpoint + "/v3/kv/range", data=body, method="POST")
        with urllib.request.urlopen(req, timeout=5) as r:
            return int(json.load(r).get("count", 0))

    def metrics(self):
        """etcd's Prometheus counters: {(name, frozenset(labels)): value}."""
        with urllib.request.urlopen(self.endpoint + "/metrics", timeout=5) as r:
            text = r.read().decode()
        values = {}
        pattern = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})?\s+(\S+)')
        for line in text.splitlines():
            if line.startswith("#"):
                continue
            m = pattern.match(line)
            if not m:
                continue
            labels = frozenset(re.findall(r'(\w+)="([^"]*)"', m.group(3) or ""))
            try:
                values[(m.group(1), labels)] = float(m.group(4))
            except ValueError:
                pass
        return values


def etcd_requests(etcd):
    """gRPC messages etcd has received so far: unary requests and stream messages (keep-alives,
    watch requests) alike."""
    return metric_sum(etcd.metrics(), "grpc_server_msg_received_total")


def metric_sum(metrics, name, **match):
    total = 0.0
    for (n, labels), value in metrics.items():
        if n != name:
            continue
        d = dict(labels)
        if all(d.get(k) == v for k, v in match.items()):
            total += value
    return total


def metric_by(metrics, name, label, **match):
    out = {}
    for (n, labels), value in metrics.items():
        if n != name:
            continue
        d = dict(labels)
        if all(d.get(k) == v for k, v in match.items()):
            out[d.get(label)] = out.get(d.get(label), 0.0) + value
    return out


def handover_traffic(before, after, seconds):
    """What etcd saw between two scrapes: requests other than lease renewals (unary RPCs by
    method, plus watch create/cancel messages), watch events sent, and renewals per second."""
    unary = {}
    b = metric_by(before, "grpc_server_started_total", "grpc_method", grpc_type="unary")
    a = metric_by(after, "grpc_server_started_total", "grpc_method", grpc_type="unary")
    for method in set(a) | set(b):
        d = a.get(method, 0) - b.get(method, 0)
        if d:
            unary[method] = int(d)
    watch_msgs = int(
        metric_sum(after, "grpc_server_msg_received_total", grpc_method="Watch")
        - metric_sum(before, "grpc_server_msg_received_total", grpc_method="Watch")
    )
    renewals = (
        metric_sum(after, "grpc_server_msg_received_total", grpc_method="LeaseKeepAlive")
        - metric_sum(before, "grpc_server_msg_received_total", grpc_method="LeaseKeepAlive")
    )
    events = int(
        metric_sum(after, "etcd_debugging_mvcc_events_total")
        - metric_sum(before, "etcd_debugging_mvcc_events_total")
    )
    return {
        "requests": sum(unary.values()) + watch_msgs,
        "unary": unary,
        "watch_requests": watch_msgs,
        "watch_events": events,
        "renewals_per_s": renewals / seconds if seconds > 0 else 0.0,
        "watchers": int(metric_sum(after, "etcd_debugging_mvcc_watcher_total")),
    }


def etcd_expiry_lag(etcd, count):
    """etcd's own part of a crash failover: leases of TTL_S seconds that are never renewed, each
    with a key; returns the seconds from the grant's answer to the key being gone, per lease.
    etcd checks for expired leases periodically, so this exceeds the TTL by up to that period."""
    results = []

    def one(i, delay):
        time.sleep(delay)
        conn = http.client.HTTPConnection("127.0.0.1", etcd.client_port, timeout=10)

        def call(path, body):
            conn.request("POST", path, json.dumps(body))
            return json.loads(conn.getresponse().read())

        key = base64.b64encode(f"/bench-expiry/{i}".encode()).decode()
        lease = call("/v3/lease/grant", {"TTL": TTL_S})["ID"]
        granted = mono()
        call("/v3/kv/put", {"key": key, "value": key, "lease": lease})
        until = time.monotonic() + TTL_S + 5
        while time.monotonic() < until:
            if int(call("/v3/kv/range", {"key": key, "count_only": True}).get("count", 0)) == 0:
                results.append((mono() - granted) / 1e9)
                break
            time.sleep(0.005)
        conn.close()

    rng = random.Random(count)
    threads = [threading.Thread(target=one, args=(i, rng.random())) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sorted(results)
