"""PostgreSQL through PgBouncer in transaction pooling mode (docs/scaling.md, "PgBouncer"):
the settings DATABASE_POOLER=pgbouncer gives, and, in the PgBouncer lane of scripts/test
(docs/testing.md), what they keep working through a real PgBouncer."""

import os
from datetime import timedelta

import psycopg
import psycopg.conninfo
import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import connections
from django.utils import timezone

from jobs.models import Job
from runs.brokers.pg_listen import listen_params
from runs.models import Run
from scheduler_project.settings import database_config

URL = "postgres://app@db.internal:6432/scheduler"
pooled_lane = pytest.mark.skipif(
    os.environ.get("DATABASE_POOLER") != "pgbouncer",
    reason="the PgBouncer lane only (scripts/test --pgbouncer)")


def test_pgbouncer_turns_off_what_does_not_outlive_a_transaction():
    config = database_config(URL, pooler="pgbouncer")

    assert config["DISABLE_SERVER_SIDE_CURSORS"] is True
    assert config["OPTIONS"]["prepare_threshold"] is None
    # PgBouncer refuses a connection that sends the options startup parameter.
    assert "options" not in config["OPTIONS"]
    assert config["CONN_MAX_AGE"] == 60


def test_a_direct_connection_keeps_server_cursors_and_the_idle_transaction_limit():
    config = database_config(URL, pooler="")

    assert not config.get("DISABLE_SERVER_SIDE_CURSORS")
    assert "idle_in_transaction_session_timeout" in config["OPTIONS"]["options"]


def test_the_pooler_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("DATABASE_POOLER", "PgBouncer")
    assert database_config(URL)["DISABLE_SERVER_SIDE_CURSORS"] is True

    monkeypatch.setenv("DATABASE_POOLER", "pgpool")
    with pytest.raises(ImproperlyConfigured, match="DATABASE_POOLER='pgpool'"):
        database_config(URL)


@pooled_lane
@pytest.mark.django_db
def test_pgbouncer_refuses_the_direct_settings():
    params = connections["default"].get_connection_params()
    direct = database_config("postgres://x@h/d", pooler="")["OPTIONS"]["options"]

    with pytest.raises(psycopg.OperationalError, match="unsupported startup parameter"):
        psycopg.connect(**{**params, "options": direct}).close()


@pooled_lane
@pytest.mark.django_db(transaction=True)
def test_an_iterator_outside_a_transaction_outlives_another_client_taking_its_session():
    """A server-side cursor lives in the server session that declared it; in autocommit its
    next fetch may go to another one. Another client starting a transaction between two
    fetches takes the session just released (PgBouncer reuses the last used first)."""
    job = Job.objects.create(name="iterated", handler="noop", run_at=timezone.now())
    Run.objects.bulk_create(Run(job=job, scheduled_at=job.run_at + timedelta(seconds=i),
                                run_at=job.run_at) for i in range(5))
    params = connections["default"].get_connection_params()
    seen = []
    with psycopg.connect(**{k: params[k] for k in ("host", "port", "user", "dbname")}) as other:
        for run in Run.objects.filter(job=job).order_by("pk").iterator(chunk_size=2):
            if not seen:
                other.execute("SELECT 1")  # opens a transaction: holds a server session
            seen.append(run.pk)

    assert len(seen) == 5


@pooled_lane
def test_the_listen_connection_goes_to_postgresql_itself(settings):
    """Everything else of the lane goes through PgBouncer; LISTEN must not (a LISTEN there
    holds no server session and hears nothing)."""
    pooled = connections["default"].settings_dict
    listen = psycopg.conninfo.conninfo_to_dict(listen_params("default")["conninfo"])

    assert settings.DATABASE_LISTEN_URL
    assert str(listen["port"]) != str(pooled["PORT"])
    assert listen["dbname"] == pooled["NAME"]
