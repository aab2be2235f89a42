"""Stdlib-only helpers shared by every bench adapter (ours and the peers').

Peers' adapters run under their own virtualenvs, so nothing here may import a third-party
package: Redis is spoken through a minimal RESP client, PostgreSQL through the psql/createdb
command-line tools.
"""

import json
import math
import os
import platform
import socket
import subprocess
import sys
import time

# BENCH_PG_PORT / BENCH_REDIS_PORT: servers of its own for a bench run beside another one
# (two developers' benchmarks on one machine would otherwise empty each other's data).
PG_HOST = "127.0.0.1"
PG_PORT = int(os.environ.get("BENCH_PG_PORT", "5432"))
PG_USER = "postgres"
REDIS_HOST = "127.0.0.1"
REDIS_PORT = int(os.environ.get("BENCH_REDIS_PORT", "6379"))
# Environment our scheduler's bench processes run with: the demo handlers (noop, sleep)
# on, and no per-owner bounds (docs/isolation.md, "Tenant bounds"): a benchmark measures
# throughput for one trusted owner, not what an ordinary tenant may take.
OURS_ENV = {
    "SCHEDULER_DEMO_HANDLERS": "true",
    **{f"SCHEDULER_OWNER_{name}": "0" for name in (
        "CONCURRENCY", "MAX_PENDING", "MAX_JOBS", "HIGHEST_PRIORITY", "MAX_TIMEOUT_S",
        "MAX_ATTEMPTS")},
}


def percentile(values, p):
    """Return the p-th percentile (0..100) of values by linear interpolation; None if empty."""
    if not values:
        return None
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    rank = (len(ordered) - 1) * p / 100.0
    low = math.floor(rank)
    high = math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def emit_json(obj):
    """Print obj as one JSON line on stdout (the adapter contract's last line) and flush."""
    sys.stdout.write(json.dumps(obj, sort_keys=True, default=str) + "\n")
    sys.stdout.flush()


def log(*parts):
    """Progress message on stderr, so stdout keeps only the final JSON line."""
    print(*parts, file=sys.stderr, flush=True)


def wait_until(predicate, timeout_s, interval_s=0.05):
    """Call predicate until it returns a truthy value or timeout_s seconds pass.

    Returns the truthy value, or None on timeout.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            return None
        time.sleep(interval_s)


def hardware():
    """One line describing this machine: CPU model, core count, RAM in GiB, OS, Python."""
    model = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem_gib = None
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    mem_gib = round(int(line.split()[1]) / 1024 / 1024, 1)
                    break
    except OSError:
        pass
    return (
        f"{model}, {os.cpu_count()} cores, {mem_gib} GiB RAM, "
        f"{platform.system()} {platform.release()}, Python {platform.python_version()}"
    )


# --- Redis (minimal RESP2 client, enough for FLUSHDB / INFO / counters) -------------------


class Redis:
    """A tiny synchronous RESP2 client: one socket, one command at a time."""

    def __init__(self, db=0, host=REDIS_HOST, port=REDIS_PORT, timeout_s=30.0):
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        self.buf = b""
        if db:
            self.execute("SELECT", db)

    def close(self):
        """Close the socket."""
        self.sock.close()

    def _readline(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("redis closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _readexact(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("redis closed the connection")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def _reply(self):
        line = self._readline()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            size = int(rest)
            if size < 0:
                return None
            data = self._readexact(size + 2)[:-2]
            return data
        if kind == b"*":
            size = int(rest)
            if size < 0:
                return None
            return [self._reply() for _ in range(size)]
        raise RuntimeError(f"unexpected RESP reply {line!r}")

    def execute(self, *args):
        """Send one command and return its decoded reply (bulk strings stay bytes)."""
        out = [b"*%d\r\n" % len(args)]
        for arg in args:
            data = arg if isinstance(arg, bytes) else str(arg).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(data), data))
        self.sock.sendall(b"".join(out))
        return self._reply()


def redis_flushdb(db):
    """FLUSHDB the given Redis db index (never FLUSHALL: other systems share the server)."""
    r = Redis(db)
    try:
        r.execute("FLUSHDB")
    finally:
        r.close()


def redis_used_memory(db=0):
    """Return INFO memory used_memory in bytes (server-wide; callers take deltas)."""
    r = Redis(db)
    try:
        info = r.execute("INFO", "memory").decode()
    finally:
        r.close()
    for line in info.splitlines():
        if line.startswith("used_memory:"):
            return int(line.split(":", 1)[1])
    raise RuntimeError("used_memory missing from INFO memory")


# --- PostgreSQL through the command-line tools --------------------------------------------


def pg_recreate_database(name):
    """Drop (terminating its sessions) and create PostgreSQL database name."""
    if "bench" not in name:
        raise ValueError(f"refusing to drop {name!r}: benchmark databases contain 'bench'")
    pg_exec_sql(
        "postgres",
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        f"WHERE datname = '{name}' AND pid <> pg_backend_pid()",
    )
    subprocess.run(
        ["dropdb", "-h", PG_HOST, "-p", str(PG_PORT), "-U", PG_USER, "--if-exists", name],
        check=True,
    )
    subprocess.run(
        ["createdb", "-h", PG_HOST, "-p", str(PG_PORT), "-U", PG_USER, name], check=True
    )


def pg_exec_sql(database, sql):
    """Run sql through psql on database and return its unaligned, tuples-only output."""
    result = subprocess.run(
        ["psql", "-h", PG_HOST, "-p", str(PG_PORT), "-U", PG_USER, "-d", database,
         "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql],
        check=True, capture_output=True, text=True,
    )
    return result.stdout.strip()


def pg_url(database):
    """postgres:// URL for database on the bench server."""
    return f"postgres://{PG_USER}@{PG_HOST}:{PG_PORT}/{database}"


