"""bench/results/summary.json and the generated parts of BENCHMARKS.md, from the rows of
bench/pairs.py (BENCHMARKS.md, "Rules": medians of interleaved pairs with their ranges and
the load; ratios against the best peer row overall and the best that keeps a durable
history)."""

from pathlib import Path

import floors
import rows

ROOT = Path(__file__).resolve().parent.parent
MARKS = {"top": ("<!-- bench/run.py: summary begin -->", "<!-- bench/run.py: summary end -->"),
         "tables": ("<!-- bench/run.py: tables begin -->", "<!-- bench/run.py: tables end -->")}
TARGETS = {
    "W1": "at least 10,000 jobs/s (Python bulk API and REST bulk endpoint) and ahead of "
          "every peer row",
    "W2": "at least 2x every durable peer's best row, ahead of every peer's best row, and "
          "at least 60% of the bare-loop ceiling, at the median of the pairs",
    "W3": "p99 at or below Celery tuned's on the Redis broker",
}


def best(summary_w: dict, workload: str, durable_only: bool) -> dict | None:
    """The strongest peer row (optionally among durable ones): the one ours beats by the
    least, by the median of its pairs' ratios. Rows differ in N (W2), and a figure from
    launch rises with N, so the pairs' ratios (each at one N) rank the rows, not the raw
    figures; a row without pairs is ranked by its figure after those with."""
    found = []
    for system in rows.PEERS:
        for row in summary_w.get(system, {}).values():
            if row.get("figure") and (row.get("durable_history") or not durable_only):
                found.append(row)
    paired = [r for r in found if (r.get("ratio") or {}).get("median")]
    if paired:
        return min(paired, key=lambda r: r["ratio"]["median"])
    if not found:
        return None
    return (max if rows.HIGHER_IS_BETTER[workload] else min)(
        found, key=lambda r: r["figure"]["median"])


def fmt(value) -> str:
    if value is None:
        return "—"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def span(s: dict | None, suffix: str = "") -> str:
    """'median (min-max)'."""
    if not s:
        return "—"
    lo, hi = s["range"]
    return f"{fmt(s['median'])}{suffix} ({fmt(lo)}-{fmt(hi)})"


def times(s: dict | None) -> str:
    return span(s, "x")


def headline(summary: dict) -> dict:
    """workload -> the best peer row overall and the best durable one, with ours' ratio
    against each (the median of that row's pair ratios)."""
    out = {}
    for workload in rows.WORKLOADS:
        if workload == "ceiling" or workload not in summary:
            continue
        entry = {}
        for key, durable in (("best_peer", False), ("best_durable_peer", True)):
            row = best(summary[workload], workload, durable)
            if row:
                entry[key] = {"system": row["system"], "variant": row["variant"],
                              "figure": row["figure"], "ratio": row.get("ratio")}
        ours = summary[workload].get("ours", {}).get("default")
        if ours:
            entry["ours"] = ours.get("figure")
        out[workload] = entry
    return out


def losses(summary: dict) -> list[str]:
    """Every row whose median pair ratio is under 1 (ours worse), worst first."""
    found = []
    for workload in rows.WORKLOADS:
        for system in rows.PEERS:
            for variant, row in summary.get(workload, {}).get(system, {}).items():
                r = (row.get("ratio") or {}).get("median")
                if r is not None and r < 1:
                    found.append((r, f"* **{workload}**, {row['label']} {variant}: ours "
                                     f"{times(row['ratio'])} of it ({span(row['ours'])} "
                                     f"against {span(row['figure'])} {row.get('unit', '')}, "
                                     f"{row['pairs']} pairs)"))
    return [text for _, text in sorted(found)]


