"""The invariants (docs/architecture.md, "Invariants"), checked from the database and
the execution log after a scenario has drained (docs/reliability.md, "What is checked").

Every figure is computed over the jobs of the ``chaos`` owner only.
"""

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from django.db import connection
from django.db.models import Count

from jobs.models import Job
from jobs.schedules import cron
from runs.models import TERMINAL_STATES, Attempt, AttemptOutcome, Run, RunState


@dataclass
class Fault:
    """One injected fault: what, when (epoch seconds, this machine's clock), when the
    harness restored the service it took away (``ended_at``, for outages such as a stopped
    Redis; None for an instant fault) and, when it hit a worker, the runs that worker held
    at that moment."""

    kind: str
    target: str
    at: float
    held_runs: list[int] = field(default_factory=list)
    recovery_s: float | None = None
    ended_at: float | None = None


@dataclass
class ExecLine:
    kind: str
    run_id: int
    attempt: int
    pid: int
    monotonic: float
    wall: float


def read_exec_log(path: Path) -> list[ExecLine]:
    """Parse the execution log written by ``chaos.work``; a torn last line is skipped."""
    lines = []
    if not path.exists():
        return lines
    for raw in path.read_text().splitlines():
        parts = raw.split()
        if len(parts) != 6:
            continue
        lines.append(ExecLine(parts[0], int(parts[1]), int(parts[2]), int(parts[3]),
                              float(parts[4]), float(parts[5])))
    return lines


@dataclass
class Result:
    """The figures of one scenario (docs/reliability.json keys plus details)."""

    scenario: str
    seed: int
    jobs: int = 0
    runs: int = 0
    faults: int = 0
    not_terminal: int = 0
    missing_occurrences: int = 0
    one_off_without_run: int = 0
    duplicate_runs: int = 0
    duplicate_executions: int = 0
    unexplained_duplicates: list[str] = field(default_factory=list)
    double_outcomes: int = 0
    succeeded_without_end: int = 0
    early_starts: int = 0
    max_lateness_s: float = 0.0
    p99_lateness_s: float = 0.0
    catch_up_runs: int = 0
    states: dict[str, int] = field(default_factory=dict)
    outcomes: dict[str, int] = field(default_factory=dict)
    fault_log: list[Fault] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0
    figures: dict = field(default_factory=dict)  # a scenario's own JSON keys

    @property
    def lost(self) -> int:
        return self.not_terminal + self.missing_occurrences + self.one_off_without_run

    @property
    def recovery_s(self) -> float | None:
        values = [f.recovery_s for f in self.fault_log if f.recovery_s is not None]
        return round(max(values), 3) if values else None

    @property
    def ok(self) -> bool:
        return not self.all_failures()

    def all_failures(self) -> list[str]:
        """Every broken invariant, one sentence each (empty: the scenario passed)."""
        problems = []
        if self.not_terminal:
            problems.append(f"{self.not_terminal} runs not terminal after the drain")
        if self.missing_occurrences:
            problems.append(f"{self.missing_occurrences} cron occurrences have no run")
        if self.one_off_without_run:
            problems.append(f"{self.one_off_without_run} one-off jobs have no run")
        if self.duplicate_runs:
            problems.append(f"{self.duplicate_runs} duplicate run rows per (job, scheduled_at)")
        if self.unexplained_duplicates:
            problems.append(f"{len(self.unexplained_duplicates)} duplicate executions not "
                            f"explained by an expired lease: "
                            + "; ".join(self.unexplained_duplicates[:10]))
        if self.double_outcomes:
            problems.append(f"{self.double_outcomes} runs with more than one succeeded attempt")
        if self.succeeded_without_end:
            problems.append(f"{self.succeeded_without_end} succeeded chaos.work runs whose "
                            f"handler never logged its end")
        if self.early_starts:
            problems.append(f"{self.early_starts} runs started before scheduled_at + jitter")
        return problems + self.failures

    def as_json(self) -> dict:
        """The docs/reliability.json object."""
        return {
            "scenario": self.scenario, "seed": self.seed, "runs": self.runs,
            "faults": self.faults, "lost": self.lost, "duplicate_runs": self.duplicate_runs,
            "duplicate_executions": self.duplicate_executions,
            "max_lateness_s": round(self.max_lateness_s, 3), "recovery_s": self.recovery_s,
            **self.figures,
        }


def owner_runs(user):
    return Run.objects.filter(job__owner=user)


def check(result: Result, user, cron_initial: dict[int, datetime], load_started: datetime,
          exec_log: Path) -> Result:
    """Fill ``result`` with every invariant's figure for the jobs of ``user``.

    ``cron_initial`` maps each cron job to its first next_run_at: every minute from there
    up to the job's final next_run_at must have exactly one run. ``load_started``
    (database clock) splits on-time runs from the catch-up runs the harness provoked;
    lateness is measured on runs scheduled at or after it.
    """
    _analyze()
    runs = owner_runs(user)
    jobs = Job.objects.filter(owner=user)
    result.jobs = jobs.count()
    result.runs = runs.count()
    result.states = dict(runs.values_list("state").annotate(n=Count("pk")).order_by())
    result.outcomes = dict(Attempt.objects.filter(run__job__owner=user)
                           .values_list("outcome").annotate(n=Count("pk")).order_by())
    result.not_terminal = runs.exclude(state__in=TERMINAL_STATES).count()
    # A workflow node's job has runs only as its workflow runs make them, none for a
    # skipped node: workflow-kill checks its nodes itself (chaos/workflow_kill.py).
    result.one_off_without_run = jobs.filter(run_at__isnull=False, runs__isnull=True,
                                             workflow_node__isnull=True).count()
    result.duplicate_runs = sum(
        n - 1 for n in runs.values("job_id", "scheduled_at").annotate(n=Count("pk"))
        .filter(n__gt=1).values_list("n", flat=True)
    )
    result.missing_occurrences = _missing_occurrences(cron_initial)
    result.double_outcomes = (
        Attempt.objects.filter(run__job__owner=user, outcome=AttemptOutcome.SUCCEEDED)
        .values("run_id").annotate(n=Count("pk")).filter(n__gt=1).count()
    )
    _lateness(result, user, load_started)
    _duplicates(result, user, read_exec_log(exec_log))
    _recovery(result, user)
    return result


