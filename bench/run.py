#!/usr/bin/env python3
"""Benchmarks leader-exec side by side with `etcdctl lock` on one etcd, and writes BENCHMARKS.md.

    python3 bench/run.py             # full run: >= 7 runs per scenario and tool, writes BENCHMARKS.md
    python3 bench/run.py --smoke     # one run per scenario, small numbers, writes target/bench/SMOKE.md
                                     # (and target/bench/SMOKE-postgres.md, SMOKE-zookeeper.md for the
                                     # other stores, each skipped when that store is not installed)
    python3 bench/run.py --store postgres   # leader-exec on PostgreSQL beside leader-exec on etcd,
                                            # writes bench/POSTGRES.md
    python3 bench/run.py --store zookeeper  # leader-exec on ZooKeeper beside leader-exec on etcd,
                                            # writes bench/ZOOKEEPER.md

The runner builds leader-exec (`cargo build --release --locked`) and a tiny child program
(bench/stamp.rs, with rustc), starts its own single-member etcd on free loopback ports (data on
tmpfs when /dev/shm exists, so that the figures measure the tools and not the disk), and runs
every scenario for both tools in alternation (leader-exec, etcdctl, leader-exec, etcdctl, ...),
so that a noisy machine affects both alike. Every figure is measured from outside the tools:
the child (stamp) records its own start, end and signal instants on CLOCK_MONOTONIC; the runner
records when it launched, killed or cut something on the same clock; deaths are observed through
pidfds; etcd's own /metrics count requests and watch events.

Standard library only (Python 3.11). Processes are killed by pid only, every wait is bounded.
"""

import argparse
import base64
import datetime
import http.client
import json
import os
import platform
import random
import re
import select
import shlex
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import traceback
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# One timing profile for both tools: a 5 s lease. leader-exec's flags must satisfy
# renew-deadline + kill-after <= ttl - max(5 % ttl, 250 ms) and retry-period <= renew-deadline / 3.
TTL_S = 5
RENEW_DEADLINE_S = 3.0
RETRY_PERIOD_S = 1.0
LE_TIMING = ["--ttl", "5s", "--renew-deadline", "3s", "--retry-period", "1s", "--kill-after", "1s"]
CTL_TIMING = ["--ttl", str(TTL_S)]

# After the new child started, how long to keep watching whether the old one is still alive.
OVERLAP_WINDOW_S = 1.0


def mono():
    return time.monotonic_ns()


def ms(ns):
    return ns / 1e6


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(condition, timeout, step=0.01):
    """Polls `condition` until it returns something truthy or `timeout` seconds pass."""
    until = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= until:
            return None
        time.sleep(step)


class BenchError(Exception):
    pass


def clean_env(extra=None):
    env = {
        k: v
        for k, v in os.environ.items()
        if not (k.startswith("LEADER_") or k.startswith("ETCDCTL_") or k.startswith("ETCD_"))
    }
    env["ETCDCTL_API"] = "3"
    env.update(extra or {})
    return env


# ---------------------------------------------------------------------------------------------
# Processes


class Procs:
    """Every process the runner starts, so that all of them can be killed (by pid) at the end,
    including children that their wrapper left orphaned."""

    def __init__(self, stamp_path):
        self.popens = []
        self.stamp_path = str(stamp_path)
        self.stamp_pids = set()

    def spawn(self, argv, stderr_path, env):
        with open(stderr_path, "ab") as err:
            p = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                env=env,
                close_fds=True,
            )
        self.popens.append(p)
        return p

    def is_stamp(self, pid):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                return f.read().split(b"\0")[0].decode() == self.stamp_path
        except OSError:
            return False

    def kill_stamp(self, pid, sig=signal.SIGKILL):
        """Signals one of our children by pid, after checking the pid is still ours."""
        if self.is_stamp(pid):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def cleanup(self):
        for p in self.popens:
            if p.poll() is None:
                try:
                    p.kill()
                except ProcessLookupError:
                    pass
        # Children the runner never saw start (a failed run) but whose wrapper left them running:
        # this run's stamp binary has a path of its own, so they are found by their argv[0].
        for entry in os.listdir("/proc"):
            if entry.isdigit() and self.is_stamp(int(entry)):
                self.stamp_pids.add(int(entry))
        for pid in list(self.stamp_pids):
            self.kill_stamp(pid)
        for p in self.popens:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self.popens = [p for p in self.popens if p.returncode is None]


def wait_exit(p, timeout):
    """Waits for a Popen to exit; returns (returncode, exit instant) or (None, None)."""
    if p.returncode is not None:
        return p.returncode, None
    try:
        fd = os.pidfd_open(p.pid)
    except ProcessLookupError:
        p.wait()
        return p.returncode, mono()
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        if not poller.poll(timeout * 1000):
            return None, None
        at = mono()
    finally:
        os.close(fd)
    p.wait()
    return p.returncode, at


def stop(p, grace=3.0, sig=signal.SIGTERM):
    """Stops one of our wrappers: `sig`, then SIGKILL after `grace` seconds."""
    if p.poll() is not None:
        return p.returncode
    try:
        os.kill(p.pid, sig)
    except ProcessLookupError:
        pass
    rc, _ = wait_exit(p, grace)
    if rc is None:
        p.kill()
        rc, _ = wait_exit(p, 5)
    return rc


class DeathWatch:
    """Records the instant a process (any process, not only our child) dies, through a pidfd."""

    def __init__(self, pid):
        self.pid = pid
        self.died = None
        self.gone_already = False
        try:
            self.fd = os.pidfd_open(pid)
        except ProcessLookupError:
            self.gone_already = True
            self.died = mono()
            return
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self):
        poller = select.poll()
        poller.register(self.fd, select.POLLIN)
        poller.poll()
        self.died = mono()
        os.close(self.fd)


def tool_processes(root_pid, exclude):
    """`root_pid` and its descendants, leaving out `exclude` and everything below it."""
    found = []
    todo = [root_pid]
    while todo:
        pid = todo.pop()
        if pid in exclude:
            continue
        found.append(pid)
        try:
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return found


def cpu_ns(pid):
    """CPU time of every thread of the process so far, in ns (from /proc/PID/task/*/schedstat)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


def memory_kb(pid):
    """(Rss, Pss, Anonymous) in kB from smaps_rollup."""
    values = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 2 and parts[0] in ("Rss:", "Pss:", "Anonymous:"):
                values[parts[0][:-1]] = int(parts[1])
    return values["Rss"], values["Pss"], values["Anonymous"]


def resident_pages(pid):
    """The physical pages (frame numbers) mapped by a process, from /proc/PID/pagemap (needs root
    to see frame numbers; returns None without them)."""
    frames = set()
    page = os.sysconf("SC_PAGE_SIZE")
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/pagemap", "rb") as pagemap:
        for line in maps:
            start, end = (int(x, 16) for x in line.split()[0].split("-"))
            if line.split()[-1] == "[vsyscall]":
                continue
            pagemap.seek(start // page * 8)
            data = pagemap.read((end - start) // page * 8)
            for (entry,) in struct.iter_unpack("<Q", data):
                if entry >> 63 & 1:
                    frame = entry & ((1 << 55) - 1)
                    if frame == 0:
                        return None
                    frames.add(frame)
    return frames


def machine_busy():
    """(busy, total) jiffies of all CPUs, from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


# ---------------------------------------------------------------------------------------------
# etcd


class Etcd:
    """A single-member etcd on free loopback ports (never 2379/2380)."""

    def __init__(self, workdir, data_parent):
        self.workdir = workdir
        self.data_parent = data_parent
        self.proc = None
        self.data = None

    def start(self):
        for _ in range(5):
            self.client_port, self.peer_port = free_port(), free_port()
            if 2379 in (self.client_port, self.peer_port) or 2380 in (self.client_port, self.peer_port):
                continue
            self.data = tempfile.mkdtemp(prefix="leader-exec-bench-etcd", dir=self.data_parent)
            os.chmod(self.data, 0o700)
            client = self.endpoint
            peer = f"http://127.0.0.1:{self.peer_port}"
            log = open(self.workdir / "etcd.log", "ab")
            self.proc = subprocess.Popen(
                [
                    "etcd", "--name", "bench", "--data-dir", self.data,
                    "--listen-client-urls", client, "--advertise-client-urls", client,
                    "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                    "--initial-cluster", f"bench={peer}",
                    "--logger", "zap", "--log-outputs", "stderr", "--log-level", "error",
                ],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                env=clean_env(),
            )
            log.close()
            if wait_until(self.healthy, 15, step=0.05):
                return
            self.stop()
        raise BenchError("etcd did not start (see etcd.log)")

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.client_port}"

    def healthy(self):
        try:
            with urllib.request.urlopen(self.endpoint + "/health", timeout=1) as r:
                return json.load(r).get("health") == "true"
        except Exception:
            return False

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None
        if self.data:
            shutil.rmtree(self.data, ignore_errors=True)
            self.data = None

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


# ---------------------------------------------------------------------------------------------
# The other stores (--store postgres, --store zookeeper): leader-exec on them beside leader-exec on
# etcd. Each is a server of the runner's own on a free loopback port, data on tmpfs when there is
# one. What the shared code needs of a store: start/stop, its version, the endpoint leader-exec is
# given for a lease, how many candidates stand in line for a lease, and (optionally) a count of
# the requests it has received and how late it expires a dead client's lease. The rest is text for
# the report.


class SecondStore:
    name = title = report_name = ""
    # What the runner needs installed, and what it does to start the store (report text).
    requirements = ""

    def __init__(self, workdir, data_parent):
        self.workdir = workdir
        self.data_parent = data_parent

    @classmethod
    def missing(cls):
        """Why the store cannot be started here (not installed), or None."""
        return None

    def requests(self):
        """A count of the requests the store has received so far, or None when it has none."""
        return None

    def expiry_lag(self, count):
        """Seconds from a lease's last request to its end, for `count` leases nobody renews; None
        when the store has no reaper (the lease ends when a waiter looks)."""
        return None

    @classmethod
    def setup_text(cls):
        """How the runner starts the store and counts who stands in line (report lines)."""
        return []

    @classmethod
    def differences_text(cls, args, results, med):
        """The report's "What differs between the stores" paragraphs."""
        return []


