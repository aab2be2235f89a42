"""A daemon whose start-up fails after it made its children exits non-zero with a clear
message and leaves nothing behind (docs/deploy.md, "How many daemons": "exits non-zero with a clear
message if the database or Redis is unreachable at start"; docs/architecture.md, "Stopping")."""

import os
import subprocess

import psycopg
import pytest

from runs.models import WorkerProcess
from tests.conftest import daemon_env, database_url, start_daemon

pytestmark = pytest.mark.django_db(transaction=True)

REFUSE = """
CREATE FUNCTION refuse_registration() RETURNS trigger LANGUAGE plpgsql AS
$$ BEGIN RAISE EXCEPTION 'registration refused by the test'; END $$;
CREATE TRIGGER refuse_registration BEFORE INSERT ON {table}
FOR EACH ROW EXECUTE FUNCTION refuse_registration();
"""


@pytest.mark.postgresql_only("the refusal is a PostgreSQL trigger on the registration table")
def test_a_worker_whose_registration_fails_exits_with_a_message_and_no_children(tmp_path):
    """The database refuses the worker's registration row (as SQLite's "database is
    locked" would), after the worker started its child processes: it used to wait on
    them at exit for ever, ignoring SIGTERM."""
    table = WorkerProcess._meta.db_table
    log = tmp_path / "worker.log"
    with psycopg.connect(database_url("default"), autocommit=True) as admin:
        admin.execute(REFUSE.format(table=table))
        try:
            proc = start_daemon(["runworker", "--concurrency", "2"], daemon_env("redis"), log)
            try:
                code = proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                pytest.fail("the worker hung after its registration failed: "
                            + log.read_text()[-1500:])
            finally:
                if proc.poll() is None:
                    os.killpg(proc.pid, 9)
                    proc.wait()
        finally:
            admin.execute(f"DROP TRIGGER refuse_registration ON {table}; "
                          "DROP FUNCTION refuse_registration()")
    output = log.read_text()
    assert code == 1, output
    assert "worker cannot start: registering the worker failed" in output, output
    assert "registration refused by the test" in output
    assert "Traceback" not in output
    with pytest.raises(ProcessLookupError):  # nothing left in the worker's process group
        os.killpg(proc.pid, 0)
