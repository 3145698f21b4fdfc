"""The reports, rendered from a run's results and the templates in bench/templates/ (which hold
the prose): BENCHMARKS.md (leader-exec beside etcdctl lock on etcd, `report.md.in` and
`notes.md.in`) and one report per other store (`report-store.md.in` and `STORE.md.in`). Nothing
here measures; figures and statistics come from stats.py."""

import datetime
import json
import shlex
import statistics
import string
import textwrap

from .common import CTL_TIMING, LE_TIMING, RENEW_DEADLINE_S, RETRY_PERIOD_S, ROOT, TTL_S
from .stats import (EACH_STORE_FIGURES, FIGURES, STORE_FIGURES, STORE_ONLY_FIGURES, median, ratio_interval,
                    summary)

TEMPLATES = ROOT / "bench" / "templates"


def render(name, values):
    """The template `name` with `${key}` replaced by values[key] (every key must be given)."""
    return string.Template((TEMPLATES / name).read_text()).substitute(values)


def store_template(store):
    """A store's template (bench/templates/STORE.md.in): its header fields (`title`, `report`,
    `endpoint-options`, `requirements`) and its `setup` and `differences` prose. A store of the
    list without one gets its name as the title and no prose."""
    out = {"title": store, "report": store.upper(), "endpoint-options": "", "requirements": "",
           "setup": "", "differences": ""}
    path = TEMPLATES / f"{store}.md.in"
    if not path.exists():
        return out
    section = None
    parts = {}
    for line in path.read_text().splitlines():
        if line.startswith("--- "):
            section = line[4:].strip()
            parts[section] = []
        elif section is None:
            key, _, value = line.partition(":")
            if key.strip():
                out[key.strip()] = value.strip()
        else:
            parts[section].append(line)
    out.update({k: "\n".join(v).strip("\n") for k, v in parts.items()})
    return out


def rewrap(text, width=100):
    """Prose paragraphs (not tables, lists, headings or code) wrapped to `width`."""
    out = []
    for paragraph in text.split("\n\n"):
        lines = paragraph.split("\n")
        if paragraph.strip() and not any(l.startswith(("|", "-", "#", "    ")) or l[:2].rstrip(".").isdigit()
                                         for l in lines):
            paragraph = "\n".join(textwrap.wrap(" ".join(lines), width, break_long_words=False,
                                                 break_on_hyphens=False))
        out.append(paragraph)
    return "\n\n".join(out)


def run_times(raw, raw_path):
    """When a stored run started and finished (the file's time for a run that did not record it)."""
    written = datetime.datetime.fromtimestamp(raw_path.stat().st_mtime, datetime.timezone.utc)
    return [datetime.datetime.fromisoformat(raw[k]) if k in raw else written for k in ("started_at", "finished_at")]


def shown_path(path):
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def command_line(argv):
    return " ".join(["python3", "bench/run.py", *(shlex.quote(a) for a in argv)])


def busy_line(loads, with_load_average):
    busy = [l["machine_busy"] for l in loads.values()]
    if not busy:
        return []
    text = (f"- machine load while measuring (all CPUs, everything running on the machine, the benchmark "
            f"included): {min(busy) * 100:.0f} – {max(busy) * 100:.0f} % busy")
    if with_load_average:
        text += (f"; 1-min load average {min(l['load1_start'] for l in loads.values()):.2f} – "
                 f"{max(l['load1_end'] for l in loads.values()):.2f}")
    return [text]


def failure_lines(failures):
    if not failures:
        return []
    return ["", "Failed runs (left out of the table):", ""] + [f"- {f}" for f in failures]


def loads_lines(loads):
    return [f"- {name}: {l['seconds']:.0f} s, machine {l['machine_busy'] * 100:.0f} % busy, "
            f"load {l['load1_start']:.2f} → {l['load1_end']:.2f}" for name, l in loads.items()]


# ---------------------------------------------------------------------------------------------
# BENCHMARKS.md: leader-exec and etcdctl lock on etcd


def results_section(args, results, notes, failures):
    """The results table (with targets and verdicts in a full run), notes and failed runs."""
    smoke = args.smoke
    lines = []
    w = lines.append
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
        title = fig.title.format(n=args.waiters, m=getattr(args, 'memory_waiters', '?')) + (f" ({fig.unit})" if fig.unit else "")
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
    return "\n".join(lines)


