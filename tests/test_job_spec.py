"""One job spec (jobs/spec.py): every way in takes the same field names, refuses an unknown
one naming it and the field meant, keeps its old names one release with a deprecation,
and docs/api.md's table is the spec's."""

import dataclasses
import inspect
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.tasks import task

from jobs import services, spec
from jobs.admin.forms import JobChangeForm, JobCreateForm
from jobs.api.serializers import JobCreateSerializer, JobSerializer, JobUpdateSerializer
from jobs.models import Job
from runs.models import Run
from scheduler_tasks.backend import SchedulerTask
from workflows.validation import NODE_KEYS, SCHEDULE_KEYS

pytestmark = pytest.mark.django_db
DOCS = Path(__file__).resolve().parents[1] / "docs" / "api.md"


# A new job field goes into jobs/spec.py's FIELDS with the ways in that take it; then
# docs/api.md's table is pasted from spec.markdown_table().
DRIFT = "a way in and jobs/spec.py's FIELDS differ: define the field there (doors included)"


def old_names(door):
    return {name for name, old in spec.DEPRECATED.items() if door in old.doors}


# --- every way in takes the spec's names, and only them ---------------------------------

def test_docs_api_md_carries_the_spec_table():
    assert spec.markdown_table() in DOCS.read_text(), (
        "docs/api.md's job field table differs from jobs/spec.py: paste spec.markdown_table()")


def test_rest_create_takes_the_spec_fields_and_its_old_names():
    assert set(JobCreateSerializer().fields) == spec.names_of(spec.REST) | old_names(
        spec.REST), DRIFT


def test_rest_update_takes_the_update_fields_and_the_old_names():
    assert set(JobUpdateSerializer().fields) == (spec.names_of(spec.UPDATE)
                                                 | old_names(spec.REST)), DRIFT


def test_the_rest_answer_names_each_spec_field_it_shows_as_the_spec_does():
    shown = set(JobSerializer().fields)
    assert spec.names_of(spec.REST) - shown == {"delay_s", "unique_period_s",
                                                "unique_states"}, DRIFT


def test_create_job_takes_the_spec_fields():
    options = set(inspect.signature(services._spec).parameters)
    assert options == spec.names_of(spec.CREATE_JOB), DRIFT


def test_the_admin_forms_use_the_spec_names():
    assert set(JobCreateForm.base_fields) == spec.names_of(spec.ADMIN), DRIFT
    # A one-off job's run_at is changed through the REST API only.
    assert set(JobChangeForm.base_fields) == spec.names_of(spec.UPDATE) - {"run_at"}, DRIFT


def test_task_options_are_the_spec_fields():
    django_own = {"priority", "func", "backend", "queue_name", "run_after", "takes_context",
                  "name"}
    options = {f.name for f in dataclasses.fields(SchedulerTask)} - django_own
    assert options == spec.names_of(spec.TASK), DRIFT


def test_workflow_nodes_and_schedules_take_the_spec_fields():
    # task/args/kwargs name a django.tasks node's task; trigger_rule, map and workflow
    # are the node's place in the graph (docs/workflows.md, "Trigger rules", "Mapped
    # nodes" and "Sub-workflows"), not fields of its job.
    graph_keys = {"task", "args", "kwargs", "trigger_rule", "map", "workflow"}
    assert NODE_KEYS - graph_keys == spec.names_of(spec.NODE), DRIFT
    assert SCHEDULE_KEYS == spec.names_of(spec.WORKFLOW_SCHEDULE), DRIFT


# --- create_jobs refused what it does not know (it ignored it) ---------------------------

@pytest.mark.parametrize("key, value, meant", [
    ("schedule", "@hourly", "cron"),
    ("cron_expr", "@hourly", "cron"),
    ("timezone_name", "Europe/Paris", "timezone"),
    ("max_retries", 2, "max_attempts"),
    ("colour", "red", None),
])
def test_create_jobs_refuses_an_unknown_key_naming_the_field_meant(key, value, meant):
    with pytest.raises(services.InvalidJobs) as caught:
        services.create_jobs([{"handler": "noop"}, {"handler": "noop", key: value}])

    errors = caught.value.item_errors
    assert list(errors) == [1]
    reason = errors[1][key]
    assert reason.startswith("unknown field")
    assert (f"did you mean {meant!r}" in reason) if meant else "did you mean" not in reason
    assert (Job.objects.count(), Run.objects.count()) == (0, 0)


