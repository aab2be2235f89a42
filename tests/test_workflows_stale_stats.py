"""The ack of a wide fan-out's root on PostgreSQL costs reads linear in its width: it
reads its downstream nodes' readiness by index whatever the statistics say, and chooses
the run it continues with one probe of the owner policies per run made, not one per pair
of runs made (workflows/migrations/0004, 0005). With statistics taken when every node run had
succeeded (a table of finished workflow runs, or one analyzed just after a TRUNCATE), the
planner took the readiness read's NOT EXISTS over the upstream node runs as a
sequential scan of every node run per candidate: a root with 998 downstream nodes read a
million rows and its ack took 0.6-1.8 s instead of 0.1 s (BENCHMARKS.md, "Workflows
(W7)"). Counts of rows read and of index probes, not times, tell the plans apart."""

import pytest
from django.db import connections

from jobs.registry import handler
from runs.execution.continuation import Offer
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


def table_stat(using: str, column: str, table: str = NodeRun._meta.db_table) -> int:
    """``column`` of pg_stat_user_tables for ``table`` (seq_tup_read: rows read by
    sequential scans; idx_scan: index probes), this backend's own counts flushed first
    (PostgreSQL 15+)."""
    with connections[using].cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
    with connections[using].cursor() as cursor:
        cursor.execute(f"SELECT COALESCE({column}, 0) FROM pg_stat_user_tables"
                       " WHERE relname = %s", [table])
        return cursor.fetchone()[0]


def seq_rows_read(using: str) -> int:
    return table_stat(using, "seq_tup_read")


def statistics_of_finished_runs(broker) -> None:
    """Statistics of the node runs' table that say every node run has succeeded: one
    small workflow run to its end, then ANALYZE."""
    done = services.create_workflow("done", [{"name": n, "handler": "wf.stale"}
                                             for n in ("a", "b")], [["a", "b"]],
                                    using=broker.using)
    drain(broker, services.start_workflow_run(done, using=broker.using))
    with connections[broker.using].cursor() as cursor:
        cursor.execute(f"ANALYZE {NodeRun._meta.db_table}")


def test_a_wide_fan_outs_root_ack_does_not_scan_every_node_run_per_candidate(broker,
                                                                              settings):
    if broker.using != "default":
        pytest.skip("the statistics and plans are PostgreSQL's")
    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": broker.name}
    using = broker.using
    statistics_of_finished_runs(broker)

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
    statistics_of_finished_runs(broker)
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


def test_a_wide_fan_outs_root_ack_probes_the_owner_policies_once_per_run_made(broker,
                                                                              settings):
    """The rule that no run is continued behind a more urgent one the ack leaves to the
    broker (runs/execution/continuation.py, choose) compared every run made with every other, each
    with a probe of the owner policies: FAN² probes for a root owned by someone."""
    if broker.using != "default":
        pytest.skip("the one-call ack is PostgreSQL's")
    from django.contrib.auth.models import User

    from jobs.models import OwnerPolicy

    # No owner-wide limit: an owner's runs may be continued (docs/isolation.md).
    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": broker.name,
                          "OWNER_CONCURRENCY": 0}
    using = broker.using
    owner = User.objects.db_manager(using).create_user("fan-owner")
    names = [f"n{i}" for i in range(FAN)]
    fan = services.create_workflow(
        "fan", [{"name": n, "handler": "wf.stale"} for n in ["root", *names]],
        [["root", n] for n in names], owner=owner, using=using)
    workflow_run = services.start_workflow_run(fan, using=using)
    [lease] = lease_all(broker, 1)
    before = table_stat(using, "idx_scan", OwnerPolicy._meta.db_table)
    offer = Offer("w1", frozenset({"default"}), room=1, ttl_s=30.0)
    assert broker.complete([Outcome(lease, AttemptOutcome.SUCCEEDED, watched=True)],
                           offer) == [True]
    probes = table_stat(using, "idx_scan", OwnerPolicy._meta.db_table) - before

    assert len(offer.taken) == 1
    assert NodeRun.objects.using(using).filter(
        workflow_run=workflow_run, state="running").count() == FAN
    assert probes < 10 * FAN, f"{probes} probes of the owner policies"
