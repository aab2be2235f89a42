"""Readings for bench/profile_runs.py: pg_stat_statements and Redis INFO commandstats
between two points, a cProfile dump's top functions, and their markdown tables."""

import pstats
import re

# The standard library's folder, left out of a function's file name.
STDLIB = re.compile(r"/[^\s(]*/lib/python3\.\d+/")

# Left out of the statement counts: the bench's own queries (progress polling, these
# readings, the bulk load's ANALYZE), and the foreign-key checks a COPY fires per row
# (PostgreSQL's RI triggers, "SELECT 1 FROM ONLY ..."), which pg_stat_statements shows
# as top-level since COPY bypasses its executor hooks: they are not statements sent.
OWN_SQL = ("pg_stat_statements", "SELECT count(*) FROM runs_run WHERE state", "ANALYZE",
           "pg_backend_pid", " FROM ONLY ")


def pg_statements_reset(connection) -> None:
    """Create pg_stat_statements in the bench database if missing, and zero it."""
    with connection.cursor() as cursor:
        cursor.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        cursor.execute("SELECT pg_stat_statements_reset()")


def pg_statements(connection) -> list[dict]:
    """Every statement since the last reset, the bench's own left out: {query, calls,
    total_ms}; most execution time first."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT query, sum(calls)::bigint, sum(total_exec_time) "
                       "FROM pg_stat_statements WHERE toplevel GROUP BY query "
                       "ORDER BY 3 DESC")
        rows = cursor.fetchall()
    return [{"query": q, "calls": int(c), "total_ms": float(t)} for q, c, t in rows
            if not any(own in q for own in OWN_SQL)]


def redis_commandstats(client) -> dict[str, tuple[int, int]]:
    """INFO commandstats as {command: (calls, usec)}."""
    out = {}
    for name, stats in client.info("commandstats").items():
        out[name.removeprefix("cmdstat_")] = (int(stats["calls"]), int(stats["usec"]))
    return out


def redis_delta(before: dict, after: dict) -> list[dict]:
    """Commands run between two commandstats readings (INFO itself left out): {command,
    calls, usec}; most time first."""
    rows = []
    for name, (calls, usec) in after.items():
        c0, u0 = before.get(name, (0, 0))
        if name != "info" and calls > c0:
            rows.append({"command": name, "calls": calls - c0, "usec": usec - u0})
    return sorted(rows, key=lambda r: -r["usec"])


def top_functions(path: str, runs: int, limit: int = 8) -> dict:
    """The ``limit`` functions of a cProfile dump with the most cumulative time, and the
    ``limit`` with the most own time, among those called at least once per 100 runs (the
    per-run path; the daemon's lifetime frames, such as serve() or a thread's join() that
    every other thread's frames nest under, are left out): {"functions": [{function,
    calls, cum_s, own_s}], "own": [...], "total_s"}."""
    stats = pstats.Stats(path)
    rows = []
    for (file, line, name), (_cc, calls, own, cum, _callers) in stats.stats.items():
        if calls * 100 < runs:
            continue
        where = f"{file.split('/site-packages/')[-1].split('/work/main/')[-1]}:{line}"
        rows.append({"function": f"{name} ({where})", "calls": calls, "cum_s": cum,
                     "own_s": own})
    by_own = sorted(rows, key=lambda r: -r["own_s"])[:limit]
    rows.sort(key=lambda r: -r["cum_s"])
    return {"functions": rows[:limit], "own": by_own, "total_s": stats.total_tt}


def _cell(text: str, width: int = 70) -> str:
    text = " ".join(text.split())
    text = text if len(text) <= width else text[:width - 1] + "…"
    return "`" + text.replace("|", "\\|").replace("`", "'") + "`"


def markdown(result: dict) -> str:
    """The compact tables of one or more brokers' results (profile_runs.py's
    ``_one_broker``): per broker the CPU per process, the 5 costliest SQL statements and
    Redis commands over ingest and drain together, and the supervisor's 8 functions with
    the most own time. Units: µs per run; counts per 1,000 runs."""
    lines = []
    for r in result["brokers"]:
        n = r["n"]
        lines += [f"### {r['broker']} broker: {n:,} no-op runs, µs per run", "",
                  f"Ingest {r['ingest_s']:.1f} s, drain {r['drain_s']:.1f} s "
                  f"(wall, worker start to last ack: {n / r['drain_s']:.0f} runs/s).", "",
                  "| process | ingest CPU µs/run | drain CPU µs/run |", "|---|---:|---:|"]
        for name in r["drain_cpu"]:
            lines.append(f"| {name} | {r['ingest_cpu'].get(name, 0.0):.1f} | "
                         f"{r['drain_cpu'][name]:.1f} |")
        sql = [(ph, s["query"], s["calls"], s["total_ms"] * 1000)
               for ph in ("ingest", "drain") for s in r[f"{ph}_sql"]]
        cmds = [(ph, c["command"], c["calls"], c["usec"])
                for ph in ("ingest", "drain") for c in r[f"{ph}_redis"]]
        for title, rows in (("PostgreSQL statement", sql), ("Redis command", cmds)):
            if not rows:
                continue
            summary = ", ".join(
                f"{ph} {sum(x[2] for x in rows if x[0] == ph) * 1000 / n:.1f} per 1,000 runs, "
                f"{sum(x[3] for x in rows if x[0] == ph) / n:.1f} µs/run"
                for ph in ("ingest", "drain"))
            lines += ["", f"{title}s: {summary}. The 5 costliest:", "",
                      f"| phase | {title.split()[-1]} | per 1,000 runs | mean µs | µs/run |",
                      "|---|---|---:|---:|---:|"]
            for ph, what, calls, usec in sorted(rows, key=lambda x: -x[3])[:5]:
                lines.append(f"| {ph} | {_cell(what)} | {calls * 1000 / n:.1f} | "
                             f"{usec / calls:.0f} | {usec / n:.1f} |")
        if r.get("cprofile"):
            lines += _cprofile_lines(r["cprofile"], n)
        lines.append("")
    return "\n".join(lines)


def _cprofile_lines(prof: dict, n: int) -> list[str]:
    total = prof["total_s"] * 1e6 / n
    lines = ["", f"Worker supervisor under cProfile, in a second drain ({total:.0f} µs/run "
             "under the profiler): the functions called at least once per 100 runs with "
             "the most own time.", "",
             "| function | calls per run | cumulative µs/run | own µs/run |",
             "|---|---:|---:|---:|"]
    for f in prof["own"]:
        name = STDLIB.sub("", f["function"])
        lines.append(f"| {_cell(name, 80)} | {f['calls'] / n:.3f} | "
                     f"{f['cum_s'] * 1e6 / n:.1f} | {f['own_s'] * 1e6 / n:.1f} |")
    return lines
