"""Read replicas (docs/scaling.md, "Read replicas") against a real streaming replica: the
session makes its own primary and ``pg_basebackup -R`` replica (chaos/pg_pair.py), runs
the web server and a probe (tests/replica_probe.py) with DATABASE_URL the primary and
DATABASE_REPLICA_URL the replica, and pauses the replica's replay to tell the two apart.
"""

import json
import os
import subprocess
import sys
import time

import pytest
import requests

from chaos.cluster import free_port
from chaos.pg_pair import PgPair
from tests.conftest import ROOT, start_daemon, stop, wait_until

MAX_LAG_S = 3


@pytest.fixture(scope="session")
def replica_pair():
    """A migrated primary with one streaming replica, removed at the end."""
    pair = PgPair(replicas=1).start()
    try:
        env = pair_env(pair)
        subprocess.run([sys.executable, str(ROOT / "manage.py"), "migrate", "-v0"], env=env,
                       check=True, cwd=ROOT, timeout=300)
        yield pair
    finally:
        pair.close()


def pair_env(pair: PgPair) -> dict:
    env = dict(os.environ)
    env.update({
        "DJANGO_SETTINGS_MODULE": "scheduler_project.settings_chaos",
        "DATABASE_URL": pair.primary.url,
        "DATABASE_REPLICA_URL": pair.replicas[0].url,
        "DATABASE_REPLICA_MAX_LAG_S": str(MAX_LAG_S),
        "SCHEDULER_BROKER": "database",
        "REDIS_URL": "",
        "PYTHONUNBUFFERED": "1",
    })
    return env


def probe(pair: PgPair, step: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "tests.replica_probe", step],
                         env=pair_env(pair), cwd=ROOT, check=True, capture_output=True,
                         text=True, timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def web(replica_pair, tmp_path_factory):
    """The web server on the pair, and a token of a user with view_run: (base URL, headers)."""
    token = probe(replica_pair, "setup")["token"]
    port = free_port()
    log = tmp_path_factory.mktemp("replica-web") / "web.log"
    proc = start_daemon(["runserver", "--noreload", f"127.0.0.1:{port}"],
                        pair_env(replica_pair), log)
    base = f"http://127.0.0.1:{port}"
    headers = {"Authorization": f"Token {token}"}

    def up():
        try:
            return requests.get(f"{base}/healthz", timeout=2).status_code == 200
        except requests.ConnectionError:
            return False

    try:
        wait_until(up, timeout=60, message=f"runserver on {port} ({log})")
        yield base, headers
    finally:
        stop(proc)


def replica_has_job(pair: PgPair, name: str) -> bool:
    with pair.replicas[0].connect() as conn:
        return conn.execute("SELECT count(*) FROM jobs_job WHERE name = %s",
                            [name]).fetchone()[0] > 0


def listed(web, path: str) -> list:
    base, headers = web
    response = requests.get(f"{base}{path}", headers=headers, timeout=10)
    assert response.status_code == 200, response.text
    return response.json()["results"]


def create_job(web, name: str) -> dict:
    base, headers = web
    response = requests.post(f"{base}/api/jobs/", headers=headers, timeout=10, json={
        "name": name, "handler": "noop", "payload": {}})
    assert response.status_code == 201, response.text
    return response.json()


