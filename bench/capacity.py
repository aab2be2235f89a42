"""The capacity model's measurements (docs/capacity.md): the CPU each step of a run's life
costs in each tier, and the model checked against whole runs.

    BENCH_PG_PORT=5444 BENCH_REDIS_PORT=6394 \\
        .venv/bin/python bench/capacity.py [--step-n 20000] [--sizes 20000,100000]
                                           [--json bench/results/capacity.json]

Resources as bench/ours.py's (database ``bench_ours``, Redis db 6, prefix ``bench``; both
emptied): the servers must be this run's own, since the Redis and PostgreSQL CPU is read
server-wide (bench/cpu_meter.py). Steps, each over ``--step-n`` runs with only its own
daemons up, each daemon's idle CPU (measured over a few seconds just before, the same
daemons up and idle) taken out:

* ingest: ``POST /api/jobs/bulk/`` (gunicorn, 2 workers, 10,000 one-off jobs a request):
  the web processes, PostgreSQL, Redis;
* materialise: ``runscheduler`` creating the runs of as many due cron jobs and pushing
  them;
* promote: ``rundispatcher`` moving as many runs from delayed to ready (and labelling them
  queued in PostgreSQL);
* lease, execute, ack: ``runworker --concurrency 2`` draining them (no-op handler); the
  worker's children are "execute", its parent leases and acks, split between the two in
  the proportion the same broker calls take when made one after the other from this
  process (``lease_ack_split``).

Then the check: at each of ``--sizes`` runs (a quarter of them cron runs, the rest one-off
jobs through the REST API), every daemon up as in a deployment; the CPU each tier spent
from the first request to the last ack, against the model's prediction (steps times
runs, plus each daemon's idle CPU over the run's wall time). The last stdout line is the
JSON (also written to ``--json``); bench/capacity_model.py turns the steps into the
per-run costs, the prediction and the tier sizes.
"""

import argparse
import json
import os
import signal
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import common  # noqa: E402
import cpu_meter  # noqa: E402
import ours  # noqa: E402
from cpu_meter import Meter  # noqa: E402

TIERS = ("python", "postgresql", "redis")
IDLE_S = 4.0
BATCH = 10_000  # jobs per REST request, as BENCHMARKS.md's ingest figures
MICRO_BATCH = 128


class Bench:
    """The meters of one phase: Redis, the PostgreSQL server (less this script's own
    backend, whose polling is not the scheduler's work) and each daemon started."""

    def __init__(self, log_dir: Path):
        self.daemons = ours.Daemons(log_dir)
        self.procs: dict[str, object] = {}
        self.servers = []
        backend = ours.scalar("SELECT pg_backend_pid()")
        postmaster = cpu_meter.parent_of(backend)
        client = ours.redis_client()
        self.meter = Meter({
            "redis": lambda: cpu_meter.redis_cpu_s(client),
            "postgresql": lambda: (cpu_meter.tree_cpu_s(postmaster)
                                   - cpu_meter.own_cpu_s(backend)),
        })

    def start(self, name: str, *args: str) -> None:
        proc = self.daemons.start(name, *args)
        self._watch(name, proc)

    def _watch(self, name: str, proc) -> None:
        self.procs[name] = proc
        if name == "worker":
            self.meter.readers["worker"] = lambda: cpu_meter.split_cpu_s(proc.pid)[0]
            self.meter.readers["worker children"] = lambda: cpu_meter.split_cpu_s(proc.pid)[1]
        else:
            self.meter.readers[name] = lambda: cpu_meter.tree_cpu_s(proc.pid)

    def start_web(self) -> str:
        import ingest  # bench/ingest.py: its gunicorn helpers

        server, url = ingest.start_server(2)
        self.servers.append(server)
        self._watch("web", server)
        return url

    def signal(self, name: str, sig: int) -> None:
        """Send ``sig`` to daemon ``name``'s process group (SIGSTOP/SIGCONT: a worker's
        children with it)."""
        os.killpg(self.procs[name].pid, sig)

    def idle(self) -> dict:
        """Each meter's CPU seconds per second over IDLE_S with the daemons idle."""
        before = self.meter.read()
        time.sleep(IDLE_S)
        d = Meter.delta(before, self.meter.read())
        return {name: cpu / d["wall_s"] for name, cpu in d["cpu_s"].items()}

    def close(self) -> None:
        import ingest

        self.daemons.stop()
        for server in self.servers:
            ingest.stop_server(server)


