"""The load a scenario runs: one-off and cron jobs of a dedicated owner (docs/reliability.md).

Every job belongs to the user ``chaos``, so the invariants are checked over that owner's
jobs only and the harness can share a database with other data. Jobs go through the bulk
path (``jobs.services.create_jobs``), the one the REST API's bulk endpoint uses.
"""

import random
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.contrib.auth import get_user_model
from django.db import InterfaceError, OperationalError, connections, transaction

from jobs import services
from jobs.models import Job, OwnerPolicy, Schedule
from jobs.tenants import MAX_INT
from runs.clock import db_now
from runs.flow import control as flow
from runs.flow.models import RateLimit
from workflows.models import Workflow

OWNER = "chaos"
BULK_CHUNK = 2000
CRON_MAX_ATTEMPTS = 10
DB_ERRORS = (OperationalError, InterfaceError)


def with_db_retry(fn, *args, timeout: float = 120, using: str = "default", **kwargs):
    """Call ``fn`` and retry on a lost database connection (PostgreSQL restarting) for up
    to ``timeout`` seconds after the first failure, closing the broken connection between
    tries. The harness must
    outlive a restart of the database it watches. Re-raises the last error on timeout."""
    deadline = None
    while True:
        try:
            return fn(*args, **kwargs)
        except DB_ERRORS:
            connections[using].close()
            # The window starts at the first failure: a slow query is not an outage.
            deadline = deadline or time.monotonic() + timeout
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


UNBOUNDED = {"max_running": MAX_INT, "max_pending": MAX_INT, "max_jobs": MAX_INT,
             "highest_priority": 0, "max_timeout_s": MAX_INT, "max_attempts": 32_767,
             "max_map_items": MAX_INT}


def owner(using: str = "default"):
    """The ``chaos`` user (created, inactive for login, on first use), with a policy that
    lifts the per-owner bounds (docs/isolation.md): the harness measures faults, and its
    load is bigger and more urgent than an ordinary tenant may ask for."""
    user, _ = get_user_model().objects.using(using).get_or_create(
        username=OWNER, defaults={"is_active": True})
    # The row alone: the dispatchers sync max_running to the scenario's own Redis when
    # they start (set_owner_policy would try that Redis before it runs).
    OwnerPolicy.objects.using(using).update_or_create(owner=user, defaults=UNBOUNDED)
    return user


def forget_previous(using: str = "default") -> int:
    """Delete the workflows and jobs (with their runs and attempts) and the rate limit an
    earlier scenario left behind, so that each scenario checks only its own; returns how
    many jobs went."""
    user = owner(using)
    with transaction.atomic(using=using):
        # A workflow's nodes protect their jobs: the workflows (with their runs) go first.
        workflows = Workflow.objects.using(using).filter(owner=user)
        schedule_ids = list(workflows.exclude(schedule=None)
                            .values_list("schedule_id", flat=True))
        workflows.delete()
        jobs = Job.objects.using(using).filter(owner=user)
        schedule_ids += list(jobs.exclude(schedule=None).values_list("schedule_id", flat=True))
        count, _ = jobs.delete()
        Schedule.objects.using(using).filter(pk__in=schedule_ids).delete()
        # flow-kill's rate limit on the load's handler would slow every later scenario.
        RateLimit.objects.using(using).filter(scope="handler", name="chaos.work").delete()
    flow.forget_use()
    return count


@dataclass
class Load:
    """What was created: job ids, and each cron job's first ``next_run_at``."""

    one_off_ids: list[int]
    cron_initial: dict[int, datetime]
    started_at: datetime  # database clock when the load was created

    @property
    def jobs(self) -> int:
        return len(self.one_off_ids) + len(self.cron_initial)


def work_seconds(rng: random.Random, long_share: float = 0.05,
                 long_range: tuple[float, float] = (0.5, 2.0)) -> float:
    """A handler duration: mostly under 50 ms, ``long_share`` of them in ``long_range``
    seconds so that faults find runs in flight."""
    if rng.random() < long_share:
        return round(rng.uniform(*long_range), 3)
    return round(rng.uniform(0, 0.05), 3)


def create_one_off(rng: random.Random, count: int, window_s: float, *,
                   start_in_s: float | None = None,
                   handler: str = "chaos.work", payload_fn=None, timeout_s: int = 60,
                   max_attempts: int = CRON_MAX_ATTEMPTS, using: str = "default",
                   name: str = "chaos one-off", shard_keys: int = 0) -> list[int]:
    """Create ``count`` one-off jobs whose run_at is spread uniformly over
    [now + start_in_s, now + start_in_s + window_s] (database clock, seconds), in bulk
    transactions of BULK_CHUNK. ``start_in_s`` defaults to the time a chunk takes to
    store (about 1 ms per job, plus a second), so no run is already late when committed.
    ``payload_fn(rng)`` builds each payload (default: ``{"seconds": work_seconds(rng)}``).
    ``shard_keys`` > 0 gives each job one of that many shard keys at random (its runs then
    spread over the queue's shards). Returns the job ids."""
    payload_fn = payload_fn or (lambda r: {"seconds": work_seconds(r)})
    user = owner(using)
    ids: list[int] = []
    for start in range(0, count, BULK_CHUNK):
        chunk = min(BULK_CHUNK, count - start)
        lead = 1 + chunk / 1000 if start_in_s is None else start_in_s
        base = db_now(using) + timedelta(seconds=lead)
        specs = [
            {"name": name, "handler": handler, "payload": payload_fn(rng),
             "run_at": base + timedelta(seconds=rng.uniform(0, window_s)),
             "timeout_s": timeout_s, "max_attempts": max_attempts,
             **_shard_key(rng, shard_keys)}
            for _ in range(chunk)
        ]
        ids += [job.pk for job in services.create_jobs(specs, owner=user, using=using)]
    return ids


def _shard_key(rng: random.Random, shard_keys: int) -> dict:
    # Drawn only when asked for, so the other scenarios' seeds make the load they made.
    return {"shard_key": f"k{rng.randrange(shard_keys)}"} if shard_keys else {}


def create_cron(rng: random.Random, count: int, using: str = "default",
                shard_keys: int = 0) -> dict[int, datetime]:
    """Create ``count`` cron jobs ``* * * * *`` with misfire policy run_all (every missed
    minute is caught up, so every occurrence is checkable) and CRON_MAX_ATTEMPTS attempts.

    Their first ``next_run_at`` is moved back to the start of the current minute: that
    occurrence is then due at once, so even a scenario shorter than a minute checks one
    occurrence per cron job (docs/reliability.md, "Cron"). ``shard_keys`` as in
    create_one_off. Returns job id -> first next_run_at."""
    user = owner(using)
    specs = [
        {"name": "chaos cron", "handler": "chaos.work",
         "payload": {"seconds": work_seconds(rng)}, "cron": "* * * * *", "timezone": "UTC",
         "misfire_policy": "run_all", "max_lag_s": 3600, "timeout_s": 60,
         "max_attempts": CRON_MAX_ATTEMPTS, **_shard_key(rng, shard_keys)}
        for _ in range(count)
    ]
    ids = []
    for start in range(0, count, BULK_CHUNK):
        jobs = services.create_jobs(specs[start:start + BULK_CHUNK], owner=user, using=using)
        ids += [job.pk for job in jobs]
    if not ids:
        return {}
    minute = db_now(using).replace(second=0, microsecond=0)
    Job.objects.using(using).filter(pk__in=ids).update(next_run_at=minute)
    return dict(Job.objects.using(using).filter(pk__in=ids).values_list("pk", "next_run_at"))
