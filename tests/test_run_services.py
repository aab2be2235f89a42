"""Run operations shared by the API and the admin: requeue, cancel, discard."""

import pytest

from runs import services
from runs.brokers import get_broker
from runs.execution.transitions import run_refs
from runs.models import Attempt, AttemptOutcome, Run, RunState
from runs.types import Outcome
from tests.conftest import flush_redis, make_runs

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def broker():
    flush_redis()
    yield get_broker()
    flush_redis()


def kill_run(broker) -> Run:
    [r] = make_runs("default", 1, max_attempts=1)
    broker.push(run_refs(Run.objects.filter(pk=r.pk)))
    broker.promote()
    [lease] = broker.lease(["default"], 1, "w1")
    broker.complete([Outcome(lease, AttemptOutcome.FAILED, error="boom")])
    return Run.objects.get(pk=r.pk)


def test_requeue_gives_a_dead_run_a_fresh_budget_and_it_runs_again(broker):
    dead = kill_run(broker)
    assert dead.state == RunState.DEAD

    assert services.requeue([dead.pk]) == 1
    broker.promote()
    [lease] = broker.lease(["default"], 1, "w2")

    again = Run.objects.get(pk=dead.pk)
    assert (again.state, again.attempt, again.max_attempts) == (RunState.RUNNING, 2, 2)
    assert lease.attempt == 2
    assert Attempt.objects.filter(run=dead).count() == 2


def test_requeue_ignores_runs_that_are_not_dead(broker):
    [pending] = make_runs("default", 1)
    assert services.requeue([pending.pk]) == 0
    assert Run.objects.get(pk=pending.pk).state == RunState.SCHEDULED


def test_cancelling_a_running_run_refuses_its_workers_ack(broker):
    [r] = make_runs("default", 1)
    broker.push(run_refs(Run.objects.filter(pk=r.pk)))
    broker.promote()
    [lease] = broker.lease(["default"], 1, "w1")

    assert services.cancel([r.pk]) == 1
    assert broker.complete([Outcome(lease, AttemptOutcome.SUCCEEDED)]) == [False]
    assert Run.objects.get(pk=r.pk).state == RunState.CANCELLED


def test_discard_takes_a_run_out_of_the_dead_letter_and_keeps_its_history(broker):
    dead = kill_run(broker)

    assert services.discard([dead.pk]) == 1

    assert Run.objects.dead().count() == 0
    assert Run.objects.get(pk=dead.pk).state == RunState.CANCELLED
    assert Attempt.objects.get(run=dead).error == "boom"