def test_create_jobs_names_an_unknown_key_with_the_other_errors():
    with pytest.raises(services.InvalidJobs) as caught:
        services.create_jobs([{"handler": "noop", "priority": 12, "colour": "red"}])

    assert set(caught.value.item_errors[0]) == {"priority", "colour"}


def test_create_jobs_refuses_an_item_that_is_not_a_dict():
    with pytest.raises(services.InvalidJobs) as caught:
        services.create_jobs([["noop"]])

    assert "dict" in caught.value.item_errors[0]["spec"]


# --- the old names work this release, with a deprecation ---------------------------------

def test_create_job_old_names_work_with_a_deprecation_warning():
    with pytest.warns(DeprecationWarning, match="'cron_expr' is deprecated.*use 'cron'"):
        job = services.create_job("noop", {}, cron_expr="@daily",
                                  timezone="Europe/Paris")
    with pytest.warns(DeprecationWarning, match="'timezone_name' is deprecated"):
        other = services.create_job("noop", {}, cron="@daily", timezone_name="Asia/Tokyo")

    assert (job.schedule.cron, job.schedule.timezone) == ("0 0 * * *", "Europe/Paris")
    assert other.schedule.timezone == "Asia/Tokyo"


def test_create_job_refuses_a_field_under_both_names():
    with pytest.warns(DeprecationWarning), pytest.raises(TypeError, match="give 'cron' only"):
        services.create_job("noop", {}, cron="@daily", cron_expr="@daily")


def test_the_task_decorator_old_timezone_name_works_with_a_deprecation_warning():
    with pytest.warns(DeprecationWarning, match="'cron_timezone' is deprecated"):
        declared = task(cron="0 3 * * *", cron_timezone="Europe/Berlin")(
            test_create_jobs_refuses_an_item_that_is_not_a_dict)

    assert declared.timezone == "Europe/Berlin"


def test_the_task_decorator_refuses_an_unknown_option_naming_the_one_meant():
    with pytest.raises(TypeError, match="'max_retries'.*did you mean 'max_attempts'"):
        task(max_retries=3)(test_create_jobs_refuses_an_item_that_is_not_a_dict)


def test_rest_old_names_work_answered_with_a_deprecation_header(api):
    response = api.post("/api/jobs/", {"handler": "noop", "schedule": "@daily",
                                       "max_retries": 2}, format="json")

    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["cron"], body["max_attempts"]) == ("0 0 * * *", 3)
    assert (body["schedule"], body["max_retries"]) == ("0 0 * * *", 2)
    assert response["Deprecation"] == "true"
    assert re.search(r"'max_retries' is deprecated.*'schedule' is deprecated",
                     response["Warning"])


def test_rest_new_names_have_no_deprecation_header(api):
    response = api.post("/api/jobs/", {"handler": "noop", "cron": "@daily",
                                       "max_attempts": 3}, format="json")

    assert response.status_code == 201, response.content
    assert "Deprecation" not in response
    assert Job.objects.get().max_attempts == 3


def test_rest_refuses_a_field_under_both_names(api):
    response = api.post("/api/jobs/", {"handler": "noop", "cron": "@daily",
                                       "schedule": "@daily"}, format="json")

    assert response.status_code == 400
    assert "give 'cron' only" in response.json()["schedule"][0]


def test_a_rest_patch_takes_the_new_names(api):
    job_id = api.post("/api/jobs/", {"handler": "noop", "cron": "@daily"},
                      format="json").json()["id"]

    response = api.patch(f"/api/jobs/{job_id}/", {"cron": "@hourly", "max_attempts": 2},
                         format="json")

    assert response.status_code == 200, response.content
    assert (response.json()["cron"], response.json()["max_attempts"]) == ("0 * * * *", 2)