def net(window: dict, idle: dict, skip=()) -> dict:
    """CPU seconds per meter over ``window`` less each meter's idle rate times its wall
    (never below 0); meters in ``skip`` were stopped (SIGSTOP), so nothing is taken out."""
    return {name: max(0.0, cpu - (0 if name in skip else idle.get(name, 0.0))
                      * window["wall_s"]) for name, cpu in window["cpu_s"].items()}


def wait(predicate, what: str, timeout: float = 600, interval: float = 0.25) -> None:
    if not common.wait_until(predicate, timeout, interval):
        raise SystemExit(f"capacity: {what} not reached within {timeout} s")


def in_redis(*kinds: str) -> int:
    """Runs in the broker's sets of ``kinds`` ("ready", "delayed"), every shard."""
    client = ours.redis_client()
    return sum(client.zcard(k) for kind in kinds
               for k in client.scan_iter(f"{ours.PREFIX}:*:{kind}"))


def wait_partitions() -> None:
    wait(lambda: ours.scalar("SELECT count(*) FROM jobs_schedulerpartition WHERE owner <> '' "
                             "AND lease_expires_at > now()") >= 16, "scheduler partitions")


def bench_owner():
    from django.contrib.auth import get_user_model

    from scheduler_core.rest.tokens import create_token

    owner, _ = get_user_model().objects.get_or_create(username="bench")
    return owner, create_token(owner)


def post_jobs(url: str, token: str, n: int) -> None:
    """POST ``n`` one-off noop jobs due now, BATCH per request, from one client."""
    import requests

    session = requests.Session()
    headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
    for start in range(0, n, BATCH):
        now = datetime.now(UTC).isoformat()
        body = {"jobs": [{"handler": "noop", "payload": {"i": start + i}, "run_at": now}
                         for i in range(min(BATCH, n - start))]}
        reply = session.post(f"{url}/api/jobs/bulk/", json=body, headers=headers, timeout=600)
        if reply.status_code != 201:
            raise SystemExit(f"capacity: bulk POST answered {reply.status_code}: "
                             f"{reply.text[:300]}")


def create_cron_due(n: int) -> datetime:
    """``n`` cron jobs firing once a day at this UTC minute, their next_run_at (tomorrow)
    left alone: ``make_cron_due`` later moves it back to today's occurrence."""
    at = datetime.now(UTC)
    ours.create_jobs(n, handler="noop", cron=f"{at.minute} {at.hour} * * *",
                     misfire_policy="run_all")
    return at.replace(second=0, microsecond=0)


def make_cron_due(occurrence: datetime) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("UPDATE jobs_job SET next_run_at = %s WHERE schedule_id IS NOT NULL",
                       [occurrence])


# --- the steps ------------------------------------------------------------------------


def step_ingest(n: int, log_dir: Path) -> dict:
    ours.reset()
    _, token = bench_owner()
    b = Bench(log_dir)
    try:
        url = b.start_web()
        idle = b.idle()
        before = b.meter.read()
        post_jobs(url, token, n)
        window = Meter.delta(before, b.meter.read())
    finally:
        b.close()
    cpu = net(window, idle)
    return {"python": cpu["web"], "postgresql": cpu["postgresql"], "redis": cpu["redis"],
            "window": window, "idle": idle}


def step_materialise(n: int, log_dir: Path) -> dict:
    ours.reset()
    occurrence = create_cron_due(n)
    b = Bench(log_dir)
    try:
        b.start("scheduler", "runscheduler")
        wait_partitions()
        idle = b.idle()
        b.signal("scheduler", signal.SIGSTOP)
        make_cron_due(occurrence)
        before = b.meter.read()
        b.signal("scheduler", signal.SIGCONT)
        wait(lambda: in_redis("ready", "delayed") >= n, "every cron run in Redis")
        window = Meter.delta(before, b.meter.read())
        made = ours.scalar("SELECT count(*) FROM runs_run")
    finally:
        b.close()
    if made != n:
        raise SystemExit(f"capacity: the scheduler made {made} runs of {n} cron jobs")
    cpu = net(window, idle)
    return {"python": cpu["scheduler"], "postgresql": cpu["postgresql"],
            "redis": cpu["redis"], "window": window, "idle": idle}