def pg_bin():
    """The newest installed PostgreSQL's bin directory (Debian: /usr/lib/postgresql/N/bin)."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parent.parent.name)
                   if p.parent.parent.name.isdigit() else 0)
    return found[-1].parent if found else None


class Postgres(SecondStore):
    """A PostgreSQL server of the runner's own: initdb and pg_ctl as the postgres user (initdb
    refuses root) on a temporary directory, TCP on a free loopback port, fsync=off (like etcd's
    data on tmpfs: the figures measure the tools, not the disk)."""

    name, title, report_name = "postgres", "PostgreSQL", "POSTGRES"
    requirements = ("as root (the runner starts PostgreSQL as the `postgres` user with\n"
                    "`runuser`), with `postgresql`, `etcd-server`, `etcd-client`, Rust and Python 3.11 installed:")

    def __init__(self, workdir, data_parent):
        super().__init__(workdir, data_parent)
        self.dir = None
        self.port = None
        self.bin = pg_bin()

    @classmethod
    def missing(cls):
        return None if pg_bin() else "PostgreSQL is not installed (apt-get install postgresql)"

    def as_postgres(self, program, *args, **kw):
        return subprocess.run(["runuser", "-u", "postgres", "--", str(self.bin / program), *args],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60, **kw)

    def start(self):
        if self.bin is None:
            raise BenchError(self.missing())
        self.dir = Path(tempfile.mkdtemp(prefix="leader-exec-bench-pg", dir=self.data_parent))
        shutil.chown(self.dir, "postgres", "postgres")
        data = self.dir / "data"
        r = self.as_postgres("initdb", "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync")
        if r.returncode != 0:
            raise BenchError(f"initdb: {r.stderr.strip()}")
        for _ in range(5):
            self.port = free_port()
            options = (f"-c listen_addresses=127.0.0.1 -p {self.port} -k {data} -c fsync=off "
                       f"-c max_connections=600 -c shared_preload_libraries=pg_stat_statements")
            r = self.as_postgres("pg_ctl", "-D", str(data), "-o", options, "-l", str(self.dir / "log"),
                                 "-w", "-t", "30", "start")
            if r.returncode == 0:
                self.sql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
                return
        raise BenchError(f"PostgreSQL did not start (see {self.dir / 'log'})")

    def url(self, application_name="leader-exec"):
        return (f"postgres://postgres@127.0.0.1:{self.port}/postgres?sslmode=disable"
                f"&application_name={application_name}")

    def endpoint(self, lease):
        """Sessions are named after the lease, so that the runner can count who stands in line."""
        return self.url(f"bench-{lease}")

    def version(self):
        if self.bin is None:
            return "not installed"
        return command_output([str(self.bin / "postgres"), "--version"])

    def sql(self, statement):
        p = subprocess.run(["psql", "-X", "-q", "-At", "-d", self.url("bench-runner"), "-c", statement],
                           capture_output=True, text=True, timeout=10, env=clean_env())
        return p.stdout.strip() if p.returncode == 0 else None

    def requests(self):
        """Statements the server has run so far (pg_stat_statements), less the runner's own (every
        one of which reads a pg_stat_ view) and the waiters' periodic looks at the line (`looks`),
        as etcd's counts leave out lease renewals."""
        return self._calls("query NOT LIKE '%pg_stat%' AND query NOT LIKE 'WITH mine AS%'")

    def looks(self):
        """The waiters' periodic looks at the line so far (one per waiter per retry period)."""
        return self._calls("query LIKE 'WITH mine AS%'")

    def _calls(self, where):
        out = self.sql(f"SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE {where}")
        try:
            return float(out)
        except (TypeError, ValueError):
            return None

    def in_line(self, lease):
        """The waiter rows of the lease and its holder: one per instance of leader-exec that
        stands in line (or leads)."""
        out = self.sql(f"SELECT (SELECT count(*) FROM leader_exec_waiters WHERE name = '{lease}') + "
                       f"(SELECT count(*) FROM leader_exec_leases WHERE name = '{lease}' AND holder IS NOT NULL)")
        return int(out) if out and out.isdigit() else 0

    def stop(self):
        if self.dir is None:
            return
        if self.port is not None:
            self.as_postgres("pg_ctl", "-D", str(self.dir / "data"), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = None

    @classmethod
    def setup_text(cls):
        return [
            "PostgreSQL: `initdb -A trust --no-sync` and `pg_ctl start` as the postgres user on a temporary",
            "directory (`--etcd-data`, default /dev/shm), TCP on a free loopback port, `fsync=off` (like etcd's",
            "data on tmpfs: the figures measure the tool, not the disk). leader-exec connects with",
            "`sslmode=disable`; the runner counts who stands in line from `leader_exec_waiters` and the lease",
            "row, and statements from `pg_stat_statements`. Raw values in",
        ]

    @classmethod
    def differences_text(cls, args, results, med):
        return [
            f"**Uncontended start.** On PostgreSQL leader-exec opens a session, checks it (primary, schema,",
            f"`search_path`: one round trip), checks that its tables exist and who owns them (one round trip,",
            f"pipelined) and makes one acquiring `UPDATE` (sent unnamed: one round trip). A waiter's",
            f"listening session (`LISTEN`, and the `NOTIFY` check for pgbouncer) opens in the background after",
            f"that first answer, never for an instance that won; the renewal has a session of its own, opened at",
            f"the first renewal. On etcd it grants a lease, creates its key and reads its place in line.",
            "",
            f"**Graceful handover.** Waiters stand in line (`leader_exec_waiters`, ordered by ids from a",
            f"sequence), the first four listening on channels of their own. The holder's release is one `UPDATE` that",
            f"notifies the first waiter in the same statement; that waiter's listening session receives it and",
            f"it takes the released row at once with one conditional `UPDATE` ({med('handover', digits=2)} ms median",
            f"against {med('handover', 'leader-exec')} ms on etcd, where the one waiter watching its predecessor's",
            f"key reads the line once more and starts). The other waiters sleep on: with {args.waiters} waiters the",
            f"handover makes the same statements; besides, each waiter looks at the line once per retry period",
            f"(one statement: it renews its own row and reads the row ahead and the lease row), counted apart.",
            "",
            f"**Crash failover.** Nobody releases the row, and no wall clock decides a takeover (the",
            f"server's `now()` may be stepped): the waiter reads the row every retry period and takes it with",
            f"one conditional `UPDATE` once it has itself seen it unchanged (holder, token, renewal count) for",
            f"a full ttl on its own boot clock, counted from the first read that showed the holder's last",
            f"renewal. That read comes up to one retry period after the renewal, which came up to one retry",
            f"period before the kill: the failover takes between ttl − retry period and ttl + retry period",
            f"after the kill ({TTL_S} s ± {RETRY_PERIOD_S:g} s here), up to one retry period more than when",
            f"the row's server-side expiry decided. PostgreSQL has no lease reaper, so there is no lag like",
            f"etcd's expiry check (BENCHMARKS.md, crash failover).",
            "",
            f"**Memory and CPU while holding.** The same two processes; on PostgreSQL the main one keeps three",
            f"sessions (requests, the listening one, renewals) and renews with one `UPDATE` every",
            f"{RETRY_PERIOD_S:g} s. The server's own processes are not counted, as etcd's are not.",
            "",
        ]


class ZkClient:
    """A tiny ZooKeeper client (the jute protocol over TCP), for the runner's own reads: enough to
    list a node's children, check a node, and create an ephemeral node whose session is then left
    to expire. Blocking, one request at a time."""

    NO_NODE, NODE_EXISTS = -101, -110

    def __init__(self, port, session_timeout_ms=10_000):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.xid = 0
        # ConnectRequest: protocolVersion, lastZxidSeen, timeOut, sessionId, passwd, readOnly.
        self._send(struct.pack(">iqiqi", 0, 0, session_timeout_ms, 0, 16) + bytes(16) + b"\0")
        response = self._receive()
        self.timeout_ms, self.session_id = struct.unpack(">iq", response[4:16])
        if self.session_id == 0:
            raise BenchError("ZooKeeper refused the runner's session")

    def _send(self, body):
        self.sock.sendall(struct.pack(">i", len(body)) + body)

    def _read(self, n):
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise OSError("ZooKeeper closed the connection")
            data += chunk
        return data

    def _receive(self):
        return self._read(struct.unpack(">i", self._read(4))[0])

    def call(self, op, payload=b""):
        """One request; returns (error code, the reply's body). Watch events are skipped."""
        self.xid += 1
        self._send(struct.pack(">ii", self.xid, op) + payload)
        while True:
            reply = self._receive()
            xid, _zxid, err = struct.unpack(">iqi", reply[:16])
            if xid == self.xid:
                return err, reply[16:]

    @staticmethod
    def text(value):
        data = value.encode() if isinstance(value, str) else value
        return struct.pack(">i", len(data)) + data

    def children(self, path):
        """The names of a node's children; [] when the node does not exist."""
        err, body = self.call(8, self.text(path) + b"\0")  # getChildren, no watch
        if err == self.NO_NODE:
            return []
        if err:
            raise BenchError(f"ZooKeeper getChildren {path}: error {err}")
        (count,), at, names = struct.unpack(">i", body[:4]), 4, []
        for _ in range(max(count, 0)):
            (n,) = struct.unpack(">i", body[at:at + 4])
            names.append(body[at + 4:at + 4 + n].decode())
            at += 4 + n
        return names

    def exists(self, path):
        err, _ = self.call(3, self.text(path) + b"\0")
        if err not in (0, self.NO_NODE):
            raise BenchError(f"ZooKeeper exists {path}: error {err}")
        return err == 0

    def create(self, path, ephemeral=False):
        """Creates `path` (open ACL); an existing node is fine."""
        acl = struct.pack(">ii", 1, 31) + self.text("world") + self.text("anyone")
        err, _ = self.call(1, self.text(path) + self.text(b"") + acl + struct.pack(">i", 1 if ephemeral else 0))
        if err not in (0, self.NODE_EXISTS):
            raise BenchError(f"ZooKeeper create {path}: error {err}")

    def close(self, end_session=True):
        """Ends the session (closeSession), or only drops the connection and leaves the session
        to expire, as a client that was SIGKILLed does."""
        try:
            if end_session:
                self.call(-11)
        except OSError:
            pass
        finally:
            self.sock.close()


ZK_JARS = ["zookeeper", "zookeeper-jute", "slf4j-api", "slf4j-nop", "netty-handler", "netty-common",
           "netty-buffer", "netty-transport", "netty-codec", "netty-resolver", "netty-transport-native-epoll",
           "netty-transport-native-unix-common", "metrics-core", "commons-io", "snappy-java"]
ZK_JAVA = Path("/usr/share/java")
ZK_TICK_MS = 500


class ZooKeeper(SecondStore):
    """A standalone ZooKeeper server of the runner's own (Debian's zookeeper package, run with
    java directly), client port on a free loopback port, data on tmpfs when there is one,
    forceSync=no (like etcd's data on tmpfs and PostgreSQL's fsync=off)."""

    name, title, report_name = "zookeeper", "ZooKeeper", "ZOOKEEPER"
    requirements = ("with `zookeeper` (Debian's package, and a Java runtime), `etcd-server`,\n"
                    "`etcd-client`, Rust and Python 3.11 installed:")

    def __init__(self, workdir, data_parent):
        super().__init__(workdir, data_parent)
        self.dir = None
        self.port = None
        self.proc = None
        self.words = 0  # four-letter words the runner sent: the server counts each as a packet

    @classmethod
    def missing(cls):
        absent = [f"{jar}.jar" for jar in ZK_JARS if not (ZK_JAVA / f"{jar}.jar").exists()]
        if absent:
            return (f"ZooKeeper is not installed ({', '.join(absent[:3])}{' …' if len(absent) > 3 else ''} "
                    f"not in {ZK_JAVA}; apt-get install zookeeper)")
        if not shutil.which("java"):
            return "java not found, which ZooKeeper needs (apt-get install zookeeper)"
        return None

    def start(self):
        why = self.missing()
        if why:
            raise BenchError(why)
        self.dir = Path(tempfile.mkdtemp(prefix="leader-exec-bench-zk", dir=self.data_parent))
        classpath = ":".join([str(self.dir), *(str(ZK_JAVA / f"{jar}.jar") for jar in ZK_JARS)])
        for _ in range(5):
            self.port = free_port()
            (self.dir / "zoo.cfg").write_text("\n".join([
                f"tickTime={ZK_TICK_MS}",
                f"dataDir={self.dir / 'data'}",
                f"clientPort={self.port}",
                "clientPortAddress=127.0.0.1",
                "admin.enableServer=false",
                "4lw.commands.whitelist=ruok,srvr,mntr,cons,stat",
                "minSessionTimeout=1000",
                "maxSessionTimeout=30000",
                "forceSync=no",
            ]) + "\n")
            with open(self.workdir / "zookeeper.log", "ab") as log:
                self.proc = subprocess.Popen(
                    ["java", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xmx256m", "-cp", classpath,
                     "org.apache.zookeeper.server.ZooKeeperServerMain", str(self.dir / "zoo.cfg")],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=clean_env(),
                )
            if wait_until(self.ready, 60, step=0.1):
                return
            self.kill()
        raise BenchError(f"ZooKeeper did not start (see {self.workdir / 'zookeeper.log'})")

    def four(self, word):
        """A four-letter word's answer, or None."""
        self.words += 1
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=2) as s:
                s.sendall(word.encode())
                data = b""
                while chunk := s.recv(65536):
                    data += chunk
            return data.decode(errors="replace")
        except OSError:
            return None

    def ready(self):
        if self.proc.poll() is not None:
            return False
        out = self.four("srvr")
        return bool(out) and "Mode: standalone" in out

    def mntr(self):
        values = {}
        for line in (self.four("mntr") or "").splitlines():
            key, _, value = line.partition("\t")
            values[key] = value
        return values

    def requests(self):
        """Packets the server has received from clients: requests and pings, less the runner's own
        four-letter words (this one included)."""
        value = self.mntr().get("zk_packets_received")
        return float(value) - self.words if value else None

    def endpoint(self, lease):
        return f"zk://127.0.0.1:{self.port}"

    def in_line(self, lease):
        """Children of the election node: one ephemeral-sequential node per candidate."""
        client = ZkClient(self.port)
        try:
            return len(client.children(f"/leader-exec/{lease}"))
        finally:
            client.close()

    def version(self):
        srvr = self.four("srvr") if self.port else None
        line = next((l for l in (srvr or "").splitlines() if l.startswith("Zookeeper version:")), None)
        java = command_output(["java", "-version"]).splitlines()
        if line:  # Debian's build leaves a placeholder for the commit: "3.8.0-${mvngit.commit.id}, built on …"
            line = re.sub(r"-\$\{[^}]*\}", "", line.replace("Zookeeper version:", "ZooKeeper")).strip()
        return (line or "ZooKeeper (version unknown)") + (
            f" on {java[0]}" if java else "")

    def expiry_lag(self, count):
        """Sessions of TTL_S seconds, each with an ephemeral node, whose connection is dropped right
        after the create (nothing else is sent): seconds from the create's answer to the node
        being gone. The server expires sessions on tick boundaries, so up to a tick late."""
        results = []
        setup = ZkClient(self.port)
        setup.create("/bench-expiry")
        setup.close()

        def one(i, delay):
            time.sleep(delay)
            path = f"/bench-expiry/{i}"
            victim = ZkClient(self.port, TTL_S * 1000)
            victim.create(path, ephemeral=True)
            created = mono()
            victim.close(end_session=False)
            watcher = ZkClient(self.port)
            try:
                until = time.monotonic() + TTL_S + 5
                while time.monotonic() < until:
                    if not watcher.exists(path):
                        results.append((mono() - created) / 1e9)
                        break
                    time.sleep(0.005)
            finally:
                watcher.close()

        rng = random.Random(count)
        threads = [threading.Thread(target=one, args=(i, rng.random())) for i in range(count)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return sorted(results)

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.proc is not None:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self.proc = None

    def stop(self):
        self.kill()
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    @classmethod
    def setup_text(cls):
        return [
            "ZooKeeper: Debian's `zookeeper` package (3.8), `ZooKeeperServerMain` run with `java` directly",
            f"(`-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xmx256m`), standalone, `tickTime={ZK_TICK_MS}`, data in a",
            "temporary directory (`--etcd-data`, default /dev/shm), `forceSync=no` (like etcd's data on tmpfs:",
            "the figures measure the tool, not the disk), client port on a free loopback port, session timeouts",
            "1 – 30 s. leader-exec gets `--endpoints zk://127.0.0.1:PORT`; the runner counts the candidates",
            "standing in line as the children of `/leader-exec/LEASE` (a tiny client of its own), and the",
            "requests reaching the server from the `mntr` four-letter word (`zk_packets_received`). Raw values in",
        ]

    @classmethod
    def differences_text(cls, args, results, med):
        expiry = results.get("store_expiry", {}).get(cls.name, [])
        expiry_text = (f"in this run a {TTL_S} s session that sent nothing more was gone {min(expiry):.2f} – "
                       f"{max(expiry):.2f} s after its last request (median {statistics.median(expiry):.2f} s, "
                       f"{len(expiry)} sessions)") if expiry else "(not measured in this run)"
        return paragraphs(
            f"**Uncontended start.** On ZooKeeper leader-exec opens a session — the session is the lease: "
            f"`--ttl` is the session timeout it asks for, {TTL_S} s here, which the server grants as it lies "
            f"within its 1 – 30 s bounds — makes sure the election node `/leader-exec/LEASE` exists, creates "
            f"its ephemeral-sequential node under it and lists the children to find its place in line. On etcd "
            f"it grants a lease, creates its key and reads its place in line.",

            f"**Graceful handover.** The holder deletes its node (then its `status` node) and closes its "
            f"session; the one waiter that watches the node just ahead of its own (Curator's `LeaderLatch` "
            f"layout) is told of the deletion, lists the children once more and starts its command "
            f"({med('handover')} ms median on ZooKeeper against {med('handover', 'leader-exec')} ms on etcd, where "
            f"the one waiter watching its predecessor's key reads the line once more and starts).",

            f"**Crash failover.** Nobody deletes the node: it goes when the server expires the killed leader's "
            f"session, {TTL_S} s after the last packet the server received from it. leader-exec renews with a "
            f"`sync` and an `exists` every retry period ({RETRY_PERIOD_S:g} s here), so the session ends between "
            f"ttl − retry period and ttl after the kill — plus the server's lag: it expires sessions on tick "
            f"boundaries (`tickTime`, {ZK_TICK_MS} ms here), so up to a tick late; {expiry_text}. The waiter "
            f"watching the node is told of the deletion and starts at once.",

            f"**Memory and CPU while holding.** The same two processes; on ZooKeeper the main one keeps one "
            f"session (one TCP connection) and renews with a `sync` and an `exists` every {RETRY_PERIOD_S:g} s. "
            f"Its client library (the `zookeeper-client` crate) also wakes every session timeout / 20 "
            f"({TTL_S * 1000 // 20} ms here) to check the connection, and pings when it has sent nothing for "
            f"three of those ({3 * TTL_S * 1000 // 20} ms): between two renewals a second apart one ping goes out. "
            f"Hence {med('store_requests', digits=1)} requests per second reaching ZooKeeper (sync, exists, ping) "
            f"against {med('store_requests', 'leader-exec', 1)} on etcd (one lease keep-alive), and more CPU "
            f"while holding ({med('cpu')} against {med('cpu', 'leader-exec')} ms per s, still under 1 ms per s). "
            f"\"Requests reaching the store\" counts what the server received from all clients over the CPU "
            f"window, while only this instance ran: on ZooKeeper `zk_packets_received` from `mntr` (requests and "
            f"pings; the runner's own four-letter words left out), on etcd every gRPC message received "
            f"(`grpc_server_msg_received_total`: unary requests and stream messages such as lease keep-alives). "
            f"The server's own processes are not counted, as etcd's are not.",
        )


STORES = {store.name: store for store in (Postgres, ZooKeeper)}


def paragraphs(*texts, width=100):
    """Report lines: each text wrapped to `width`, followed by an empty line."""
    out = []
    for text in texts:
        out += textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False) + [""]
    return out


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


