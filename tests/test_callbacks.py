"""Callbacks on every broker/database pair (docs/callbacks.md): a job's ``on_success``
handler runs exactly once per successful run, with its result; its ``on_failure`` handler
exactly once per run that ends dead, with its error; neither on the other outcome. The
callback run is a run like any: retried, dead-lettered, requeued, and linked to the run
that made it (``callback_of``) over REST. Unknown handlers are refused at every way in."""

import time

import pytest
from django.db import IntegrityError, transaction

from jobs import services
from jobs.callbacks import FAILURE, SUCCESS, make_callbacks
from jobs.models import Job
from jobs.registry import handler
from runs import services as run_services
from runs.brokers import get_broker
from runs.clock import db_now
from runs.models import Run
from runs.worker import Worker
from scheduler_core.exceptions import InvalidJob
from tests.conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])


@handler("cb.ok")
def ok(ctx, payload):
    return {"rows": payload.get("rows", 0)}


@handler("cb.boom")
def boom(ctx, payload):
    raise ValueError("card declined")


@handler("cb.record")
def record(ctx, payload):
    """A callback: returns what it was told, so the test reads it from its run."""
    return payload


@handler("cb.flaky")
def flaky(ctx, payload):
    """A callback that fails until its run's third attempt."""
    if ctx.attempt < 3:
        raise ValueError(f"attempt {ctx.attempt} fails")
    return payload["callback"]


@pytest.fixture
def pair(broker, settings):
    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": broker.name,
                          "RETRY_BACKOFF_BASE_S": 0.05}
    return broker


def work(broker) -> None:
    broker.promote()
    Worker(["default"], concurrency=2, using=broker.using, burst=True).serve()


def drain(broker, until) -> None:
    def done():
        work(broker)
        return until()

    wait_until(done, timeout=60, interval=0.05, message="the runs to finish")


def callbacks_of(using: str, run_id: int) -> list[Run]:
    return list(Run.objects.using(using).filter(job__callback_of=run_id)
                .select_related("job"))


def finished(using: str, *job_ids) -> bool:
    runs = Run.objects.using(using).filter(job_id__in=job_ids)
    return runs.exists() and not runs.exclude(
        state__in=["succeeded", "dead", "cancelled", "expired"]).exists()


def settle(pair, job):
    """Run until ``job``'s run and its callbacks have finished; returns its run."""
    using = pair.using
    drain(pair, lambda: finished(using, job.pk))
    run = Run.objects.using(using).get(job=job)
    drain(pair, lambda: finished(using, *Job.objects.using(using).filter(
        callback_of=run.pk).values_list("pk", flat=True)) or not Job.objects.using(
        using).filter(callback_of=run.pk).exists())
    return run


def test_a_success_makes_one_on_success_callback_with_its_result(pair):
    job = services.create_job("cb.ok", {"rows": 7}, on_success="cb.record",
                              on_failure="cb.record", using=pair.using)
    run = settle(pair, job)

    assert run.state == "succeeded"
    [callback] = callbacks_of(pair.using, run.pk)
    assert (callback.job.callback_on, callback.state) == (SUCCESS, "succeeded")
    assert callback.result == {"callback": {"run": run.pk, "job": job.pk,
                                            "state": "succeeded", "result": {"rows": 7}}}
    assert (callback.job.owner_id, callback.job.queue) == (job.owner_id, job.queue)


def test_a_dead_run_makes_one_on_failure_callback_with_its_error(pair):
    job = services.create_job(
        "cb.boom", max_attempts=2, on_success="cb.record",
        on_failure={"handler": "cb.record", "payload": {"team": "billing"}},
        using=pair.using)
    run = settle(pair, job)

    assert (run.state, run.attempt) == ("dead", 2)
    [callback] = callbacks_of(pair.using, run.pk)
    assert (callback.job.callback_on, callback.state) == (FAILURE, "succeeded")
    told = callback.result["callback"]
    assert callback.result["team"] == "billing"
    assert (told["run"], told["state"]) == (run.pk, "dead")
    assert "card declined" in told["error"] and "result" not in told