def test_the_same_cron_job_through_every_way_in(api, admin_client):
    """One set of names gives the same job through REST, create_job, create_jobs and the
    admin's Add form (docs/api.md, "Job fields")."""
    fields = {"name": "report", "cron": "30 2 * * *", "timezone": "Europe/Berlin",
              "max_attempts": 3, "priority": 4}  # an owner may go down to 3 by default
    one = services.create_job("echo", {"x": 1}, **fields)
    [two] = services.create_jobs([{"handler": "echo", "payload": {"x": 1}, **fields}])
    three = api.post("/api/jobs/", {"handler": "echo", "payload": {"x": 1}, **fields},
                     format="json").json()["id"]
    added = admin_client.post("/admin/jobs/job/add/", {
        "handler": "echo", "payload": '{"x": 1}', "misfire_policy": "run_once",
        "queue": "default", "timeout_s": 300, **fields})
    assert added.status_code == 302, added.content.decode()[-3000:]
    four = Job.objects.latest("pk").pk

    def shape(pk):
        job = Job.objects.select_related("schedule").get(pk=pk)
        return (job.name, job.handler, job.payload, job.schedule.cron, job.schedule.timezone,
                job.max_attempts, job.priority)

    assert shape(one.pk) == shape(two.pk) == shape(three) == shape(four)


def test_rest_names_an_unknown_handler_with_the_python_apis_registration_hint(api):
    from scheduler_core.exceptions import UnknownHandler

    response = api.post("/api/jobs/", {"handler": "send_mail"}, format="json")

    assert response.status_code == 400
    assert response.json()["handler"] == [UnknownHandler("send_mail").errors["handler"]]
    assert "SCHEDULER_DEMO_HANDLERS" in response.json()["handler"][0]


def test_update_job_names_an_unknown_change_with_the_field_meant():
    job = services.create_job("noop", {}, cron="@daily")

    with pytest.raises(services.InvalidJob) as caught:
        services.update_job(job.pk, {"schedule": "@hourly", "queue": "other"})

    assert caught.value.errors == {"queue": "cannot be changed",
                                   "schedule": "unknown field (did you mean 'cron'?)"}


# --- every way in refuses the same wrongly typed values ----------------------------------

NAIVE_2030 = "2030-01-01T00:00:00"
# (field, the value over REST as JSON, the value in Python): a JSON integer field takes a
# JSON integer only, a number int or float but not bool or text, a text field text, a
# datetime an offset; an expires_at already past would only ever expire its run.
WRONG_TYPES = [
    ("priority", "5", "5"),
    ("max_attempts", "3", "3"),
    ("timeout_s", 1.0, 1.0),
    ("expires_in_s", "60", "60"),
    ("name", 123, 123),
    ("delay_s", True, True),
    ("delay_s", "1e3", "1e3"),
    ("expires_at", NAIVE_2030, datetime.fromisoformat(NAIVE_2030)),
    ("expires_at", "2020-01-01T00:00:00Z", datetime(2020, 1, 1, tzinfo=UTC)),
]
# Refused at every door, in REST's words or the Python API's: a one-off job's schedule
# fields mean nothing, yet a wrong one is refused; a shard_key 0 is no "none".
WRONG_ELSEWHERE = [
    ("max_lag_s", "60", "60"),
    ("timezone", "Not/AZone", "Not/AZone"),
    ("misfire_policy", "bogus", "bogus"),
    ("shard_key", 0, 0),
]
# A run_at in the past means now: an expires_at after it but past is past all the same.
PAST_RUN_AT = {"run_at": datetime(2019, 1, 1, tzinfo=UTC)}
TYPE_IDS = [f"{field}={rest!r}" for field, rest, _ in WRONG_TYPES]


def python_refusal(door: str, field: str, value, **more) -> dict:
    """The field errors the Python way in ``door`` gives for ``field`` set to ``value``
    (and the fields ``more``)."""
    if door == "create_job":
        with pytest.raises(services.InvalidJob) as caught:
            services.create_job("noop", {}, **{field: value}, **more)
        return caught.value.errors
    with pytest.raises(services.InvalidJobs) as caught:
        services.create_jobs([{"handler": "noop"}, {"handler": "noop", field: value, **more}])
    assert list(caught.value.item_errors) == [1]
    return caught.value.item_errors[1]


def rest_refusal(api, door: str, field: str, value, **more) -> dict:
    """The field errors of the 400 the REST way in ``door`` answers for ``field`` (and
    the fields ``more``)."""
    item = {"handler": "noop", field: value, **more}
    if door == "REST":
        answer = api.post("/api/jobs/", item, format="json")
        assert answer.status_code == 400, answer.content
        return answer.json()
    answer = api.post("/api/jobs/bulk/", {"jobs": [{"handler": "noop"}, item]}, format="json")
    assert answer.status_code == 400, answer.content
    [refused] = answer.json()["errors"]
    assert refused["index"] == 1
    return refused["errors"]