def baseline_section(args, results):
    lines = []
    w = lines.append
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
            w(f"- {fig.title.format(n=args.waiters, m=getattr(args, 'memory_waiters', '?'))}: leader-exec / baseline {median(le) / median(base):.3f}"
              f" (95 % interval {lo1:.2f} – {hi1:.2f}); baseline / etcdctl {median(base) / median(ctl):.3f}"
              f" ({lo2:.2f} – {hi2:.2f})")
        w("")
    return "\n".join(lines) + "\n"


def details_section(extras, loads):
    lines = []
    w = lines.append
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


# The each-store table's rows: the figure key in etcd's report (leader-exec beside etcdctl) and in
# another store's (leader-exec on it, the tool named after the store).
EACH_STORE_ROWS = [(key, key, None) for key in EACH_STORE_FIGURES] + [
    ("handover_requests", "store_handover_requests",
     "1 waiter: requests reaching the store per handover (etcd: renewals excluded; PostgreSQL, MySQL: "
     "statements)"),
    ("waiters_requests", "store_waiters_requests",
     "{n} waiters: requests reaching the store per handover (the same exclusions)"),
]


def each_store_table(results, started_at, stores, waiters):
    """leader-exec on each store: etcd from this run and every other store from the raw results
    of its run (bench/POSTGRES.json, ...: written earlier in the same invocation by a full run);
    a store without them is left out, and so is the table when no other store has any."""
    columns = [("etcd", results, "leader-exec", started_at, "this file's run", "etcd")]
    reports = []
    for store in stores:
        info = store_template(store)
        raw_path = ROOT / "bench" / f"{info['report']}.json"
        if not raw_path.exists():
            continue
        raw = json.loads(raw_path.read_text())
        columns.append((info["title"], raw["results"], store, run_times(raw, raw_path)[0],
                        f"`{raw_path.relative_to(ROOT)}`", store))
        reports.append(f"bench/{info['report']}.md")
    if not reports:
        return ""
    out = ["**leader-exec on each store.** Median (min – max) over each store's runs.", ""]
    out.append("| figure | " + " | ".join(title for title, *_ in columns) + " |")
    out.append("|---|" + "---|" * len(columns))
    figures = {f.key: f for f in FIGURES + STORE_ONLY_FIGURES}
    for etcd_key, store_key, row_title in EACH_STORE_ROWS:
        fig = figures[etcd_key]
        values = [res.get(etcd_key if kind == "etcd" else store_key, {}).get(tool, [])
                  for _, res, tool, _, _, kind in columns]
        if any(values):
            title = (row_title or fig.title).format(n=waiters)
            unit = f" ({fig.unit})" if fig.unit else ""
            out.append(f"| {title}{unit} | " + " | ".join(summary(v, fig.digits) for v in values) + " |")
    out.append("")
    runs = ", ".join(f"{title} {when:%Y-%m-%d %H:%M} UTC ({source})" for title, _, _, when, source, _ in columns)
    out += textwrap.wrap(f"Each column comes from its own series of runs — {runs} — one store after another (a full"
                         f" run measures every store, the other stores first), so the machine's load may differ"
                         f" between the columns; the per-store reports ({', '.join(reports)}) compare each store"
                         f" with etcd in alternation within one run, which is the fairer comparison.", 100,
                         break_on_hyphens=False)
    return "\n".join(out) + "\n\n"


