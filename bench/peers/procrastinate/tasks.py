"""The procrastinate app of the benchmark: a no-op task, a task that records when it starts
(W3) and, when BENCH_PERIODIC_N is set, that many periodic registrations of one task (W4).

Configured by environment (bench.py sets it for itself and for the workers it starts):
BENCH_PG_DSN (libpq URL of bench_procrastinate), BENCH_STARTS_FILE (where handlers append
"key start_time" lines), BENCH_PERIODIC_N, BENCH_PERIODIC_MAX_DELAY (seconds).
"""

import asyncio
import os
import time

from procrastinate import App, PsycopgConnector

app = App(
    connector=PsycopgConnector(conninfo=os.environ.get("BENCH_PG_DSN", "")),
    periodic_defaults={"max_delay": float(os.environ.get("BENCH_PERIODIC_MAX_DELAY", "600"))},
)


def _record(key, started):
    # One short O_APPEND write per line is atomic between the two worker processes.
    with open(os.environ["BENCH_STARTS_FILE"], "a") as f:
        f.write(f"{key} {started!r}\n")


@app.task(name="noop")
def noop():
    """The no-op job of W1 and W2."""
    return None


@app.task(name="stamp")
def stamp(key):
    """W3: record time.time() (seconds) at start under key."""
    _record(key, time.time())


@app.task(name="anoop")
async def anoop():
    """The async no-op of W2's async row (BENCH_ASYNC set: bench/async_pairs.py)."""
    return None


@app.task(name="astamp")
async def astamp(key):
    """W3's async row: record time.time() at start, then await a 50 ms sleep."""
    _record(key, time.time())
    await asyncio.sleep(0.05)


@app.task(name="tick", pass_context=True)
def tick(context, timestamp):
    """W4: record the start time (seconds) under the cron instant and the job's id."""
    _record(f"{timestamp}:{context.job.id}", time.time())


for _i in range(int(os.environ.get("BENCH_PERIODIC_N", "0"))):
    # One task, N periodic_ids: procrastinate's way to register N schedules of one task.
    app.periodic(cron="* * * * *", periodic_id=f"p{_i}")(tick)