# ---------------------------------------------------------------------------------------------
# A TCP proxy in front of etcd that can cut every connection or black-hole the client's traffic


def _reset(sock):
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


SO_TIMESTAMPNS = 35  # Linux; receive timestamps as a struct timespec on CLOCK_REALTIME


class FrameScanner:
    """Follows the HTTP/2 frames a client sends, to tell where a DATA frame (a gRPC message,
    such as a lease renewal) ends."""

    PREFACE = 24

    def __init__(self):
        self.preface_left = self.PREFACE
        self.header = b""
        self.payload_left = 0
        self.current = None

    def feed(self, data):
        """Returns [(type, length, end offset in data)] for the frames that end in `data`."""
        done = []
        i = 0
        n = len(data)
        while i < n:
            if self.preface_left:
                take = min(self.preface_left, n - i)
                self.preface_left -= take
                i += take
            elif self.payload_left:
                take = min(self.payload_left, n - i)
                self.payload_left -= take
                i += take
                if not self.payload_left:
                    done.append((self.current[0], self.current[1], i))
            else:
                take = min(9 - len(self.header), n - i)
                self.header += data[i:i + take]
                i += take
                if len(self.header) == 9:
                    length = int.from_bytes(self.header[:3], "big")
                    self.current = (self.header[3], length)
                    self.header = b""
                    self.payload_left = length
                    if length == 0:
                        done.append((self.current[0], 0, i))
        return done


class Proxy:
    def __init__(self, target_port):
        self.target_port = target_port
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.lock = threading.Lock()
        self.sockets = []
        self.cut_off = False
        self.stopped = False
        # Black hole: after the next DATA frame from the client, drop everything it sends.
        self.armed = False
        self.blackholed = False
        self.last_request_at = None  # when the proxy read it (CLOCK_MONOTONIC)
        self.last_request_sent_at = None  # the kernel's receive timestamp, as CLOCK_MONOTONIC
        self.first_answer_at = None
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.port}"

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.stopped or self.cut_off:
                _reset(client)
                if self.stopped:
                    return
                continue
            try:
                server = socket.create_connection(("127.0.0.1", self.target_port), timeout=2)
                server.settimeout(None)
            except OSError:
                _reset(client)
                continue
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self.lock:
                self.sockets += [client, server]
            threading.Thread(target=self._upstream, args=(client, server), daemon=True).start()
            threading.Thread(target=self._downstream, args=(server, client), daemon=True).start()

    def _upstream(self, src, dst):
        scanner = FrameScanner()
        # The kernel stamps every segment as it arrives; on loopback that happens inside the
        # sender's write, so it tells when the client sent it, however late this thread reads it.
        src.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        try:
            while True:
                data, ancillary, _, _ = src.recvmsg(65536, socket.CMSG_SPACE(16))
                at = mono()
                sent_at = None
                for level, kind, value in ancillary:
                    if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(value) >= 16:
                        sec, nsec = struct.unpack("qq", value[:16])
                        sent_at = sec * 1_000_000_000 + nsec - (time.time_ns() - mono())
                if not data or self.cut_off:
                    break
                if self.blackholed:
                    continue
                frames = scanner.feed(data)
                if self.armed:
                    data_frames = [end for (kind, length, end) in frames if kind == 0 and length > 0]
                    if data_frames:
                        # Before forwarding: the answer may come back (to the other thread) while
                        # this one still waits in sendall.
                        self.last_request_at = at
                        self.last_request_sent_at = sent_at
                        self.blackholed = True
                        self.armed = False
                        dst.sendall(data[:data_frames[0]])
                        continue
                dst.sendall(data)
        except OSError:
            pass
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def _downstream(self, src, dst):
        try:
            while True:
                data = src.recv(65536)
                at = mono()
                if not data or self.cut_off:
                    break
                if self.blackholed and self.first_answer_at is None:
                    self.first_answer_at = at
                dst.sendall(data)
        except OSError:
            pass
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def cut(self):
        """Resets every connection and refuses new ones: a partition."""
        self.cut_off = True
        with self.lock:
            sockets, self.sockets = self.sockets, []
        for s in sockets:
            _reset(s)

    def blackhole_after_next_request(self):
        """Lets the client's next gRPC message through (and the answers to it), then drops
        everything the client sends, as a black-holed route would."""
        self.armed = True

    def stop(self):
        self.stopped = True
        self.cut()
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
        except OSError:
            pass
        self.listener.close()