def notes_values(args, results, extras, started_at, stores):
    """The numbers notes.md.in shows, all from this run."""

    def med(key, tool="leader-exec", digits=2):
        values = results.get(key, {}).get(tool)
        return f"{median(values):.{digits}f}" if values else "–"

    def diag(scenario, tool, key):
        return [r.get(key) for r in extras.get(scenario, {}).get(tool, []) if r.get(key) is not None]

    def ratio_of(key):
        le, ctl = results.get(key, {}).get("leader-exec"), results.get(key, {}).get("etcdctl")
        return f"{median(le) / median(ctl):.2f}" if le and ctl else "–"

    expiry = results.get("etcd_expiry", {}).get("etcd", [])
    expiry_text = (f"a {TTL_S} s lease that nobody renewed was gone after {min(expiry):.2f} – {max(expiry):.2f} s"
                   f" (median {statistics.median(expiry):.2f} s, {len(expiry)} leases)") if expiry else "(not measured)"
    signalled = diag("partition", "leader-exec", "old_child_signalled_after_cut_s")
    per = extras.get("hold", {}).get("leader-exec", [])
    breakdown = ""
    procs = (per[0].get("per_process_rss_pss_anon_mb") or []) if per else []
    if len(procs) >= 2:
        breakdown = (f" (in the first run: main process RSS {procs[0][0]} MB, PSS {procs[0][1]} MB;"
                     f" supervisor RSS {procs[1][0]} MB, PSS {procs[1][1]} MB)")
    rss_le, rss_ctl = results.get("rss", {}).get("leader-exec"), results.get("rss", {}).get("etcdctl")
    return {
        "each_store_table": each_store_table(results, started_at, stores, args.waiters),
        "check_ctl": med("check", "etcdctl"), "check_le": med("check"),
        "runs": args.runs, "chain": args.chain, "ttl": TTL_S, "retry_period": f"{RETRY_PERIOD_S:g}",
        "renew_deadline": f"{RENEW_DEADLINE_S:g}", "expiry_text": expiry_text,
        "signalled_text": f" ({statistics.median(signalled):.2f} s after the cut, median)" if signalled else "",
        "breakdown": breakdown,
        "rss_le": med("rss"), "rss_ratio": f"{median(rss_le) / median(rss_ctl):.2f}" if rss_le and rss_ctl else "–",
        "distinct_le": med("distinct"), "distinct_ctl": med("distinct", "etcdctl"),
        "distinct_ratio": ratio_of("distinct"),
        "anon_le": med("anon"), "anon_ctl": med("anon", "etcdctl"),
        "memory_waiters": getattr(args, "memory_waiters", "?"),
        "memory_waiters_plus_one": getattr(args, "memory_waiters", 0) + 1 if hasattr(args, "memory_waiters") else "?",
        "pss_inst_le": med("pss_per_instance"), "pss_inst_ctl": med("pss_per_instance", "etcdctl"),
        "waiter_anon_le": med("waiter_anon"), "waiter_anon_ctl": med("waiter_anon", "etcdctl"),
        "waiter_anon_once_le": med("waiter_anon_once"), "waiter_anon_once_ctl": med("waiter_anon_once", "etcdctl"),
        "waiter_private_le": med("waiter_private"), "waiter_private_ctl": med("waiter_private", "etcdctl"),
        "hold_seconds": f"{args.hold_seconds:g}", "waiters": args.waiters,
        "waiters_renewals_le": med("waiters_renewals", digits=0),
        "waiters_renewals_ctl": med("waiters_renewals", "etcdctl", 0),
    }


def report(args, argv, info, results, extras, loads, failures, notes, started_at, finished_at, raw_path,
           stores=()):
    """BENCHMARKS.md (or a smoke run's SMOKE.md). `stores`: the other stores of the list, whose
    raw results feed the each-store table."""
    machine = [
        f"- {info['cpu']}, {info['cores']} cores, {info['memory_gb']} GB, Linux {info['kernel']}",
        f"- leader-exec: {info['leader_exec']}",
        f"- etcd: {info['etcd']}; etcdctl: {info['etcdctl']}",
        f"- {info['rustc']}; Python {info['python']}",
        f"- run {started_at:%Y-%m-%d %H:%M} – {finished_at:%H:%M} UTC; timing profile: leader-exec "
        f"`{' '.join(LE_TIMING)}`, etcdctl `lock {' '.join(CTL_TIMING)}`",
    ] + busy_line(loads, True)
    if args.baseline:
        sections = baseline_section(args, results)
    elif not args.smoke:
        sections = render("notes.md.in", notes_values(args, results, extras, started_at, stores))
    else:
        sections = ""
    return render("report.md.in", {
        "smoke_title": " (smoke run: not a measurement)" if args.smoke else "",
        "command": command_line(argv),
        "binary_note": "(run here with a given binary, `--binary`; without it the runner builds its own.)\n"
        if args.binary else "",
        "fast_runs": args.fast_runs, "runs": args.runs, "chain": args.chain,
        "raw_path": shown_path(raw_path),
        "machine": "\n".join(machine),
        "results": results_section(args, results, notes, failures),
        "sections": sections,
        "details": details_section(extras, loads),
    })


