"""A worker that slept until its next run's time leases it then, with no dispatcher round
between (docs/performance.md, "Waking idle workers"): the broker tells it when the next
delayed run falls due (next_due_s), and the lease made from then promotes it. On the
database broker only the dispatcher promoted, every DISPATCH_INTERVAL_S, so a run due
while the workers were idle waited for it: W3's p50 lag was 64 ms, its p99 125 ms."""

import time

import pytest

from runs.execution.transitions import run_refs
from runs.models import Run, RunState
from tests.conftest import make_runs

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])


def test_a_run_due_while_idle_is_leased_at_its_time_without_a_promote(broker):
    [run] = make_runs(broker.using, 1, delay_s=0.6)
    broker.push(run_refs(Run.objects.using(broker.using).filter(pk=run.pk)))
    assert broker.lease(["default"], 1, "w") == []

    due_in = broker.next_due_s(["default"])
    assert due_in is not None and 0.2 < due_in <= 0.6
    time.sleep(due_in + 0.05)
    [lease] = broker.lease(["default"], 1, "w")

    assert lease.run_id == run.pk
    run.refresh_from_db(using=broker.using)
    assert run.state == RunState.RUNNING


def test_with_nothing_delayed_the_next_due_time_is_unknown(broker):
    assert broker.next_due_s(["default"]) is None
