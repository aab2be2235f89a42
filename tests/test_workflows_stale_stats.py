"""The ack of a wide fan-out's root on PostgreSQL reads its downstream nodes' readiness
by index whatever the statistics say. With statistics taken when every node run had
succeeded (a table of finished workflow runs, or one analyzed just after a TRUNCATE), the
planner took the readiness read's NOT EXISTS over the upstream node runs as a
sequential scan of every node run per candidate: a root with 998 downstream nodes read a
million rows and its ack took 0.6-1.8 s instead of 0.1 s (BENCHMARKS.md, "Workflows
(W7)"). The count of rows read by sequential scans, not a time, tells the plans apart."""

import pytest
from django.db import connections

from jobs.registry import handler
from runs.continuation import Offer
from runs.models import AttemptOutcome
from runs.types import Outcome
from tests.test_workflows_engine import drain
from tests.test_workflows_races import lease_all
from workflows import services
from workflows.models import NodeRun

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])
FAN = 300  # downstream nodes of the root: a scan per candidate reads FAN² rows


@handler("wf.stale")
def noop(ctx, payload):
    return None


def seq_rows_read(using: str) -> int:
    """Rows of the node runs' table read by sequential scans so far, this backend's own
    counts flushed first (PostgreSQL 15+)."""
    with connections[using].cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
    with connections[using].cursor() as cursor:
        cursor.execute("SELECT COALESCE(seq_tup_read, 0) FROM pg_stat_user_tables"
                       " WHERE relname = %s", [NodeRun._meta.db_table])
        return cursor.fetchone()[0]


def test_a_wide_fan_outs_root_ack_does_not_scan_every_node_run_per_candidate(broker,
                                                                              settings):
    if broker.using != "default":
        pytest.skip("the statistics and plans are PostgreSQL's")
    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": broker.name}
    using = broker.using
    # Statistics that say every node run has succeeded.
    done = services.create_workflow("done", [{"name": n, "handler": "wf.stale"}
                                             for n in ("a", "b")], [["a", "b"]], using=using)
    drain(broker, services.start_workflow_run(done, using=using))
    with connections[using].cursor() as cursor:
        cursor.execute(f"ANALYZE {NodeRun._meta.db_table}")

    names = [f"n{i}" for i in range(FAN)]
    fan = services.create_workflow(
        "fan", [{"name": n, "handler": "wf.stale"} for n in ["root", *names]],
        [["root", n] for n in names], using=using)
    workflow_run = services.start_workflow_run(fan, using=using)
    [lease] = lease_all(broker, 1)
    before = seq_rows_read(using)
    offer = Offer("w1", frozenset({"default"}), room=1, ttl_s=30.0)
    assert broker.complete([Outcome(lease, AttemptOutcome.SUCCEEDED, watched=True)],
                           offer) == [True]
    read = seq_rows_read(using) - before

    assert NodeRun.objects.using(using).filter(
        workflow_run=workflow_run, state="running").count() == FAN
    assert read < FAN * FAN // 10, f"{read} node run rows read by sequential scans"


def test_a_start_of_many_roots_does_not_scan_every_node_run_per_root(broker, settings):
    if broker.using != "default":
        pytest.skip("the statistics and plans are PostgreSQL's")
    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": broker.name}
    using = broker.using
    done = services.create_workflow("done", [{"name": n, "handler": "wf.stale"}
                                             for n in ("a", "b")], [["a", "b"]], using=using)
    drain(broker, services.start_workflow_run(done, using=using))
    with connections[using].cursor() as cursor:
        cursor.execute(f"ANALYZE {NodeRun._meta.db_table}")
    names = [f"n{i}" for i in range(FAN)]
    wide = services.create_workflow(
        "wide", [{"name": n, "handler": "wf.stale"} for n in [*names, "sink"]],
        [[n, "sink"] for n in names], using=using)

    before = seq_rows_read(using)
    workflow_run = services.start_workflow_run(wide, using=using)
    read = seq_rows_read(using) - before

    assert NodeRun.objects.using(using).filter(
        workflow_run=workflow_run, state="running").count() == FAN
    assert read < FAN * FAN // 10, f"{read} node run rows read by sequential scans"