# ---------------------------------------------------------------------------------------------
# The child's records


class History:
    def __init__(self, path):
        self.path = path

    def records(self):
        try:
            with open(self.path) as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            return []
        out = []
        for line in lines:
            parts = line.split()
            if not parts:
                continue
            kind, name = parts[0], parts[1]
            if kind == "start" and len(parts) == 5:
                out.append({"kind": kind, "name": name, "pid": int(parts[2]), "token": parts[3], "t": int(parts[4])})
            elif kind == "end" and len(parts) == 3:
                out.append({"kind": kind, "name": name, "t": int(parts[2])})
            elif kind == "signal" and len(parts) == 4:
                out.append({"kind": kind, "name": name, "signo": int(parts[2]), "t": int(parts[3])})
        return out

    def find(self, kind, name=None):
        for r in self.records():
            if r["kind"] == kind and (name is None or r["name"] == name):
                return r
        return None

    def wait(self, kind, name, timeout):
        r = wait_until(lambda: self.find(kind, name), timeout)
        if r is None:
            raise BenchError(f"no `{kind} {name}` record within {timeout} s ({self.path})")
        return r


# ---------------------------------------------------------------------------------------------
# The two tools


class LeaderExec:
    kind = "leader-exec"
    store = "etcd"

    def __init__(self, binary, key="leader-exec", label="leader-exec"):
        self.binary = str(binary)
        self.key = key
        self.label = label

    def argv(self, endpoint, lease, child, extra=()):
        return [self.binary, "--endpoints", endpoint, "--lease", lease, *LE_TIMING, *extra, "--", *child]

    def prefix(self, lease):
        return f"/leader-exec/{lease}/"


class StoreLeaderExec(LeaderExec):
    """The same leader-exec against the runner's other store (PostgreSQL, ZooKeeper); its results
    are keyed by the store's name."""

    def __init__(self, binary, store):
        super().__init__(binary, store.name, f"leader-exec on {store.title}")
        self.store = store.name


# Scenarios run against another store (--store postgres, --store zookeeper): the others measure
# etcd-specific paths (the proxy scans etcd's gRPC frames; requests are counted from etcd's
# /metrics). The waiters scenario counts a store's requests where it can (PostgreSQL:
# pg_stat_statements; ZooKeeper: packets), etcd's from its /metrics.
STORE_SCENARIOS = ("uncontended", "handover", "crash", "hold", "waiters")


# The scraper of the --scraped tool: requests per second, and the longest it runs for one instance.
SCRAPE_RATE = 10
SCRAPE_LIMIT_S = 120


def scrape(port):
    """GETs /metrics SCRAPE_RATE times a second until the instance stops answering (or for at most
    SCRAPE_LIMIT_S): the load a Prometheus server scraping far too often would put on it."""
    started, seen, misses = time.monotonic(), False, 0
    while time.monotonic() - started < SCRAPE_LIMIT_S:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=0.5)
            conn.request("GET", "/metrics")
            conn.getresponse().read()
            conn.close()
            seen, misses = True, 0
        except OSError:
            misses += 1
            if seen and misses > 2 * SCRAPE_RATE:
                return  # the instance is gone
        time.sleep(1 / SCRAPE_RATE)


class ScrapedLeaderExec(LeaderExec):
    """The same leader-exec with `--http` on a free loopback port and a scraper hitting /metrics
    SCRAPE_RATE times a second: shows whether serving metrics moves the step-down or the CPU."""

    def argv(self, endpoint, lease, child, extra=()):
        port = free_port()
        threading.Thread(target=scrape, args=(port,), daemon=True).start()
        return super().argv(endpoint, lease, child, ("--http", f"127.0.0.1:{port}", *extra))


# Scenarios the --scraped tool runs in: the ones whose figures the HTTP server could move.
SCRAPED_SCENARIOS = {"stepdown", "hold"}


class Etcdctl:
    kind = key = "etcdctl"
    store = "etcd"
    label = "etcdctl lock"

    def argv(self, endpoint, lease, child, extra=()):
        return ["etcdctl", "--endpoints", endpoint, "lock", *CTL_TIMING, *extra, self.lock_name(lease), *child]

    def lock_name(self, lease):
        return f"/bench-etcdctl/{lease}"

    def prefix(self, lease):
        return self.lock_name(lease) + "/"


# ---------------------------------------------------------------------------------------------
# Scenarios. Each takes the context, the tool and the run index, and returns a dict of figures.


class Context:
    def __init__(self, args, workdir, etcd, stamp, second=None):
        self.args = args
        self.workdir = workdir
        self.etcd = etcd
        self.second = second  # the other store (a SecondStore), when one is measured
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
        """The store's endpoint for `tool` (PostgreSQL's names the lease: see Postgres.endpoint)."""
        if tool.store != "etcd":
            return self.second.endpoint(lease)
        return self.etcd.endpoint

    def request_counter(self, tool):
        """A function counting the requests `tool`'s store has received so far, in a comparison
        with another store that can count its requests (ZooKeeper; PostgreSQL cannot); else None."""
        if self.second is None or self.second.requests() is None:
            return None
        if tool.store != "etcd":
            return self.second.requests
        return lambda: etcd_requests(self.etcd)

    def start(self, tool, endpoint, lease, child_name, mode, run_dir, extra=()):
        history = run_dir / "history"
        argv = tool.argv(endpoint, lease, [self.stamp, child_name, mode], extra)
        return self.procs.spawn(argv, run_dir / f"{child_name}.stderr", clean_env({"BENCH_HISTORY": str(history)}))

    def started(self, history, name, timeout=15):
        r = history.wait("start", name, timeout)
        self.procs.stamp_pids.add(r["pid"])
        return r

    def wait_in_line(self, tool, lease, count, timeout=15):
        if tool.store != "etcd":
            def standing():
                return self.second.in_line(lease) >= count
        else:
            def standing():
                return self.etcd.count_prefix(tool.prefix(lease)) >= count
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
            before, t_before = (counter() if counter else ctx.etcd.metrics()), mono()
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
            traffic = handover_traffic(before, ctx.etcd.metrics(), (mono() - t_before) / 1e9)
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


def overlap_after(ctx, death, new_start):
    """Overlap of the old child with the new one (ms): 0 when the old one was gone first. A child
    still alive OVERLAP_WINDOW_S after the new one started is reported as at least that."""
    wait_until(lambda: death.died, OVERLAP_WINDOW_S + max(0, (new_start - mono()) / 1e9), step=0.005)
    if death.died is None:
        return {"value": ms(mono() - new_start), "open": True}
    return {"value": max(0.0, ms(death.died - new_start)), "open": False}


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
    overlap = overlap_after(ctx, death, b_start["t"])
    old_stopped = ms(death.died - t_kill) if death.died else None
    ctx.procs.kill_stamp(a_start["pid"])
    wait_exit(a, 5)
    os.kill(b_start["pid"], signal.SIGUSR1)
    rc, _ = wait_exit(b, 10)
    if rc != 0:
        raise BenchError(f"{tool.label} (b) exited {rc} (see {d})")
    return {
        "failover": (b_start["t"] - t_kill) / 1e9,
        "overlap_kill": overlap,
        "_old_child_gone_after_kill_ms": old_stopped,
    }


def scenario_partition(ctx, tool, i, shared):
    d = ctx.run_dir("partition", tool, i)
    h = History(d / "history")
    lease = ctx.lease("partition", i)
    proxy = Proxy(ctx.etcd.client_port)
    try:
        a = ctx.start(tool, proxy.endpoint, lease, "a", "hold", d)
        a_start = ctx.started(h, "a")
        b = ctx.start(tool, ctx.etcd.endpoint, lease, "b", "hold", d)
        ctx.wait_in_line(tool, lease, 2)
        time.sleep(0.5 + shared["phase"])
        death = DeathWatch(a_start["pid"])
        t_cut = mono()
        proxy.cut()
        b_start = ctx.started(h, "b", TTL_S + 10)
        overlap = overlap_after(ctx, death, b_start["t"])
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
        "overlap_cut": overlap,
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
    proxy = Proxy(ctx.etcd.client_port)
    try:
        a = ctx.start(tool, proxy.endpoint, lease, "a", "hold", d, extra=["-v", "--log-format", "json"])
        ctx.started(h, "a")
        time.sleep(0.5)  # the command's start-up requests are done; what comes next is a renewal
        proxy.blackhole_after_next_request()
        sig = h.wait("signal", "a", RENEW_DEADLINE_S + RETRY_PERIOD_S + 5)
        rc, _ = wait_exit(a, 10)
        if rc != 75:
            raise BenchError(f"leader-exec exited {rc}, expected 75 (see {d})")
    finally:
        proxy.stop()
    if proxy.last_request_sent_at is None or proxy.first_answer_at is None:
        raise BenchError("the last renewal or its answer did not pass the proxy")
    answered_in = proxy.first_answer_at - proxy.last_request_sent_at
    if answered_in >= RETRY_PERIOD_S * 1e9:
        raise BenchError(f"the last renewal was answered only after {ms(answered_in):.0f} ms")
    # leader-exec's deadline is the renewal's send instant (read just before it writes the
    # request) + --renew-deadline; the kernel stamped the request as it was written.
    deadline = proxy.last_request_sent_at + int(RENEW_DEADLINE_S * 1e9)
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
        "_proxy_read_the_renewal_after_ms": ms(proxy.last_request_at - proxy.last_request_sent_at),
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
    os.kill(a_start["pid"], signal.SIGUSR1)
    rc, _ = wait_exit(a, 10)
    if rc != 0:
        raise BenchError(f"{tool.label} exited {rc} (see {d})")
    return {
        "rss": sum(r for r, _, _ in mem) / 1024,
        "pss": sum(p for _, p, _ in mem) / 1024,
        "anon": sum(a for _, _, a in mem) / 1024,
        **({"distinct": distinct} if distinct is not None else {}),
        "cpu": (c1 - c0) / 1e6 / ((t1 - t0) / 1e9),
        **({"store_requests": (r1 - r0) / ((t1 - t0) / 1e9)} if counter else {}),
        "_per_process_rss_pss_anon_mb": [[round(v / 1024, 2) for v in m] for m in mem],
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
    periodic = getattr(ctx.second, "looks", counter) if counter else None
    before, t0 = (periodic() if periodic else ctx.etcd.metrics()), mono()
    time.sleep(2.0 if ctx.args.smoke else 10.0)
    if periodic:
        idle_n = periodic() - before
        idle = {"renewals_per_s": idle_n / ((mono() - t0) / 1e9), "requests": idle_n}
    else:
        idle = handover_traffic(before, ctx.etcd.metrics(), (mono() - t0) / 1e9)
    out = {"waiters_latency": [], "waiters_requests": [], "waiters_events": [], "_traffic": [],
           "waiters_reference": reference["latency"],
           "store_waiters_reference_requests": reference["requests"],
           "waiters_renewals": idle["renewals_per_s"], "_idle_requests_per_s": idle["requests"] / ((mono() - t0) / 1e9)}
    seen = {r["name"] for r in h.records() if r["kind"] == "start"}
    for _ in range(ctx.args.handovers):
        before = counter() if counter else ctx.etcd.metrics()
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
            traffic = handover_traffic(before, ctx.etcd.metrics(), (mono() - t_before) / 1e9)
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


def scenario_check(ctx, tool, i, shared):
    """`leader-exec check` against a running leader; for reference, one `etcdctl get`."""
    holder = shared["check_holder"]
    t0 = mono()
    if tool.kind == "leader-exec":
        argv = [tool.binary, "check", "--endpoints", ctx.etcd.endpoint, "--lease", holder["lease"],
                "--token", holder["token"]]
    else:
        argv = ["etcdctl", "--endpoints", ctx.etcd.endpoint, "get", "--prefix", "--keys-only",
                "--sort-by=CREATE", "--order=ASCEND", "--limit=1", f"/leader-exec/{holder['lease']}/"]
    p = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, env=clean_env(), timeout=15)
    t1 = mono()
    if p.returncode != 0:
        raise BenchError(f"{argv[0]} {argv[1] if tool.kind == 'leader-exec' else 'get'} exited "
                         f"{p.returncode}: {p.stderr.decode().strip()}")
    return {"check": ms(t1 - t0)}


