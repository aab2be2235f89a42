"""Two workers acking a fan-in's last two upstreams at the same moment, each ack offering
to continue what it makes ready (runs/execution/continuation.py), on every broker/database pair:
the downstream node gets one run, leased to at most one of the two workers, and the
broker counts that one lease once (docs/workflows.md, "The rules", "Latency")."""

import pytest

from runs.execution.continuation import Offer
from runs.models import AttemptOutcome, Run, RunState
from runs.types import Outcome
from tests.test_workflows_continuation import noop, running_count
from tests.test_workflows_races import lease_all, race
from workflows import services
from workflows.models import NodeRun, WorkflowRun

__all__ = ["noop"]  # the handler the nodes run, registered by importing it

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])


@pytest.fixture
def pair(broker, settings):
    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": broker.name}
    return broker


def test_two_offering_acks_of_a_fan_in_continue_its_run_once(pair):
    rounds = 4
    nodes = [{"name": n, "handler": "wf.cont", "payload": {}} for n in ("l", "r", "join")]
    wf = services.create_workflow("fan-in", nodes, [("l", "join"), ("r", "join")],
                                  using=pair.using)
    runs = [services.start_workflow_run(wf, using=pair.using) for _ in range(rounds)]
    of_run = dict(NodeRun.objects.using(pair.using).filter(run_id__isnull=False)
                  .values_list("run_id", "workflow_run_id"))
    by_workflow_run: dict[int, list] = {}
    for lease in lease_all(pair, 2 * rounds):
        by_workflow_run.setdefault(of_run[lease.run_id], []).append(lease)

    taken = []
    for leases in by_workflow_run.values():
        offers = [Offer(f"w{i}", frozenset({"default"}), room=1, ttl_s=30.0)
                  for i in range(2)]
        assert race(*[(lambda lease=lease, offer=offer: pair.complete(
            [Outcome(lease, AttemptOutcome.SUCCEEDED)], offer))
            for lease, offer in zip(leases, offers, strict=True)]) == []
        got = [lease for offer in offers for lease, _ in offer.taken]
        assert len(got) <= 1
        taken += got

    join = wf.nodes.using(pair.using).get(name="join")
    assert Run.objects.using(pair.using).filter(job_id=join.job_id).count() == rounds
    for wr in runs:
        run_id = NodeRun.objects.using(pair.using).get(workflow_run=wr, node=join).run_id
        assert Run.objects.using(pair.using).filter(
            job_id=join.job_id, scheduled_at=wr.scheduled_at).get().pk == run_id
    # Every continued run is running under its worker, and counted once by the broker.
    assert {Run.objects.using(pair.using).get(pk=lease.run_id).state
            for lease in taken} <= {RunState.RUNNING}
    assert running_count(pair) == (len(taken) if pair.name == "redis" else 0)
    for lease in taken:
        assert pair.complete([Outcome(lease, AttemptOutcome.SUCCEEDED)]) == [True]
    rest = lease_all(pair, rounds - len(taken)) if len(taken) < rounds else []
    assert pair.complete([Outcome(lease, AttemptOutcome.SUCCEEDED) for lease in rest]) == [
        True] * len(rest)
    assert running_count(pair) == 0
    assert set(WorkflowRun.objects.using(pair.using).filter(
        pk__in=[r.pk for r in runs]).values_list("state", flat=True)) == {"succeeded"}
