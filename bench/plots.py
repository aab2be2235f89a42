"""The PNG plots of BENCHMARKS.md, drawn with matplotlib from bench/results/summary.json
(``pip install -e '.[bench]'``): one chart per measured workload, every row's median with
its range over the pairs as an error bar, ours in red, durable-history rows dark grey,
the others light grey."""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import rows  # noqa: E402

UNITS = {"W1": "jobs/s", "W2": "jobs/s", "W3": "ms", "W4": "s", "W5": "ms",
         "W6": "bytes/run"}


def _rows_of(wsum: dict) -> list[tuple[str, dict]]:
    out = []
    for system in rows.SYSTEMS:
        for variant, row in (wsum.get(system) or {}).items():
            if (row.get("figure") or {}).get("median"):
                name = "ours" if system == "ours" else f"{rows.LABELS[system]}\n{variant}"
                out.append((name, row))
    return out


def plot(workload: str, wsum: dict, out: Path) -> Path | None:
    """A bar chart of the workload's rows (log scale when they span 100x)."""
    found = _rows_of(wsum)
    if not found:
        return None
    medians = [r["figure"]["median"] for _, r in found]
    low = [m - r["figure"]["range"][0] for m, (_, r) in zip(medians, found, strict=True)]
    high = [r["figure"]["range"][1] - m for m, (_, r) in zip(medians, found, strict=True)]
    colors = ["tab:red" if name == "ours" else "dimgray" if r.get("durable_history")
              else "silver" for name, r in found]
    fig, ax = plt.subplots(figsize=(max(7, 0.8 * len(found)), 4.5))
    ax.bar(range(len(found)), medians, yerr=[low, high], color=colors, capsize=3)
    ax.set_xticks(range(len(found)), [name for name, _ in found], fontsize=7, rotation=60,
                  ha="right")
    if max(medians) / max(min(medians), 1e-9) > 100:
        ax.set_yscale("log")
    better = "higher" if rows.HIGHER_IS_BETTER[workload] else "lower"
    ax.set_ylabel(f"{UNITS.get(workload, '')} ({better} is better)")
    ax.set_title(rows.TITLES[workload].split(" (")[0], fontsize=9)
    fig.tight_layout()
    path = out / f"{workload.lower()}.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def make_all(summary: dict, out: Path) -> list[Path]:
    """Every workload's plot into ``out``; returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    made = []
    for workload in rows.WORKLOADS:
        if workload != "ceiling" and summary.get(workload):
            path = plot(workload, summary[workload], out)
            if path:
                made.append(path)
    return made
