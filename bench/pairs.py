"""Interleaved pairs (BENCHMARKS.md, "Rules"): each cell of the tables is K pairs of runs,
ours and the row's, one after the other in alternating order (ours first in pairs 1, 3, ...;
the row's first in 2, 4, ...), at the same size, with the 1-minute load average read before
and after every run. A cell's figure is the median of its runs, with their range; its
ratio is the median of the pairs' own ratios (ours against the row, >1: ours better), so
that a swing of the machine's speed between pairs cancels within each pair.
"""

import os
import shlex
import statistics
import sys
import time
from pathlib import Path

import common
import harness
import rows

BENCH = Path(__file__).resolve().parent


def adapter_cmd(system: str, workload: str, python: Path, variant: str,
                size: list[str]) -> list[str]:
    """The argv of one run of ``system``'s adapter."""
    if system == "ours":
        if workload == "ceiling":
            return [str(python), str(BENCH / "ceiling.py"), *size]
        extra = ["--paths", "python_bulk,rest_bulk"] if workload == "W1" else []
        return [str(python), str(BENCH / "ours.py"), workload, *size, *extra]
    folder = "vtasksvk" if system == "vtasksvk" else system
    return [str(python), str(BENCH / "peers" / folder / "bench.py"), workload, *size,
            "--variant", variant]


def timeout_for(workload: str, quick: bool) -> float:
    if quick:
        return 240.0
    return {"W4": 1800.0, "W5": 1800.0}.get(workload, 900.0)


