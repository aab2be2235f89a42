"""The bulk create's ids come from the table's sequence in one statement
(jobs/ingest/copy.py, next_ids): as bounds when no other session took ids between them,
as the full list when it did. The jobs made with them are checked, not only the ids."""

import pytest
from django.db import connection

from jobs import services
from jobs.ingest.copy import next_ids
from runs.models import Run

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def postgres():
    if connection.vendor != "postgresql":
        pytest.skip("the COPY path's sequences are PostgreSQL's")


def test_ids_taken_together_are_consecutive_and_fresh(postgres):
    first = next_ids("jobs_job", 500)
    second = next_ids("jobs_job", 3)
    assert first == list(range(first[0], first[0] + 500))
    assert second[0] > first[-1] and len(set(second)) == 3
    assert next_ids("jobs_job", 0) == []


def test_ids_with_gaps_between_them_come_back_whole(postgres):
    # A sequence stepping by 3 stands for other sessions taking ids in between.
    with connection.cursor() as cursor:
        cursor.execute("ALTER SEQUENCE runs_run_id_seq INCREMENT BY 3")
    try:
        ids = next_ids("runs_run", 50)
        jobs = services.create_jobs([{"handler": "noop", "payload": {"i": i}}
                                     for i in range(20)])
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER SEQUENCE runs_run_id_seq INCREMENT BY 1")
    assert ids == list(range(ids[0], ids[0] + 150, 3))
    runs = list(Run.objects.filter(job_id__in=jobs.ids).order_by("id")
                .values_list("id", "job_id"))
    assert [job for _, job in runs] == sorted(jobs.ids)
    assert [run for run, _ in runs] == list(range(runs[0][0], runs[0][0] + 60, 3))
