"""The ten fault scenarios (overload's in chaos/overload.py, cluster-failover's in
chaos/failover.py) and the driver they share
(docs/reliability.md, "Scenarios"); what a scenario is built from is chaos/session.py.

Every scenario goes through the same phases: a private Redis; cron jobs; the daemons;
one-off load spread over the fault window; faults until the window closes; every daemon
up again; the schedulers stopped (the cron cutoff); a drain until every run of the owner
is terminal; the invariants. A scenario class only says which daemons it runs, what load
it adds and which faults it injects, and may check things of its own.
"""

import os
import random
import shlex
import signal
import subprocess
import tempfile
import time
from dataclasses import replace
from datetime import datetime
from pathlib import Path

from django.db import connections

from chaos.cluster import Cluster, Daemon, broker_of
from chaos.failover import ClusterFailover
from chaos.invariants import Result, check
from chaos.load import (
    create_cron,
    forget_previous,
    owner,
    with_db_retry,
    work_seconds,
)
from chaos.overload import Overload
from chaos.session import Scenario, Session, Size
from jobs import services
from jobs.models import Job
from runs.clock import db_now
from runs.models import TERMINAL_STATES, Attempt, Run, RunState

LONG_DRAIN_S = 600


class WorkerKill(Scenario):
    """SIGKILL a random worker every few seconds and restart it at once."""

    name = "worker-kill"
    short = Size(one_off=500, cron=40, duration_s=20)
    long = Size(one_off=20_000, cron=500, duration_s=200, workers=4, concurrency=3,
                drain_s=300)

    def inject(self, s: Session) -> None:
        while s.left() > 3:
            s.tick(s.rng.uniform(1.5, 3.5))
            victim = s.rng.choice([w for w in s.cluster.of_kind("worker") if w.alive()])
            held = s.held_by(victim)
            s.fault("SIGKILL", victim.name, held)
            s.cluster.kill(victim, signal.SIGKILL)
        s.until_deadline()


class ControlPlaneKill(Scenario):
    """Two schedulers and two dispatchers side by side; SIGKILL a random one of each
    repeatedly and restart it."""

    name = "control-plane-kill"
    schedulers = 2
    dispatchers = 2
    short = Size(one_off=400, cron=50, duration_s=18)
    long = Size(one_off=10_000, cron=500, duration_s=180, workers=4, concurrency=3)

    def inject(self, s: Session) -> None:
        while s.left() > 4:
            s.tick(s.rng.uniform(2.0, 4.0))
            for kind in ("scheduler", "dispatcher"):
                victim = s.rng.choice([d for d in s.cluster.of_kind(kind) if d.alive()])
                s.fault("SIGKILL", victim.name)
                s.cluster.kill(victim, signal.SIGKILL)
        s.until_deadline()


class RedisLoss(Scenario):
    """FLUSHALL mid-load; later stop redis-server, keep it down a few seconds, start it
    again empty. The dispatcher rebuilds the broker from the database."""

    name = "redis-loss"
    short = Size(one_off=500, cron=40, duration_s=20)
    long = Size(one_off=15_000, cron=500, duration_s=150, workers=4, concurrency=3)

    def inject(self, s: Session) -> None:
        window = s.size.duration_s
        s.tick(window / 3)
        s.fault("FLUSHALL", "redis")
        s.cluster.redis.client().flushall()
        s.tick(window / 3)
        outage = s.fault("stop+restart", "redis")
        s.cluster.redis.stop()
        s.tick(3)
        s.cluster.redis.start()
        outage.ended_at = time.time()
        s.until_deadline()


class PostgresRestart(Scenario):
    """Restart the PostgreSQL cluster mid-load (twice in the long version). Daemons must
    reconnect without exiting; the harness's own queries retry through the restart."""

    name = "postgres-restart"
    short = Size(one_off=400, cron=30, duration_s=18)
    long = Size(one_off=6_000, cron=300, duration_s=150, workers=4, concurrency=3)

    def inject(self, s: Session) -> None:
        restarts = 1 if s.size.duration_s < 60 else 2
        for _ in range(restarts):
            s.tick(s.size.duration_s / (restarts + 1))
            outage = s.fault("restart", "postgresql")
            restart_postgres()
            outage.ended_at = time.time()
            connections.close_all()
        s.until_deadline()