@pytest.mark.parametrize("door", ["REST", "REST bulk", "create_job", "create_jobs"])
@pytest.mark.parametrize("field, rest_value, python_value", WRONG_TYPES + WRONG_ELSEWHERE,
                         ids=TYPE_IDS + [f"{f}={r!r}" for f, r, _ in WRONG_ELSEWHERE])
def test_every_way_in_refuses_a_wrongly_typed_value_naming_the_field(
        api, door, field, rest_value, python_value):
    if door.startswith("REST"):
        errors = rest_refusal(api, door, field, rest_value)
    else:
        errors = python_refusal(door, field, python_value)

    assert field in errors, errors
    assert (Job.objects.count(), Run.objects.count()) == (0, 0)


@pytest.mark.parametrize("door", ["REST", "REST bulk", "create_job", "create_jobs"])
def test_every_way_in_refuses_an_expires_at_past_after_a_past_run_at(api, door):
    at = datetime(2020, 1, 1, tzinfo=UTC)
    if door.startswith("REST"):
        errors = rest_refusal(api, door, "expires_at", at.isoformat(),
                              run_at=PAST_RUN_AT["run_at"].isoformat())
    else:
        errors = python_refusal(door, "expires_at", at, **PAST_RUN_AT)

    reason = errors["expires_at"]
    assert "after the run's time" in (reason[0] if isinstance(reason, list) else reason)
    assert (Job.objects.count(), Run.objects.count()) == (0, 0)


@pytest.mark.parametrize("field, rest_value, python_value",
                         [w for w in WRONG_TYPES if w[0] != "expires_at"],
                         ids=[i for i, w in zip(TYPE_IDS, WRONG_TYPES, strict=True)
                              if w[0] != "expires_at"])
def test_rest_words_a_wrongly_typed_value_as_the_python_api_does(
        api, field, rest_value, python_value):
    reason = python_refusal("create_job", field, python_value)[field]

    assert rest_refusal(api, "REST", field, rest_value)[field] == [reason]
    assert rest_refusal(api, "REST bulk", field, rest_value)[field] == [reason]


def test_rest_names_a_wrongly_typed_value_beside_the_other_bad_fields(api):
    """A value handed on to validation is refused in the same 400 as a field the
    serializer refuses itself, all at once (docs/api.md, "Errors")."""
    answer = api.post("/api/jobs/", {"handler": "noop", "cron": "61 * * * *",
                                     "priority": "5", "max_retries": "3"}, format="json")

    assert answer.status_code == 400
    assert set(answer.json()) == {"cron", "priority", "max_retries"}, answer.json()
    assert answer.json()["priority"] == ["must be an integer"]
    assert Job.objects.count() == 0


@pytest.mark.parametrize("field, value", [("priority", "5"), ("max_attempts", "3"),
                                          ("timeout_s", 1.0), ("expires_in_s", "60")])
def test_a_workflow_node_over_rest_refuses_a_wrongly_typed_value_as_create_job_does(
        api, field, value):
    """A node's job fields go, as sent, to the validation create_jobs runs."""
    answer = api.post("/api/workflows/", {"name": "w", "nodes": [
        {"name": "a", "handler": "noop", field: value}]}, format="json")

    assert answer.status_code == 400, answer.content
    assert answer.json()[f"nodes[0].{field}"] == [
        python_refusal("create_job", field, value)[field]]
    assert Job.objects.count() == 0


@pytest.mark.parametrize("field, value", [("priority", "5"), ("max_attempts", 3.0),
                                          ("name", 123), ("max_retries", "3")])
def test_a_rest_patch_refuses_a_wrongly_typed_value_as_update_job_does(api, alice, field,
                                                                      value):
    job = services.create_job("noop", {}, cron="@daily", owner=alice)

    answer = api.patch(f"/api/jobs/{job.pk}/", {field: value}, format="json")

    assert answer.status_code == 400, answer.content
    assert field in answer.json(), answer.json()
    job.refresh_from_db()
    assert (job.priority, job.max_attempts, job.name) == (5, 4, "noop")
