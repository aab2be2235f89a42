"""The bulk create's rows built straight from the validated specs (jobs/ingest/bulk.py): every
column of the models is written, what is stored is exactly what was sent (payload JSON,
text with COPY's special characters), and the answer's instances equal their rows."""

import json
from datetime import UTC, datetime

import pytest
from django.contrib.auth.models import User
from django.db import IntegrityError, connection, transaction

from jobs import services
from jobs.ingest import bulk as ingest
from jobs.models import Job, Schedule
from jobs.tenants import set_owner_policy
from runs.models import Run
from scheduler_core.exceptions import InvalidJob
from tests.test_api_helpers import client_for

AT = datetime(2030, 1, 1, 9, 30, 15, 123456, tzinfo=UTC)

PAYLOADS = [
    {},
    {"unicode": "naïve café ünïcödé, 日本語, עברית, emoji 🎉🧪, combining é"},
    {"nested": {"a": [1, {"b": [None, True, False, {"c": {"d": []}}]}], "e": {}}},
    # (Not 1e300: jsonb's numeric writes it out in digits, read back as an int, whichever
    # way the row went in.)
    {"big": 2**70, "negative": -(2**63), "zero": 0, "float": 0.1, "large": 1.5e10,
     "tiny": 5e-324, "neg_float": -2.5},
    {"copy specials": "tab\there, newline\nthere, cr\r, backslash \\ and \\N and \\t",
     "quote \"key\"": "json \"escapes\" \\u0041 \\\\", "keys\twith\ttabs": 1},
    {"control": "\x01\x1f\x7f", "slash": "a/b", "empty": "", "list": [1, "two", 3.0]},
]


