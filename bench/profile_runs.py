"""Where a run's time goes, per process: a W2-style drain of N no-op runs, profiled.

    .venv/bin/python bench/profile_runs.py [--n 20000] [--broker redis|database|both]
                                           [--no-cprofile] [--write]

For each broker: N one-off no-op jobs are created through services.create_jobs (the
ingest), then ``runworker --concurrency 2`` drains them beside a running dispatcher (the
drain), as in bench/ours.py's W2, whose reset, daemons and CPU readings this reuses. Per
run and per phase it reports the CPU µs of each process (bench/cputime.py: the client,
the dispatcher, the worker supervisor and its children, PostgreSQL, Redis), the
PostgreSQL statements and their mean execution time (pg_stat_statements), the Redis
commands (INFO commandstats deltas), and the worker supervisor's top functions by
cumulative time from a cProfile of it in a second, separate drain (the profiler's
overhead stays out of the CPU figures; cProfile is off in the children it forks).

It runs on a PostgreSQL and a Redis of its own (bench/profile_servers.py), so that
pg_stat_statements can be preloaded and no one else's work is counted. ``--write``
replaces the block between the profile markers in docs/performance.md.

Named profile_runs, not profile: bench/ is first on sys.path of its scripts, and a
bench/profile.py would shadow the standard library module cProfile imports.
"""

import argparse
import cProfile
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(ROOT))

DOC = ROOT / "docs" / "performance.md"
SAVED = ROOT / "bench" / "results" / "profile.json"
BEGIN, END = "<!-- profile:begin -->", "<!-- profile:end -->"
NAMES = {"client": "client (ingest; polling in the drain)", "dispatcher": "dispatcher",
         "dispatcher_children": "dispatcher children", "worker": "worker supervisor",
         "worker_children": "worker children (2)", "postgresql": "PostgreSQL (all backends)",
         "redis": "Redis", "total": "total"}


def _daemon_under_cprofile(out: str, argv: list[str]) -> None:
    """(Daemon process) ours.py's daemon under cProfile, stats dumped to ``out`` when it
    exits; forked children switch the profiler off."""
    import ours

    ours._setup_django()
    from django.core.management import execute_from_command_line

    # The process's CPU time, not wall time: a call blocked in select() or join() accrues
    # only what the supervisor's other threads spend meanwhile. (cProfile watches every
    # thread, with one clock: a per-thread clock gives nonsense.)
    profiler = cProfile.Profile(time.process_time)
    pid = os.getpid()
    os.register_at_fork(after_in_child=profiler.disable)
    profiler.enable()
    try:
        execute_from_command_line(["manage.py", *argv])
    finally:
        profiler.disable()
        if os.getpid() == pid:
            profiler.dump_stats(out)


def _ingest(n: int) -> None:
    from jobs import services

    now = datetime.now(UTC)
    for start in range(0, n, 10_000):
        services.create_jobs([{"handler": "noop", "payload": {"i": i}, "run_at": now}
                              for i in range(start, min(n, start + 10_000))])


def _cpu(daemons) -> dict[str, float]:
    import cputime

    return {"client": cputime.process_cpu_s(os.getpid()), **daemons.cpu()}


def _drain(n: int, log_dir: Path, cprofile_out: str | None = None) -> dict:
    """One ingest and drain of ``n`` runs, with readings around each phase (none when
    ``cprofile_out`` is set: the worker then runs under cProfile, dumping there)."""
    import common
    import cputime
    import ours
    import profile_stats as ps
    from django.db import connection

    ours.reset()
    redis = ours.redis_client()
    daemons = ours.Daemons(log_dir)
    out = {}
    try:
        daemons.start("dispatcher", "rundispatcher")
        if not ours.wait_dispatcher_ready():
            raise SystemExit("the dispatcher took no shard within 30 s")
        ps.pg_statements_reset(connection)
        cpu0, cmd0, began = _cpu(daemons), ps.redis_commandstats(redis), time.monotonic()
        _ingest(n)
        out["ingest_s"] = time.monotonic() - began
        out["ingest_cpu"] = cputime.per_run_us(cpu0, _cpu(daemons), n)
        out["ingest_redis"] = ps.redis_delta(cmd0, ps.redis_commandstats(redis))
        out["ingest_sql"] = ps.pg_statements(connection)
        ours.analyze()
        ps.pg_statements_reset(connection)
        cpu0, cmd0, began = _cpu(daemons), ps.redis_commandstats(redis), time.monotonic()
        if cprofile_out:
            cmd = [sys.executable, __file__, "--cprofile-daemon", cprofile_out,
                   *ours.WORKER_ARGS]
            daemons.by_name["worker"] = common.spawn(cmd, env=dict(os.environ), cwd=ROOT,
                                                     log_path=log_dir / "worker-cprofile.log")
            daemons.procs.append(daemons.by_name["worker"])
        else:
            daemons.start("worker", *ours.WORKER_ARGS)
        if not common.wait_until(lambda: ours.count_succeeded() >= n, 600, 0.2):
            raise SystemExit(f"only {ours.count_succeeded()} of {n} runs succeeded")
        out["drain_s"] = time.monotonic() - began
        out["drain_cpu"] = cputime.per_run_us(cpu0, _cpu(daemons), n)
        out["drain_redis"] = ps.redis_delta(cmd0, ps.redis_commandstats(redis))
        out["drain_sql"] = ps.pg_statements(connection)
    finally:
        daemons.stop()
    return out


