"""One django.tasks ``.enqueue()`` in interleaved pairs: ours against django-vtasks (its
Valkey and its database backend) and django-tasks-db (BENCHMARKS.md, "django.tasks").

    .venv/bin/python bench/enqueue_pairs.py [--pairs 5] [--n 1000]
                                            [--rows vtasksvk,vtasks,djtasksdb]

Each row holds a peer against the side of ours it compares with: django-vtasks' Valkey
backend against our Redis broker on PostgreSQL (``redis-pg``), its database backend and
django-tasks-db against our database broker on PostgreSQL (``db-pg``). A pair runs both
sides once, each in a fresh interpreter (ours: bench/djtasks_enqueue.py; a peer:
bench/djtasks_peer.py's ``enqueue`` in its own virtualenv, which bench/harness.py makes
from bench/peers/<peer>/requirements.txt), the order alternating from pair to pair. Both
time their calls with bench/enqueue_timing.py: ``n`` calls outside a transaction, then
``n`` each in its own ``transaction.atomic()``; wall and the caller's CPU milliseconds per
call. Servers: BENCH_PG_PORT / BENCH_REDIS_PORT (bench/common.py).

Per row and figure: the medians over the pairs and, as BENCHMARKS.md's tables give it,
``ours / row``, the median of the pairs' own ratios (peer's milliseconds over ours: above 1
ours is faster). Writes bench/results/enqueue-pairs.json, with the floors the summary's
targets weigh them against (bench/floors.py): floor() and, for each django-vtasks row,
the statement ours sends on that side replayed alone. Prints a table. ``--floor``
prints instead what any durable enqueue pays here with no framework (floor()).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import common  # noqa: E402
import enqueue_timing  # noqa: E402
import harness  # noqa: E402

# row -> (its adapter, relative to bench/peers/; our side it is held against)
ROWS = {"vtasksvk": ("vtasksvk/bench.py", "redis-pg"),
        "vtasks": ("vtasks/bench.py", "db-pg"),
        "djtasksdb": ("djtasksdb/bench.py", "db-pg")}
FIGURES = ("outside_wall_ms", "outside_cpu_ms", "inside_wall_ms", "inside_cpu_ms")
OUT = BENCH / "results" / "enqueue-pairs.json"


def last_json(argv: list[str]) -> dict:
    """Run ``argv`` and return its last JSON line; a failed run raises RuntimeError with
    its output's tail."""
    done = subprocess.run(argv, capture_output=True, text=True, cwd=BENCH.parent)
    found = harness.last_json(done.stdout)
    if done.returncode or found is None or "failed" in found:
        raise RuntimeError(f"{' '.join(argv)}: {(done.stdout + done.stderr)[-2000:]}")
    return found


def ours(side: str, n: int) -> dict:
    return last_json([sys.executable, str(BENCH / "djtasks_enqueue.py"), "--one", side,
                      "--n", str(n)])


def peer(python: Path, adapter: str, n: int) -> dict:
    return last_json([str(python), str(BENCH / "peers" / adapter), "enqueue",
                      "--n", str(n)])["details"]


def summary(pairs: list[dict]) -> dict:
    """Medians of each figure of both sides over ``pairs`` and the median of the pairs'
    own peer / ours ratios."""
    out = {}
    for figure in FIGURES:
        out[figure] = {
            "ours": statistics.median(p["ours"][figure] for p in pairs),
            "row": statistics.median(p["row"][figure] for p in pairs),
            # Unrounded: bench/floors.py weighs it against the target's bound.
            "ours_over_row": statistics.median(
                p["row"][figure] / p["ours"][figure] for p in pairs)}
    return out


def floor(n: int) -> dict:
    """What any durable enqueue pays on this machine, with no framework: wall and CPU ms
    per call of a bare psycopg INSERT of one small row outside a transaction (a round
    trip and a commit), and of one redis-py LPUSH (a round trip)."""
    import psycopg
    import redis

    out = {}
    with psycopg.connect(common.pg_url("bench_djtasks_enqueue"), autocommit=True) as pg:
        # A logged table: a temporary one skips the WAL, and so the commit's flush.
        pg.execute("DROP TABLE IF EXISTS bench_floor_rows")
        pg.execute("CREATE TABLE bench_floor_rows (id bigserial PRIMARY KEY, payload jsonb)")
        out["postgresql_insert"] = enqueue_timing.per_call(
            lambda: pg.execute("INSERT INTO bench_floor_rows (payload) VALUES (%s::jsonb)",
                               ['{"args": [1]}']), n)
        pg.execute("DROP TABLE bench_floor_rows")
    client = redis.Redis.from_url(common.redis_url(7))
    out["redis_lpush"] = enqueue_timing.per_call(lambda: client.lpush("bench:floor", "x"), n)
    client.delete("bench:floor")
    return out


def our_statement(n: int, side: str) -> dict:
    """Wall and CPU ms per call of the statement our enqueue on ``side`` (redis-pg or
    db-pg) sends, replayed alone (bench/djtasks_enqueue.py --statement): the part of
    ours no Python of ours can shorten."""
    return last_json([sys.executable, str(BENCH / "djtasks_enqueue.py"), "--one", side,
                      "--n", str(n), "--statement"])["statement_alone"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--rows", default=",".join(ROWS))
    parser.add_argument("--floor", action="store_true",
                        help="only the bare round trips any durable enqueue pays (floor)")
    args = parser.parse_args()
    if args.floor:
        print(json.dumps({"floor": floor(args.n)}))
        return
    rows = args.rows.split(",")
    notes: list[str] = []
    pythons = {row: harness.ensure_venv(row, notes) for row in rows}
    exists = "SELECT 1 FROM pg_database WHERE datname = 'bench_djtasks_enqueue'"
    if not common.pg_exec_sql("postgres", exists):
        common.pg_exec_sql("postgres", 'CREATE DATABASE "bench_djtasks_enqueue"')
    results = {}
    for row in rows:
        adapter, side = ROWS[row]
        pairs = []
        for k in range(args.pairs):
            first_ours = k % 2 == 0
            got = {}
            for who in (("ours", "row") if first_ours else ("row", "ours")):
                got[who] = (ours(side, args.n) if who == "ours"
                            else peer(pythons[row], adapter, args.n))
            got["load_1m"] = round(os.getloadavg()[0], 2)
            pairs.append(got)
            common.log(f"[enqueue] {row} pair {k + 1}: ours {side} "
                       f"{got['ours']['outside_wall_ms']} ms, {row} "
                       f"{got['row']['outside_wall_ms']} ms (wall, outside)")
        results[row] = {"ours_side": side, "pairs": pairs, "summary": summary(pairs)}
    # The floors BENCHMARKS.md's targets weigh the rows against (bench/floors.py).
    floors = floor(args.n)
    for row, key in (("vtasksvk", "our_statement_redis"), ("vtasks", "our_statement")):
        if row in results:
            floors[key] = our_statement(args.n, ROWS[row][1])
    OUT.write_text(json.dumps({"measured": datetime.now(UTC).isoformat(timespec="seconds"),
                               "n": args.n, "rows": results, "floor": floors,
                               "notes": notes}, indent=1) + "\n")
    print("| row | ours | figure | ours, ms | row, ms | ours / row |")
    print("|---|---|---|---:|---:|---:|")
    for row, result in results.items():
        for figure, s in result["summary"].items():
            print(f"| {row} | {result['ours_side']} | {figure} | {s['ours']:.3f} | "
                  f"{s['row']:.3f} | {s['ours_over_row']:.2f}x |")


if __name__ == "__main__":
    main()