def test_an_expired_run_makes_its_on_failure_callback(pair):
    job = services.create_job("cb.ok", expires_in_s=1, on_failure="cb.record",
                              using=pair.using)
    time.sleep(1.2)  # expired before any worker took it
    run = settle(pair, job)

    assert run.state == "expired"
    [callback] = callbacks_of(pair.using, run.pk)
    told = callback.result["callback"]
    assert (told["run"], told["job"], told["state"]) == (run.pk, job.pk, "expired")
    assert told["error"].startswith("expired: not started by its expiry")


def test_a_result_over_the_bound_fails_the_run_and_calls_on_failure(pair, settings):
    settings.SCHEDULER = {**settings.SCHEDULER, "WORKFLOW_MAX_RESULT_BYTES": 100}
    job = services.create_job("cb.ok", {"rows": "x" * 200}, on_success="cb.record",
                              on_failure="cb.record", using=pair.using)
    run = settle(pair, job)

    assert run.state == "dead" and "WORKFLOW_MAX_RESULT_BYTES (100)" in run.error
    [callback] = callbacks_of(pair.using, run.pk)
    assert callback.job.callback_on == FAILURE


def test_no_callback_without_the_field_of_that_outcome(pair):
    good = services.create_job("cb.ok", on_failure="cb.record", using=pair.using)
    bad = services.create_job("cb.boom", max_attempts=1, on_success="cb.record",
                              using=pair.using)
    for job in (good, bad):
        settle(pair, job)

    assert not Job.objects.using(pair.using).filter(callback_of__isnull=False).exists()
    assert Run.objects.using(pair.using).count() == 2


def test_an_ack_told_again_makes_no_second_callback(pair):
    job = services.create_job("cb.ok", on_success="cb.record", using=pair.using)
    run = settle(pair, job)
    with transaction.atomic(using=pair.using):
        again = make_callbacks([run.pk], SUCCESS, db_now(pair.using), pair.using)

    assert again == []
    assert len(callbacks_of(pair.using, run.pk)) == 1
    # The database holds it too, whatever the code reads first.
    with pytest.raises(IntegrityError), transaction.atomic(using=pair.using):
        Job.objects.using(pair.using).create(
            name="twin", handler="cb.record", run_at=run.finished_at,
            callback_of=run.pk, callback_on=SUCCESS)


def test_a_callback_run_is_retried_dead_lettered_and_requeued_like_any(pair):
    job = services.create_job("cb.ok", on_success="cb.flaky", max_attempts=2,
                              using=pair.using)
    run = settle(pair, job)
    [callback] = callbacks_of(pair.using, run.pk)
    assert (callback.state, callback.attempt) == ("dead", 2)  # the job's max_attempts

    assert run_services.requeue([callback.pk], using=pair.using) == 1
    drain(pair, lambda: finished(pair.using, callback.job_id))
    callback.refresh_from_db()
    assert (callback.state, callback.attempt) == ("succeeded", 3)
    assert callback.result["run"] == run.pk
    assert len(callbacks_of(pair.using, run.pk)) == 1  # the callback has none of its own


@handler("cb.second_time")
def second_time(ctx, payload):
    if ctx.attempt < 2:
        raise ValueError("the first attempt fails")
    return {"attempt": ctx.attempt}


def test_a_requeued_parent_gets_each_field_once(pair):
    revived = services.create_job("cb.second_time", max_attempts=1, on_success="cb.record",
                                  on_failure="cb.record", using=pair.using)
    again = services.create_job("cb.boom", max_attempts=1, on_failure="cb.record",
                                using=pair.using)
    runs = [settle(pair, job) for job in (revived, again)]
    assert [run.state for run in runs] == ["dead", "dead"]

    assert run_services.requeue([run.pk for run in runs], using=pair.using) == 2
    runs = [settle(pair, job) for job in (revived, again)]

    assert [run.state for run in runs] == ["succeeded", "dead"]
    assert sorted(c.job.callback_on for c in callbacks_of(pair.using, runs[0].pk)) == [
        FAILURE, SUCCESS]
    assert [c.job.callback_on for c in callbacks_of(pair.using, runs[1].pk)] == [FAILURE]