def _one_broker(broker: str, n: int, cprofile: bool, log_dir: Path) -> dict:
    """(Subprocess: Django's broker is fixed at setup) both drains of one broker."""
    import ours
    import profile_stats as ps

    ours._ensure_database()
    ours._setup_django()
    result = {"broker": broker, "n": n, **_drain(n, log_dir)}
    result["drain_cpu"] = {NAMES[k]: v for k, v in result["drain_cpu"].items()}
    result["ingest_cpu"] = {NAMES[k]: v for k, v in result["ingest_cpu"].items()}
    if cprofile:
        dump = str(log_dir / f"worker-{broker}.pstats")
        _drain(n, log_dir, cprofile_out=dump)
        result["cprofile"] = ps.top_functions(dump, n)
    return result


def _commit() -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                          capture_output=True, text=True).stdout.strip()


def _header() -> str:
    return (f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC at commit "
            f"{_commit()}, 1-minute load {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")


def _block(table: str, command: str, header: str) -> str:
    return (f"{BEGIN}\n{header}\n(the machine is shared: wall times swing, CPU per run much "
            f"less), with\n`{command}`.\n\n{table}{END}")


def write_doc(block: str) -> None:
    """Replace the marked block in docs/performance.md (append a section if missing)."""
    text = DOC.read_text()
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + block + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n## Where a run's time goes\n\n" + block + "\n"
    DOC.write_text(text)


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--cprofile-daemon":
        _daemon_under_cprofile(sys.argv[2], sys.argv[3:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--broker", choices=["redis", "database", "both"], default="redis")
    parser.add_argument("--no-cprofile", action="store_true")
    parser.add_argument("--write", action="store_true", help="update docs/performance.md")
    parser.add_argument("--render", action="store_true",
                        help="rewrite the docs block from bench/results/profile.json, no run")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--log-dir", type=Path, default=Path("/tmp/bench-profile-logs"))
    args = parser.parse_args()
    args.log_dir.mkdir(parents=True, exist_ok=True)
    if args.render:
        import profile_stats

        saved = json.loads(SAVED.read_text())
        write_doc(_block(profile_stats.markdown(saved), saved["command"], saved["header"]))
        return
    if args.one:
        print(json.dumps(_one_broker(args.one, args.n, not args.no_cprofile, args.log_dir)))
        return
    from profile_servers import PrivateServers

    servers = PrivateServers().start()
    try:
        env = {**os.environ, "BENCH_PG_PORT": str(servers.pg_port),
               "BENCH_REDIS_PORT": str(servers.redis_port), "BENCH_OURS_DB": "bench_profile"}
        results = []
        for broker in (["redis", "database"] if args.broker == "both" else [args.broker]):
            extra = {"SCHEDULER_BROKER": broker}
            cmd = [sys.executable, __file__, "--one", broker, "--n", str(args.n),
                   "--log-dir", str(args.log_dir)] + (["--no-cprofile"] if args.no_cprofile
                                                       else [])
            done = subprocess.run(cmd, env={**env, **extra}, cwd=ROOT, stdout=subprocess.PIPE,
                                  text=True, check=True)
            results.append(json.loads(done.stdout.strip().splitlines()[-1]))
    finally:
        servers.close()
    import profile_stats

    table = profile_stats.markdown({"brokers": results})
    print(table)
    if args.write:
        shown = " ".join(a for a in sys.argv[1:] if a != "--write")
        command = f".venv/bin/python bench/profile_runs.py {shown}".strip()
        header = _header()
        SAVED.write_text(json.dumps({"brokers": results, "command": command,
                                     "header": header}, indent=1) + "\n")
        write_doc(_block(table, command, header))


if __name__ == "__main__":
    main()
