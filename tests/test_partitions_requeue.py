"""Time partitions (docs/retention.md, "Partitioned history") under a hostile schedule:
a dead run kept from a dropped partition is requeued and runs again with its history
whole, and UNIQUE (job, scheduled_at) holds in the DEFAULT partition and after a run
scheduled far ahead is moved out of it into a new partition."""

from datetime import UTC, datetime, timedelta

import pytest
from django.db import IntegrityError, connection, transaction

from runs import services as run_services
from runs.clock import db_now
from runs.history import retention
from runs.history import time_partitions as hp
from runs.models import Attempt, Run
from runs.worker import Worker
from tests.conftest import wait_until
from tests.test_history_partitions import (  # noqa: F401
    layout,
    partition_of,
    partitions_back,
    runs_at,
    with_history,
)

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])

DAY = timedelta(days=1)


@pytest.fixture
def pg_pair(broker, settings):
    if broker.using != "default" or not hp.partitioned("default"):
        pytest.skip("time partitions are PostgreSQL's (the layout fixture's: default)")
    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": broker.name}
    return broker


def orphans() -> tuple[int, int]:
    """Attempts pointing at no run, log lines pointing at no attempt."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM runs_attempt a WHERE NOT EXISTS (SELECT 1 "
                       "FROM runs_run r WHERE r.id = a.run_id)")
        attempts = cursor.fetchone()[0]
        cursor.execute("SELECT count(*) FROM runs_logline l WHERE NOT EXISTS (SELECT 1 "
                       "FROM runs_attempt a WHERE a.id = l.attempt_id)")
        return attempts, cursor.fetchone()[0]


@pytest.mark.usefixtures("layout")
def test_a_dead_run_kept_from_a_dropped_partition_is_requeued_and_runs(pg_pair):
    partitions_back(12)
    [run] = runs_at(db_now() - 10 * DAY, 1)
    with_history(run, "dead", 9 * DAY)
    old = partition_of(run.pk)

    retention.drop_partitions(retention.cutoff(7 * 86_400))

    assert partition_of(run.pk) == "runs_run_default" != old
    assert run_services.requeue([run.pk]) == 1

    def done():
        pg_pair.promote()
        Worker(["default"], concurrency=1, using="default", burst=True).serve()
        return Run.objects.get(pk=run.pk).state == "succeeded"

    wait_until(done, timeout=30, message="the requeued run to succeed")
    attempts = list(Attempt.objects.filter(run_id=run.pk).order_by("number")
                    .values_list("number", "run_scheduled_at"))
    assert attempts == [(1, run.scheduled_at), (2, run.scheduled_at)]
    assert orphans() == (0, 0)
    with pytest.raises(IntegrityError), transaction.atomic():  # still one per occurrence
        Run.objects.create(job_id=run.job_id, scheduled_at=run.scheduled_at,
                           run_at=run.scheduled_at)


@pytest.mark.usefixtures("layout")
def test_unique_occurrence_holds_in_the_default_and_after_a_move_out_of_it(pg_pair):
    far = datetime(2101, 3, 14, 1, 59, 26, tzinfo=UTC)
    [run] = runs_at(far, 1)
    with_history(run, "succeeded", None)
    assert partition_of(run.pk) == "runs_run_default"
    with pytest.raises(IntegrityError), transaction.atomic():
        Run.objects.create(job_id=run.job_id, scheduled_at=far, run_at=far)

    lower = hp.floor_to_width(far, hp.width_s())
    with transaction.atomic(), connection.cursor() as cursor:
        hp.create_range(cursor, hp.Range(lower, lower + DAY))

    assert partition_of(run.pk) == f"runs_run_p{lower:%Y%m%d_%H%M}"
    assert Attempt.objects.get(run_id=run.pk).run_scheduled_at == far
    assert orphans() == (0, 0)
    with pytest.raises(IntegrityError), transaction.atomic():
        Run.objects.create(job_id=run.job_id, scheduled_at=far, run_at=far)
    # A boundary instant belongs to the partition it starts.
    [edge] = runs_at(lower + DAY, 1)
    assert partition_of(edge.pk) == "runs_run_default"
    [start] = runs_at(lower, 1)
    assert partition_of(start.pk) == f"runs_run_p{lower:%Y%m%d_%H%M}"
