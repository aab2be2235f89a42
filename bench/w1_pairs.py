"""W1 ingest in interleaved pairs: ours (the Python bulk API and the REST bulk endpoint)
against procrastinate's ``batch_defer``, with the CPU each process spent per job
(BENCHMARKS.md, "Ingest (W1)").

    .venv/bin/python bench/w1_pairs.py [--pairs 3] [--jobs 50000] [--batch 10000]
                                       [--peer-batches 1000,10000] [--clients 1]

Each pair runs every side once, in a fresh interpreter each, the order alternating from
pair to pair (ours first, then procrastinate first, ...), so a change of the machine's
load between sides does not favour one. Sides: ``python`` (jobs.services.create_jobs,
``--batch`` jobs per call, in the side's own process), ``rest`` (POST /api/jobs/bulk/,
``--batch`` jobs per request, gunicorn with 2 workers as bench/ingest.py starts it, from
``--clients`` threads of one client process; ``rest-Nc``: from N threads) and
``procrastinate-B`` for each B of
``--peer-batches`` (procrastinate's ``Task.batch_defer`` of B jobs per call, with the
peer's own virtualenv, bench/.venvs/procrastinate, which bench/run.py makes). Every side
stores the same one-off no-op jobs due now, after a warm-up call of 100 jobs that is not
timed, and starts from empty tables.

Per side: jobs/s over the timed calls' wall time; CPU microseconds per job of the client
process (getrusage), of the gunicorn workers (rest), of the PostgreSQL server (all its
processes, from /proc; the server must be local) and of Redis (INFO cpu); the 1-minute
load at the end. Servers: BENCH_PG_PORT / BENCH_REDIS_PORT (bench/common.py). Writes
bench/results/w1-pairs.json and prints one JSON line per side and a summary.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))

import common  # noqa: E402

PEER_PYTHON = BENCH / ".venvs" / "procrastinate" / "bin" / "python"
WARM = 100


def pg_cpu_s(data_directory: str) -> float:
    """CPU seconds (user + system) of the PostgreSQL server: the postmaster and every
    process it started."""
    pid = int(Path(data_directory, "postmaster.pid").read_text().split()[0])
    pids = [pid] + [int(p) for p in
                    Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    return sum(proc_cpu_s(p) for p in pids)


def proc_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used; 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def redis_cpu_s() -> float:
    """CPU seconds Redis (the bench server) has used."""
    r = common.Redis()
    try:
        info = r.execute("INFO", "cpu").decode()
    finally:
        r.close()
    values = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
    return float(values["used_cpu_sys"]) + float(values["used_cpu_user"])


def self_cpu_s() -> float:
    return time.process_time()


class Meter:
    """CPU of the client, PostgreSQL, Redis and any extra pids around the timed calls."""

    def __init__(self, data_directory: str, extra_pids=()):
        self.data_directory, self.extra = data_directory, list(extra_pids)

    def read(self) -> tuple[float, ...]:
        return (time.perf_counter(), self_cpu_s(), pg_cpu_s(self.data_directory),
                redis_cpu_s(), sum(proc_cpu_s(p) for p in self.extra))

    def result(self, side: str, n: int, before, after, **extra) -> dict:
        wall, client, pg, redis_s, server = (b - a for a, b in zip(before, after, strict=True))
        per_job = {"client": client, "postgres": pg, "redis": redis_s}
        if self.extra:
            per_job["gunicorn_workers"] = server
        return {"side": side, "jobs": n, "wall_s": round(wall, 3),
                "jobs_per_s": round(n / wall),
                "cpu_us_per_job": {k: round(v / n * 1e6, 1) for k, v in per_job.items()},
                "load_1m": round(os.getloadavg()[0], 2), **extra}


# --- ours --------------------------------------------------------------------------------


def ours_setup():
    import ours  # bench/ours.py: its database, environment and reset

    ours._ensure_database()
    ours._setup_django()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    ours.reset()
    from django.contrib.auth import get_user_model
    from django.db import connection

    from scheduler_core.rest.tokens import create_token

    owner, _ = get_user_model().objects.get_or_create(username="bench")
    with connection.cursor() as cursor:
        cursor.execute("SHOW data_directory")
        data_directory = cursor.fetchone()[0]
    return owner, create_token(owner), data_directory


def specs(count: int, offset: int, api: bool) -> list[dict]:
    """One-off noop jobs due now, as bench/ours.py's W1 makes them."""
    from datetime import UTC, datetime

    now = datetime.now(UTC)
    at = now.isoformat() if api else now
    return [{"handler": "noop", "payload": {"i": i}, "run_at": at}
            for i in range(offset, offset + count)]


def side_python(args) -> dict:
    owner, _, data_directory = ours_setup()
    from jobs import services

    services.create_jobs(specs(WARM, 0, False), owner=owner)
    batches = [specs(min(args.batch, args.jobs - s), WARM + s, False)
               for s in range(0, args.jobs, args.batch)]
    meter = Meter(data_directory)
    before = meter.read()
    for batch in batches:
        services.create_jobs(batch, owner=owner)
    return meter.result("python", args.jobs, before, meter.read(), batch=args.batch)


