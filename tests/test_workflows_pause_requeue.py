"""A paused workflow run that fails while paused, then is revived by a requeue, on every
broker/database pair (docs/workflows.md, "Cancel and pause": a paused workflow run starts
no new node until resumed; "a requeue of a dead node's run while paused ... runs, and
what it makes ready waits for the resume")."""

import pytest

from runs import services as run_services
from runs.models import AttemptOutcome
from runs.types import Outcome
from tests.test_workflows_engine import node, start, states
from tests.test_workflows_races import lease_all, pair
from workflows import control, services

__all__ = ["pair"]  # the fixture, imported for its use here

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])


def test_a_requeue_of_a_run_paused_then_failed_starts_nothing_before_the_resume(pair):
    wr = start(pair, [node("a", max_attempts=1), node("b")], [["a", "b"]])
    assert control.pause_workflow_run(wr, using=pair.using)
    [lease] = lease_all(pair, 1)
    pair.complete([Outcome(lease, AttemptOutcome.FAILED, error="boom", retry=False)])
    assert run_services.requeue([lease.run_id], using=pair.using)
    [again] = lease_all(pair, 1)

    pair.complete([Outcome(again, AttemptOutcome.SUCCEEDED, result={})])

    view = services.get_workflow_run(wr.pk, using=pair.using)
    assert (view["state"], states(view)) == ("paused", {"a": "succeeded", "b": "pending"})
