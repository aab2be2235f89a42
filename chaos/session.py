"""What every fault scenario is built from (docs/reliability.md, "Scenarios"): its size,
the state of one run of it (Session: the cluster, the clock of the fault window, the
faults injected) and the base class whose hooks a scenario overrides (Scenario).
chaos/scenarios.py names the scenarios and drives them; each lives in a module of its
concern (chaos/kills.py, outages.py, poison.py, skew.py, overload.py, failover.py,
many_daemons.py).
"""

import random
import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from chaos.cluster import Cluster, Daemon
from chaos.invariants import Fault, Result
from chaos.load import create_one_off, with_db_retry, work_seconds
from runs.models import Run, RunState, WorkerProcess

WORKER_GRACE_S = 3


@dataclass(frozen=True)
class Size:
    """How big a scenario runs: one-off and cron jobs, the fault window (s), the workers
    (processes x child processes each) and the longest drain (s) after the window."""

    one_off: int
    cron: int
    duration_s: float
    workers: int = 3
    concurrency: int = 2
    drain_s: float = 120.0


@dataclass
class Session:
    """The state of one scenario run, handed to the scenario's hooks."""

    name: str
    seed: int
    size: Size
    cluster: Cluster
    rng: random.Random
    user: object
    result: Result
    out: object
    workdir: Path
    started: float = field(default_factory=time.monotonic)
    deadline: float = 0.0
    next_worker: int = 0
    grace_s: float = WORKER_GRACE_S
    retired: list[Daemon] = field(default_factory=list)
    extra: dict = field(default_factory=dict)
    on_tick: object = None  # called about once a second while the harness waits
    last_on_tick: float = 0.0

    def say(self, message: str) -> None:
        self.out(f"[{time.monotonic() - self.started:6.1f}s] {message}")

    # --- daemons ----------------------------------------------------------------------

    def add_worker(self, skew: str | None = None) -> Daemon:
        """Start one more worker, ``worker-<n>``; ``skew`` as in Cluster.add."""
        self.next_worker += 1
        return self.cluster.add(
            f"worker-{self.next_worker}",
            ["runworker", "--concurrency", str(self.size.concurrency),
             "--grace", str(self.grace_s)],
            skew=skew,
        )

    def held_by(self, daemon: Daemon) -> list[int]:
        """Ids of the owner's runs that worker ``daemon`` holds (state running) now."""
        return with_db_retry(lambda: list(
            Run.objects.filter(job__owner=self.user, state=RunState.RUNNING,
                               worker_id__contains=f":{daemon.pid}:")
            .values_list("pk", flat=True)))

    def wait_workers(self, timeout: float = 60) -> None:
        """Wait until every worker started so far has registered (it is serving)."""
        pids = {d.pid for d in self.cluster.of_kind("worker") if d.alive()}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            live = set(with_db_retry(lambda: list(
                WorkerProcess.objects.filter(pid__in=pids, stopped_at=None)
                .values_list("pid", flat=True))))
            if live >= pids:
                return
            self.tick(0.2)
        self.result.failures.append(f"workers {sorted(pids - live)} never registered")

    def fault(self, kind: str, target: str, held_runs: list[int] | None = None) -> Fault:
        """Record (and print) a fault injected now; returns it so an outage can set
        ``ended_at`` when the service is back."""
        record = Fault(kind, target, time.time(), held_runs or [])
        self.result.fault_log.append(record)
        self.say(f"fault: {kind} {target}" + (f" holding runs {held_runs}" if held_runs else ""))
        return record

    # --- time -------------------------------------------------------------------------

    def left(self) -> float:
        """Seconds until the fault window closes."""
        return self.deadline - time.monotonic()

    def tick(self, seconds: float) -> None:
        """Sleep ``seconds`` in short steps, restarting any daemon that ended; a daemon
        that died without the harness asking is a failure (a crash, or a crash loop)."""
        end = time.monotonic() + seconds
        while True:
            for name in self.cluster.ensure_up():
                code = self.cluster.daemons[name].unexpected_exits[-1]
                self.say(f"{name} exited on its own with code {code}; restarted")
            if self.on_tick is not None and time.monotonic() - self.last_on_tick >= 1:
                self.last_on_tick = time.monotonic()
                self.on_tick()
            left = end - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, 0.2))

    def until_deadline(self) -> None:
        self.tick(max(0.0, self.left()))


class Scenario:
    """Base scenario: one scheduler, one dispatcher, ``size.workers`` workers, chaos.work
    load, no faults. Subclasses override the hooks."""

    name = ""
    short = Size(one_off=400, cron=30, duration_s=18)
    long = Size(one_off=10_000, cron=300, duration_s=150, workers=4, concurrency=3)
    schedulers = 1
    dispatchers = 1
    grace_s = WORKER_GRACE_S
    # Tunables (docs/architecture.md's SCHEDULER_* names without the prefix) this scenario
    # sets beyond CHAOS_TUNABLES, for the daemons and the harness's own pushes alike.
    tunables: dict = {}
    # > 0: every job gets one of this many shard keys at random, so a queue's runs spread
    # over its shards (0: the shard is the handler's, one shard for all the load).
    shard_keys = 0

    def start_daemons(self, s: Session) -> None:
        for i in range(self.schedulers):
            s.cluster.add(f"scheduler-{i + 1}", ["runscheduler"])
        for i in range(self.dispatchers):
            s.cluster.add(f"dispatcher-{i + 1}", ["rundispatcher"])
        for _ in range(s.size.workers):
            s.add_worker()

    def database(self, workdir: Path, out) -> AbstractContextManager:
        """A context manager within which the harness and the daemons it starts use this
        scenario's database (``default``'s settings switched, ``out`` told): by default
        the default database as it is."""
        return nullcontext()

    def redis_server(self, workdir: Path):
        """The Redis the daemons use: None, a private redis-server (chaos/cluster.py)."""
        return None

    def payload(self, rng: random.Random) -> dict:
        return {"seconds": work_seconds(rng)}

    def create_load(self, s: Session) -> None:
        """One-off jobs spread over the first 80% of the fault window, so the last faults
        still find work and the tail drains soon after."""
        create_one_off(s.rng, s.size.one_off, s.size.duration_s * 0.8, payload_fn=self.payload,
                       shard_keys=self.shard_keys)

    def inject(self, s: Session) -> None:
        s.until_deadline()

    def verify(self, s: Session) -> None:
        """Scenario-specific checks, after the drain; append to ``s.result.failures``."""
