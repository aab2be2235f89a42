"""A job's retry strategy (the field ``retry``: runs/execution/retry.py,
docs/retries-and-expiry.md), on every broker/database pair: the next attempt's run_at on
the database clock follows the strategy, never_retry_on dead-letters at once, retry_on
limits what is retried, and a handler's RetryAfter / PermanentFailure still win. The
failing attempts are real: a burst worker runs handlers that raise, so the exception's
classes come from its child."""

from datetime import timedelta

import pytest

from jobs import services
from jobs.registry import handler
from runs.execution import retry
from runs.models import Attempt, AttemptOutcome, Run, RunState
from runs.types import Outcome
from runs.worker import Worker
from scheduler_core.exceptions import PermanentFailure, RetryAfter

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])


class Declined(ValueError):
    """A ValueError of a module of its own, as a client library's error is."""


@handler("retry.raise")
def raise_as_told(ctx, payload):
    kind = payload["raise"]
    if kind == "ValueError":
        raise ValueError("bad input")
    if kind == "KeyError":
        raise KeyError("missing")
    if kind == "Declined":
        raise Declined("card declined")
    if kind == "RetryAfter":
        raise RetryAfter(7, "come back later")
    raise PermanentFailure("no point")


def _fail_once(broker, settings, retry_spec, raised="ValueError", max_attempts=4,
               attempt_before=0) -> tuple[Run, Attempt]:
    """One job whose handler raises ``raised``, run once by a burst worker; the run and
    its attempt after it. ``attempt_before``: attempts the run already had."""
    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": broker.name}
    job = services.create_job("retry.raise", {"raise": raised}, retry=retry_spec,
                              max_attempts=max_attempts, using=broker.using)
    if attempt_before:
        Run.objects.using(broker.using).filter(job=job).update(attempt=attempt_before)
    broker.promote()
    Worker(["default"], concurrency=1, using=broker.using, burst=True).serve()
    run = Run.objects.using(broker.using).get(job=job)
    return run, Attempt.objects.using(broker.using).get(run=run, number=run.attempt)


@pytest.mark.parametrize(("strategy", "attempt", "delay_s"), [
    ({"kind": "fixed", "base_s": 30}, 3, 30),
    ({"kind": "linear", "base_s": 30}, 3, 90),
    ({"kind": "exponential", "base_s": 30}, 3, 120),
    ({"kind": "exponential", "base_s": 30, "cap_s": 100}, 3, 100),
    (None, 3, 4),  # today's default: 1 s doubling
])
def test_the_next_attempt_waits_as_the_strategy_says(broker, settings, strategy, attempt,
                                                      delay_s):
    run, tried = _fail_once(broker, settings, strategy, max_attempts=5,
                            attempt_before=attempt - 1)

    assert run.state == RunState.RETRYING and run.attempt == attempt
    # The attempt's end and the run's next run_at are one database clock reading apart
    # by exactly the delay.
    assert run.run_at - tried.finished_at == timedelta(seconds=delay_s)
    assert tried.outcome == AttemptOutcome.FAILED


def test_jitter_adds_up_to_its_seconds_after_the_cap(broker, settings):
    run, tried = _fail_once(broker, settings, {"kind": "fixed", "base_s": 60, "jitter_s": 30})

    waited = (run.run_at - tried.finished_at).total_seconds()
    assert 60 <= waited <= 90


def test_an_exception_in_never_retry_on_dead_letters_at_once(broker, settings):
    run, tried = _fail_once(broker, settings, {"never_retry_on": ["ValueError"]})

    assert run.state == RunState.DEAD and run.attempt == 1
    assert run.error == "ValueError: bad input (not retried: ValueError is in never_retry_on)"
    assert tried.error == run.error


def test_never_retry_on_matches_a_base_class_and_a_dotted_name(broker, settings):
    run, _ = _fail_once(broker, settings, {"never_retry_on": ["builtins.ValueError"]},
                        raised="Declined")

    assert run.state == RunState.DEAD and run.attempt == 1
    assert run.error.endswith("(not retried: tests.test_retry_strategy.Declined is a "
                              "builtins.ValueError, in never_retry_on)")


def test_retry_on_retries_only_what_it_names(broker, settings):
    named, _ = _fail_once(broker, settings, {"retry_on": ["ValueError"]})
    other, _ = _fail_once(broker, settings, {"retry_on": ["ValueError"]}, raised="KeyError")

    assert named.state == RunState.RETRYING
    assert other.state == RunState.DEAD and other.attempt == 1
    assert other.error == ("KeyError: 'missing' (not retried: KeyError is not in retry_on "
                           "(ValueError))")