def _analyze() -> None:
    """Refresh the planner's statistics of the tables a scenario just filled: with
    autovacuum off or behind, PostgreSQL plans the checks' joins over tens of thousands of
    fresh rows as if the tables were empty (nested loops taking minutes)."""
    tables = [Job._meta.db_table, Run._meta.db_table, Attempt._meta.db_table]
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {', '.join(tables)}")


def _missing_occurrences(cron_initial: dict[int, datetime]) -> int:
    missing = 0
    finals = dict(Job.objects.filter(pk__in=list(cron_initial))
                  .values_list("pk", "next_run_at"))
    have = defaultdict(set)
    for job_id, at in Run.objects.filter(job_id__in=list(cron_initial)).values_list(
            "job_id", "scheduled_at"):
        have[job_id].add(at)
    for job_id, first in cron_initial.items():
        final = finals[job_id]
        for moment in cron.iter_after("* * * * *", "UTC", first - timedelta(microseconds=1)):
            if final is None or moment >= final:
                break
            if moment not in have[job_id]:
                missing += 1
    return missing


def _lateness(result: Result, user, load_started: datetime) -> None:
    rows = (Attempt.objects.filter(run__job__owner=user, number=1)
            .values_list("started_at", "run__scheduled_at", "run__jitter_s"))
    late = []
    for started, scheduled, jitter in rows:
        delta = (started - (scheduled + timedelta(seconds=jitter))).total_seconds()
        if delta < 0:
            result.early_starts += 1
        if scheduled >= load_started:
            late.append(delta)
        else:
            result.catch_up_runs += 1
    if late:
        late.sort()
        result.max_lateness_s = round(late[-1], 3)
        result.p99_lateness_s = round(late[min(len(late) - 1, int(len(late) * 0.99))], 3)


def _duplicates(result: Result, user, lines: list[ExecLine]) -> None:
    """A duplicate execution is a run whose handler logged "end" more than once. Each
    extra end must come from an attempt the database recorded as ``lease_expired`` (its
    worker lost the lease, so its ack was refused): that is at-least-once delivery working
    as designed. Anything else is reported as unexplained."""
    ends: dict[int, list[int]] = defaultdict(list)
    for line in lines:
        if line.kind == "end":
            ends[line.run_id].append(line.attempt)
    outcome_of = {
        (r, n): o for r, n, o in Attempt.objects.filter(run__job__owner=user)
        .values_list("run_id", "number", "outcome")
    }
    succeeded = set(owner_runs(user).filter(state=RunState.SUCCEEDED, job__handler="chaos.work")
                    .values_list("pk", flat=True))
    result.succeeded_without_end = len(succeeded - set(ends))
    for run_id, attempts in ends.items():
        if len(attempts) < 2:
            continue
        result.duplicate_executions += 1
        for attempt, times in Counter(attempts).items():
            if times > 1:
                result.unexplained_duplicates.append(
                    f"run {run_id} attempt {attempt} finished {times} times")
        extra = [a for a in set(attempts)
                 if outcome_of.get((run_id, a)) != AttemptOutcome.SUCCEEDED]
        for attempt in extra:
            outcome = outcome_of.get((run_id, attempt))
            if outcome != AttemptOutcome.LEASE_EXPIRED:
                result.unexplained_duplicates.append(
                    f"run {run_id} attempt {attempt} ran to its end but was recorded {outcome}")


def _recovery(result: Result, user) -> None:
    """Seconds from each fault (from the end of an outage) until (a) an attempt that
    started after it has succeeded (leasing, executing and acking work again) and (b)
    every run the faulty process held at the fault is terminal. None when that never
    happened."""
    attempts = Attempt.objects.filter(run__job__owner=user, outcome=AttemptOutcome.SUCCEEDED)
    for fault in result.fault_log:
        at = datetime.fromtimestamp(fault.ended_at or fault.at, tz=UTC)
        recovered = (attempts.filter(started_at__gte=at).order_by("finished_at")
                     .values_list("finished_at", flat=True).first())
        if recovered is None:
            continue
        if fault.held_runs:
            held = owner_runs(user).filter(pk__in=fault.held_runs)
            if held.exclude(state__in=TERMINAL_STATES).exists():
                continue
            last = max(held.values_list("finished_at", flat=True), default=None)
            if last is not None:
                recovered = max(recovered, last)
        fault.recovery_s = round(max(0.0, (recovered - at).total_seconds()), 3)


def attempts_by_outcome(user, **filters) -> dict[str, int]:
    """Attempt counts per outcome over the owner's runs matching ``filters``."""
    return dict(Attempt.objects.filter(run__job__owner=user, **filters)
                .values_list("outcome").annotate(n=Count("pk")).order_by())

