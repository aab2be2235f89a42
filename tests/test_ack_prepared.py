"""The batched ack of successes is planned once per session on a direct PostgreSQL
connection (docs/performance.md, "The ack"), and still applies each success fenced."""

import os

import pytest
from django.db import connections

from runs.execution.completion import complete
from runs.execution.leases import start_attempts
from runs.models import Attempt, AttemptOutcome, Run, RunState
from runs.types import Outcome
from scheduler_project.settings import PREPARE_THRESHOLD
from tests.conftest import make_runs

pytestmark = pytest.mark.django_db(transaction=True)


def prepared_acks(connection) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_prepared_statements "
                       "WHERE statement LIKE '%%done AS (%%'")
        return cursor.fetchone()[0]


@pytest.mark.parametrize("result", [lambda i: {"i": i}, lambda i: None],
                         ids=["results", "no-results"])
def test_a_direct_session_prepares_the_ack_and_each_ack_stays_fenced(result):
    """With results the statement gets an array of them; with none, a NULL array: both
    are prepared and fenced."""
    if os.environ.get("DATABASE_POOLER") == "pgbouncer":
        pytest.skip("this lane's sessions go through PgBouncer: nothing is prepared")
    connection = connections["default"]
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's one-statement ack")
    connection.close()  # a session of its own: nothing prepared yet
    connection.ensure_connection()
    runs = make_runs("default", PREPARE_THRESHOLD + 2)
    Run.objects.filter(pk__in=[r.pk for r in runs]).update(state=RunState.QUEUED)
    leases = start_attempts([r.pk for r in runs], "w1", 60, "default")
    assert len(leases) == len(runs)
    accepted = [complete([Outcome(lease=lease, outcome=AttemptOutcome.SUCCEEDED,
                                  result=result(i))], "default")[0]
                for i, lease in enumerate(leases)]
    assert accepted == [[True]] * len(leases)
    assert prepared_acks(connection) == 1
    # A second ack of the same lease, now stale, changes nothing.
    assert complete([Outcome(lease=leases[0], outcome=AttemptOutcome.SUCCEEDED,
                             result={"again": True})], "default")[0] == [False]
    stored = {r.pk: r for r in Run.objects.filter(pk__in=[r.pk for r in runs])}
    assert [(stored[le.run_id].state, stored[le.run_id].result) for le in leases] == [
        (RunState.SUCCEEDED, result(i)) for i in range(len(leases))]
    assert set(Attempt.objects.filter(run_id__in=stored).values_list(
        "outcome", flat=True)) == {AttemptOutcome.SUCCEEDED}