def redis_url(db):
    """redis:// URL for db index ``db`` on the bench server (BENCH_REDIS_PORT)."""
    return f"redis://{REDIS_HOST}:{REDIS_PORT}/{db}"


# Subprocesses (bench/procs.py): every adapter reaches them as common.<name>.
from procs import (  # noqa: E402, F401
    ROOT,
    compile_sources,
    install_signal_handlers,
    kill_all,
    spawn,
    stop,
)


def next_minute_boundary(min_lead_s=20.0):
    """Return the epoch second of the next minute boundary at least min_lead_s away."""
    now = time.time()
    boundary = (int(now) // 60 + 1) * 60
    while boundary - now < min_lead_s:
        boundary += 60
    return boundary


def base_parser(description):
    """argparse parser with the contract's options: WORKLOAD --n --rate --duration --quick."""
    import argparse

    parser = argparse.ArgumentParser(description=description)
    # "enqueue": one django.tasks .enqueue()'s latency (bench/enqueue_pairs.py).
    parser.add_argument("workload", choices=["W1", "W2", "W3", "W4", "W5", "W6", "enqueue"])
    parser.add_argument("--n", type=int, default=None)
    parser.add_argument("--rate", type=float, default=116.0)
    parser.add_argument("--duration", type=float, default=None)
    parser.add_argument("--quick", action="store_true")
    # BENCHMARKS.md, "Rules": every peer runs at its documented defaults and again at its
    # best documented tuning; the adapter knows what each means for its peer.
    parser.add_argument("--variant", choices=VARIANTS, default="default")
    return parser


VARIANTS = ("default", "tuned")


def row_facts(variant, config, durable_history, history):
    """The facts every result's ``details`` carries for its row of the tables
    (BENCHMARKS.md, "Rules"): ``variant`` ("default" or "tuned"), ``config`` (one line: the
    commands and options that ran, as a reader would set them), ``durable_history`` (bool:
    does every outcome end up in a store that survives a restart of the servers, e.g. a
    PostgreSQL table; an in-memory or expiring Redis key does not count) and ``history``
    (where outcomes go, in words)."""
    return {"variant": variant, "config": config, "durable_history": bool(durable_history),
            "history": history}


DEFAULT_N = {
    # workload: (full, quick)
    "W1": (20000, 5000),
    "W2": (20000, 2000),
    "W4": (20000, 1000),
    "W6": (50000, 50000),
}


def default_n(args):
    """N for args.workload: --n if given, else the contract's full or quick size."""
    if args.n:
        return args.n
    full, quick = DEFAULT_N.get(args.workload, (0, 0))
    return quick if args.quick else full


def default_duration(args):
    """W3 duration in seconds: --duration if given, else 60 (quick 15)."""
    if args.duration:
        return args.duration
    return 15.0 if args.quick else 60.0


def redis_db_bytes(db):
    """Sum of MEMORY USAGE (bytes, SAMPLES 0 = exact) over every key of Redis db index db.

    Unlike INFO used_memory this counts only our db, so other systems' traffic on the shared
    server does not leak into it (it leaves out allocator and dict overhead of the db itself).
    """
    r = Redis(db)
    total = 0
    try:
        cursor = b"0"
        while True:
            cursor, keys = r.execute("SCAN", cursor, "COUNT", 1000)
            for key in keys:
                total += r.execute("MEMORY", "USAGE", key, "SAMPLES", 0) or 0
            if cursor == b"0":
                break
    finally:
        r.close()
    return total


def run_adapter(description, workloads):
    """The contract's main for an adapter: parse the CLI (``base_parser``: WORKLOAD, --n,
    --rate, --duration, --quick, --variant), run ``workloads[WORKLOAD](args)``
    (it returns the result dict), stop every process it started, and print the result as
    the last stdout line; an exception becomes ``{"failed": ...}`` so the orchestrator
    always gets a JSON line."""
    args = base_parser(description).parse_args()
    install_signal_handlers()
    compile_sources()
    try:
        result = workloads[args.workload](args)
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        result = {"workload": args.workload, "figure": None, "failed": repr(exc)}
    finally:
        kill_all()
    emit_json(result)


def read_starts(path):
    """{key: start time (s)} from a handlers' file of "<key> <time.time()>" lines (a
    duplicate keeps the first); {} if the file does not exist yet."""
    out = {}
    try:
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2:
                    out.setdefault(parts[0], float(parts[1]))
    except FileNotFoundError:
        pass
    return out
