"""The tools measured: leader-exec (on etcd or on another store, or serving metrics while a
scraper hits it) and `etcdctl lock`, each as the argv that runs a child under it."""

import http.client
import threading
import time

from .common import CTL_TIMING, LE_TIMING, free_port


class LeaderExec:
    kind = "leader-exec"
    store = "etcd"

    def __init__(self, binary, key="leader-exec", label="leader-exec", env=None):
        self.binary = str(binary)
        self.key = key
        self.label = label
        # Added to the environment of every instance (the check-free start of --unchecked).
        self.env = env or {}

    def argv(self, endpoint, lease, child, extra=()):
        return [self.binary, "--endpoints", endpoint, "--lease", lease, *LE_TIMING, *extra, "--", *child]

    def prefix(self, lease):
        return f"/leader-exec/{lease}/"


class StoreLeaderExec(LeaderExec):
    """The same leader-exec against another store of the list (PostgreSQL, ZooKeeper); its
    results are keyed by the store's name."""

    def __init__(self, binary, store, title, key=None, label=None, env=None):
        super().__init__(binary, key or store, label or f"leader-exec on {title}", env)
        self.store = store


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