# ---------------------------------------------------------------------------------------------
# Figures and targets


class Figure:
    def __init__(self, key, title, unit, target, judge=None, le_only=False, digits=1):
        self.key, self.title, self.unit, self.target = key, title, unit, target
        self.judge, self.le_only, self.digits = judge, le_only, digits


def ratio_interval(le, ctl, rounds=2000):
    """95 % bootstrap interval of median(le) / median(ctl): how far noise alone moves the ratio."""
    rng = random.Random(0)
    a = [v["value"] if isinstance(v, dict) else v for v in le]
    b = [v["value"] if isinstance(v, dict) else v for v in ctl]
    ratios = sorted(
        statistics.median(rng.choices(a, k=len(a))) / statistics.median(rng.choices(b, k=len(b)))
        for _ in range(rounds)
    )
    return ratios[int(rounds * 0.025)], ratios[int(rounds * 0.975) - 1]


def ratio_at_most(limit):
    def judge(le, ctl, results):
        r = median(le) / median(ctl)
        low, high = ratio_interval(le, ctl)
        why = f"ratio {r:.3f} (95 % interval {low:.2f} – {high:.2f})"
        if r > limit and low <= limit:
            return "≈", why + f": above {limit:g} by less than the noise"
        return r <= limit, why
    return judge


def judge_failover(le, ctl, results):
    over = sum(1 for v in le if v > TTL_S + 0.3)
    return median(le) <= TTL_S + 0.3, f"median {median(le):.2f} s; {over}/{len(le)} runs above {TTL_S + 0.3} s"


def judge_overlap(le, ctl, results):
    worst = max(v["value"] for v in le)
    return all(v["value"] == 0 and not v["open"] for v in le), f"leader-exec max {worst:.1f} ms"


def judge_stepdown(le, ctl, results):
    return max(le) <= 50, f"max {max(le):.1f} ms"


def judge_cpu(le, ctl, results):
    return median(le) <= 1.0, "≤ 1 ms CPU per s (0.1 % of a core) counts as ≈ 0"


def judge_o1(key):
    def judge(le, ctl, results):
        one = results.get(key, {}).get("leader-exec")
        if not one:
            return None, "no one-waiter figure"
        return max(le) <= max(one), f"many waiters: max {max(le):g}; 1 waiter: max {max(one):g}"
    return judge


def judge_waiter_latency(le, ctl, results):
    one = results.get("waiters_reference", {}).get("leader-exec")
    if not one:
        return None, "no one-waiter figure"
    r = median(le) / median(one)
    low, high = ratio_interval(le, one)
    return r <= 1.2, f"{r:.2f} × the one-waiter median of the same runs ({median(one):.2f} ms; 95 % interval {low:.2f} – {high:.2f})"


FIGURES = [
    Figure("uncontended", "uncontended: launch → child's first output", "ms", "≤ 0.7 × etcdctl", ratio_at_most(0.7), digits=2),
    Figure("uncontended_exit", "uncontended, whole run: launch → wrapper exited (child exits at once)", "ms", "report", digits=2),
    Figure("handover", "graceful handover: holder's child exits → waiter's child starts", "ms", "≤ 1.0 × etcdctl", ratio_at_most(1.0), digits=2),
    Figure("failover", f"crash failover, ttl {TTL_S} s: wrapper SIGKILLed → next child starts", "s", f"≤ ttl + 0.3 s = {TTL_S + 0.3} s", judge_failover, digits=2),
    Figure("overlap_kill", "overlap of old and new child after wrapper SIGKILL", "ms", "0 for leader-exec in every run", judge_overlap),
    Figure("overlap_cut", "overlap of old and new child under a partition (proxy cut)", "ms", "0 for leader-exec in every run", judge_overlap),
    Figure("failover_cut", "partition: proxy cut → next child starts", "s", "report", digits=2),
    Figure("stepdown", "step-down latency: local renew deadline → kill signal received by the child", "ms", "≤ 50 ms", judge_stepdown, le_only=True, digits=2),
    Figure("pss", "PSS while holding, all the tool's own processes together", "MB", "≤ 0.3 × etcdctl", ratio_at_most(0.3), digits=2),
    Figure("rss", "RSS while holding, summed over the tool's own processes", "MB", "(see PSS)", digits=2),
    Figure("distinct", "resident pages of the tool's processes, each page counted once", "MB", "report", digits=2),
    Figure("anon", "of which anonymous memory (heap, stacks: not shared with any file)", "MB", "report", digits=2),
    Figure("cpu", "CPU while holding idle (ms of CPU per s)", "ms/s", "≈ 0", judge_cpu, digits=2),
    Figure("handover_requests", "1 waiter: etcd requests per handover (renewals excluded)", "", "report", digits=0),
    Figure("waiters_requests", "{n} waiters: etcd requests per handover (renewals excluded)", "", "O(1): same as 1 waiter", judge_o1("handover_requests"), digits=0),
    Figure("handover_events", "1 waiter: watch events sent per handover", "", "report", digits=0),
    Figure("waiters_events", "{n} waiters: watch events sent per handover", "", "O(1): same as 1 waiter", judge_o1("handover_events"), digits=0),
    Figure("waiters_reference", "1 waiter, measured in the same runs just before the {n}-waiter line", "ms", "report", digits=2),
    Figure("waiters_latency", "{n} waiters: handover latency", "ms", "≤ 1.2 × the one-waiter figure", judge_waiter_latency, digits=2),
    Figure("waiters_renewals", "{n} waiters, idle: lease renewals (PostgreSQL: looks at the line) per second reaching the store", "1/s", "report", digits=0),
    Figure("check", "`leader-exec check` round trip (etcdctl: one `etcdctl get`, for reference)", "ms", "report", digits=2),
]


def median(values):
    return statistics.median(v["value"] if isinstance(v, dict) else v for v in values)


def fmt(value, digits):
    if isinstance(value, dict):
        return ("≥ " if value["open"] else "") + f"{value['value']:.{digits}f}"
    return f"{value:.{digits}f}"


def summary(values, digits):
    """median (min – max)."""
    if not values:
        return "–"
    plain = [v["value"] if isinstance(v, dict) else v for v in values]
    opens = sum(1 for v in values if isinstance(v, dict) and v["open"])
    text = f"{statistics.median(plain):.{digits}f} ({min(plain):.{digits}f} – {max(plain):.{digits}f})"
    if opens:
        text = "≥ " + text + f"; old child never stopped in {opens}/{len(values)}"
    return text


# ---------------------------------------------------------------------------------------------
# The run


# (name, function, both tools?, quick?) — quick scenarios take under a second a run and get
# --fast-runs runs, the others --runs.
SCENARIOS = [
    ("uncontended", scenario_uncontended, True, True),
    ("handover", scenario_handover, True, False),
    ("check", scenario_check, True, True),
    ("hold", scenario_hold, True, False),
    ("stepdown", scenario_stepdown, False, False),
    ("crash", scenario_crash, True, False),
    ("partition", scenario_partition, True, False),
    ("waiters", scenario_waiters, True, False),
]


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
    ap.add_argument("--hold-seconds", type=float, help="CPU window while holding (default 10, smoke 2)")
    ap.add_argument("--binary", help="use this leader-exec instead of building target/release/leader-exec")
    ap.add_argument("--baseline", help="another leader-exec binary (an older build) to run as a third tool, "
                    "for before/after comparisons of a change")
    ap.add_argument("--baseline-note", default="", help="how the baseline was built, printed in the report")
    ap.add_argument("--scraped", action="store_true",
                    help="run the same binary with --http and a scraper at 10 requests/s as the third tool, "
                    "in the step-down and hold scenarios (instead of --baseline)")
    ap.add_argument("--only", help="comma-separated scenarios: " + ",".join(s[0] for s in SCENARIOS))
    ap.add_argument("--out", help="report file (default BENCHMARKS.md, smoke target/bench/SMOKE.md)")
    ap.add_argument("--etcd-data", default=default_etcd_data(),
                    help="parent directory of etcd's data dir (default /dev/shm, a tmpfs, when it has room)")
    ap.add_argument("--store", choices=["etcd", *STORES],
                    help="etcd (default): leader-exec beside etcdctl lock, writes BENCHMARKS.md; postgres, "
                    "zookeeper: leader-exec on a server of the runner's own beside leader-exec on etcd, in "
                    "the scenarios " + ", ".join(STORE_SCENARIOS) + ", writes bench/POSTGRES.md or "
                    "bench/ZOOKEEPER.md. A smoke run without --store runs them all")
    ap.add_argument("--seed", type=int, default=6, help="seed for the kill/cut phases")
    ap.add_argument("--report-from", metavar="JSON",
                    help="measure nothing: write the report again from the raw results of an earlier run")
    args = ap.parse_args()
    if args.report_from:
        return rerender(Path(args.report_from), args.out)
    smoke = args.smoke
    args.runs = args.runs or (1 if smoke else 7)
    args.fast_runs = args.fast_runs or (1 if smoke else 51)
    args.chain = args.chain or (2 if smoke else 30)
    args.waiters = args.waiters or (20 if smoke else 200)
    args.handovers = args.handovers or (2 if smoke else 5)
    args.hold_seconds = args.hold_seconds or (2.0 if smoke else 10.0)
    only = set(args.only.split(",")) if args.only else None
    # A full run measures one store; the smoke run goes through all, so that no path rots.
    stores = [args.store] if args.store else (["etcd", *STORES] if smoke else ["etcd"])
    for tool in ("etcd", "etcdctl", "rustc"):
        if not shutil.which(tool):
            sys.exit(f"bench: {tool} not found (apt-get install etcd-server etcd-client; rustup)")
    if args.store in STORES and STORES[args.store].missing():
        sys.exit(f"bench: {STORES[args.store].missing()}")

    binary = build(args)
    failed = False
    for store in stores:
        if store in STORES and STORES[store].missing():
            print(f"bench: {STORES[store].missing()}: its smoke run is skipped", file=sys.stderr, flush=True)
            continue
        failed |= measure(args, binary, store, only)
    if failed:
        sys.exit(1)