def side_rest(args) -> dict:
    import threading

    owner, token, data_directory = ours_setup()  # first: ingest sets Django up on import
    import ingest  # bench/ingest.py: its gunicorn helpers
    import requests
    from django.db import connection

    connection.close()
    server, url = ingest.start_server(2)
    try:
        workers = [int(p) for p in
                   Path(f"/proc/{server.pid}/task/{server.pid}/children").read_text().split()]
        headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
        session = requests.Session()
        for _ in range(4):  # each worker's first request (imports, connections) untimed
            warm = session.post(f"{url}/api/jobs/bulk/", headers=headers, timeout=300,
                                data=json.dumps({"jobs": specs(WARM // 4, 0, True)}))
            assert warm.status_code == 201, warm.text[:300]
        bodies = [json.dumps({"jobs": specs(min(args.batch, args.jobs - s), WARM + s, True)})
                  .encode() for s in range(0, args.jobs, args.batch)]
        pending, lock, failures = list(reversed(bodies)), threading.Lock(), []

        def client():
            mine = requests.Session()
            while True:
                with lock:
                    if not pending:
                        return
                    body = pending.pop()
                response = mine.post(f"{url}/api/jobs/bulk/", data=body, headers=headers,
                                     timeout=300)
                if response.status_code != 201:
                    failures.append(f"{response.status_code} {response.text[:300]}")

        meter = Meter(data_directory, workers)
        threads = [threading.Thread(target=client) for _ in range(args.clients)]
        before = meter.read()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        after = meter.read()
    finally:
        ingest.stop_server(server)
    if failures:
        raise SystemExit(f"{len(failures)} requests failed, e.g. {failures[0]}")
    side = "rest" if args.clients == 1 else f"rest-{args.clients}c"
    return meter.result(side, args.jobs, before, after, batch=args.batch,
                        clients=args.clients, client_processes=1, gunicorn_workers=2)


# --- procrastinate (run with its own virtualenv) ------------------------------------------


def side_procrastinate(args) -> dict:
    sys.path.insert(0, str(BENCH / "peers" / "procrastinate"))
    # bench/peers/procrastinate/bench.py: its database and schema, and its tasks module,
    # which it imports once it has set the DSN that module reads.
    import bench as adapter

    tasks = adapter.tasks
    adapter.reset_database()
    data_directory = adapter.query("SHOW data_directory")
    meter = Meter(data_directory)
    with tasks.app.open():
        tasks.noop.batch_defer(*({} for _ in range(WARM)))
        before = meter.read()
        done = 0
        while done < args.jobs:
            k = min(args.batch, args.jobs - done)
            tasks.noop.batch_defer(*({} for _ in range(k)))
            done += k
        after = meter.read()
    return meter.result(f"procrastinate-{args.batch}", args.jobs, before, after,
                        batch=args.batch, api="Task.batch_defer")


# --- the pairs ---------------------------------------------------------------------------


def run_side(side: str, args) -> dict:
    if side.startswith("procrastinate-"):
        argv = [str(PEER_PYTHON), __file__, "--side", "procrastinate",
                "--batch", side.split("-", 1)[1]]
    elif side.startswith("rest-"):  # rest-2c: the REST side from 2 client threads
        argv = [sys.executable, __file__, "--side", "rest", "--batch", str(args.batch),
                "--clients", side.split("-", 1)[1].rstrip("c")]
    else:
        argv = [sys.executable, __file__, "--side", side, "--batch", str(args.batch),
                "--clients", str(args.clients)]
    argv += ["--jobs", str(args.jobs)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900, cwd=ROOT)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        raise SystemExit(f"{side} failed ({done.returncode}): {done.stderr[-2000:]}")
    return json.loads(lines[-1])


def summary(results: list[dict]) -> dict:
    out = {}
    for side in dict.fromkeys(r["side"] for r in results):
        rows = [r for r in results if r["side"] == side]
        rates = [r["jobs_per_s"] for r in rows]
        cpu = {k: statistics.median(r["cpu_us_per_job"][k] for r in rows)
               for k in rows[0]["cpu_us_per_job"]}
        out[side] = {"pairs": len(rows), "median_jobs_per_s": statistics.median(rates),
                     "range_jobs_per_s": [min(rates), max(rates)],
                     "median_cpu_us_per_job": cpu,
                     "load_1m_range": [min(r["load_1m"] for r in rows),
                                       max(r["load_1m"] for r in rows)]}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=50_000, help="timed jobs per side")
    parser.add_argument("--batch", type=int, default=10_000, help="our jobs per call")
    parser.add_argument("--peer-batches", default="1000,10000",
                        help="procrastinate's jobs per batch_defer call, comma-separated")
    parser.add_argument("--clients", type=int, default=1, help="REST client threads")
    parser.add_argument("--sides", default="python,rest",
                        help="our sides, comma-separated: python, rest (--clients threads), "
                             "rest-Nc (N threads)")
    parser.add_argument("--side", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        side = {"python": side_python, "rest": side_rest,
                "procrastinate": side_procrastinate}[args.side]
        common.emit_json(side(args))
        return
    ours_sides = args.sides.split(",")
    peer_sides = [f"procrastinate-{b}" for b in args.peer_batches.split(",") if b]
    results = []
    for pair in range(args.pairs):
        order = ours_sides + peer_sides if pair % 2 == 0 else peer_sides + ours_sides
        for side in order:
            result = run_side(side, args)
            result["pair"] = pair
            results.append(result)
            print(json.dumps(result), flush=True)
    report = {"command": " ".join(sys.argv), "hardware": common.hardware(),
              "args": vars(args), "results": results, "summary": summary(results)}
    out = BENCH / "results" / "w1-pairs.json"
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report["summary"], indent=1))


if __name__ == "__main__":
    main()