def one_run(system: str, workload: str, python: Path, variant: str, size: list[str],
            quick: bool, log_dir: Path) -> dict:
    """One adapter run with the load before and after; returns its result dict."""
    cmd = adapter_cmd(system, workload, python, variant, size)
    load_before = os.getloadavg()[0]
    result = harness.run_adapter(cmd, workload, timeout_for(workload, quick),
                                 log_dir / f"{system}-{variant}-{workload}.log")
    result["command"] = shlex.join(cmd)
    # Tells a run apart from the others (a chained run of ours is in two pairs).
    result["run_id"] = f"{system}-{workload}-{time.time_ns()}"
    result["load_1m"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    shown = {k: result.get(k) for k in ("figure", "unit", "unsupported", "failed")
             if result.get(k) is not None}
    common.log(f"[run] {system}/{variant} {workload}: {shown} ({result.get('elapsed_s')} s, "
               f"load {result['load_1m']})")
    return result


def run_cell(system: str, variant: str, workload: str, pythons: dict, pairs: int,
             quick: bool, n: int | None, log_dir: Path, with_ours: bool = True) -> dict:
    """K interleaved pairs of (ours, ``system``/``variant``) on ``workload``; returns
    ``{"pairs": [{"order", "ours", "peer"}, ...]}`` with the raw results. A peer run that
    reports the workload unsupported, or fails in the first pair, ends the cell early."""
    size = rows.size_args(system, workload, quick, n, variant)
    if workload == "ceiling":
        # The ceiling's pair is the bare loop (bench/ceiling.py) and our W2 at its N.
        ours_workload, ours_size = "W2", size
    else:
        ours_workload = workload
        ours_size = size if workload == "W2" else rows.size_args("ours", workload, quick,
                                                                n)
    out = []
    for i in range(pairs):
        order = ["ours", "row"] if i % 2 == 0 else ["row", "ours"]
        pair = {"order": order}
        for who in order:
            if who == "ours":
                if not with_ours:
                    continue
                pair["ours"] = one_run("ours", ours_workload, pythons["ours"], "default",
                                       ours_size, quick, log_dir)
            else:
                pair["peer"] = one_run(system, workload, pythons[system], variant, size,
                                       quick, log_dir)
                if "unsupported" in pair["peer"] or (i == 0 and pair["peer"].get("failed")):
                    out.append(pair)
                    return {"pairs": out}
        out.append(pair)
    return {"pairs": out}


def round_steps(group: list, round_index: int) -> list:
    """One round of a group of chained rows (one row or a couple): the steps ``"ours"``
    and ``(row, side)``, side ``"before"`` (paired with the run of ours just before it:
    ours first) or ``"after"`` (the run of ours just after it: the row first). A couple
    (a, b) runs O a b O b a O a b O ...: each run of ours partners the row before it and
    the row after it, every pair is two adjacent runs at the same size, each row
    alternates which goes first (as run_cell's pairs do), and ours runs K + 1 times for
    the couple's 2K pairs instead of 2K. One row alone: O x x O x ..."""
    if len(group) == 2:
        first, second = group if round_index % 2 == 0 else group[::-1]
        return [(first, "before"), (second, "after"), "ours"]
    if round_index % 2 == 0:
        return [(group[0], "before")]
    return [(group[0], "after"), "ours"]


def run_chain(row_keys: list, workload: str, pythons: dict, pairs: int, quick: bool,
              n: int | None, log_dir: Path, on_pair=None) -> dict:
    """W3 and W4 (ours at one size for every row): the rows in couples, in order (a
    system's default and tuned rows together), each couple's K chained rounds
    (round_steps) before the next couple's, so that a run stopped part-way has whole
    cells. Returns ``{(system, variant): {"pairs": [...]}}`` as run_cell does; a run of
    ours is in the pairs on either side of it (the same dict, and "run_id" tells runs
    apart after a JSON round trip). A row that reports the workload unsupported, or fails
    in its first pair, leaves the chain. ``on_pair(cells)`` after every pair."""
    cells = {key: {"pairs": []} for key in row_keys}
    ours_size = rows.size_args("ours", workload, quick, n)
    gone: set = set()
    state = {"ours": None, "waiting": None, "previous_was_ours": False}

    def run_ours():
        state["ours"] = one_run("ours", workload, pythons["ours"], "default", ours_size,
                                quick, log_dir)
        state["previous_was_ours"] = True
        if state["waiting"] is not None:
            key, peer = state["waiting"]
            state["waiting"] = None
            cells[key]["pairs"].append({"order": ["row", "ours"], "ours": state["ours"],
                                        "peer": peer})
            if on_pair:
                on_pair(cells)

    for start in range(0, len(row_keys), 2):
        for i in range(pairs):
            group = [k for k in row_keys[start:start + 2] if k not in gone]
            if not group:
                break
            for step in round_steps(group, i):
                if step == "ours":
                    if not state["previous_was_ours"]:
                        run_ours()
                    continue
                key, side = step
                if side == "before" and not state["previous_was_ours"]:
                    run_ours()
                system, variant = key
                peer = one_run(system, workload, pythons[system], variant,
                               rows.size_args(system, workload, quick, n, variant), quick,
                               log_dir)
                state["previous_was_ours"] = False
                if side == "before":
                    cells[key]["pairs"].append({"order": ["ours", "row"],
                                                "ours": state["ours"], "peer": peer})
                    if on_pair:
                        on_pair(cells)
                else:
                    state["waiting"] = (key, peer)
                if "unsupported" in peer or (i == 0 and peer.get("failed")):
                    gone.add(key)
    if state["waiting"] is not None:
        run_ours()
    return cells


# --- aggregation -----------------------------------------------------------------------


def figure_of(result: dict | None, workload: str, row: str = "default") -> float | None:
    """The figure a result gives a row. W1's peer rows: ``default`` is one call per job,
    ``tuned`` the documented bulk call (from the same run's details); ours' W1 is the
    Python bulk API. Times are normalised to ms for W3 and s for W4."""
    if not result or result.get("failed") or "unsupported" in result:
        return None
    details = result.get("details") or {}
    if workload == "W1" and "single_jobs_per_s" in details:
        return details.get("single_jobs_per_s" if row == "default" else "bulk_jobs_per_s")
    if workload == "W1" and "python_bulk" in details:
        return details["python_bulk"]["jobs_per_s"]
    value = result.get("figure")
    if value is None:
        return None
    unit = result.get("unit", "")
    if workload == "W4" and unit == "ms":
        value /= 1000.0
    if workload in ("W3", "W5") and unit == "s":
        value *= 1000.0
    return float(value)


def size_of(details: dict | None) -> int | None:
    """A run's N for the table: its ``n``, else (W3) the jobs it submitted, rate x
    duration (ours and some peers give no ``n`` there: the column showed 0.00 or —)."""
    details = details or {}
    if details.get("n"):
        return details["n"]
    rate = details.get("rate") or details.get("rate_per_s")
    duration = details.get("duration_s")
    return round(rate * duration) if rate and duration else None


def spread(values: list[float]) -> dict | None:
    """``{"median", "range": [min, max], "n"}`` of the non-None values, or None."""
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": round(statistics.median(values), 3),
            "range": [round(min(values), 3), round(max(values), 3)], "n": len(values)}