def restart_postgres(timeout: float = 120) -> None:
    """Restart the test database's server: the command in TEST_POSTGRES_RESTART (a shell
    word list; scripts/test sets it to its throwaway server's ``pg_ctl restart``), else
    ``pg_ctlcluster <version> main restart`` for the newest cluster in /etc/postgresql.
    Raises subprocess.CalledProcessError or TimeoutExpired if the restart fails."""
    command = os.environ.get("TEST_POSTGRES_RESTART")
    if command:
        argv = shlex.split(command)
    else:
        versions = sorted(p.name for p in Path("/etc/postgresql").iterdir())
        argv = ["pg_ctlcluster", "--skip-systemctl-redirect", versions[-1], "main", "restart"]
    subprocess.run(argv, check=True, timeout=timeout, capture_output=True)


class StaleWorker(Scenario):
    """SIGSTOP a worker (with its children) that holds runs, past its lease; wait until
    those runs were leased again and finished elsewhere; SIGCONT it. Its late acks must be
    refused and each run must keep exactly one outcome."""

    name = "stale-worker"
    short = Size(one_off=300, cron=30, duration_s=22)
    long = Size(one_off=4_000, cron=300, duration_s=150, workers=4, concurrency=3)
    WAIT_ELSEWHERE_S = 120

    def payload(self, rng: random.Random) -> dict:
        return {"seconds": work_seconds(rng, long_share=0.1, long_range=(1.0, 2.5))}

    def inject(self, s: Session) -> None:
        s.extra["stale"] = []
        while s.left() > 10:
            s.tick(s.rng.uniform(1.0, 2.0))
            candidates = [(len(s.held_by(w)), w) for w in s.cluster.of_kind("worker")
                          if w.alive()]
            count, victim = max(candidates, key=lambda c: c[0])
            if not count:
                continue
            s.cluster.kill(victim, signal.SIGSTOP, group=True)
            # Read what it holds only once it is frozen: until then it may still ack or
            # lease, and the list would be stale itself.
            held = with_db_retry(lambda v=victim: list(
                Run.objects.filter(job__owner=s.user, state=RunState.RUNNING,
                                   worker_id__contains=f":{v.pid}:")
                .values_list("pk", "attempt")))
            s.fault("SIGSTOP", victim.name, [run_id for run_id, _ in held])
            s.extra["stale"].append((victim, held))
            deadline = time.monotonic() + self.WAIT_ELSEWHERE_S
            while time.monotonic() < deadline and with_db_retry(
                    lambda h=held: Run.objects.filter(pk__in=[r for r, _ in h])
                    .exclude(state__in=TERMINAL_STATES).exists()):
                s.tick(0.3)
            s.say(f"SIGCONT {victim.name}")
            s.cluster.kill(victim, signal.SIGCONT, group=True)
        s.until_deadline()

    def verify(self, s: Session) -> None:
        refused = 0
        for victim, held in s.extra.get("stale", []):
            log = victim.log_path.read_text(errors="replace")
            for run_id, attempt in held:
                run = Run.objects.get(pk=run_id)
                stale = run.attempts.get(number=attempt)
                if run.state != RunState.SUCCEEDED:
                    s.result.failures.append(f"stale run {run_id} ended {run.state}")
                if stale.outcome == "succeeded" and run.attempt == attempt:
                    # Never re-leased: the worker was frozen inside a transaction holding
                    # the run's row lock, which the reaper skips. No second execution.
                    s.result.notes.append(f"run {run_id} was not re-leased while "
                                          f"{victim.name} was stopped; its ack stood")
                    continue
                if stale.outcome != "lease_expired":
                    s.result.failures.append(f"stale attempt {attempt} of run {run_id} was "
                                             f"recorded {stale.outcome}, not lease_expired")
                if (f"ack of run {run_id} attempt {attempt} refused" in log
                        or f"lease on run {run_id} lost before it started" in log):
                    # The second: leased ahead, still waiting for a child when the worker
                    # froze, so dropped unstarted on waking (runs/worker/supervise.py).
                    refused += 1
                else:
                    s.result.failures.append(f"{victim.name} never logged its late ack of run "
                                             f"{run_id} attempt {attempt} as refused")
        s.result.notes.append(f"late acks refused by the stale workers: {refused}")