def step_promote_and_drain(n: int, log_dir: Path) -> tuple[dict, dict]:
    """Promote (dispatcher alone) then lease, execute, ack (worker alone) the same runs;
    the daemon not measured is SIGSTOPped."""
    ours.reset()
    b = Bench(log_dir)
    try:
        b.start("dispatcher", "rundispatcher")
        b.start("worker", *ours.WORKER_ARGS)
        ours.wait_dispatcher_ready()
        ours.wait_worker_ready()
        b.signal("dispatcher", signal.SIGSTOP)
        idle_worker = b.idle()
        b.signal("worker", signal.SIGSTOP)
        b.signal("dispatcher", signal.SIGCONT)
        idle_dispatcher = b.idle()
        # Due only after the last of them is stored, so every one is pushed to delayed
        # (a run due when pushed goes straight to ready, with no promotion to measure).
        lead = 5 + n / 1000
        ours.create_jobs(n, handler="noop", run_at=datetime.now(UTC) + timedelta(seconds=lead))
        if in_redis("delayed") != n:
            raise SystemExit(f"capacity: {in_redis('delayed')} of {n} runs in delayed: "
                             f"storing them took longer than their {lead} s lead")
        before = b.meter.read()
        wait(lambda: ours.scalar("SELECT count(*) FROM runs_run WHERE state = 'queued'") >= n,
             "every run promoted")
        promote = Meter.delta(before, b.meter.read())
        b.signal("dispatcher", signal.SIGSTOP)
        before = b.meter.read()
        b.signal("worker", signal.SIGCONT)
        wait(lambda: ours.count_succeeded() >= n, "every run succeeded")
        drain = Meter.delta(before, b.meter.read())
        b.signal("dispatcher", signal.SIGCONT)
    finally:
        b.close()
    p = net(promote, idle_dispatcher, skip=("worker", "worker children"))
    d = net(drain, idle_worker, skip=("dispatcher",))
    return ({"python": p["dispatcher"], "postgresql": p["postgresql"], "redis": p["redis"],
             "window": promote, "idle": idle_dispatcher},
            {"python_parent": d["worker"], "python_children": d["worker children"],
             "postgresql": d["postgresql"], "redis": d["redis"], "window": drain,
             "idle": idle_worker})


def lease_ack_split(n: int) -> dict:
    """Lease ``n`` ready runs in calls of MICRO_BATCH, then ack them all, from this process:
    the share of each tier's CPU that the leases took (the rest is the acks')."""
    from runs.brokers import get_broker
    from runs.types import Outcome

    ours.reset()
    ours.create_jobs(n, handler="noop", run_at=datetime.now(UTC))
    broker = get_broker()
    backend = ours.scalar("SELECT pg_backend_pid()")
    client = ours.redis_client()

    def read():
        return {"python": time.thread_time(), "postgresql": cpu_meter.own_cpu_s(backend),
                "redis": cpu_meter.redis_cpu_s(client)}

    t0 = read()
    leases = []
    while batch := broker.lease(["default"], MICRO_BATCH, "capacity:split"):
        leases += batch
    t1 = read()
    for start in range(0, len(leases), MICRO_BATCH):
        broker.complete([Outcome(lease=lease, outcome="succeeded", took_s=0.0)
                         for lease in leases[start:start + MICRO_BATCH]])
    t2 = read()
    if len(leases) != n:
        raise SystemExit(f"capacity: leased {len(leases)} of {n}")
    return {tier: (t1[tier] - t0[tier]) / ((t2[tier] - t0[tier]) or 1) for tier in TIERS} | {
        "lease_cpu_s": {t: t1[t] - t0[t] for t in TIERS},
        "ack_cpu_s": {t: t2[t] - t1[t] for t in TIERS}}


# --- the check ------------------------------------------------------------------------


