"""The Python API refuses bad input with InvalidJob naming the field, and stores nothing
(cases found by an adversarial run; each used to raise a raw error or store a bad job)."""

from datetime import UTC, datetime, timedelta, timezone

import pytest

from jobs import services
from jobs.models import Job
from runs.models import Run
from scheduler_core.exceptions import InvalidJob, SchedulerError

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("options, field", [
    ({"cron": "* * * * *", "timezone": "America"}, "timezone"),
    ({"cron": "* * * * *", "timezone": 5}, "timezone"),
    ({"cron": 5}, "cron"),
    ({"delay_s": 1e12}, "delay_s"),
    ({"delay_s": float("nan")}, "delay_s"),
    ({"delay_s": 0, "queue": "default\n"}, "queue"),
    ({"delay_s": 0, "name": "x" * 201}, "name"),
    ({"run_at": datetime(9999, 12, 31, 23, 59, tzinfo=timezone(timedelta(hours=-14)))}, "run_at"),
    ({"run_at": datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=14)))}, "run_at"),
    ({"cron": "* * * * *", "timeout_s": 10**10}, "timeout_s"),
    # Not hashable: checked against the set of policies, it must still be named.
    ({"cron": "* * * * *", "misfire_policy": ["skip"]}, "misfire_policy"),
    ({"misfire_policy": {"run_once": 1}}, "misfire_policy"),
])
def test_bad_options_are_refused_naming_the_field(options, field):
    with pytest.raises(InvalidJob) as caught:
        services.create_job("noop", {}, **options)

    assert field in caught.value.errors, caught.value.errors
    assert (Job.objects.count(), Run.objects.count()) == (0, 0)


@pytest.mark.parametrize("handler, payload, field", [
    (["noop"], {}, "handler"),
    ("noop", {"when": {1, 2}}, "payload"),
    ("noop", {"text": "nul \x00"}, "payload"),
])
def test_bad_handler_or_payload_is_refused(handler, payload, field):
    with pytest.raises(InvalidJob) as caught:
        services.create_job(handler, payload, delay_s=0)

    assert list(caught.value.errors) == [field]
    assert Job.objects.count() == 0


def test_trigger_refuses_a_naive_time_and_a_second_run_at_the_same_time():
    job = services.create_job("noop", {}, cron="@daily")
    at = datetime(2030, 1, 1, tzinfo=UTC)

    with pytest.raises(InvalidJob):
        services.trigger(job.pk, at=datetime(2030, 1, 1))
    services.trigger(job.pk, at=at)
    with pytest.raises(SchedulerError, match="already has a run"):
        services.trigger(job.pk, at=at)
    assert Run.objects.filter(job=job).count() == 1


@pytest.mark.parametrize("option, hint", [
    ("schedule", "did you mean 'cron'?"), ("tz", "did you mean 'timezone'?"),
    ("max_retries", "did you mean 'max_attempts'?"), ("colour", None)])
def test_an_option_create_job_does_not_take_is_a_type_error_naming_it(option, hint):
    with pytest.raises(TypeError) as error:
        services.create_job("noop", {}, **{option: 1})

    message = str(error.value)
    assert message.startswith(f"create_job() got an unexpected keyword argument '{option}'")
    assert (hint in message) if hint else "did you mean" not in message
    assert Job.objects.count() == 0


def test_a_reason_many_fields_share_is_said_once_in_the_message():
    """A workflow of 100 nodes naming one unknown handler repeated the whole hint 100
    times in its error's message; the errors themselves stay one per field."""
    from workflows import services as workflows
    from workflows.validation import InvalidWorkflow

    nodes = [{"name": f"n{i}", "handler": "no.such.handler"} for i in range(100)]
    with pytest.raises(InvalidWorkflow) as caught:
        workflows.create_workflow("many", nodes, [])
    assert len(caught.value.errors) == 100
    message = str(caught.value)
    assert message.count("no handler is registered as 'no.such.handler'") == 1
    assert "nodes[0].handler, nodes[1].handler, nodes[2].handler and 97 more: " in message