class HungAndPoison(Scenario):
    """Handlers that busy-loop or sleep past timeout_s, and one that kills its own process,
    among normal load: the hung ones are cut off and retried, the poison one is
    dead-lettered after max_attempts, the pool keeps serving."""

    name = "hung-and-poison"
    short = Size(one_off=400, cron=30, duration_s=18, concurrency=3)
    long = Size(one_off=10_000, cron=300, duration_s=150, workers=4, concurrency=3)
    BAD = {  # handler -> (payload, timeout_s, max_attempts, the outcome of every attempt)
        "busy_loop": ({}, 2, 2, "timed_out"),
        "sleep": ({"seconds": 60}, 2, 2, "timed_out"),
        "suicide": ({}, 60, 3, "crashed"),
    }

    def create_load(self, s: Session) -> None:
        super().create_load(s)
        per_kind = 2 if s.size.duration_s < 60 else 5
        s.extra["bad"] = {}
        for i in range(per_kind):
            s.tick(s.size.duration_s * 0.6 / per_kind)
            for handler, (payload, timeout_s, attempts, _) in self.BAD.items():
                job = services.create_job(handler, payload, owner=s.user, delay_s=0,
                                          timeout_s=timeout_s, max_attempts=attempts,
                                          name=f"chaos {handler} {i}")
                run_id = Run.objects.get(job=job).pk
                s.extra["bad"][run_id] = handler
                s.fault(handler, f"run {run_id}", [run_id])

    def verify(self, s: Session) -> None:
        for run_id, handler in s.extra.get("bad", {}).items():
            _, _, attempts, outcome = self.BAD[handler]
            run = Run.objects.get(pk=run_id)
            got = list(run.attempts.order_by("number").values_list("outcome", flat=True))
            if run.state != RunState.DEAD or got != [outcome] * attempts:
                s.result.failures.append(
                    f"{handler} run {run_id}: {run.state} with attempts {got}, expected dead "
                    f"with {attempts} x {outcome}")
        normal = Run.objects.filter(job__owner=s.user, job__handler="chaos.work")
        s.result.notes.append(
            f"normal runs: {normal.filter(state=RunState.SUCCEEDED).count()} succeeded of "
            f"{normal.count()} while {len(s.extra.get('bad', {}))} bad runs were in the pool")


class ClockSkew(Scenario):
    """Workers, a scheduler and a dispatcher whose local clock is minutes off (libfaketime);
    every claim uses the database's or Redis's clock, so runs still start on time."""

    name = "clock-skew"
    schedulers = 2
    short = Size(one_off=400, cron=40, duration_s=16)
    long = Size(one_off=10_000, cron=500, duration_s=150, workers=4, concurrency=3)
    SKEWS = {"worker": ["+5m", "-3m"], "scheduler": ["+5m"], "dispatcher": ["+2m"]}

    def start_daemons(self, s: Session) -> None:
        for kind, count in (("scheduler", self.schedulers), ("dispatcher", self.dispatchers)):
            skews = self.SKEWS[kind]
            for i in range(count):
                skew = skews[i] if i < len(skews) else None
                s.cluster.add(f"{kind}-{i + 1}", [f"run{kind}"], skew=skew)
                if skew:
                    s.fault(f"clock {skew}", f"{kind}-{i + 1}")
        skews = self.SKEWS["worker"]
        for i in range(s.size.workers):
            skew = skews[i] if i < len(skews) else None
            worker = s.add_worker(skew=skew)
            if skew:
                s.fault(f"clock {skew}", worker.name)
        s.extra["probe"] = {skew: probe_skew(s.cluster, skew) for skew in ("+5m", "-3m")}

    def verify(self, s: Session) -> None:
        from chaos.invariants import read_exec_log

        # The handler's wall clock at "start" against the attempt's started_at (database
        # clock, a few ms earlier): the skew the handler really saw.
        started = {(r, n): at.timestamp() for r, n, at in Attempt.objects.filter(
            run__job__owner=s.user).values_list("run_id", "number", "started_at")}
        seen: dict[int, int] = {}
        for line in read_exec_log(s.cluster.exec_log):
            if line.kind == "start" and (line.run_id, line.attempt) in started:
                skew = round((line.wall - started[line.run_id, line.attempt]) / 60)
                seen[skew] = seen.get(skew, 0) + 1
        s.result.notes.append(f"faketime probe (s): {s.extra.get('probe')}; executions by "
                              f"handler clock skew in minutes: {dict(sorted(seen.items()))}")
        for minutes in (5, -3):
            if not seen.get(minutes):
                s.result.failures.append(
                    f"no execution saw a {minutes:+d} min clock: libfaketime did not take")
        for fault in s.result.fault_log:
            fault.recovery_s = None  # a skew lasts the whole scenario: nothing to recover


