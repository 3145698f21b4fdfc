"""What every part of the benchmark runner shares: the repository root, the timing profile,
CLOCK_MONOTONIC in ns (the clock bench/stamp.rs records on), bounded polling, a clean environment."""

import os
import socket
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent

# One timing profile for both tools: a 5 s lease. leader-exec's flags must satisfy
# renew-deadline + kill-after <= ttl - max(5 % ttl, 250 ms) and retry-period <= renew-deadline / 3.
TTL_S = 5


RENEW_DEADLINE_S = 3.0


RETRY_PERIOD_S = 1.0


LE_TIMING = ["--ttl", "5s", "--renew-deadline", "3s", "--retry-period", "1s", "--kill-after", "1s"]


CTL_TIMING = ["--ttl", str(TTL_S)]


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


class Unsupported(BenchError):
    """The tool refused the scenario's options as a configuration error (exit 125) before its
    child started, e.g. a store that does not take `--max-holders 2` in this build: the scenario's
    figures for that tool are n/a, noted in the report, not a failed run."""


def clean_env(extra=None):
    env = {
        k: v
        for k, v in os.environ.items()
        if not (k.startswith("LEADER_") or k.startswith("ETCDCTL_") or k.startswith("ETCD_"))
    }
    env["ETCDCTL_API"] = "3"
    env.update(extra or {})
    return env
