"""The workflow reconcile (docs/workflows.md, "Nothing lost") isolates a workflow run it
cannot repair: the other runs of its batch are repaired, the failing one is logged and
left for the next reconcile. One tenant's graph once stopped every batch after its own."""

import pytest

from workflows import reconcile, services
from workflows.models import NodeRun

pytestmark = pytest.mark.django_db

NODES = [{"name": "a", "handler": "noop"}, {"name": "b", "handler": "noop"}]


def test_a_workflow_run_the_reconcile_cannot_repair_holds_up_no_other(monkeypatch, caplog):
    wf = services.create_workflow("wf", NODES, [["a", "b"]])
    poison, healthy = (services.start_workflow_run(wf, run_key=k)
                       for k in ("poison", "healthy"))
    for wr in (poison, healthy):  # a's run lost before the engine was told
        NodeRun.objects.filter(workflow_run=wr, node__name="a").update(state="pending",
                                                                       run_id=None)
    real = reconcile._reconcile_batch

    def meets_a_bug(batch, counts, using):  # a fault injected, as a bug would raise
        if poison.pk in batch:
            raise RuntimeError("a bug met in this workflow run")
        real(batch, counts, using)

    monkeypatch.setattr(reconcile, "_reconcile_batch", meets_a_bug)

    reconcile.reconcile()

    a = dict(NodeRun.objects.filter(node__name="a").values_list("workflow_run_id", "state"))
    assert (a[healthy.pk], a[poison.pk]) == ("running", "pending")
    assert f"workflow run {poison.pk} not repaired" in caplog.text