def report_path(args, store):
    """Where a store's report goes: --out names the report of the store measured (of etcd in a
    smoke run of both)."""
    if store in STORES:
        if args.out and args.store == store:
            return Path(args.out)
        if args.smoke:
            return ROOT / "target" / "bench" / f"SMOKE-{store}.md"
        return ROOT / "bench" / f"{STORES[store].report_name}.md"
    if args.out:
        return Path(args.out)
    return ROOT / "target" / "bench" / "SMOKE.md" if args.smoke else ROOT / "BENCHMARKS.md"


def measure(args, binary, store, only):
    """Runs the scenarios against one store and writes its report; returns whether a run failed.
    etcd: leader-exec and etcdctl lock (and a --baseline or --scraped third tool). Another store
    (PostgreSQL, ZooKeeper): leader-exec on it and leader-exec on etcd, in alternation, in
    STORE_SCENARIOS."""
    smoke = args.smoke
    out = report_path(args, store)
    (ROOT / "target" / "bench").mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="run-", dir=ROOT / "target" / "bench"))
    stamp = build_stamp(workdir)
    etcd = Etcd(workdir, args.etcd_data)
    second = STORES[store](workdir, args.etcd_data) if store in STORES else None
    le, ctl = LeaderExec(binary), Etcdctl()
    extra = [LeaderExec(Path(args.baseline).resolve(), "baseline", "leader-exec (baseline)")] if args.baseline else []
    if args.scraped:
        extra = [ScrapedLeaderExec(binary, "baseline", "leader-exec --http, scraped")]
        args.baseline = f"{binary} --http 127.0.0.1:PORT"
        args.baseline_note = args.baseline_note or (
            f"the same binary serving metrics, with a scraper GETting /metrics {SCRAPE_RATE} times a second "
            f"(step-down and hold scenarios only)")
    ctx = Context(args, workdir, etcd, stamp, second)
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
        etcd.start()
        if second:
            second.start()
            info[second.name] = second.version()
        for name, fn, both, quick in SCENARIOS:
            if only and name not in only:
                continue
            if second:
                if name not in STORE_SCENARIOS:
                    continue
                tools = [StoreLeaderExec(binary, second), le]
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
                holder = ctx.start(le, etcd.endpoint, lease, "a", "hold", d)
                a = ctx.started(History(d / "history"), "a")
                shared["check_holder"] = {"lease": lease, "token": a["token"]}
            if name == "crash" and not second:
                # etcd's own share of a crash failover, for the notes: leases nobody renews.
                try:
                    results["etcd_expiry"] = {"etcd": etcd_expiry_lag(etcd, 3 if smoke else 20)}
                except Exception as e:  # noqa: BLE001 - recorded
                    failures.append(f"etcd expiry reference: {e}")
            if name == "crash" and second:
                # The other store's own share, where it expires leases by itself.
                try:
                    lag = second.expiry_lag(3 if smoke else 20)
                    if lag is not None:
                        results["store_expiry"] = {second.name: lag}
                except Exception as e:  # noqa: BLE001 - recorded
                    failures.append(f"{second.title} expiry reference: {e}")
            busy0, load0, t0 = machine_busy(), os.getloadavg()[0], time.monotonic()
            runs = args.fast_runs if quick else args.runs
            for i in range(runs):
                shared["phase"] = rng.random()
                for tool in tools:
                    print(f"bench: {name} run {i + 1}/{runs}: {tool.label}", file=sys.stderr, flush=True)
                    try:
                        figures = fn(ctx, tool, i, shared)
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
        ctx.procs.cleanup()
        etcd.stop()
        if second:
            second.stop()
    finished_at = datetime.datetime.now(datetime.timezone.utc)
    raw = {"args": vars(args), "argv": sys.argv[1:], "store": store, "machine": info, "results": results,
           "extras": extras, "loads": loads, "failures": failures, "notes": notes,
           "started_at": started_at.isoformat(), "finished_at": finished_at.isoformat()}
    out.parent.mkdir(parents=True, exist_ok=True)
    raw_path = (out.with_suffix(".json") if (smoke or args.out or second) else ROOT / "bench" / "results.json")
    raw_path.write_text(json.dumps(raw, indent=1, default=str) + "\n")
    write_report = store_report(STORES[store]) if second else report
    out.write_text(write_report(args, sys.argv[1:], info, results, extras, loads, failures, notes, started_at,
                                finished_at, raw_path))
    print(f"bench: wrote {out} and {raw_path}", file=sys.stderr)
    if failures:
        print("bench: failures:\n  " + "\n  ".join(failures), file=sys.stderr)
        print(f"bench: the children's records and the tools' stderr are in {workdir}", file=sys.stderr)
        return True
    shutil.rmtree(workdir, ignore_errors=True)
    return False


# The figures every store's run measures: BENCHMARKS.md's table of leader-exec on each store.
EACH_STORE_FIGURES = ["uncontended", "handover", "failover", "pss", "cpu"]


def run_times(raw, raw_path):
    """When a stored run started and finished (the file's time for a run that did not record it)."""
    written = datetime.datetime.fromtimestamp(raw_path.stat().st_mtime, datetime.timezone.utc)
    return [datetime.datetime.fromisoformat(raw[k]) if k in raw else written for k in ("started_at", "finished_at")]


def each_store_table(results, started_at):
    """Report lines: leader-exec on each store, etcd from this run and every other store from the
    raw results of its own run (bench/POSTGRES.json, ...); a store without them is left out, and
    so is the table when no other store has any."""
    columns = [("etcd", results, "leader-exec", started_at, "this file's run")]
    reports = []
    for store in STORES.values():
        raw_path = ROOT / "bench" / f"{store.report_name}.json"
        if not raw_path.exists():
            continue
        raw = json.loads(raw_path.read_text())
        columns.append((store.title, raw["results"], store.name, run_times(raw, raw_path)[0],
                        f"`{raw_path.relative_to(ROOT)}`"))
        reports.append(f"bench/{store.report_name}.md")
    if not reports:
        return []
    out = paragraphs("**leader-exec on each store.** Median (min – max) over each store's runs.")
    out.append("| figure | " + " | ".join(title for title, *_ in columns) + " |")
    out.append("|---|" + "---|" * len(columns))
    figures = {f.key: f for f in FIGURES}
    for key in EACH_STORE_FIGURES:
        fig = figures[key]
        values = [res.get(key, {}).get(tool, []) for _, res, tool, _, _ in columns]
        if any(values):
            out.append(f"| {fig.title} ({fig.unit}) | " + " | ".join(summary(v, fig.digits) for v in values) + " |")
    out.append("")
    runs = ", ".join(f"{title} on {when:%Y-%m-%d} ({source})" for title, _, _, when, source in columns)
    return out + paragraphs(
        f"Each column comes from its own run — {runs} — so the machine's load differs between the"
        f" columns; the per-store reports ({', '.join(reports)}) compare each store with etcd within one"
        f" run, which is the fairer comparison.")