def test_the_callback_run_links_to_its_parent_over_rest(api, alice, settings):
    broker = get_broker("default", name="database")
    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": broker.name}
    answer = api.post("/api/jobs/", {"handler": "cb.ok", "on_success": "cb.record"},
                      format="json")
    assert answer.status_code == 201, answer.json()
    assert answer.json()["on_success"] == {"handler": "cb.record", "payload": {}}
    job = Job.objects.get(pk=answer.json()["id"])
    run = settle(broker, job)
    [callback] = callbacks_of("default", run.pk)

    shown = api.get(f"/api/runs/{callback.pk}/").json()
    assert (shown["callback_of"], shown["callback_on"]) == (run.pk, SUCCESS)
    assert api.get(f"/api/runs/{run.pk}/").json()["callback_of"] is None
    assert api.get(f"/api/jobs/{callback.job_id}/").json()["callback_of"] == run.pk


UNKNOWN = "no handler is registered as 'cb.nope'"


@pytest.mark.parametrize("field", ["on_success", "on_failure"])
def test_an_unknown_handler_is_refused_by_the_python_api(field):
    with pytest.raises(InvalidJob) as one:
        services.create_job("cb.ok", **{field: "cb.nope"})
    with pytest.raises(InvalidJob) as many:
        services.create_jobs([{"handler": "cb.ok"},
                              {"handler": "cb.ok", field: {"handler": "cb.nope"}}])

    assert UNKNOWN in one.value.errors[field]
    assert UNKNOWN in many.value.item_errors[1][field]
    assert not Job.objects.exists()


@pytest.mark.parametrize("value, reason", [
    ({"handler": "cb.record", "when": 1}, "unknown key 'when'"),
    ({"handler": "cb.record", "payload": [1]}, "payload: "),
    (7, "give a handler name"),
    ("django_task", "not offered as a callback"),
])
def test_a_bad_callback_is_refused_naming_why(value, reason):
    with pytest.raises(InvalidJob) as caught:
        services.create_job("cb.ok", on_failure=value)
    assert reason in caught.value.errors["on_failure"]


def test_an_unknown_handler_is_refused_over_rest(api):
    one = api.post("/api/jobs/", {"handler": "cb.ok", "on_success": "cb.nope"},
                   format="json")
    bulk = api.post("/api/jobs/bulk/", {"jobs": [
        {"handler": "cb.ok"}, {"handler": "cb.ok", "on_failure": {"handler": "cb.nope"}}]},
        format="json")

    assert one.status_code == 400 and UNKNOWN in str(one.json()["on_success"])
    assert bulk.status_code == 400 and UNKNOWN in str(bulk.json()), bulk.json()
    assert not Job.objects.exists()


def test_the_chaos_checker_counts_a_missing_a_wrong_and_a_stuck_callback():
    """chaos/callback_load.py's figures (workflow-kill's callback verdict) can fail."""
    from chaos import callback_load

    jobs = [services.create_job("cb.ok", on_success="cb.record") for _ in range(3)]
    good, missing, wrong = [Run.objects.get(job=job) for job in jobs]
    Run.objects.filter(pk__in=[good.pk, missing.pk]).update(state="succeeded")
    Run.objects.filter(pk=wrong.pk).update(state="dead")
    with transaction.atomic():
        made = make_callbacks([good.pk], SUCCESS, db_now("default"), "default")
        make_callbacks([wrong.pk], FAILURE, db_now("default"), "default")  # no on_failure
    Job.objects.create(name="odd", handler="cb.record", run_at=good.run_at,
                       callback_of=wrong.pk, callback_on=SUCCESS)

    figures = callback_load.figures([job.pk for job in jobs])

    assert (figures["missing_callbacks"], figures["wrong_callbacks"]) == (2, 1)
    assert figures["callback_jobs_not_one_run"] == 1  # "odd" has no run
    assert figures["stuck_callbacks"] == 1 and made  # the good one never ran
