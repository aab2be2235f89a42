"""Every daemon stops within a bound after SIGTERM (docs/architecture.md, "Stopping"):
STOP_BOUND_S (plus the worker's grace), whatever it waits on and however big the tables."""

import signal
import subprocess

import psycopg
import pytest

from jobs.models import SchedulerPartition
from runs.models import ShardLease, WorkerProcess
from tests.conftest import daemon_env, database_url, make_runs, start_daemon, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def test_reconcile_stops_between_batches_when_asked(rb):
    """A dispatcher told to stop leaves a long reconcile scan after the batch in hand."""
    make_runs("default", 30)
    asked = []

    def keep_going() -> bool:
        asked.append(True)
        return False

    pushed = rb.reconcile(batch=10, keep_going=keep_going)

    assert (pushed, len(asked)) == (10, 1)
    assert rb.reconcile(batch=10) == 20  # the rest, when nobody stops it


@pytest.mark.slow
@pytest.mark.parametrize("command, model", [
    (["rundispatcher"], ShardLease), (["runscheduler"], SchedulerPartition),
    (["runworker", "--concurrency", "1", "--grace", "1"], WorkerProcess)])
def test_a_daemon_waiting_on_a_lock_still_exits_within_its_bound(command, model, tmp_path):
    """A stalled peer holds the rows the daemon's shutdown writes (its lease rows; a
    worker's registration), as a process SIGSTOPped inside a transaction would: the
    shutdown would wait for as long as the peer stays stalled. The test's lock is only let
    go after the daemon is waited for, so without the bound the daemon cannot exit."""
    log = tmp_path / "daemon.log"
    proc = start_daemon(command, daemon_env("redis"), log)
    table = model._meta.db_table
    held = model.objects.all() if model is WorkerProcess else model.objects.exclude(owner="")
    try:
        wait_until(held.exists, timeout=60, message=f"{command[0]} to be up")
        with psycopg.connect(database_url("default")) as peer:
            peer.execute(f"SELECT 1 FROM {table} FOR UPDATE")  # the stalled peer's locks
            proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(timeout=45)
            except subprocess.TimeoutExpired:
                pytest.fail(f"{command[0]} did not exit while a lock it waits on was held: "
                            + log.read_text()[-1500:])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 1
    assert "exiting now" in log.read_text()
