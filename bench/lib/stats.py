"""Statistics on the samples the scenarios return: the figures each report shows, their targets,
medians and spreads, and bootstrap intervals of ratios. Nothing here measures or renders."""

import random
import statistics

from .common import TTL_S


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


def at_most(limit):
    def judge(le, ctl, results):
        return median(le) <= limit, f"median {median(le):.2f}"
    return judge


def max_at_most(limit):
    def judge(le, ctl, results):
        most = max(v["value"] if isinstance(v, dict) else v for v in le)
        return most <= limit, f"max {most:.0f}"
    return judge


def pss_alone(le, ctl, results):
    why = f"median {median(le):.2f} MB"
    if median(le) > 4.0:
        return False, why + ", above 4 MB"
    if not ctl:
        return None, why + "; no etcdctl figure"
    ok, ratio = ratio_at_most(0.3)(le, ctl, results)
    return ok, f"{why}; {ratio}"


def judge_failover(le, ctl, results):
    over = sum(1 for v in le if v > TTL_S + 0.3)
    return median(le) <= TTL_S + 0.3, f"median {median(le):.2f} s; {over}/{len(le)} runs above {TTL_S + 0.3} s"


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
    Figure("handover", "graceful handover: holder's child exits → waiter's child starts", "ms", "≤ 0.9 × etcdctl", ratio_at_most(0.9), digits=2),
    Figure("semaphore", "`--max-holders 2`, 2 holders + 1 waiter: a holder's child exits → the waiter's child starts", "ms", "report", digits=2),
    Figure("failover", f"crash failover, ttl {TTL_S} s: wrapper SIGKILLed → next child starts", "s", f"≤ ttl + 0.3 s = {TTL_S + 0.3} s", judge_failover, digits=2),
    Figure("failover_cut", "partition: proxy cut → next child starts", "s", "report", digits=2),
    Figure("stepdown", "step-down latency: local renew deadline → kill signal received by the child", "ms", "≤ 50 ms", judge_stepdown, le_only=True, digits=2),
    Figure("pss", "tool alone (one holding instance, no other instance on the host): PSS, all its processes together", "MB", "≤ 0.3 × etcdctl and ≤ 4 MB", pss_alone, digits=2),
    Figure("rss", "tool alone: RSS, summed over its processes", "MB", "(see PSS)", digits=2),
    Figure("distinct", "tool alone: resident pages of its processes, each page counted once", "MB", "report", digits=2),
    Figure("anon", "tool alone: of which anonymous memory (heap, stacks: not shared with any file)", "MB", "report", digits=2),
    Figure("pss_per_instance", "{m} waiters of the same lease on the host: PSS per instance (holder and waiters, shared pages divided among them)", "MB", "report", digits=2),
    Figure("waiter_anon", "{m} waiters on the host: anonymous memory per waiting instance, summed over its processes (a page its main process and supervisor share copy-on-write counts twice)", "MB", "report", digits=2),
    Figure("waiter_anon_once", "{m} waiters on the host: anonymous memory per waiting instance, each page counted once (Pss_Anon summed over its processes)", "MB", "≤ 1 MB", at_most(1.0), digits=2),
    Figure("waiter_private", "{m} waiters on the host: private memory (pages no other process maps) per waiting instance", "MB", "report", digits=2),
    Figure("cpu", "CPU while holding idle (ms of CPU per s)", "ms/s", "≈ 0", judge_cpu, digits=2),
    Figure("handover_requests", "1 waiter: etcd requests per handover (renewals excluded)", "", "≤ 3 (every handover)", max_at_most(3), digits=0),
    Figure("semaphore_requests", "`--max-holders 2`, 1 waiter: etcd requests per handover (renewals excluded)", "", "≤ 3 (every handover)", max_at_most(3), digits=0),
    # Not "same as 1 waiter": the first waiter behind the leader needs no read (2 requests), a
    # waiter further back reads once (3), and no line makes more.
    Figure("waiters_requests", "{n} waiters: etcd requests per handover (renewals excluded)", "", "≤ 3 (every handover)", max_at_most(3), digits=0),
    Figure("handover_events", "1 waiter: watch events sent per handover", "", "report", digits=0),
    Figure("waiters_events", "{n} waiters: watch events sent per handover", "", "O(1): same as 1 waiter", judge_o1("handover_events"), digits=0),
    Figure("waiters_reference", "1 waiter, measured in the same runs just before the {n}-waiter line", "ms", "report", digits=2),
    Figure("waiters_latency", "{n} waiters: handover latency", "ms", "≤ 1.2 × the one-waiter figure", judge_waiter_latency, digits=2),
    Figure("waiters_renewals", "{n} waiters, idle: lease renewals (PostgreSQL: looks at the line; MySQL: their statements, three a look) per second reaching the store", "1/s", "report", digits=0),
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


# The figures every store's run measures: BENCHMARKS.md's table of leader-exec on each store.
EACH_STORE_FIGURES = ["uncontended", "handover", "semaphore", "failover", "pss", "cpu"]


STORE_FIGURES = ["uncontended", "uncontended_exit", "handover", "semaphore", "failover", "pss", "rss", "distinct",
                 "anon", "pss_per_instance", "waiter_anon", "waiter_anon_once", "waiter_private", "cpu", "store_requests", "waiters_reference", "waiters_latency",
                 "store_handover_requests", "store_waiters_reference_requests", "store_waiters_requests",
                 "waiters_renewals"]


# Figures only the store comparisons measure.
STORE_ONLY_FIGURES = [
    Figure("store_requests", "requests reaching the store per second while holding idle", "1/s", "report", digits=1),
    Figure("store_handover_requests", "graceful handover, 1 waiter: requests reaching the store (PostgreSQL, "
           "MySQL: statements; etcd: renewals excluded)", "", "report", digits=0),
    Figure("store_waiters_reference_requests", "1 waiter, before the {n}-waiter line: requests per handover "
           "(PostgreSQL, MySQL: statements)", "", "report", digits=0),
    Figure("store_waiters_requests", "{n} waiters: requests per handover (PostgreSQL, MySQL: statements, "
           "the waiters' periodic looks excluded; etcd: renewals excluded)", "", "report", digits=0),
]
