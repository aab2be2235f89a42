"""The fault scenarios by name, and the driver they share (docs/reliability.md,
"Scenarios"). What a scenario is built from is chaos/session.py; the scenarios themselves
live one concern a module: chaos/kills.py (daemons signalled), chaos/outages.py (Redis or
PostgreSQL taken away), chaos/poison.py (hung and crashing handlers), chaos/skew.py
(clocks off), chaos/overload.py, chaos/failover.py (a Redis Cluster master killed) and
chaos/many_daemons.py (three of each daemon, control plane killed in turns),
chaos/pg_failover.py (a PostgreSQL primary stopped, its replica promoted) and
chaos/flow_kill.py (workers killed under rate limits and concurrency keys).

Every scenario goes through the same phases: a private Redis; cron jobs; the daemons;
one-off load spread over the fault window; faults until the window closes; every daemon
up again; the schedulers stopped (the cron cutoff); a drain until every run of the owner
is terminal; the invariants. A scenario class only says which daemons it runs, what load
it adds and which faults it injects, and may check things of its own.
"""

import random
import tempfile
import time
from dataclasses import replace
from datetime import datetime
from pathlib import Path

from chaos.cluster import Cluster, broker_of
from chaos.failover import ClusterFailover
from chaos.flow_kill import FlowKill
from chaos.invariants import Result, check
from chaos.kills import ControlPlaneKill, RollingDeploy, StaleWorker, WorkerKill
from chaos.load import create_cron, forget_previous, owner, with_db_retry
from chaos.many_daemons import ManyDaemons
from chaos.outages import PostgresRestart, RedisLoss
from chaos.overload import Overload
from chaos.pg_failover import PgFailover
from chaos.poison import HungAndPoison
from chaos.session import Scenario, Session
from chaos.skew import ClockSkew
from chaos.workflow_kill import WorkflowKill
from jobs import services
from jobs.models import Job
from runs.clock import db_now
from runs.models import TERMINAL_STATES, Run

LONG_DRAIN_S = 600


# The order docs/reliability.md lists them in; these names are the command's contract.
SCENARIO_NAMES = ["worker-kill", "control-plane-kill", "redis-loss", "postgres-restart",
                  "stale-worker", "hung-and-poison", "clock-skew", "rolling-deploy", "overload",
                  "cluster-failover", "many-daemons", "workflow-kill", "pg-failover", "flow-kill"]


def get_scenario(name: str) -> Scenario:
    """A new instance of scenario ``name`` (one of SCENARIO_NAMES); KeyError otherwise."""
    classes = (WorkerKill, ControlPlaneKill, RedisLoss, PostgresRestart, StaleWorker,
               HungAndPoison, ClockSkew, RollingDeploy, Overload, ClusterFailover,
               ManyDaemons, WorkflowKill, PgFailover, FlowKill)
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
    # The database the harness and its daemons use: the default one, or the scenario's
    # own (pg-failover's primary and replica).
    with scenario.database(workdir, out):
        _run_with_daemons(scenario, size, workdir, result, out)
    result.elapsed_s = round(time.monotonic() - began, 1)
    return result


def _run_with_daemons(scenario: Scenario, size, workdir: Path, result: Result, out) -> None:
    """Set up the owner, the cluster and the broker, run the phases, stop everything."""
    forget_previous()
    cluster = Cluster(workdir, redis_server=scenario.redis_server(workdir),
                      extra_env={f"SCHEDULER_{k}": str(v) for k, v in scenario.tunables.items()})
    s = Session(result.scenario, result.seed, size, cluster, random.Random(result.seed),
                owner(), result, out, workdir, grace_s=scenario.grace_s)
    s.say(f"{result.scenario} seed {result.seed}: {size}; logs in {workdir}")
    try:
        s.cluster.start_redis()
        with broker_of(s.cluster.redis, scenario.tunables):
            _run_phases(scenario, s)
    finally:
        s.cluster.close()
        for daemon in s.retired:
            if daemon.alive():
                daemon.proc.kill()
                daemon.proc.wait()
        # A workflow node's job is the workflow's: the jobs' API refuses to cancel it
        # (docs/workflows.md, "Node jobs"); the scenario's workflows are left as they are.
        with_db_retry(lambda: services.cancel(
            Job.objects.filter(owner=s.user, status=Job.Status.ACTIVE,
                               workflow_node__isnull=True)
            .values_list("pk", flat=True)))


def _run_phases(scenario: Scenario, s: Session) -> None:
    """The phases every scenario shares (module docstring); fills ``s.result``."""
    size, result = s.size, s.result
    cron_initial = create_cron(s.rng, size.cron, shard_keys=scenario.shard_keys)
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
