"""The Targets lines BENCHMARKS.md's summary takes from measurements outside the pairs'
cells: W1's floor, CPU per job of ours against pgqueuer's bulk enqueue
(bench/ingest_phases.py), and one django.tasks ``.enqueue()`` against django-vtasks on
each of its backends (bench/enqueue_pairs.py), with the floors of a durable enqueue and
of today's statement on this machine. Each reads a results file; with nothing
measured, w1_floor returns None and enqueue_lines an empty list."""

import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
INGEST = RESULTS / "ingest-phases.json"
ENQUEUE = RESULTS / "enqueue-pairs.json"
# The .enqueue() targets (BENCHMARKS.md, "Targets"): within 2x of django-vtasks on
# Valkey on our Redis broker; at or below its database backend on our database broker.
# Each is the least ours / row (row ms over ours ms: above 1 ours is faster) that meets it.
ENQUEUE_TARGETS = {"vtasksvk": ("within 2x of django-vtasks on Valkey, wall and CPU", 0.5),
                   "vtasks": ("at or below django-vtasks' database backend, wall and CPU",
                              1.0)}


def _rate(value: float) -> str:
    return f"{value:,.0f}"


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def w1_floor(path: Path = INGEST) -> str | None:
    """The W1 target's floor line from ``path`` (bench/ingest_phases.py --pgqueuer
    --write): CPU per job of ours and of pgqueuer's bulk enqueue, measured in the same
    rounds, and the rates ours' CPU per job allows on both cores, all of it and
    PostgreSQL's share alone, against the rate pgqueuer reached in those rounds. None
    when it was not measured."""
    found = _read(path)
    try:
        ours, peer = found["cpu_us_per_job"], found["pgqueuer"]
    except (TypeError, KeyError):
        return None
    if found.get("without_fks"):
        return None  # an experiment, not the schema as deployed
    all_most, pg_most = 2e6 / ours["total"], 2e6 / ours["postgresql"]
    reached = peer["jobs_per_s"]
    if pg_most < reached:
        held = ("a floor even for a client and a Redis that cost nothing: PostgreSQL's "
                "share of ours alone allows less")
    elif all_most < reached:
        held = (f"a floor of today's CPU per job; PostgreSQL's share alone would allow "
                f"{_rate(pg_most)}, so the client's share is what can still give")
    else:
        held = "no floor: the gap is ours to close"
    machine = ", ".join(found["hardware"].split(", ")[:2])  # the CPU and its cores
    return (f"* **W1 floor** (`bench/ingest_phases.py --pgqueuer`, {found['date']}, "
            f"{machine}): CPU per job ours {ours['total']:g} µs (PostgreSQL "
            f"{ours['postgresql']:g}), pgqueuer's bulk enqueue "
            f"{peer['cpu_us_per_job']['total']:g}. At that cost both cores allow ours "
            f"{_rate(all_most)} jobs/s; pgqueuer reached {_rate(reached)} in the same "
            f"rounds: {held}.")


def enqueue_lines(path: Path = ENQUEUE) -> list[str]:
    """One Targets line per django-vtasks row of ``path`` (bench/enqueue_pairs.py): ours
    and the row outside a transaction, wall / CPU ms per call at the median of the pairs,
    the median of the pairs' ratios (row ms over ours: above 1 ours is faster), whether
    the target holds, and, for each figure that misses, whether a floor that file
    measured (``floor``; _enqueue_floor) keeps ours from it. Empty when it was not
    measured."""
    found = _read(path)
    if not found or "rows" not in found:
        return []
    floor = found.get("floor") or {}
    day = found.get("measured", "")[:10]
    out = []
    for row, (target, least) in ENQUEUE_TARGETS.items():
        result = found["rows"].get(row)
        if not result:
            continue
        s = result["summary"]
        wall, cpu = s["outside_wall_ms"], s["outside_cpu_ms"]
        missed = [(name, figure) for name, figure in (("wall", wall), ("CPU", cpu))
                  if figure["ours_over_row"] < least]
        line = (f"* **`.enqueue()`, {'Redis' if row == 'vtasksvk' else 'database'} broker** "
                f"(target {target}; `bench/enqueue_pairs.py`, {day}, "
                f"{len(result['pairs'])} pairs): ours {wall['ours']:.2f} / {cpu['ours']:.2f} "
                f"ms against {wall['row']:.2f} / {cpu['row']:.2f}, "
                f"{wall['ours_over_row']:.2f}x wall, {cpu['ours_over_row']:.2f}x CPU "
                f"({'misses' if missed else 'holds'})")
        for name, figure in missed:
            line += _enqueue_floor(row, floor, name, figure, least)
        out.append(line + ".")
    return out


def _enqueue_floor(row: str, floor: dict, name: str, figure: dict, least: float) -> str:
    """The clause saying whether what ``floor`` measured keeps ours' ``name`` figure
    ("wall" or "CPU") from the target: the first of the row's floors (what any durable
    enqueue pays, then what today's two rows pay) above what the target allows; else
    that the rest is ours to close."""
    key = "wall_ms" if name == "wall" else "cpu_ms"
    allowed = figure["row"] / least  # the most ours may take and meet the target
    lpush = (floor.get("redis_lpush") or {}).get(key)
    found = []
    if row == "vtasksvk" and lpush is not None:
        if "postgresql_insert" in floor:
            found.append(("the floor of any durable enqueue (a bare INSERT's commit and a "
                          "Redis round trip)", floor["postgresql_insert"][key] + lpush))
        if "our_statement_redis" in floor:
            found.append(("the floor of today's two rows (the statement ours sends, alone, "
                          "and a Redis round trip)", floor["our_statement_redis"][key] + lpush))
    elif row == "vtasks" and "our_statement" in floor:
        found.append(("the floor of today's two rows (the statement ours sends, alone)",
                      floor["our_statement"][key]))
    if not found:
        return ""
    for label, cost in found:
        if cost > allowed:
            return (f"; {name}: held by {label}, {cost:.2f} ms, above the {allowed:.2f} the "
                    f"target allows (ours {figure['ours']:.2f})")
    label, cost = found[-1]
    return (f"; {name}: no floor: {label} takes {cost:.2f} of the {allowed:.2f} allowed, "
            f"and ours, at {figure['ours']:.2f}, is {figure['ours'] - allowed:.2f} ms over, "
            "ours to close")