@pytest.mark.slow
def test_lists_read_the_replica_until_its_lag_passes_the_bound(replica_pair, web):
    """With replay paused, a job written since is missing from the lists (they read the
    replica) but found by id (the primary); once the replica is more than MAX_LAG_S
    behind, the lists read the primary and show it, while the replica still lacks it."""
    create_job(web, "before pause")
    wait_until(lambda: replica_has_job(replica_pair, "before pause"), timeout=10)
    with replica_pair.replicas[0].connect() as conn:
        conn.execute("SELECT pg_wal_replay_pause()")
    try:
        time.sleep(0.5)  # the probe's cached lag (up to 1 s old) may predate the pause
        job = create_job(web, "while paused")  # a write: the primary, replay or not
        base, headers = web
        assert requests.get(f"{base}/api/jobs/{job['id']}/", headers=headers,
                            timeout=10).status_code == 200
        names = [j["name"] for j in listed(web, "/api/jobs/?page_size=100")]
        assert "before pause" in names and "while paused" not in names
        runs = listed(web, f"/api/jobs/{job['id']}/runs/")
        assert runs == []  # the job found on the primary, its runs listed from the replica
        wait_until(lambda: "while paused" in [
            j["name"] for j in listed(web, "/api/jobs/?page_size=100")],
            timeout=MAX_LAG_S + 15, message="the list falling back to the primary")
        assert listed(web, f"/api/jobs/{job['id']}/runs/") != []
        assert not replica_has_job(replica_pair, "while paused")  # still paused
    finally:
        with replica_pair.replicas[0].connect() as conn:
            conn.execute("SELECT pg_wal_replay_resume()")
    wait_until(lambda: replica_has_job(replica_pair, "while paused"), timeout=10)


@pytest.mark.slow
def test_writes_claims_and_transactions_use_the_primary(replica_pair):
    """In the probe: reads in replica_reads() and the dashboard's history hit the replica;
    reads in a transaction, a claim (push and lease) and the save of an object read from
    the replica hit the primary only."""
    seen = probe(replica_pair, "routing")
    assert seen["read_alias"] == "replica_1"
    assert seen["plain_read_on_replica"] is False  # outside replica_reads(): the primary
    assert seen["list_on_replica"] is True
    assert seen["atomic_on_replica"] is False
    assert seen["claim_on_replica"] is False and seen["leased"] == 3
    assert seen["save_on_replica"] is False and seen["saved"] == "renamed by the probe"
    assert seen["dashboard_status"] == 200 and seen["dashboard_on_replica"] is True


@pytest.mark.slow
def test_a_replica_that_is_down_sends_reads_to_the_primary(replica_pair, web):
    """The replica stopped: the lists answer from the primary (the lag check fails fast,
    connection refused) and the job written meanwhile is listed; started again, it
    catches up and serves again."""
    replica = replica_pair.replicas[0]
    replica.stop()
    try:
        create_job(web, "replica down")
        wait_until(lambda: "replica down" in [
            j["name"] for j in listed(web, "/api/jobs/?page_size=100")], timeout=10)
    finally:
        replica.start()
    wait_until(lambda: replica_has_job(replica_pair, "replica down"), timeout=20)


def test_a_host_list_url_keeps_every_host_and_port():
    """libpq's failover form (docs/scaling.md, "Failover"), which dj-database-url refuses."""
    from scheduler_project.settings import database_config

    config = database_config("postgres://app:pw@db1:5433,[::1],db3:6000/sched"
                             "?target_session_attrs=read-write", pooler="")
    assert (config["HOST"], config["PORT"]) == ("db1,::1,db3", "5433,5432,6000")
    assert (config["USER"], config["PASSWORD"], config["NAME"]) == ("app", "pw", "sched")
    assert config["OPTIONS"]["target_session_attrs"] == "read-write"


def test_replica_urls_become_replica_aliases_and_only_postgresql():
    from django.core.exceptions import ImproperlyConfigured

    from scheduler_core.replicas import replica_databases
    from scheduler_project.settings import database_config

    replicas = replica_databases("postgres://r1:5432/s, postgres://r2:5432/s", database_config)
    assert list(replicas) == ["replica_1", "replica_2"]
    assert replicas["replica_2"]["HOST"] == "r2"
    assert replicas["replica_1"]["OPTIONS"]["connect_timeout"] == 2
    assert replica_databases("", database_config) == {}
    with pytest.raises(ImproperlyConfigured, match="replica 1 is not a PostgreSQL URL"):
        replica_databases("sqlite:///x.sqlite3", database_config)