def test_a_handlers_retry_after_and_permanent_failure_still_win(broker, settings):
    after, tried = _fail_once(broker, settings, {"never_retry_on": ["Exception"],
                                                 "kind": "fixed", "base_s": 1000},
                              raised="RetryAfter")
    final, _ = _fail_once(broker, settings, {"retry_on": ["PermanentFailure"]},
                          raised="PermanentFailure")

    assert after.state == RunState.RETRYING
    assert after.run_at - tried.finished_at == timedelta(seconds=7)
    assert final.state == RunState.DEAD and final.attempt == 1


def test_the_last_attempt_dead_letters_whatever_retry_on_says(broker):
    job = services.create_job("noop", {}, retry={"retry_on": ["ValueError"]},
                              max_attempts=1, using=broker.using)
    broker.promote()
    [lease] = broker.lease(["default"], 1, "w1")

    broker.complete([Outcome(lease, AttemptOutcome.FAILED, error="ValueError: x",
                             retry=retry.exception_names(ValueError("x")))])

    assert Run.objects.using(broker.using).get(job=job).state == RunState.DEAD


# --- the strategy's arithmetic and its checks (no broker involved) ---------------------


def test_delays_per_kind_over_attempts():
    def delays(policy):
        return [retry.delay_s(policy, n, 1.0, 3600.0) for n in range(1, 6)]

    assert delays(None) == [1, 2, 4, 8, 16]
    assert delays({"kind": "fixed", "base_s": 5}) == [5] * 5
    assert delays({"kind": "linear", "base_s": 5, "cap_s": 18}) == [5, 10, 15, 18, 18]
    assert retry.delay_s({"kind": "exponential"}, 10_000, 1.0, 3600.0) == 3600.0


@pytest.mark.parametrize(("value", "message"), [
    ("fast", "give an object"),
    ({"kind": "random"}, "kind: give one of fixed, linear, exponential"),
    ({"base_s": -1}, "base_s: give a number of seconds from 0 to 31536000"),
    ({"base_s": True}, "base_s: give a number"),
    ({"jitter_s": -0.0}, "jitter_s: give a number of seconds from 0 to 86400"),
    ({"base_s": 10, "cap_s": 5}, "cap_s: must be at least base_s"),
    ({"retry_on": "ValueError"}, "retry_on: give a list"),
    ({"never_retry_on": ["not a class"]}, "never_retry_on: 'not a class' is not a class"),
    ({"retry_on": ["KeyError"], "never_retry_on": ["KeyError"]}, "is in retry_on too"),
    ({"backoff": "exponential"}, "unknown key 'backoff'"),
])
def test_a_bad_strategy_is_refused_naming_the_key(value, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        retry.clean(value)


@pytest.mark.parametrize("planted", ['"str"', '{"kind": "linear", "base_s": "x"}', "[1]"])
def test_a_stored_strategy_no_way_in_accepts_fails_no_other_run(planted):
    # A row written by hand: the reaper and the worker's acks fail runs in batches, and
    # one unreadable strategy raised for the whole batch, every tenant's runs with it.
    from django.db import connection

    from runs.clock import db_now
    from runs.execution.transitions import fail_runs

    poisoned = services.create_job("retry.raise", {"raise": "ValueError"})
    other = services.create_job("retry.raise", {"raise": "ValueError"},
                                retry={"kind": "fixed", "base_s": 30})
    with connection.cursor() as cursor:
        cursor.execute("UPDATE jobs_job SET retry = %s::jsonb WHERE id = %s",
                       [planted, poisoned.pk])
    Run.objects.filter(job__in=[poisoned, other]).update(
        state=RunState.RUNNING, attempt=1, worker_id="w1", lease_expires_at=db_now())
    rows = list(Run.objects.filter(job__in=[poisoned, other])
                .values_list("id", "attempt", "max_attempts"))

    now = db_now()
    retried = fail_runs(rows, AttemptOutcome.FAILED, {}, now, "default")

    assert sorted(retried) == sorted(row[0] for row in rows)
    theirs = Run.objects.get(job=poisoned)
    assert theirs.state == RunState.RETRYING
    assert theirs.run_at - now == timedelta(seconds=1)  # the default backoff
    assert Run.objects.get(job=other).run_at - now == timedelta(seconds=30)