def stored_payload(pk: int):
    """The job's payload as PostgreSQL holds it, read back as JSON text by SQL."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT payload::text FROM jobs_job WHERE id = %s", [pk])
        return json.loads(cursor.fetchone()[0])


@pytest.mark.django_db
def test_every_model_column_is_one_the_rows_write():
    for model, columns in ((Job, ingest.JOB_COLUMNS), (Run, ingest.RUN_COLUMNS),
                           (Schedule, ingest.SCHEDULE_COLUMNS)):
        assert sorted(f.column for f in model._meta.concrete_fields) == sorted(columns), model


@pytest.mark.django_db
def test_the_stored_payload_is_exactly_the_payload_sent_through_the_python_api():
    jobs = services.create_jobs([{"handler": "noop", "run_at": AT, "payload": p}
                                 for p in PAYLOADS])

    for job, sent in zip(jobs, PAYLOADS, strict=True):
        assert Job.objects.get(pk=job.pk).payload == sent
        assert stored_payload(job.pk) == sent
        assert job.payload == sent
    assert type(stored_payload(jobs[3].pk)["big"]) is int


@pytest.mark.django_db
def test_the_stored_payload_is_exactly_the_payload_sent_through_the_bulk_endpoint():
    api = client_for(User.objects.create_user("alice"))
    body = {"jobs": [{"handler": "noop", "run_at": AT.isoformat(), "payload": p}
                     for p in PAYLOADS]}

    response = api.generic("POST", "/api/jobs/bulk/", json.dumps(body),
                           content_type="application/json")

    assert response.status_code == 201, response.content
    ids = response.json()["ids"]
    assert [stored_payload(pk) for pk in ids] == PAYLOADS


@pytest.mark.django_db
def test_text_with_copy_special_characters_is_stored_as_given():
    # COPY's text format gives meaning to backslash sequences and to the tab and newline
    # that separate its columns and rows. Single-line fields refuse control characters
    # (scheduler_core/text.py), so they carry the backslash forms; the payload carries
    # the raw characters.
    odd = "a\\tb\\c\\nd\\re \\N \\\\t end"
    raw = "a\tb\\c\nd\re \\N \\\\t end"
    spec = {"handler": "noop", "run_at": AT, "name": odd, "shard_key": odd,
            "unique_key": odd, "payload": {raw: raw}}

    [job] = services.create_jobs([spec])

    row = Job.objects.get(pk=job.pk)
    assert (row.name, row.shard_key, row.unique_key) == (odd, odd, odd)
    assert row.unique_lock == f"-:{odd}"
    assert stored_payload(job.pk) == {raw: raw}


@pytest.mark.django_db
def test_each_instance_answered_equals_its_stored_row_in_every_field():
    owner = User.objects.create_user("bob")
    set_owner_policy(owner, queues=["q1"], highest_priority=0)
    specs = [
        {"handler": "noop", "run_at": AT, "payload": {"n": 1}, "name": "one-off",
         "priority": 2, "timeout_s": 30, "max_attempts": 2, "queue": "q1",
         "shard_key": "s", "unique_key": "k", "unique_period_s": 60,
         "unique_states": ["queued", "scheduled", "queued"]},
        {"handler": "echo", "cron": "*/5 * * * *", "timezone": "Asia/Tokyo", "jitter_s": 7,
         "misfire_policy": "run_all", "max_lag_s": 10},
        {"handler": "noop", "delay_s": 5},
    ]

    jobs = services.create_jobs(specs, owner=owner)

    fields = [f.attname for f in Job._meta.concrete_fields]
    for job in jobs:
        row = Job.objects.get(pk=job.pk)
        assert [getattr(job, f) for f in fields] == [getattr(row, f) for f in fields]
    schedule = Schedule.objects.get(pk=jobs[1].schedule_id)
    assert [getattr(jobs[1].schedule, f.attname) for f in Schedule._meta.concrete_fields] == [
        getattr(schedule, f.attname) for f in Schedule._meta.concrete_fields]
    assert jobs[0].unique_states == "scheduled,queued"
    runs = list(Run.objects.order_by("job_id"))
    assert [(r.job_id, r.scheduled_at, r.run_at, r.queue, r.priority, r.max_attempts,
             r.state, r.attempt, r.worker_id, r.error, r.result, r.catch_up, r.jitter_s)
            for r in runs] == [
        (jobs[0].pk, AT, AT, "q1", 2, 2, "scheduled", 0, "", "", None, False, 0.0),
        (jobs[2].pk, jobs[2].run_at, jobs[2].run_at, "default", 5, 4, "scheduled", 0, "", "",
         None, False, 0.0)]


@pytest.mark.django_db
def test_the_answer_gives_ids_and_conflicts_and_makes_each_instance_once():
    specs = [{"handler": "noop", "run_at": AT, "unique_key": "k"},
             {"handler": "noop", "run_at": AT},
             {"handler": "noop", "run_at": AT, "unique_key": "k"}]

    jobs = services.create_jobs(specs)

    first, second = Job.objects.order_by("pk").values_list("pk", flat=True)
    assert (jobs.ids, jobs.conflicts, len(jobs)) == ([first, second, first], [2], 3)
    assert jobs[0] is jobs[0] and jobs[-1] is jobs[2]
    assert [j.pk for j in jobs[1:]] == [second, first]
    assert [j.conflict for j in jobs] == [False, False, True]
    with pytest.raises(IndexError):
        jobs[3]
    # Used as the list it was: concatenated, compared.
    assert jobs + [] == [*jobs] == jobs and [] + jobs == list(jobs)


@pytest.mark.django_db
def test_a_priority_of_none_is_the_default():
    [job] = services.create_jobs([{"handler": "noop", "run_at": AT, "priority": None}])

    assert Job.objects.get(pk=job.pk).priority == 5


@pytest.mark.django_db
@pytest.mark.parametrize("field, value", [("name", "nul \x00"), ("name", "lone \ud800"),
                                          ("unique_key", "lone \ud800")])
def test_text_postgresql_cannot_store_is_refused_naming_the_field(field, value):
    with pytest.raises(InvalidJob) as caught:
        services.create_jobs([{"handler": "noop", "run_at": AT, field: value}])

    assert list(caught.value.errors) == [f"[0].{field}"]
    assert Job.objects.count() == 0


@pytest.mark.django_db
def test_the_database_refuses_a_second_holder_of_a_lock_but_not_many_jobs_without_one():
    plain = services.create_jobs([{"handler": "noop", "run_at": AT}] * 3)  # no lock: NULL
    [holder] = services.create_jobs([{"handler": "noop", "run_at": AT, "unique_key": "k"}])

    with pytest.raises(IntegrityError), transaction.atomic():
        Job.objects.filter(pk=plain.ids[0]).update(unique_lock=holder.unique_lock)
    assert Job.objects.filter(unique_lock__isnull=True).count() == 3