# ---------------------------------------------------------------------------------------------
# A store's report: leader-exec on it beside leader-exec on etcd, in the same runs


def store_values(store, args, results):
    """The numbers a store's `differences` prose shows, all from this run."""

    def med(key, tool=store, digits=2):
        values = results.get(key, {}).get(tool)
        return f"{median(values):.{digits}f}" if values else "–"

    expiry = results.get("store_expiry", {}).get(store, [])
    expiry_text = (f"in this run a {TTL_S} s session that sent nothing more was gone {min(expiry):.2f} – "
                   f"{max(expiry):.2f} s after its last request (median {statistics.median(expiry):.2f} s, "
                   f"{len(expiry)} sessions)") if expiry else "(not measured in this run)"
    return {
        "ttl": TTL_S, "retry_period": f"{RETRY_PERIOD_S:g}", "waiters": args.waiters,
        "handover_store": med("handover"), "handover_etcd": med("handover", "leader-exec"),
        "expiry_text": expiry_text, "tick_ms": TTL_S * 1000 // 20, "ping_ms": 3 * TTL_S * 1000 // 20,
        "store_requests_store": med("store_requests", digits=1),
        "store_requests_etcd": med("store_requests", "leader-exec", 1),
        "cpu_store": med("cpu"), "cpu_etcd": med("cpu", "leader-exec"),
        "handover_requests_store": med("store_handover_requests", digits=0),
        "waiters_renewals_store": med("waiters_renewals", digits=0),
    }


def report_store(store, args, argv, info, results, extras, loads, failures, notes, started_at, finished_at,
                 raw_path):
    """Another store's report (bench/POSTGRES.md, ...; a smoke run's SMOKE-STORE.md)."""
    t = store_template(store)
    machine = [
        f"- {info['cpu']}, {info['cores']} cores, {info['memory_gb']} GB, Linux {info['kernel']}",
        f"- leader-exec: {info['leader_exec']}",
        f"- {info.get(store, t['title'] + ': unknown')}; etcd: {info['etcd']}",
        f"- run {started_at:%Y-%m-%d %H:%M} – {finished_at:%H:%M} UTC; timing profile: `{' '.join(LE_TIMING)}`;"
        f" {args.fast_runs} uncontended runs, {args.runs} of the others, a handover run is a chain of"
        f" {args.chain} handovers",
    ] + busy_line(loads, False)
    table = [f"| figure | leader-exec on {t['title']} | leader-exec on etcd | ratio |", "|---|---|---|---|"]
    figures = {f.key: f for f in FIGURES + STORE_ONLY_FIGURES}
    for key in STORE_FIGURES:
        fig = figures[key]
        other = results.get(key, {}).get(store, [])
        et = results.get(key, {}).get("leader-exec", [])
        if not other and not et:
            continue
        title = fig.title.format(n=args.waiters, m=getattr(args, 'memory_waiters', '?')) + (f" ({fig.unit})" if fig.unit else "")
        ratio = f"{median(other) / median(et):.2f}" if other and et and median(et) > 0 else "–"
        table.append(f"| {title} | {summary(other, fig.digits)} | {summary(et, fig.digits)} | {ratio} |")
    table.append("")
    table += [f"- {note}" for note in notes] + ([""] if notes else [])
    table += failure_lines(failures) + ([""] if failures else [])
    differences = ""
    if not args.smoke and t["differences"]:
        differences = ("## What differs between the stores\n\n"
                       + string.Template(t["differences"]).substitute(store_values(store, args, results)) + "\n\n")
    return rewrap(render("report-store.md.in", {
        "title": t["title"], "store": store, "requirements": t["requirements"],
        "smoke_title": " (smoke run: not a measurement)" if args.smoke else "",
        "command": command_line(argv), "setup": t["setup"], "raw_path": shown_path(raw_path),
        "machine": "\n".join(machine), "results": "\n".join(table), "differences": differences,
        "details": "\n".join(loads_lines(loads)) + "\n",
    }))