def notes_section(args, results, extras, started_at):
    """What each figure measures, and why it is what it is. Numbers in here come from this run."""

    def med(key, tool="leader-exec", digits=2):
        values = results.get(key, {}).get(tool)
        return f"{median(values):.{digits}f}" if values else "–"

    def span(key, tool, digits=2):
        values = results.get(key, {}).get(tool)
        if not values:
            return "–"
        plain = [v["value"] if isinstance(v, dict) else v for v in values]
        return f"{min(plain):.{digits}f} – {max(plain):.{digits}f}"

    def diag(scenario, tool, key):
        return [r.get(key) for r in extras.get(scenario, {}).get(tool, []) if r.get(key) is not None]

    out = []
    w = out.append
    w("## What the figures measure, and why they are what they are")
    w("")
    w("leader-exec on PostgreSQL, beside leader-exec on etcd in the same runs (uncontended start,")
    w("handover, crash failover, memory and CPU while holding): [bench/POSTGRES.md](bench/POSTGRES.md),")
    w("written by `python3 bench/run.py --store postgres`.")
    w("")
    w("leader-exec on ZooKeeper, beside leader-exec on etcd in the same runs (the same scenarios, and the")
    w("requests reaching the store while holding): [bench/ZOOKEEPER.md](bench/ZOOKEEPER.md), written by")
    w("`python3 bench/run.py --store zookeeper`.")
    w("")
    out.extend(each_store_table(results, started_at))
    w(f"**Uncontended start.** The runner reads CLOCK_MONOTONIC and spawns `TOOL … -- stamp`; the figure ends")
    w(f"at the child's own start record. Both tools connect, grant a lease and create their key; etcdctl's")
    w(f"lock recipe reads the owner in the same transaction (2 requests), leader-exec reads its place in line")
    w(f"in a second, read-only transaction (3 requests before the command starts; the watch on its own key")
    w(f"is set up alongside). leader-exec is faster anyway because most of")
    w(f"etcdctl's time is its own start-up: one `etcdctl get` takes {med('check', 'etcdctl')} ms end to end,")
    w(f"one `leader-exec check` {med('check')} ms.")
    w("")
    w(f"**Graceful handover.** The path is the same for both tools: the holder's child exits; the holder")
    w(f"deletes its key (leader-exec revokes its lease, which deletes the key); etcd sends the delete to the")
    w(f"one waiter that watches that key; the waiter reads the line once more (a linearizable read) and")
    w(f"starts its child. leader-exec has one process hop more on each side, through its supervisor (child")
    w(f"exit → supervisor → leader-exec; leader-exec → supervisor → fork and exec): the supervisor is what")
    w(f"kills the child's whole group when leader-exec dies, which etcdctl lock never does. Most of the")
    w(f"figure is common to both tools: etcd's work on the delete and on the read, and starting the child")
    w(f"(exec and dynamic loading take most of a millisecond even for the tiny stamp program); the")
    w(f"tool-specific part is a few hundred microseconds. Profiling (perf sched, strace) found two")
    w(f"avoidable costs in leader-exec, fixed by the two core changes below. Further candidates were")
    w(f"measured and not taken: forking the child in advance so that leader-exec could start it without")
    w(f"the supervisor hop saves ~0.1 ms (write → child's first output 1.10–1.20 ms instead of 1.21–1.28 ms")
    w(f"in a micro-benchmark) at the price of a third process and a more complex supervisor; a")
    w(f"vfork-style spawn saves less (~0.07 ms); LeaseRevoke and DeleteRange cost etcd the same; reading")
    w(f"the line with one Range instead of a two-read Txn saves ~0.01 ms per round trip. The")
    w(f"figure is short and the machine is shared, so single runs scatter widely: the verdict uses the")
    w(f"medians over {args.runs} × {args.chain} handovers (each run is a chain of handovers on one lease,")
    w(f"with one waiter at a time) and shows a 95 % bootstrap interval of the ratio; where that interval")
    w(f"includes 1, the two tools cannot be told apart on this machine.")
    w("")
    expiry = results.get("etcd_expiry", {}).get("etcd", [])
    expiry_text = (f"a {TTL_S} s lease that nobody renewed was gone after {min(expiry):.2f} – {max(expiry):.2f} s"
                   f" (median {statistics.median(expiry):.2f} s, {len(expiry)} leases)") if expiry else "(not measured)"
    w(f"**Crash failover.** After the SIGKILL nobody renews the lease, and the waiter starts when etcd")
    w(f"expires it. The lease ends {TTL_S} s after the last renewal etcd processed, i.e. between ttl − retry")
    w(f"period ({RETRY_PERIOD_S:g} s here) and ttl after the kill, and etcd looks for expired leases only")
    w(f"every so often: in this run {expiry_text} — up to about half a second late. A kill just after a")
    w(f"renewal therefore costs up to ttl + 0.5 s with any client, which is why single runs can exceed")
    w(f"ttl + 0.3 s; the target is judged on the median. The runner kills at a random phase of the renewal")
    w(f"period (the same phases for both tools). etcdctl renews less often (every ttl/3, in practice every")
    w(f"2 s here), so at a random kill instant its last renewal lies further back and its lease runs out")
    w(f"sooner: its failover is shorter on average and more spread out. Renewing often keeps a lease")
    w(f"alive longer after a crash — the price of tolerating longer outages of etcd at the same TTL.")
    w("")
    gaps = diag("partition", "leader-exec", "gap_ms")
    stops = diag("crash", "leader-exec", "old_child_gone_after_kill_ms")
    signalled = diag("partition", "leader-exec", "old_child_signalled_after_cut_s")
    w(f"**Overlap.** The old child's death is observed through a pidfd, the new child's start is its own")
    w(f"record. After a SIGKILL of leader-exec its supervisor kills the child's group"
      + (f" (gone {statistics.median(stops):.1f} ms after the kill, median)" if stops else "") + "; under a partition")
    w(f"leader-exec stops the child at its renew deadline"
      + (f" ({statistics.median(signalled):.2f} s after the cut, median)" if signalled else "")
      + ", before the lease can expire, so the next child starts"
      + (f" {statistics.median(gaps) / 1000:.2f} s after the old one is gone (median)." if gaps else " after the old one is gone."))
    w(f"etcdctl lock leaves its child running in both cases: it was still running {OVERLAP_WINDOW_S:g} s after the")
    w(f"next holder's child had started, in every run (then the runner killed it).")
    w("")
    w(f"**Step-down latency.** A proxy in front of etcd lets one renewal through, then drops everything")
    w(f"leader-exec sends (a black hole). leader-exec's deadline is the instant it sent that renewal plus")
    w(f"--renew-deadline ({RENEW_DEADLINE_S:g} s). The send instant is taken from the kernel's receive")
    w(f"timestamp on the proxy's socket (SO_TIMESTAMPNS), which on loopback is stamped inside the sender's")
    w(f"write — it errs only by the microseconds leader-exec spends between reading its clock and writing.")
    w(f"The child records when SIGTERM arrives. So the figure covers the timer, the step-down, the message")
    w(f"to the supervisor and the delivery of the signal to the child's group.")
    w("")
    per = [r for r in extras.get("hold", {}).get("leader-exec", [])]
    breakdown = ""
    if per:
        procs = per[0].get("per_process_rss_pss_anon_mb") or []
        if len(procs) >= 2:
            breakdown = (f" (in the first run: main process RSS {procs[0][0]} MB, PSS {procs[0][1]} MB;"
                         f" supervisor RSS {procs[1][0]} MB, PSS {procs[1][1]} MB)")
    w(f"**Memory: judged on PSS.** leader-exec is two processes, the main one and its supervisor, which is")
    w(f"forked from it before the async runtime starts{breakdown}. Both map the same binary and the same")
    w(f"libc, and RSS counts such a shared page once in every process that maps it, so a sum of RSS counts")
    w(f"it twice. PSS divides each page among the processes that map it: the PSS sum is the memory")
    w(f"leader-exec's processes take together. etcdctl is one process, so its PSS is close to its RSS. The")
    rss_le, rss_ctl = results.get("rss", {}).get("leader-exec"), results.get("rss", {}).get("etcdctl")
    rss_ratio = f"{median(rss_le) / median(rss_ctl):.2f}" if rss_le and rss_ctl else "–"
    w(f"RSS sum ({med('rss')} MB, ratio {rss_ratio}) is mostly file pages of the binary and of libc — the")
    w(f"kernel maps up to 16")
    w(f"neighbouring pages of a file on each page fault — and most of those pages are counted twice; only")
    w(f"a single process could bring that sum near 0.3 × etcdctl, and the separate supervisor is what")
    w(f"kills the command's whole group when leader-exec is killed. Counting every resident page of the")
    w(f"tool's processes once, with no credit for pages shared with the rest of the system (libc), gives")
    w(f"{med('distinct')} MB against {med('distinct', 'etcdctl')} MB (\"resident pages … counted once\"): about 0.3 ×. The")
    w(f"private, anonymous memory (heap, stacks) is {med('anon')} MB for leader-exec against")
    w(f"{med('anon', 'etcdctl')} MB for etcdctl.")
    w("")
    w(f"**CPU while holding.** On-CPU time of every thread of the tool's processes (from schedstat) over")
    w(f"{args.hold_seconds:g} s of holding, in ms per second: leader-exec renews every {RETRY_PERIOD_S:g} s with this")
    w(f"profile, etcdctl every ttl/3. ≈ 0 is taken as at most 1 ms per s (0.1 % of one core).")
    w("")
    w(f"**{args.waiters} waiters.** {args.waiters} instances stand in line behind a holder; etcd's /metrics are read")
    w(f"before each handover and 0.3 s after the next child started. The latency with the line is compared")
    w(f"with one-waiter handovers measured in the same run just before the line is built, so that both see")
    w(f"the same machine: other work on a shared machine comes and goes between scenarios, and a comparison")
    w(f"with the handover figure above, measured minutes earlier, mixes that in. Requests are unary RPCs")
    w(f"(`grpc_server_started_total`) plus watch create/cancel messages (`grpc_server_msg_received_total`")
    w(f"for Watch); renewals are left out and reported separately. Watch events are")
    w(f"`etcd_debugging_mvcc_events_total`. leader-exec: a LeaseRevoke and a read-only Txn per handover;")
    w(f"the delete reaches the one waiter watching that key and the old leader's own watch on its key (it")
    w(f"steps down if its key is deleted), hence 2 events. etcdctl: DeleteRange, Range and a watch cancel,")
    w(f"1 event. Neither grows with the line: only the next waiter wakes up. What grows with the line is")
    w(f"the renewal traffic: every waiter keeps its lease alive, leader-exec every --retry-period")
    w(f"({med('waiters_renewals', digits=0)}/s for {args.waiters} waiters with {RETRY_PERIOD_S:g} s; half that with the")
    w(f"default 2 s), etcdctl every ttl/3 ({med('waiters_renewals', 'etcdctl', 0)}/s).")
    w("")
    w(f"**check.** The runner times `leader-exec check --lease L --token T` from spawn to exit against a")
    w(f"running leader (exit 0). For reference, one `etcdctl get` of the same prefix (one request).")
    w("")
    w("## Changes made to the core for these figures")
    w("")
    w("Before these changes the graceful handover was slightly slower than etcdctl's (ratio 1.04 – 1.05")
    w("in runs of 9 to 40 handovers). Tracing handovers (`perf sched`, strace) showed where leader-exec")
    w("spent more than it needed to:")
    w("")
    w("1. *supervisor: report exit and empty group in one message when the command was alone* —")
    w("   the supervisor sent `exited` and then, on its next loop turn, `empty`; leader-exec woke up")
    w("   twice before it revoked the lease. Now both go in one write when the group is already empty.")
    w("2. *run: watch the candidate's own key from the start of the candidacy* — the new leader started")
    w("   its watch on its own key (a Range and a Watch request) right after spawning the command, so")
    w("   those requests and etcd's work on them competed with the command's start on a 2-core machine")
    w("   (about 0.3 ms). The watch is now set up with the candidacy and polled while waiting too; at")
    w("   the moment leadership passes there is nothing left to request (2 requests per handover")
    w("   instead of 4), and a waiter whose key is deleted notices it at once.")
    w("")
    w("`bench/AB.md` is the before/after measurement: the runner's `--baseline` option runs a build from")
    w("before the changes as a third tool in the same alternation. What the changes do for certain is")
    w("visible there as counts: 2 etcd requests per handover instead of 4, none of them after the command")
    w("was spawned. The latency gain is small against this machine's noise: over the five A/B sessions")
    w("run while making the changes (210 – 400 handovers per tool each) leader-exec's handover median")
    w("improved by 3 – 14 % over the baseline, whose ratio to etcdctl was 0.98 – 1.08 in those sessions")
    w("against 0.92 – 0.97 after the changes. Four full runs of this file's command gave handover ratios")
    w("of 0.95, 1.00, 0.97 and 1.04: at parity with etcdctl lock, within this machine's resolution.")
    w("")
    return out


def rerender(raw_path, out):
    """Writes the report of an earlier run again from its raw results (after the text changed)."""
    raw = json.loads(raw_path.read_text())
    args = argparse.Namespace(**raw["args"])
    store = raw.get("store", "etcd")
    if not hasattr(args, "store"):
        args.store = None
    out = Path(out) if out else report_path(args, store)
    when = run_times(raw, raw_path)
    write_report = store_report(STORES[store]) if store in STORES else report
    out.write_text(write_report(args, raw.get("argv", []), raw["machine"], raw["results"], raw["extras"],
                          raw["loads"], raw["failures"], raw["notes"], *when, raw_path.resolve()))
    print(f"bench: wrote {out} from {raw_path}", file=sys.stderr)


