"""Helpers shared by every benchmark adapter (bench/run.py and bench/peers/*/bench.py).

Stdlib only: the peers' virtualenvs import this module (they put bench/ on sys.path) and
have none of the project's dependencies.
"""

import atexit
import json
import math
import os
import signal
import subprocess
import sys
import time

PG_HOST = "127.0.0.1"
PG_PORT = 5432
PG_USER = "postgres"
REDIS_HOST = "127.0.0.1"
REDIS_PORT = 6379


def percentile(values, p):
    """The p-th percentile (0-100) of values by linear interpolation; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    k = (len(ordered) - 1) * p / 100.0
    lo = math.floor(k)
    hi = math.ceil(k)
    if lo == hi:
        return ordered[int(k)]
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def emit_json(obj):
    """Print obj as one JSON line on stdout (the adapter's result must be the last line)."""
    sys.stdout.flush()
    print(json.dumps(obj, default=str), flush=True)


def emit_result(workload, figure, unit, details):
    """Print the contract's result line: {"workload", "figure", "unit", "details"}."""
    emit_json({"workload": workload, "figure": figure, "unit": unit, "details": details})


def emit_unsupported(workload, why, details=None):
    """Print the contract's line for a workload the system cannot do (why: one sentence)."""
    obj = {"workload": workload, "unsupported": why}
    if details:
        obj["details"] = details
    emit_json(obj)


def wait_until(predicate, timeout, interval=0.05):
    """Call predicate every interval seconds until it returns a truthy value or timeout
    seconds pass; returns the last value (falsy on timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


def log(*args):
    """Progress messages go to stderr so that stdout's last line stays the result."""
    print(*args, file=sys.stderr, flush=True)


class ProcessGroups:
    """Starts subprocesses each in a session of its own and kills every group on stop(),
    at interpreter exit and on SIGTERM/SIGINT, so that an adapter leaves nothing running."""

    def __init__(self):
        self.procs = []
        atexit.register(self.stop)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum, frame):
        self.stop()
        sys.exit(128 + signum)

    def start(self, cmd, **kwargs):
        """Popen cmd in a new session (its own process group); returns the Popen."""
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        proc = subprocess.Popen(cmd, start_new_session=True, **kwargs)
        self.procs.append(proc)
        return proc

    def stop(self, grace=5.0):
        """SIGTERM every group, wait up to grace seconds, then SIGKILL what is left."""
        procs, self.procs = self.procs, []
        for proc in procs:
            _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in procs:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for proc in procs:
            # The group may outlive its leader (forked children): kill it regardless.
            _signal_group(proc, signal.SIGKILL)
            try:
                proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                pass


def _signal_group(proc, sig):
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def pg_url(dbname):
    """postgres:// URL of dbname on the benchmark server."""
    return f"postgresql://{PG_USER}@{PG_HOST}:{PG_PORT}/{dbname}"


def psql(sql, dbname="postgres"):
    """Run sql with psql (stdout of the command, stripped); raises on error."""
    out = subprocess.run(
        ["psql", "-h", PG_HOST, "-p", str(PG_PORT), "-U", PG_USER, "-d", dbname,
         "-v", "ON_ERROR_STOP=1", "-qAtc", sql],
        check=True, capture_output=True, text=True,
    )
    return out.stdout.strip()


def recreate_database(dbname):
    """Drop (closing its connections) and create the PostgreSQL database dbname."""
    if "bench" not in dbname:
        raise ValueError(f"refusing to drop {dbname!r}: benchmark databases contain 'bench'")
    psql(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
    psql(f'CREATE DATABASE "{dbname}"')


def hardware():
    """One line describing the machine: CPU model, cores, memory (GiB)."""
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = ""
    try:
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
        mem = f", {kb / 1024 / 1024:.1f} GiB RAM"
    except (OSError, ValueError, IndexError):
        pass
    return f"{model}, {os.cpu_count()} cores{mem}"