def ratio(ours: float | None, peer: float | None, workload: str) -> float | None:
    """Ours against the peer, >1 when ours is better (either direction of better)."""
    if not ours or not peer:
        return None
    return ours / peer if rows.HIGHER_IS_BETTER[workload] else peer / ours


def aggregate(system: str, workload: str, cell: dict, row: str) -> dict:
    """One row of a table from a cell's pairs: the peer's figures, ours in the same pairs,
    the per-pair ratios, the loads, and the row's facts from the adapter's details."""
    pairs = cell["pairs"]
    first = next((p["peer"] for p in pairs if p.get("peer")), {}) or {}
    details = first.get("details") or {}
    out = {"system": system, "variant": row, "label": rows.LABELS[system],
           "pairs": 0, "unit": first.get("unit", "")}
    if "unsupported" in first:
        return dict(out, unsupported=first["unsupported"])
    peer = [figure_of(p.get("peer"), workload, row) for p in pairs]
    if workload == "ceiling":
        return dict(out, **_ceiling(pairs))
    ours = [figure_of(p.get("ours"), workload) for p in pairs]
    ratios = [ratio(o, q, workload) for o, q in zip(ours, peer, strict=True)]
    loads = [x for p in pairs for r in (p.get("ours"), p.get("peer")) if r
             for x in r.get("load_1m", [])]
    failures = [p["peer"]["failed"] for p in pairs if p.get("peer", {}).get("failed")]
    out.update({
        "figure": spread(peer), "ours": spread(ours), "ratio": spread(ratios),
        "pairs": sum(1 for r in ratios if r is not None),
        "load_1m": [min(loads), max(loads)] if loads else None,
        "config": details.get("config"), "durable_history": details.get("durable_history"),
        "history": details.get("history"), "n": size_of(details),
        "orders": [p["order"][0] == "ours" for p in pairs],
    })
    if workload == "W1":
        out["config"] = (details.get("bulk_api") if row == "tuned"
                         else "one enqueue call per job") if system != "ours" else None
    if failures:
        out["failed"] = failures[0][:300]
    if out["figure"] is None and not failures and workload == "W1" and row == "tuned":
        out["unsupported"] = details.get("bulk_note") or details.get("bulk_api") or \
            "no bulk enqueue API"
    return out


def _ceiling(pairs: list[dict]) -> dict:
    """The ceiling's row: bare loop warm and cold, W2 in the same pairs, and the two
    like-for-like shares (W2 from launch / cold loop; W2's drain / warm loop)."""
    warm, cold, w2, drain, cold_share, warm_share, loads = [], [], [], [], [], [], []
    for p in pairs:
        loop, ours = p.get("peer") or {}, p.get("ours") or {}
        lw = loop.get("figure")
        lc = (loop.get("details") or {}).get("cold_runs_per_s")
        f = ours.get("figure")
        d = (ours.get("details") or {}).get("drain_runs_per_s")
        warm.append(lw), cold.append(lc), w2.append(f), drain.append(d)
        cold_share.append(f / lc if f and lc else None)
        warm_share.append(d / lw if d and lw else None)
        loads += loop.get("load_1m", []) + ours.get("load_1m", [])
    return {"figure": spread(warm), "cold": spread(cold), "ours": spread(w2),
            "drain": spread(drain), "w2_vs_cold": spread(cold_share),
            "drain_vs_warm": spread(warm_share),
            "pairs": sum(1 for x in cold_share if x is not None),
            "load_1m": [min(loads), max(loads)] if loads else None,
            "durable_history": True, "config": "bench/ceiling.py: 2 processes, psycopg + "
            "redis-py, the same writes as W2 in batches of our largest lease"}


def python_of(system: str, notes: list[str]) -> Path:
    """The interpreter a system's runs use (ours: this one)."""
    if system == "ours":
        return Path(sys.executable)
    return harness.ensure_venv(system, notes)


def stamp() -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