def report(args, argv, info, results, extras, loads, failures, notes, started_at, finished_at, raw_path):
    smoke = args.smoke
    lines = []
    w = lines.append
    w("# Benchmarks: leader-exec and `etcdctl lock`" + (" (smoke run: not a measurement)" if smoke else ""))
    w("")
    w("Generated by `bench/run.py` — edit the runner, not this file. Both tools run against the same")
    w("single-member etcd on loopback, in alternation (leader-exec, etcdctl, leader-exec, …), so that a")
    w("noisy machine affects both alike. Figures are measured from outside the tools: the child")
    w("(`bench/stamp.rs`) records its own start/end/signal instants on CLOCK_MONOTONIC, the runner")
    w("records launches, kills and cuts on the same clock, deaths are seen through pidfds, and etcd's")
    w("`/metrics` count requests and watch events.")
    w("")
    w("## Reproduce")
    w("")
    w("From the repository root, with `etcd-server`, `etcd-client`, Rust and Python 3.11 installed:")
    w("")
    cmd = " ".join(["python3", "bench/run.py", *(shlex.quote(a) for a in argv)])
    w(f"    {cmd}")
    w("")
    if args.binary:
        w(f"(run here with a given binary, `--binary`; without it the runner builds its own.)")
    w(f"It builds `target/release/leader-exec` (`cargo build --release --locked`) and `bench/stamp.rs`,")
    w(f"starts etcd on free loopback ports with its data on tmpfs (`--etcd-data`, default /dev/shm),")
    w(f"runs every scenario for both tools in alternation ({args.fast_runs} runs each of the sub-second")
    w(f"scenarios uncontended and check, {args.runs} of the others; a handover run is a chain of")
    w(f"{args.chain} handovers), and rewrites this file (raw values in")
    w(f"`{raw_path.relative_to(ROOT) if raw_path.is_relative_to(ROOT) else raw_path}`).")
    w("")
    w("## Machine and versions")
    w("")
    w(f"- {info['cpu']}, {info['cores']} cores, {info['memory_gb']} GB, Linux {info['kernel']}")
    w(f"- leader-exec: {info['leader_exec']}")
    w(f"- etcd: {info['etcd']}; etcdctl: {info['etcdctl']}")
    w(f"- {info['rustc']}; Python {info['python']}")
    w(f"- run {started_at:%Y-%m-%d %H:%M} – {finished_at:%H:%M} UTC; timing profile: leader-exec "
      f"`{' '.join(LE_TIMING)}`, etcdctl `lock {' '.join(CTL_TIMING)}`")
    busy = [l["machine_busy"] for l in loads.values()]
    if busy:
        w(f"- machine load while measuring (all CPUs, everything running on the machine, the benchmark "
          f"included): {min(busy) * 100:.0f} – {max(busy) * 100:.0f} % busy; 1-min load average "
          f"{min(l['load1_start'] for l in loads.values()):.2f} – {max(l['load1_end'] for l in loads.values()):.2f}")
    w("")
    w("## Results")
    w("")
    w("median (min – max) over the runs; ratio = leader-exec median / etcdctl median.")
    w("")
    baseline = bool(args.baseline)
    base_title = "--http, scraped" if getattr(args, "scraped", False) else "baseline"
    header = "| figure | leader-exec |" + (f" {base_title} |" if baseline else "") + " etcdctl lock | ratio | target |"
    w(header + ("" if smoke else " met? |"))
    w("|---|---|" + ("---|" if baseline else "") + "---|---|---|" + ("" if smoke else "---|"))
    verdicts = {"yes": [], "≈": [], "no": []}
    for fig in FIGURES:
        le = results.get(fig.key, {}).get("leader-exec", [])
        base = results.get(fig.key, {}).get("baseline", [])
        ctl = results.get(fig.key, {}).get("etcdctl", [])
        if not le and not ctl:
            continue
        title = fig.title.format(n=args.waiters) + (f" ({fig.unit})" if fig.unit else "")
        ratio = "–"
        if le and ctl and median(ctl) > 0:
            ratio = f"{median(le) / median(ctl):.2f}"
        ctl_text = "n/a: never stops its child" if fig.le_only else summary(ctl, fig.digits)
        base_text = f" {summary(base, fig.digits)} |" if baseline else ""
        row = f"| {title} | {summary(le, fig.digits)} |{base_text} {ctl_text} | {ratio} | {fig.target} |"
        if not smoke:
            verdict = "–"
            if fig.judge and le:
                try:
                    ok, why = fig.judge(le, ctl, results)
                    verdict = {True: "yes", False: "**no**", None: "–"}.get(ok, ok)
                    verdicts.get({True: "yes", False: "no"}.get(ok, ok), []).append(title)
                    verdict += f": {why}"
                except (ZeroDivisionError, statistics.StatisticsError, ValueError) as e:
                    verdict = f"– ({e})"
            row += f" {verdict} |"
        w(row)
    w("")
    if not smoke and not baseline and any(verdicts.values()):
        w(f"Targets met: {len(verdicts['yes'])}; within the noise of the target (≈): {len(verdicts['≈'])}"
          + "".join(f" ({t})" for t in verdicts["≈"])
          + f"; missed: {len(verdicts['no'])}" + "".join(f" ({t})" for t in verdicts["no"]) + ".")
        w("")
    for note in notes:
        w(f"- {note}")
    if failures:
        w("")
        w("Failed runs (left out of the table):")
        w("")
        for f in failures:
            w(f"- {f}")
    w("")
    if args.baseline:
        w("## Baseline")
        w("")
        w(f"The baseline column is `{args.baseline}`, run as a third tool in the same alternation"
          + (f": {args.baseline_note}" if args.baseline_note else "."))
        w("")
        for fig in FIGURES:
            le = results.get(fig.key, {}).get("leader-exec", [])
            base = results.get(fig.key, {}).get("baseline", [])
            ctl = results.get(fig.key, {}).get("etcdctl", [])
            if not (le and base and ctl) or fig.unit == "" or median(base) == 0:
                continue
            lo1, hi1 = ratio_interval(le, base)
            lo2, hi2 = ratio_interval(base, ctl)
            w(f"- {fig.title.format(n=args.waiters)}: leader-exec / baseline {median(le) / median(base):.3f}"
              f" (95 % interval {lo1:.2f} – {hi1:.2f}); baseline / etcdctl {median(base) / median(ctl):.3f}"
              f" ({lo2:.2f} – {hi2:.2f})")
        w("")
    elif not smoke:
        lines.extend(notes_section(args, results, extras, started_at))
    w("## Details")
    w("")
    for name, per_tool in extras.items():
        for tool, runs in per_tool.items():
            keys = sorted({k for r in runs for k in r if k != "traffic"})
            for k in keys:
                vals = [r.get(k) for r in runs]
                shown = ", ".join(json.dumps(v) if not isinstance(v, float) else f"{v:.3f}" for v in vals)
                w(f"- {name}, {tool}: {k}: {shown}")
            traffic = [t for r in runs for t in (r.get("traffic") if isinstance(r.get("traffic"), list) else [r.get("traffic")]) if t]
            if traffic:
                t = traffic[len(traffic) // 2]
                w(f"- {name}, {tool}: per handover (a typical one): unary RPCs {json.dumps(t['unary'], sort_keys=True)}, "
                  f"watch requests {t['watch_requests']}, watch events {t['watch_events']}; "
                  f"watchers registered afterwards {t['watchers']}")
    w("")
    for name, l in loads.items():
        w(f"- {name}: {l['seconds']:.0f} s, machine {l['machine_busy'] * 100:.0f} % busy, "
          f"load {l['load1_start']:.2f} → {l['load1_end']:.2f}")
    w("")
    return "\n".join(lines)


STORE_FIGURES = ["uncontended", "uncontended_exit", "handover", "failover", "overlap_kill", "pss", "rss", "distinct",
                 "anon", "cpu", "store_requests", "waiters_reference", "waiters_latency",
                 "store_handover_requests", "store_waiters_reference_requests", "store_waiters_requests",
                 "waiters_renewals"]

# Figures only the store comparisons measure.
STORE_ONLY_FIGURES = [
    Figure("store_requests", "requests reaching the store per second while holding idle", "1/s", "report", digits=1),
    Figure("store_handover_requests", "graceful handover, 1 waiter: requests reaching the store (PostgreSQL: "
           "statements; etcd: renewals excluded)", "", "report", digits=0),
    Figure("store_waiters_reference_requests", "1 waiter, before the {n}-waiter line: requests per handover "
           "(PostgreSQL: statements)", "", "report", digits=0),
    Figure("store_waiters_requests", "{n} waiters: requests per handover (PostgreSQL: statements, the "
           "waiters' periodic looks excluded; etcd: renewals excluded)", "", "report", digits=0),
]


def store_report(store):
    """The report writer for another store (a SecondStore class)."""
    def write(*a):
        return report_store(store, *a)
    return write


def report_store(store, args, argv, info, results, extras, loads, failures, notes, started_at, finished_at,
                 raw_path):
    """Another store's report: leader-exec on it beside leader-exec on etcd, same runs."""
    smoke = args.smoke
    lines = []
    w = lines.append

    def med(key, tool=store.name, digits=2):
        values = results.get(key, {}).get(tool)
        return f"{median(values):.{digits}f}" if values else "–"

    w(f"# Benchmarks: leader-exec on {store.title} and on etcd" + (" (smoke run: not a measurement)" if smoke else ""))
    w("")
    w(f"Generated by `bench/run.py --store {store.name}` — edit the runner, not this file. The same leader-exec")
    w(f"binary runs against a {store.title} server and against a single-member etcd, both started by the runner")
    w(f"on loopback, in alternation ({store.title}, etcd, {store.title}, …), with the same timing profile and")
    w("the same child (`bench/stamp.rs`) as in BENCHMARKS.md, whose figures for etcd and `etcdctl lock`")
    w("come from a separate run. Figures are measured from outside the tool, as there.")
    w("")
    w("## Reproduce")
    w("")
    w("From the repository root, " + store.requirements)
    w("")
    w("    " + " ".join(["python3", "bench/run.py", *(shlex.quote(a) for a in argv)]))
    w("")
    for line in store.setup_text():
        w(line)
    w(f"`{raw_path.relative_to(ROOT) if raw_path.is_relative_to(ROOT) else raw_path}`.")
    w("")
    w("## Machine and versions")
    w("")
    w(f"- {info['cpu']}, {info['cores']} cores, {info['memory_gb']} GB, Linux {info['kernel']}")
    w(f"- leader-exec: {info['leader_exec']}")
    w(f"- {info.get(store.name, store.title + ': unknown')}; etcd: {info['etcd']}")
    w(f"- run {started_at:%Y-%m-%d %H:%M} – {finished_at:%H:%M} UTC; timing profile: `{' '.join(LE_TIMING)}`;"
      f" {args.fast_runs} uncontended runs, {args.runs} of the others, a handover run is a chain of"
      f" {args.chain} handovers")
    busy = [l["machine_busy"] for l in loads.values()]
    if busy:
        w(f"- machine load while measuring (all CPUs, everything running on the machine, the benchmark "
          f"included): {min(busy) * 100:.0f} – {max(busy) * 100:.0f} % busy")
    w("")
    w("## Results")
    w("")
    w(f"median (min – max) over the runs; ratio = {store.title} median / etcd median.")
    w("")
    w(f"| figure | leader-exec on {store.title} | leader-exec on etcd | ratio |")
    w("|---|---|---|---|")
    figures = {f.key: f for f in FIGURES + STORE_ONLY_FIGURES}
    for key in STORE_FIGURES:
        fig = figures[key]
        other = results.get(key, {}).get(store.name, [])
        et = results.get(key, {}).get("leader-exec", [])
        if not other and not et:
            continue
        title = fig.title.format(n=args.waiters) + (f" ({fig.unit})" if fig.unit else "")
        ratio = f"{median(other) / median(et):.2f}" if other and et and median(et) > 0 else "–"
        w(f"| {title} | {summary(other, fig.digits)} | {summary(et, fig.digits)} | {ratio} |")
    w("")
    for note in notes:
        w(f"- {note}")
    if notes:
        w("")
    if failures:
        w("")
        w("Failed runs (left out of the table):")
        w("")
        for f in failures:
            w(f"- {f}")
        w("")
    if not smoke:
        w("## What differs between the stores")
        w("")
        for line in store.differences_text(args, results, med):
            w(line)
    w("## Details")
    w("")
    for name, l in loads.items():
        w(f"- {name}: {l['seconds']:.0f} s, machine {l['machine_busy'] * 100:.0f} % busy, "
          f"load {l['load1_start']:.2f} → {l['load1_end']:.2f}")
    w("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
