"""The scenarios that signal the daemons (docs/reliability.md, "Scenarios"): workers
SIGKILLed, schedulers and dispatchers SIGKILLed side by side, a worker frozen past its
lease (SIGSTOP), and a rolling deploy (SIGTERM of each worker in turn)."""

import random
import signal
import subprocess
import time

from chaos.cluster import Daemon
from chaos.load import with_db_retry, work_seconds
from chaos.session import Scenario, Session, Size
from runs.models import TERMINAL_STATES, Run, RunState


class WorkerKill(Scenario):
    """SIGKILL a random worker every few seconds and restart it at once."""

    name = "worker-kill"
    short = Size(one_off=350, cron=40, duration_s=14)
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
    short = Size(one_off=300, cron=50, duration_s=13)
    long = Size(one_off=10_000, cron=500, duration_s=180, workers=4, concurrency=3)

    def inject(self, s: Session) -> None:
        while s.left() > 4:
            s.tick(s.rng.uniform(2.0, 4.0))
            for kind in ("scheduler", "dispatcher"):
                victim = s.rng.choice([d for d in s.cluster.of_kind(kind) if d.alive()])
                s.fault("SIGKILL", victim.name)
                s.cluster.kill(victim, signal.SIGKILL)
        s.until_deadline()


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


class RollingDeploy(Scenario):
    """Replace every worker mid-load: start a new one, SIGTERM the old one. In-flight runs
    finish within the grace or are released at once, so none waits for its lease."""

    name = "rolling-deploy"
    grace_s = 1.5
    short = Size(one_off=230, cron=30, duration_s=14, concurrency=3)
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
