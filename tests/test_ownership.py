"""Ownership changes of scheduler partitions and dispatcher shards leave a trace
(runs/daemons/ownership.py, docs/architecture.md "Ownership changes"): the winner logs INFO, the
loser WARNING when it notices; each change is counted for /metrics and kept in a bounded
history the dashboard shows."""

import logging

import pytest

from jobs.models import LeaseChangeCount, LeaseMember, LeaseTenure, SchedulerPartition
from runs.clock import db_now
from runs.daemons import ownership
from runs.daemons.partitions import PartitionLeases
from runs.models import ShardLease

pytestmark = pytest.mark.django_db(transaction=True)


def stall(model, owner: str) -> None:
    """``owner``'s leases run out, as when it is SIGSTOPped or cut off past the TTL."""
    past = db_now()
    model.objects.filter(owner=owner).update(lease_expires_at=past)
    LeaseMember.objects.filter(member=owner).update(expires_at=past)


def counts(group: str) -> dict:
    return dict(LeaseChangeCount.objects.filter(group=group).values_list("event", "count"))


@pytest.mark.parametrize("model", [SchedulerPartition, ShardLease])
def test_a_takeover_is_logged_by_both_sides_counted_and_kept(model, caplog):
    caplog.set_level(logging.INFO, logger="scheduler.ownership")
    a = PartitionLeases("a", 4, 15, model=model)
    b = PartitionLeases("b", 4, 15, model=model)
    group = a.group
    assert a.refresh() == [0, 1, 2, 3]
    stall(model, "a")
    caplog.clear()

    assert b.refresh() == [0, 1, 2, 3]
    winner = [r for r in caplog.records if "took over" in r.getMessage()]
    assert [(r.levelno, r.getMessage()) for r in winner] == [
        (logging.INFO, f"b took over {ownership.kind_of(group)}s [0, 1, 2, 3] from a "
                       "(its lease had expired)")]
    caplog.clear()

    a.refresh()  # a comes back and notices
    loser = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.getMessage() for r in loser] == [
        f"a lost {ownership.kind_of(group)}s [0, 1, 2, 3] to b (its lease on them had "
        "expired)"]
    assert counts(group)["taken_over"] == 4 and counts(group)["lost"] == 4

    held = {(t.number, t.owner): t for t in LeaseTenure.objects.filter(group=group)}
    for number in range(4):
        old, new = held[(number, "a")], held[(number, "b")]
        assert (old.ended_how, old.taken_by) == ("expired", "b")
        assert old.started_at <= old.ended_at <= new.started_at
        if new.ended_at is not None:  # b gave half back to a for a fair share
            assert new.ended_how == "rebalanced"


def test_a_clean_stop_and_a_rebalance_close_the_tenures_with_how(caplog):
    a = PartitionLeases("a", 4, 15)
    a.refresh()
    b = PartitionLeases("b", 4, 15)
    b.refresh()  # b is a member now; a gives back half at its next refresh
    a.refresh()
    b.refresh()
    a.release_all()

    ends = {(t.owner, t.number): t.ended_how for t in LeaseTenure.objects.all()}
    assert sorted(how for (owner, _), how in ends.items() if owner == "a") == [
        "rebalanced", "rebalanced", "released", "released"]
    assert counts(a.group)["released"] == 2 and counts(a.group)["rebalanced"] == 2


def test_a_lease_that_lapsed_unnoticed_is_a_warning(caplog):
    a = PartitionLeases("a", 2, 15)
    a.refresh()
    stall(SchedulerPartition, "a")

    a.refresh()

    assert any(r.levelno == logging.WARNING and "had expired unnoticed" in r.getMessage()
               for r in caplog.records)
    assert counts(a.group)["lapsed"] == 2


def test_the_history_is_capped(monkeypatch):
    monkeypatch.setattr(ownership, "HISTORY_ROWS", 5)
    a, b = PartitionLeases("a", 2, 15), PartitionLeases("b", 2, 15)
    for _ in range(4):
        a.refresh()
        stall(SchedulerPartition, "a")
        b.refresh()
        stall(SchedulerPartition, "b")
        a.release_all()
        b.release_all()

    assert LeaseTenure.objects.count() == 5
    assert counts(a.group)["taken_over"] >= 4  # the counters keep counting


def test_metrics_count_the_changes_and_the_dashboard_lists_who_held_what(admin_client):
    from tests.test_metrics import scrape

    a, b = PartitionLeases("a", 2, 15), PartitionLeases("b", 2, 15, model=ShardLease)
    a.refresh()
    b.refresh()
    stall(SchedulerPartition, "a")
    PartitionLeases("c", 2, 15).refresh()

    samples = scrape()
    key = ("scheduler_lease_changes_total",)
    assert samples[(*key, (("event", "taken_over"), ("kind", "partition")))] == 2
    assert samples[(*key, (("event", "acquired"), ("kind", "shard")))] == 2
    data = admin_client.get("/admin/dashboard/data.json").json()
    rows = {(t["kind"], t["number"], t["owner"]): t for t in data["ownership"]}
    assert rows[("partition", 0, "a")]["taken_by"] == "c"
    assert rows[("partition", 0, "a")]["ended_how"] == "expired"
    assert rows[("partition", 0, "c")]["ended_at"] is None
    assert rows[("shard", 1, "b")]["ended_at"] is None
    page = admin_client.get("/admin/dashboard/").content.decode()
    assert 'id="dash-ownership"' in page
