"""A run leased just before its time (docs/performance.md, "Starting a run at its time"):
an idle worker promotes the run it sleeps to a few ms early (Broker.promote's
``within_s``, at most EARLY_MAX_S), its attempt starts at the run's run_at, and the child
waits for that instant before the handler (runs/worker/child.py, not_yet_s). On the
PostgreSQL pairs, where the worker does it (one statement starts the attempt)."""

import time

import pytest
from django.db import connections

from runs.clock import to_us
from runs.execution.leases import EARLY_MAX_S
from runs.execution.transitions import run_refs
from runs.models import Run
from runs.worker.child import not_yet_s
from tests.conftest import make_runs

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])


def pushed(broker, delay_s: float) -> Run:
    [run] = make_runs(broker.using, 1, delay_s=delay_s)
    broker.push(run_refs(Run.objects.using(broker.using).filter(pk=run.pk)))
    return run


def test_a_promote_within_a_few_ms_leases_a_run_whose_attempt_starts_at_its_run_at(broker):
    if connections[broker.using].vendor != "postgresql":
        pytest.skip("workers lease early only where one statement starts the attempt")
    soon = pushed(broker, delay_s=0.04)

    broker.promote(queues=["default"], within_s=EARLY_MAX_S)
    [lease] = broker.lease(["default"], 1, "w1")

    started = Run.objects.using(broker.using).get(pk=soon.pk)
    assert lease.run_id == soon.pk and lease.task["run_at_us"] == to_us(soon.run_at)
    assert started.started_at >= started.run_at


def test_a_promote_moves_no_run_due_later_than_the_most_it_may_lease_early(broker):
    later = pushed(broker, delay_s=1.0)

    moved = broker.promote(queues=["default"], within_s=5.0)

    assert moved == 0 and broker.lease(["default"], 1, "w1") == []
    assert Run.objects.using(broker.using).get(pk=later.pk).state == "scheduled"


def test_a_child_waits_for_its_runs_run_at_and_no_longer_than_the_most_early():
    now_us = time.time_ns() // 1000

    assert 0.0 < not_yet_s({"run_at": now_us + 30_000}) <= 0.03
    assert not_yet_s({"run_at": now_us + 10_000_000}) == EARLY_MAX_S
    assert not_yet_s({"run_at": now_us - 5_000}) == 0.0
    assert not_yet_s({"run_at": None}) == not_yet_s({}) == 0.0