def targets(summary: dict) -> list[str]:
    """Whether the targets of W1, W2, W3 and one ``.enqueue()`` hold at the median of
    the pairs, and by how much; the floors beside them (bench/floors.py)."""
    out = []
    w1 = summary.get("W1", {})
    ours = w1.get("ours", {}).get("default", {})
    if ours.get("ours"):
        py = ours["ours"]["median"]
        rest = (ours.get("ours_rest") or {}).get("median")
        worst = min((row["ratio"]["median"], row["label"], v)
                    for s in rows.PEERS for v, row in w1.get(s, {}).items()
                    if (row.get("ratio") or {}).get("median") is not None) if any(
            (row.get("ratio") or {}).get("median") for s in rows.PEERS
            for row in w1.get(s, {}).values()) else None
        line = (f"* **W1** (target {TARGETS['W1']}): Python bulk {fmt(py)} jobs/s "
                f"({verdict(py)}), REST bulk {fmt(rest)} jobs/s ({verdict(rest)})")
        if worst:
            line += (f"; against the strongest peer row ({worst[1]} {worst[2]}) ours is "
                     f"{worst[0]:.2f}x ({'ahead' if worst[0] >= 1 else 'behind'})")
        out.append(line + ".")
        if floor := floors.w1_floor():
            out.append(floor)
    w2 = summary.get("W2", {})
    # A peer's best tuning is whichever of its rows ours beats by the least: a documented
    # tuning can lose to the defaults on this machine (Dramatiq's larger read-ahead did).
    tuned = [row for s in rows.PEERS for row in w2.get(s, {}).values()
             if (row.get("ratio") or {}).get("median")]
    if tuned:
        worst = min(tuned, key=lambda r: r["ratio"]["median"])
        durable = [r for r in tuned if r.get("durable_history")]
        wd = min(durable, key=lambda r: r["ratio"]["median"]) if durable else None
        line = (f"* **W2** (target {TARGETS['W2']}): against the strongest peer row "
                f"({worst['label']} {worst['variant']}) ours is "
                f"{worst['ratio']['median']:.2f}x "
                f"({'holds' if worst['ratio']['median'] > 1 else 'misses'})")
        if wd:
            line += (f"; against the strongest durable row ({wd['label']} {wd['variant']}) "
                     f"{wd['ratio']['median']:.2f}x "
                     f"({'holds' if wd['ratio']['median'] >= 2 else 'misses 2x'})")
        out.append(line)
    celery = summary.get("W3", {}).get("celery", {}).get("tuned", {})
    if (celery.get("ratio") or {}).get("median"):
        r = celery["ratio"]["median"]
        out.append(f"* **W3** (target {TARGETS['W3']}): ours {span(celery.get('ours'))} "
                   f"against {span(celery['figure'])} ms, {r:.2f}x "
                   f"({'holds' if r >= 1 else 'misses'}); the database broker's (under 50 "
                   "ms) is bench/db_broker_pairs.py's.")
    ceiling = summary.get("ceiling", {}).get("ours", {}).get("default")
    if ceiling and ceiling.get("w2_vs_cold"):
        cold, warm = ceiling["w2_vs_cold"]["median"], (ceiling.get("drain_vs_warm") or {}
                                                       ).get("median")
        out.append(f"* **W2 against the bare loop** (target 60%): from launch against the "
                   f"cold loop {cold:.0%} ({'holds' if cold >= 0.6 else 'misses'}; pairs "
                   f"{ceiling['w2_vs_cold']['range'][0]:.0%}-"
                   f"{ceiling['w2_vs_cold']['range'][1]:.0%}), drain against the warm loop "
                   f"{'—' if warm is None else f'{warm:.0%}'}, {ceiling['pairs']} pairs.")
    return out + floors.enqueue_lines()


def verdict(jobs_per_s: float | None, target: float = 10_000) -> str:
    if jobs_per_s is None:
        return "not measured"
    return "holds" if jobs_per_s >= target else f"misses by {1 - jobs_per_s / target:.0%}"


def top_block(summary: dict) -> str:
    head = headline(summary)
    covered = coverage(summary)
    lines = ["## Summary", "",
             "Medians of interleaved pairs (\"Rules\"); in brackets the range over the pairs. "
             "A ratio is ours against that row, the median of the pairs' own ratios: above 1 "
             "ours is better. The strongest row is the one ours beats by the least in its own "
             "pairs." + ("" if covered else " Every row was measured in the last run."), "",
             "| workload | ours | strongest peer row | ours / it | strongest peer row with a "
             "durable history | ours / it |", "|---|---|---|---|---|---|"]
    for workload, entry in head.items():
        cells = [rows.TITLES[workload], span(entry.get("ours"))]
        for key in ("best_peer", "best_durable_peer"):
            b = entry.get(key)
            cells += ([f"{rows.LABELS[b['system']]} {b['variant']}: {span(b['figure'])}",
                       times(b.get("ratio"))] if b else ["—", "—"])
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "### Where we lose", ""]
    lines += losses(summary) or ["* No row beat ours at the median of its pairs."]
    lines += ["", "### Targets", ""] + (targets(summary) or ["* Not measured."])
    if covered:
        lines += ["", "### Measured, carried over, missing", ""] + covered
    return "\n".join(lines)


