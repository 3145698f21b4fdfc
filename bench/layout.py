#!/usr/bin/env python3
"""Makes link/order.txt: the functions a run executes, which the release link puts first in the
code, next to each other (build.rs passes the file to the linker as its symbol ordering file).

    python3 bench/layout.py          # profiles the release build on every store, writes link/order.txt

Why: on a page fault in the binary's code the kernel maps up to 16 neighbouring pages that are in
the page cache (fault-around, 64 KB). With the linker's default order the code a run executes is
spread over the whole binary, among the code of the other stores, TLS, the HTTP server and
`generate-assets`, so nearly all the code became resident (bench/MEMORY.md). Listed first, it
shares its 64 KB windows with itself.

How: each store of the benchmarks (etcd first, then PostgreSQL, ZooKeeper and PostgreSQL through
pgbouncer: the store list's order) is started by the test harness (bench-servers, as the benchmarks
do); on each, a leader that holds for a few seconds (renewals) and a waiter that takes over when the
leader's command exits run under valgrind's lackey, which writes down every block of code executed,
the forked supervisor's included; the file lists the functions in the order they first ran, each
once. A run on etcd finds its code at the front; a run on another store finds there the code every
run shares (among etcd's), and its store's code behind it. Functions not listed (error paths, other
subcommands) follow in the linker's order, so a stale file costs memory, never correctness; the
runner's memory figures (BENCHMARKS.md) show whether it needs making again.

Standard library only (Python 3.11); needs valgrind. Processes are killed by pid only, every wait
is bounded.
"""

import argparse
import bisect
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from lib.common import ROOT, clean_env  # noqa: E402
from lib.servers import Server, benchmarked_stores, build_servers  # noqa: E402

ORDER = ROOT / "link" / "order.txt"
# Slow under valgrind: a long lease, so that nothing expires while it translates code.
TIMING = ["--ttl", "9s", "--renew-deadline", "4s", "--kill-after", "1600ms", "--retry-period", "800ms"]
HEADER = """\
# The functions a run executes, first in the code (build.rs: lld's --symbol-ordering-file).
# Made by `python3 bench/layout.py` from traces of a leader and a waiter on etcd, then
# PostgreSQL, then ZooKeeper; do not edit. Names missing from a build are ignored.
"""


def traced(binary, out, endpoint, lease, hold, log):
    """leader-exec under valgrind's lackey, which writes the address of every block of code it
    executes, as it executes it, to a file per process (`out.PID`): the forked supervisor's
    included, which leader-exec's exit kills before it could write anything at its end.

    Under valgrind the command does not start (valgrind's launcher takes its exec and fails), so
    the leader keeps its lease for `hold` with --hold-at-least, renewing it, and then exits
    with the failed command's status."""
    command = [
        "valgrind", "--tool=lackey", "--trace-superblocks=yes", f"--log-file={out}.%p",
        str(binary), "--endpoints", endpoint, "--lease", lease, *TIMING, "--hold-at-least", hold,
        "--", "true",
    ]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log, env=clean_env())


def wait(proc, name, log, timeout=120):
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
        raise SystemExit(f"layout: {name} did not finish within {timeout} s") from None
    # 1: the command that could not start under valgrind (see `traced`).
    if code not in (0, 1):
        raise SystemExit(f"layout: {name} exited {code} (see {log})")


class Symbols:
    """The binary's functions by address (its symbol table) and its entry point."""

    def __init__(self, binary):
        out = subprocess.run(["nm", "-n", "-S", "--defined-only", str(binary)],
                             capture_output=True, text=True, check=True).stdout
        self.functions = []
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 4 and parts[2] in ("t", "T", "w", "W"):
                start, size = int(parts[0], 16), int(parts[1], 16)
                self.functions.append((start, start + size, parts[3]))
        self.starts = [f[0] for f in self.functions]
        header = subprocess.run(["readelf", "-h", str(binary)], capture_output=True, text=True, check=True).stdout
        self.entry = int(re.search(r"Entry point address:\s+0x([0-9a-f]+)", header).group(1), 16)

    def name(self, address):
        i = bisect.bisect_right(self.starts, address) - 1
        if i >= 0 and self.functions[i][0] <= address < self.functions[i][1]:
            return self.functions[i][2]
        return None


def blocks(path):
    with open(path, errors="replace") as f:
        for line in f:
            if line.startswith("SB "):
                yield int(line[3:], 16)


def load_address(main_file, symbols):
    """Where valgrind loaded the binary. Its entry point is among the main process's blocks,
    like blocks of the loader and libc that a wrong base would take for it: of the bases that
    put a block on the entry point, the one under which most of the trace falls in the
    binary's functions."""
    trace = list(blocks(main_file))
    sample = trace[:: max(1, len(trace) // 5000)]
    bases = {a - symbols.entry for a in trace if a >= symbols.entry and (a - symbols.entry) % 4096 == 0}
    if not bases:
        raise SystemExit(f"layout: the binary's entry point is not in {main_file}")
    return max(bases, key=lambda base: sum(1 for a in sample if symbols.name(a - base) is not None))


def executed(files, base, symbols):
    """The binary's functions in lackey's traces, in order of first execution."""
    names = []
    for path in files:
        for address in blocks(path):
            name = symbols.name(address - base)
            if name is not None:
                names.append(name)
    return names


def profile_store(binary, symbols, server, work, log):
    """A leader holding for 4 s, and a waiter that takes over when the leader lets go."""
    lease = f"layout-{server.name}"
    endpoint = server.endpoint(lease)
    runs = []
    for role, hold in (("leader", "4s"), ("waiter", "1s")):
        out = work / f"{server.name}-{role}"
        runs.append((role, out, traced(binary, out, endpoint, lease, hold, log)))
        time.sleep(3)
    names = []
    for role, out, proc in runs:
        wait(proc, f"the {role} on {server.name}", log.name)
        # The main process's file first: its pid is the lower (the supervisor is its child).
        files = sorted(work.glob(f"{out.name}.*"), key=lambda p: int(p.suffix[1:]))
        names += executed(files, load_address(files[0], symbols), symbols)
    return names


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", default=str(ROOT / "target" / "release" / "leader-exec"))
    parser.add_argument("--out", default=str(ORDER))
    args = parser.parse_args()
    binary = Path(args.binary).resolve()
    if args.binary == str(ROOT / "target" / "release" / "leader-exec"):
        subprocess.run(["cargo", "build", "--release", "--locked", "--quiet"], cwd=ROOT, check=True)
    servers_binary = build_servers()
    symbols = Symbols(binary)
    names, seen = [], set()
    work = Path(tempfile.mkdtemp(prefix="leader-exec-layout"))
    with open(work / "valgrind.log", "w") as log:
        for store in benchmarked_stores(servers_binary):
            server = Server(servers_binary, store, work)
            try:
                found = profile_store(binary, symbols, server, work, log)
            finally:
                server.stop()
            added = 0
            for name in found:
                if name not in seen:
                    seen.add(name)
                    names.append(name)
                    added += 1
            print(f"{store}: {len(set(found))} functions executed, {added} not listed before")
            # A run executes well over a thousand of the binary's functions: far fewer means the
            # traces were not read right (a wrong load address), not a smaller program.
            if len(set(found)) < 300:
                raise SystemExit(f"layout: only {len(set(found))} functions found on {store} (see {work})")
    shutil.rmtree(work)
    Path(args.out).write_text(HEADER + "".join(f"{n}\n" for n in names))
    print(f"{args.out}: {len(names)} functions")


if __name__ == "__main__":
    main()
