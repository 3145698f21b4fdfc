"""Processes the runner starts and watches: launching and stopping by pid, deaths seen through
pidfds, a tool's processes, their CPU time and memory, the machine's load, and the records the
child (bench/stamp.rs) writes."""

import os
import select
import signal
import struct
import subprocess
import threading

from .common import BenchError, mono, wait_until


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


def pss_anon_kb(pid):
    """Pss_Anon from smaps_rollup, in kB: the process's anonymous pages, each divided among the
    processes that map it. An instance's anonymous pages are shared only between its own
    processes (copy-on-write after the supervisor's fork), so the sum over them counts each page
    once."""
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 2 and parts[0] == "Pss_Anon:":
                return int(parts[1])
    raise BenchError(f"no Pss_Anon in /proc/{pid}/smaps_rollup (Linux 5.9 or later has it)")


def private_kb(pid):
    """Pages of the process that no other process maps (Private_Clean + Private_Dirty), in kB:
    what ending it would give back."""
    total = 0
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 2 and parts[0] in ("Private_Clean:", "Private_Dirty:"):
                total += int(parts[1])
    return total


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