def check(n: int, cron_share: float, per: dict, log_dir: Path) -> dict:
    """One whole run of ``n`` runs (``cron_share`` of them cron) with every daemon up:
    measured CPU per meter and tier against the model's prediction."""
    import capacity_model

    ours.reset()
    _, token = bench_owner()
    cron = int(n * cron_share)
    occurrence = create_cron_due(cron)
    b = Bench(log_dir)
    try:
        b.start("scheduler", "runscheduler")
        b.start("dispatcher", "rundispatcher")
        b.start("worker", *ours.WORKER_ARGS)
        url = b.start_web()
        wait_partitions()
        ours.wait_dispatcher_ready()
        ours.wait_worker_ready()
        idle = b.idle()
        b.signal("scheduler", signal.SIGSTOP)
        make_cron_due(occurrence)
        load_before = common_load()
        before = b.meter.read()
        b.signal("scheduler", signal.SIGCONT)
        post_jobs(url, token, n - cron)
        wait(lambda: ours.count_succeeded() >= n, "every run succeeded", interval=0.5)
        window = Meter.delta(before, b.meter.read())
    finally:
        b.close()
    predicted = capacity_model.predict(per, n - cron, cron, window["wall_s"], idle)
    measured = window["cpu_s"]
    tiers_p, tiers_m = capacity_model.by_tier(predicted), capacity_model.by_tier(measured)
    return {"n": n, "one_off": n - cron, "cron": cron, "wall_s": round(window["wall_s"], 2),
            "idle_share": round(window["idle_share"], 3), "load_1m": [load_before,
                                                                      common_load()],
            "measured_cpu_s": _rounded(measured), "predicted_cpu_s": _rounded(predicted),
            "by_tier": {t: {"measured": round(tiers_m[t], 2), "predicted": round(tiers_p[t], 2),
                            "error": round(tiers_p[t] / tiers_m[t] - 1, 3) if tiers_m[t] else None}
                        for t in tiers_m},
            "idle_cpu_s_per_s": _rounded(idle, 4)}


def common_load() -> float:
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def _rounded(values: dict, digits: int = 3) -> dict:
    return {k: round(v, digits) for k, v in values.items()}


def main() -> None:
    import capacity_model

    parser = argparse.ArgumentParser(description="The capacity model's measurements.")
    parser.add_argument("--step-n", type=int, default=20_000,
                        help="runs per step measurement")
    parser.add_argument("--sizes", default="20000,100000",
                        help="runs of each whole run the model is checked against")
    parser.add_argument("--cron-share", type=float, default=0.25)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--log-dir", type=Path, default=Path("/tmp/bench-capacity-logs"))
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    args.log_dir.mkdir(parents=True, exist_ok=True)
    common.install_signal_handlers()
    ours._ensure_database()
    ours._setup_django()
    n = args.step_n
    out = {"machine": common.hardware(), "versions": ours.versions(), "step_n": n,
           "load_1m_at_start": common_load(), "date": datetime.now(UTC).isoformat()}
    steps = {"ingest": step_ingest(n, args.log_dir)}
    common.log("ingest", json.dumps(steps["ingest"]))
    steps["materialise"] = step_materialise(n, args.log_dir)
    common.log("materialise", json.dumps(steps["materialise"]))
    steps["promote"], steps["drain"] = step_promote_and_drain(n, args.log_dir)
    common.log("promote", json.dumps(steps["promote"]), "drain", json.dumps(steps["drain"]))
    steps["split"] = lease_ack_split(min(n, 10_000))
    common.log("split", json.dumps(steps["split"]))
    per = capacity_model.build(steps, n)
    out["steps_measured"] = steps
    out["per_run_us"] = {s: {t: round(v * 1e6, 1) for t, v in per[s].items()} for s in per}
    out["per_run_s"] = per
    out["checks"] = []
    for size in sizes:
        out["checks"].append(check(size, args.cron_share, per, args.log_dir))
        common.log("check", json.dumps(out["checks"][-1]))
    out["sizes"] = capacity_model.sizes(per)
    out["load_1m_at_end"] = common_load()
    if args.json:
        args.json.write_text(json.dumps(out, indent=2, default=str) + "\n")
    common.emit_json(out)


if __name__ == "__main__":
    main()
