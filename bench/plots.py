"""The PNG plots of BENCHMARKS.md (W2 to W5), drawn with matplotlib from the results of
bench/run.py (``pip install -e '.[bench]'``)."""

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
ORDER = ["ours", "celery", "rq", "dramatiq", "procrastinate", "djangoq"]
LABELS = {"ours": "ours", "celery": "Celery", "rq": "RQ", "dramatiq": "Dramatiq",
          "procrastinate": "procrastinate", "djangoq": "django-q2"}


def _latest(results: dict, system: str, workload: str) -> dict | None:
    """This run's result for (system, workload), else the newest results file's."""
    found = results.get(system, {}).get(workload)
    if found and found.get("figure") is not None:
        return found
    # run.py's dated files first, then ours' hand runs (e.g. ours-w4-w5-<date>.json: W4
    # has no plot after a --quick run otherwise).
    files = (sorted(RESULTS.glob("20*.json"), reverse=True)
             + sorted(RESULTS.glob("ours-*.json"), reverse=True))
    for path in files:
        try:
            old = json.loads(path.read_text())["results"].get(system, {}).get(workload)
        except (OSError, ValueError, KeyError):
            continue
        if old and old.get("figure") is not None:
            return old
    return None


def _bars(ax, names, values, color):
    bars = ax.bar([LABELS[n] for n in names], values, color=color)
    for bar, value in zip(bars, values, strict=True):
        ax.annotate(f"{value:,.0f}" if value >= 100 else f"{value:.2f}",
                    (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center", va="bottom", fontsize=8)


def _colors(names):
    return ["tab:red" if n == "ours" else "tab:gray" for n in names]


def plot_w2(results: dict, out: Path) -> Path | None:
    rows = [(s, r["figure"]) for s in ORDER if (r := _latest(results, s, "W2"))]
    ceiling = _latest(results, "ours", "ceiling")
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    _bars(ax, [s for s, _ in rows], [v for _, v in rows], _colors([s for s, _ in rows]))
    if ceiling:
        ax.axhline(ceiling["figure"], color="tab:blue", linestyle="--",
                   label=f"ceiling, bare loop started warm {ceiling['figure']:,.0f}/s")
        cold = ceiling.get("details", {}).get("cold_runs_per_s")
        if cold:
            ax.axhline(cold, color="tab:blue", linestyle=":",
                       label=f"ceiling, bare loop from launch (like W2) {cold:,.0f}/s")
        ax.legend(fontsize=8)
    ax.set_ylabel("jobs/s (higher is better)")
    ax.set_title("W2: drain no-op jobs with 2 worker processes")
    return _save(fig, out / "w2_drain.png")


def plot_w3(results: dict, out: Path) -> Path | None:
    rows = [(s, r["details"]) for s in ORDER if (r := _latest(results, s, "W3"))
            and "details" in r]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.27
    for i, (key, label) in enumerate((("p50_ms", "p50"), ("p99_ms", "p99"),
                                      ("max_ms", "max"))):
        xs = [j + (i - 1) * width for j in range(len(rows))]
        ax.bar(xs, [max(d.get(key) or 0, 0.1) for _, d in rows], width, label=label)
    ax.set_xticks(range(len(rows)), [LABELS[s] for s, _ in rows])
    ax.set_yscale("log")
    ax.axhline(100, color="tab:red", linestyle=":", label="target p99 100 ms")
    ax.set_ylabel("lag: handler start - scheduled instant (ms, log)")
    ax.set_title("W3: lag at 116 jobs/s, 2 worker processes")
    ax.legend(fontsize=8)
    return _save(fig, out / "w3_latency.png")


def plot_w4(results: dict, out: Path) -> Path | None:
    rows = [(LABELS[s], r["details"]) for s in ORDER if (r := _latest(results, s, "W4"))
            and "details" in r]
    if not rows:
        return None
    ours = _latest(results, "ours", "W4")
    # Our adapter also runs the largest N this machine holds: one more pair of bars.
    for extra in (ours or {}).get("details", {}).get("runs", [])[1:]:
        rows.insert(1, (f"ours\nN={extra['n']:,}", extra))
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.38
    for i, key in enumerate(("queued_s", "started_s")):
        xs = [j + (i - 0.5) * width for j in range(len(rows))]
        values = [d.get(key) or 0 for _, d in rows]
        bars = ax.bar(xs, values, width, label=key)
        for bar, value in zip(bars, values, strict=True):
            if value:
                ax.annotate(f"{value:.1f}", (bar.get_x() + bar.get_width() / 2,
                                             bar.get_height()),
                            ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(rows)), [name for name, _ in rows], fontsize=8)
    ax.set_ylabel("seconds after the minute boundary (lower is better)")
    n = (ours or {}).get("details", {}).get("n")
    ax.set_title(f"W4: N={n:,} cron jobs due at the same minute" if n
                 else "W4: N cron jobs due at the same minute")
    ax.legend(fontsize=8)
    return _save(fig, out / "w4_top_of_minute.png")


def plot_w5(results: dict, out: Path) -> Path | None:
    r = _latest(results, "ours", "W5")
    if not r or "points" not in r.get("details", {}):
        return None
    points = r["details"]["points"]
    jobs = [p["jobs"] for p in points]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(jobs, [p["tick_ms"] for p in points], "o-", color="tab:red", label="tick (ms)")
    ax.set_xscale("log")
    ax.set_xlabel("active cron jobs (1,000 of them due)")
    ax.set_ylabel("scheduler tick (ms)")
    ax.set_ylim(bottom=0)
    twin = ax.twinx()
    twin.plot(jobs, [p["rss_mb"] for p in points], "s--", color="tab:blue", label="RSS (MB)")
    twin.set_ylabel("scheduler RSS (MB)")
    twin.set_ylim(bottom=0)
    lines = ax.get_legend_handles_labels()[0] + twin.get_legend_handles_labels()[0]
    ax.legend(lines, [line.get_label() for line in lines], fontsize=8, loc="lower right")
    ax.set_title("W5: scheduler cost as the number of cron jobs grows (ours)")
    return _save(fig, out / "w5_tick_growth.png")


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def make_all(summary: dict, results: dict, out: Path) -> list[Path]:
    """Draw the W2-W5 plots into ``out``; returns the files written."""
    made = [plot(results, out) for plot in (plot_w2, plot_w3, plot_w4, plot_w5)]
    return [p for p in made if p]
