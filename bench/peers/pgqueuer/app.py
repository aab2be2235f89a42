"""The pgqueuer application of the benchmark, the factory ``pgq run app:main`` starts (its
quick start: https://pgqueuer.readthedocs.io/en/latest/getting-started/quickstart.html, an
``asynccontextmanager`` yielding a PgQueuer). The connection comes from the libpq
environment (PGHOST, PGPORT, PGUSER, PGDATABASE), which bench.py sets.

Entrypoints: ``noop`` (W1, W2) and ``stamp`` (W3: appends "<payload> <time.time()>" to the
file BENCH_STARTS_FILE names, one O_APPEND write, atomic between the two workers).
"""

import asyncio
import os
import time
from contextlib import asynccontextmanager

import asyncpg
from pgqueuer import PgQueuer
from pgqueuer.models import Job


@asynccontextmanager
async def main():
    """Yield the PgQueuer the worker runs, on one asyncpg connection."""
    connection = await asyncpg.connect()
    pgq = PgQueuer.from_asyncpg_connection(connection)

    @pgq.entrypoint("noop")
    async def noop(job: Job) -> None:
        return None

    @pgq.entrypoint("stamp")
    async def stamp(job: Job) -> None:
        with open(os.environ["BENCH_STARTS_FILE"], "a") as f:
            f.write(f"{job.payload.decode()} {time.time()!r}\n")

    @pgq.entrypoint("astamp")
    async def astamp(job: Job) -> None:
        """W3's async row (bench/async_pairs.py): stamp, then await a 50 ms sleep."""
        with open(os.environ["BENCH_STARTS_FILE"], "a") as f:
            f.write(f"{job.payload.decode()} {time.time()!r}\n")
        await asyncio.sleep(0.05)

    yield pgq
    await connection.close()
