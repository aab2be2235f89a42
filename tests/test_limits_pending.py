"""/api/limits/ shows the pending figure the max_pending quota enforces: the owner's runs
waiting to run and the runs its live workflow runs will still make (docs/isolation.md,
"Tenant bounds")."""

import pytest

from jobs import services
from jobs.tenants import QuotaExceeded, set_owner_policy
from workflows.services import create_workflow, start_workflow_run

pytestmark = pytest.mark.django_db
CHAIN = [{"name": "a", "handler": "noop"}, {"name": "b", "handler": "noop"}]


def test_limits_show_the_pending_figure_the_quota_enforces(api, alice):
    """It showed "pending: 8" while the quota refused with "it has 31 (20 of them not yet
    made)": the nodes not yet made were left out."""
    set_owner_policy(alice, max_pending=3)
    start_workflow_run(create_workflow("w", CHAIN, [["a", "b"]], owner=alice))
    job = services.create_job("noop", {}, name="j", cron="@daily", owner=alice)
    services.trigger(job.pk)

    body = api.get("/api/limits/").json()
    with pytest.raises(QuotaExceeded) as caught:
        services.trigger(job.pk)

    assert (body["pending"], body["pending_not_yet_made"]) == (3, 1)
    assert "it has 3 (1 of them not yet made)" in str(caught.value)