def coverage(summary: dict) -> list[str]:
    """Per workload: which rows the tables hold from the last run, which are carried over
    from an earlier one, and which no run under these rules has measured yet; empty when
    every row is fresh (the summary then says so in a sentence)."""
    out = []
    for workload in rows.WORKLOADS:
        have, old, missing = [], [], []
        for system, spec in rows.SYSTEMS.items():
            if workload not in spec["workloads"]:
                continue
            for variant in rows.variants_of(system, workload) + (
                    ["tuned"] if workload == "W1" and system != "ours" else []):
                row = summary.get(workload, {}).get(system, {}).get(variant)
                name = f"{rows.LABELS[system]} {variant}"
                if not row:
                    missing.append(name)
                elif "unsupported" in row and not row.get("figure"):
                    have.append(f"{name} (unsupported)")
                elif row.get("carried"):
                    old.append(f"{name} ({row.get('date')})")
                else:
                    have.append(f"{name} ({row.get('pairs', 0)} pairs)")
        parts = [f"measured: {', '.join(have)}" if have else "",
                 f"carried over: {', '.join(old)}" if old else "",
                 f"not measured under these rules: {', '.join(missing)}" if missing else ""]
        if old or missing:
            out.append(f"* **{workload}**: " + "; ".join(p for p in parts if p) + ".")
    return out


def table(workload: str, wsum: dict) -> list[str]:
    unit = next((r.get("unit") for s in wsum.values() for r in s.values() if r.get("unit")),
                "")
    lines = [f"### {rows.TITLES[workload]}", "",
             "| row | configuration | durable history | N | figure | ours in the same pairs "
             "| ours / row | pairs | load 1 min | measured |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    unsupported = []  # rows a system cannot run: one line under the table, not a row each
    for system in rows.SYSTEMS:
        for variant, row in wsum.get(system, {}).items():
            label = f"{rows.LABELS[system]} {variant}"
            when = row.get("date", "") + (" quick" if row.get("quick") else "")
            if row.get("carried"):
                when += " † carried over from an earlier day"
            if "unsupported" in row and not row.get("figure"):
                unsupported.append(f"{label} ({row['unsupported']}; {when})")
                continue
            fig = span(row.get("figure"))
            if row.get("failed") and not row.get("figure"):
                fig = f"failed: {row['failed'][:120]}"
            load = row.get("load_1m")
            hist = {True: "yes", False: "no", None: "?"}[row.get("durable_history")]
            # An N of 0 (W3's rows summarised before pairs.size_of) is no N: not "0.00".
            lines.append(
                f"| {label} | {row.get('config') or ''} | {hist} | {fmt(row.get('n') or None)} | "
                f"{fig} {unit} | {span(row.get('ours'))} | {times(row.get('ratio'))} | "
                f"{row.get('pairs', 0)} | {'' if not load else f'{load[0]:.1f}-{load[1]:.1f}'}"
                f" | {when} |")
    if unsupported:
        lines += ["", "Unsupported: " + "; ".join(unsupported) + "."]
    if workload == "ceiling":
        c = wsum.get("ours", {}).get("default", {})
        lines += ["", f"Bare loop warm {span(c.get('figure'))} runs/s, cold "
                      f"{span(c.get('cold'))}; W2 {span(c.get('ours'))} jobs/s, its drain "
                      f"{span(c.get('drain'))} runs/s; W2 / cold loop "
                      f"{times(c.get('w2_vs_cold'))}, drain / warm loop "
                      f"{times(c.get('drain_vs_warm'))}."]
    return lines + [""]


def tables_block(summary: dict, hw: dict, command: str, notes: list[str],
                 plots: list[Path]) -> str:
    lines = ["## Tables", "",
             f"{hw['cpu']}, {hw['cores']} cores, {hw['ram']}; PostgreSQL {hw['postgresql']} "
             f"(the benchmark's own cluster, fsync on, stock settings), Redis {hw['redis']}, "
             f"Python {hw['python']} ({hw['os']}); shared with others: the load column is the "
             f"1-minute load average before and after each run of the cell. Last command: "
             f"`{command}`.", ""]
    for workload in rows.WORKLOADS:
        if summary.get(workload):
            lines += table(workload, summary[workload])
    if notes:
        lines += ["Notes: " + "; ".join(notes) + ".", ""]
    if plots:
        lines += [" ".join(f"![{p.stem}](bench/results/plots/{p.name})" for p in plots), ""]
    return "\n".join(lines)


def write_md(summary: dict, hw: dict, command: str, notes: list[str], plots: list[Path]):
    """Replace the two generated blocks of BENCHMARKS.md (each between its markers)."""
    path = ROOT / "BENCHMARKS.md"
    text = path.read_text()
    for key, body in (("top", top_block(summary)),
                      ("tables", tables_block(summary, hw, command, notes, plots))):
        begin, end = MARKS[key]
        if begin not in text or end not in text:
            raise SystemExit(f"BENCHMARKS.md lacks the markers {begin} ... {end}")
        head, rest = text.split(begin, 1)
        text = (head + begin + "\n\n" + body.strip() + "\n\n" + end
                + rest.split(end, 1)[1])
    path.write_text(text)