def probe_skew(cluster: Cluster, skew: str) -> float:
    """Seconds by which ``time.time()`` is off in a Python process started the way skewed
    daemons are (checks that libfaketime really takes)."""
    import sys

    env = dict(cluster.base_env)
    env.update(cluster.add("probe", ["check"], skew=skew, start=False).env)
    del cluster.daemons["probe"]
    before = time.time()
    out = subprocess.run([sys.executable, "-c", "import time; print(time.time())"], env=env,
                         capture_output=True, text=True, timeout=30, check=True)
    return round(float(out.stdout) - before, 1)


class RollingDeploy(Scenario):
    """Replace every worker mid-load: start a new one, SIGTERM the old one. In-flight runs
    finish within the grace or are released at once, so none waits for its lease."""

    name = "rolling-deploy"
    grace_s = 1.5
    short = Size(one_off=300, cron=30, duration_s=18, concurrency=3)
    # Its runs are longer (8% of them 2.5-6 s): 2,500 keep the 12 slots below capacity.
    long = Size(one_off=2_500, cron=300, duration_s=150, workers=4, concurrency=3)

    def payload(self, rng: random.Random) -> dict:
        return {"seconds": work_seconds(rng, long_share=0.08, long_range=(2.5, 6.0))}

    def inject(self, s: Session) -> None:
        rounds = 1 if s.size.duration_s < 60 else 3
        s.extra["exits"] = []
        for _ in range(rounds):
            s.tick(s.size.duration_s / (rounds + 1) * 0.8)
            for old in list(s.cluster.of_kind("worker")):
                s.add_worker()
                self.wait_for_long_run(s, old)
                s.fault("SIGTERM", old.name, s.held_by(old))
                s.cluster.kill(old, signal.SIGTERM)
                began = time.monotonic()
                try:
                    code = old.proc.wait(self.grace_s + 15)
                except subprocess.TimeoutExpired:
                    code = None
                s.extra["exits"].append((old.name, code, time.monotonic() - began))
                del s.cluster.daemons[old.name]
                s.retired.append(old)
        s.until_deadline()

    def wait_for_long_run(self, s: Session, worker: Daemon, timeout: float = 4) -> None:
        """Wait (briefly) until ``worker`` runs something that outlasts its grace, so the
        SIGTERM exercises the release path and not only the finish path."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not with_db_retry(lambda: Run.objects.filter(
                job__owner=s.user, state=RunState.RUNNING,
                worker_id__contains=f":{worker.pid}:",
                job__payload__seconds__gt=self.grace_s + 0.5).exists()):
            s.tick(0.2)

    def verify(self, s: Session) -> None:
        from chaos.invariants import attempts_by_outcome

        for name, code, took in s.extra.get("exits", []):
            if code != 0:
                s.result.failures.append(f"{name} exited {code} after SIGTERM ({took:.1f} s)")
        outcomes = attempts_by_outcome(s.user)
        for bad in ("lease_expired", "crashed"):
            if outcomes.get(bad):
                s.result.failures.append(
                    f"{outcomes[bad]} attempts ended {bad}: a SIGTERMed worker left runs "
                    f"waiting for their lease")
        slowest = max((t for _, _, t in s.extra.get("exits", [])), default=0)
        s.result.notes.append(f"released attempts: {outcomes.get('released', 0)}; slowest "
                              f"worker exit after SIGTERM: {slowest:.1f} s")


# The order docs/reliability.md lists them in; these names are the command's contract.
SCENARIO_NAMES = ["worker-kill", "control-plane-kill", "redis-loss", "postgres-restart",
                  "stale-worker", "hung-and-poison", "clock-skew", "rolling-deploy", "overload",
                  "cluster-failover"]


def get_scenario(name: str) -> Scenario:
    """A new instance of scenario ``name`` (one of SCENARIO_NAMES); KeyError otherwise."""
    classes = (WorkerKill, ControlPlaneKill, RedisLoss, PostgresRestart, StaleWorker,
               HungAndPoison, ClockSkew, RollingDeploy, Overload, ClusterFailover)
    return {cls.name: cls for cls in classes}[name]()


def run_scenario(name: str, seed: int, *, short: bool = False, duration: float | None = None,
                 out=print) -> Result:
    """Run scenario ``name`` with random seed ``seed`` against the default database and
    return its Result. ``short`` picks the CI size; ``duration`` (s) overrides the fault
    window. The daemons and the private Redis are stopped whatever happens."""
    scenario = get_scenario(name)
    size = scenario.short if short else scenario.long
    if not short:
        # A long load on a small machine can build a backlog of minutes: give it time to
        # drain rather than report slow runs as lost.
        size = replace(size, drain_s=max(size.drain_s, LONG_DRAIN_S))
    if duration is not None:
        size = replace(size, duration_s=duration)
    workdir = Path(tempfile.mkdtemp(prefix=f"chaos-{name}-{seed}-"))
    result = Result(name, seed)
    began = time.monotonic()
    forget_previous()
    cluster = Cluster(workdir, redis_server=scenario.redis_server(workdir))
    s = Session(name, seed, size, cluster, random.Random(seed), owner(), result, out,
                workdir, grace_s=scenario.grace_s)
    s.say(f"{name} seed {seed}: {size}; logs in {workdir}")
    try:
        s.cluster.start_redis()
        with broker_of(s.cluster.redis):
            _run_phases(scenario, s)
    finally:
        s.cluster.close()
        for daemon in s.retired:
            if daemon.alive():
                daemon.proc.kill()
                daemon.proc.wait()
        with_db_retry(lambda: services.cancel(
            Job.objects.filter(owner=s.user, status=Job.Status.ACTIVE)
            .values_list("pk", flat=True)))
    result.elapsed_s = round(time.monotonic() - began, 1)
    return result


def _run_phases(scenario: Scenario, s: Session) -> None:
    """The phases every scenario shares (module docstring); fills ``s.result``."""
    size, result = s.size, s.result
    cron_initial = create_cron(s.rng, size.cron)
    load_started: datetime = db_now()
    scenario.start_daemons(s)
    s.wait_workers()
    s.deadline = time.monotonic() + size.duration_s
    scenario.create_load(s)
    s.say(f"load created: {Job.objects.filter(owner=s.user).count()} jobs")
    scenario.inject(s)
    s.say("fault window closed; every daemon up, schedulers stopping")
    s.tick(0)
    s.cluster.stop(s.cluster.of_kind("scheduler"))
    drain(s)
    result.faults = len(result.fault_log)
    with_db_retry(check, result, s.user, cron_initial, load_started, s.cluster.exec_log)
    scenario.verify(s)
    for daemon in [*s.cluster.daemons.values(), *s.retired]:
        if daemon.unexpected_exits:
            result.failures.append(
                f"{daemon.name} exited on its own {len(daemon.unexpected_exits)} times "
                f"(exit codes {sorted(set(daemon.unexpected_exits))}; see {daemon.log_path})")


def drain(s: Session) -> None:
    """Wait until every run of the owner is terminal, or ``size.drain_s`` passed."""
    deadline = time.monotonic() + s.size.drain_s
    pending = None
    while time.monotonic() < deadline:
        pending = with_db_retry(lambda: Run.objects.filter(job__owner=s.user)
                                .exclude(state__in=TERMINAL_STATES).count())
        if pending == 0:
            s.say("drained: every run is terminal")
            return
        s.tick(0.5)
    s.say(f"drain timed out with {pending} runs not terminal")
