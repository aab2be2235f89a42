"""The operators' dashboard (docs/admin.md): its figures on PostgreSQL and SQLite, its JSON
endpoint and who may see it. The browser test in tests/e2e/ watches it refresh."""

import random
from datetime import UTC, timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.utils import timezone

from jobs.models import Job, SchedulerPartition
from runs.clock import db_now
from runs.dashboard.figures import PercentileCont, percentile, series, snapshot
from runs.models import Run, RunState, WorkerProcess


def minute_floor(moment):
    return moment.astimezone(UTC).replace(second=0, microsecond=0)


def add_run(using, job, *, scheduled, started=None, finished=None, state=RunState.SUCCEEDED,
            attempt=1, worker=""):
    run = Run.objects.using(using).create(
        job=job, scheduled_at=scheduled, run_at=scheduled, state=state, attempt=attempt,
        started_at=started, finished_at=finished, worker_id=worker,
        lease_expires_at=started + timedelta(minutes=5) if state == RunState.RUNNING else None,
    )
    # Made when it was scheduled, as the scheduler makes runs: lag counts from the later
    # of the two (runs/models.py, LAG_FROM).
    Run.objects.using(using).filter(pk=run.pk).update(created_at=scheduled)
    return run


def history(using, now):
    """Runs whose figures are known: in the minute two before ``now``'s, four first
    attempts with lags 1, 2, 3 and 10 s and one retry (lag 100 s, not a first attempt);
    one minute before, three of them succeed and one dies. Plus a run started two hours
    ago that finished in the window (counts as succeeded, not as started)."""
    job = Job.objects.using(using).create(name="figures", handler="noop", run_at=now)
    m2 = minute_floor(now) - timedelta(minutes=2)
    m1 = m2 + timedelta(minutes=1)
    outcomes = [RunState.SUCCEEDED] * 3 + [RunState.DEAD]
    for i, (lag, state) in enumerate(zip([1, 2, 3, 10], outcomes, strict=True)):
        start = m2 + timedelta(seconds=20 + 5 * i)
        add_run(using, job, scheduled=start - timedelta(seconds=lag), started=start,
                finished=m1 + timedelta(seconds=i), state=state)
    retry_start = m2 + timedelta(seconds=45)
    add_run(using, job, scheduled=retry_start - timedelta(seconds=100), started=retry_start,
            state=RunState.RETRYING, attempt=2)
    old = now - timedelta(hours=2)
    add_run(using, job, scheduled=old, started=old, finished=m1 + timedelta(seconds=30))
    return m2, m1


def check_series(figures, now, m2, m1):
    minutes = [f"{m}" for m in figures["minutes"]]
    assert len(minutes) == 60
    assert figures["minutes"][-1] == minute_floor(now).isoformat()
    i2, i1 = minutes.index(m2.isoformat()), minutes.index(m1.isoformat())
    assert figures["started_per_s"][i2] == round(5 / 60, 3)
    assert figures["lag_p50_s"][i2] == 2.5
    assert figures["lag_p99_s"][i2] == pytest.approx(3 + 7 * 0.97)
    assert figures["succeeded_per_s"][i1] == round(4 / 60, 3)
    assert figures["dead_per_s"][i1] == round(1 / 60, 3)
    assert figures["lag_p50_s"][i1] is None and figures["started_per_s"][i1] == 0
    assert figures["totals"] == {"started": 5, "catch_up": 0, "succeeded": 4, "dead": 1}


def test_percentile_interpolates_like_percentile_cont():
    assert percentile([1.0, 2.0, 3.0, 10.0], 0.5) == 2.5
    assert percentile([1.0, 2.0, 3.0, 10.0], 0.99) == pytest.approx(9.79)
    assert percentile([4.0], 0.99) == 4.0
    assert percentile([], 0.5) is None
    with pytest.raises(ValueError, match="fraction"):
        PercentileCont("x", 1.5)
    with pytest.raises(ValueError, match="fraction"):
        percentile([1.0, 2.0], 0.995)


@pytest.mark.postgresql_only("compares with PostgreSQL's own percentile_cont")
@pytest.mark.django_db
@pytest.mark.parametrize("seed", range(5))
def test_percentile_in_python_equals_postgresqls_percentile_cont(seed):
    rng = random.Random(seed)
    values = [rng.expovariate(1 / 3) for _ in range(rng.randint(2, 300))]

    with connection.cursor() as cursor:
        cursor.execute("SELECT percentile_cont(ARRAY[0, 0.01, 0.5, 0.9, 0.99, 1]) WITHIN GROUP "
                       "(ORDER BY v) FROM unnest(%s::float8[]) AS v", [values])
        [expected] = cursor.fetchone()

    got = [percentile(values, f) for f in (0, 0.01, 0.5, 0.9, 0.99, 1)]
    assert got == pytest.approx(expected, rel=1e-12)


@pytest.mark.postgresql_only("compares with PostgreSQL's own percentile_cont")
@pytest.mark.django_db
@pytest.mark.parametrize("in_database", [True, False], ids=["percentile_cont", "python"])
def test_series_on_postgresql_in_the_database_and_in_python(in_database):
    now = db_now()
    m2, m1 = history("default", now)

    check_series(series("default", now=now, in_database=in_database), now, m2, m1)


@pytest.mark.django_db(databases=["default", "sqlite"])
def test_series_on_sqlite():
    now = timezone.now()
    m2, m1 = history("sqlite", now)

    check_series(series("sqlite", now=now), now, m2, m1)


@pytest.mark.django_db
def test_the_minute_under_way_has_no_rate_yet_but_counts_in_the_totals():
    now = minute_floor(db_now()) + timedelta(seconds=10)
    job = Job.objects.create(name="now", handler="noop", run_at=now)
    for i in range(5):
        start = now - timedelta(seconds=5 - i)
        add_run("default", job, scheduled=start, started=start, state=RunState.RUNNING,
                worker="w")

    figures = series(now=now)

    assert figures["started_per_s"][-1] is None and figures["started_per_s"][-2] == 0
    assert figures["lag_p50_s"][-1] == 0
    assert figures["totals"]["started"] == 5


@pytest.mark.django_db
def test_snapshot_shows_live_workers_with_their_runs_and_partition_owners():
    now = db_now()
    job = Job.objects.create(name="long one", handler="sleep", run_at=now)
    WorkerProcess.objects.create(worker_id="w-live", hostname="h1", pid=10, queues=["default"],
                                 concurrency=4, started_at=now, last_heartbeat_at=now)
    WorkerProcess.objects.create(worker_id="w-gone", hostname="h2", pid=11, queues=["default"],
                                 concurrency=4, started_at=now - timedelta(hours=1),
                                 last_heartbeat_at=now - timedelta(hours=1))
    running = add_run("default", job, scheduled=now, started=now, state=RunState.RUNNING,
                      worker="w-live")
    add_run("default", job, scheduled=now - timedelta(minutes=1), state=RunState.DEAD,
            finished=now)
    for n in range(16):
        SchedulerPartition.objects.update_or_create(number=n, defaults={
            "owner": "sched-a" if n < 12 else "sched-b",
            "lease_expires_at": now + timedelta(seconds=10 if n < 12 else -5)})

    figures = snapshot()

    [worker] = figures["workers"]
    assert worker["worker_id"] == "w-live" and worker["concurrency"] == 4
    assert [r["id"] for r in worker["runs"]] == [running.pk]
    assert worker["runs"][0]["job"] == "long one"
    assert worker["runs"][0]["url"] == f"/admin/runs/run/{running.pk}/change/"
    assert figures["totals"]["live_workers"] == 1
    assert figures["totals"]["dead_letter"] == 1
    owners = {p["owner"]: p for p in figures["partitions"]}
    assert owners["sched-a"]["partitions"] == list(range(12))
    assert 0 < owners["sched-a"]["lease_expires_in_s"] <= 10
    assert owners[""]["partitions"] == [12, 13, 14, 15]  # sched-b's leases expired
    [default] = [q for q in figures["queues"] if q["queue"] == "default"]
    assert default["live_workers"] == 1


@pytest.mark.django_db
def test_the_dashboard_is_for_staff_only(client):
    response = client.get("/admin/dashboard/")
    assert response.status_code == 302 and response["Location"].startswith("/admin/login/")
    assert client.get("/admin/dashboard/data.json").status_code == 403

    client.force_login(get_user_model().objects.create_user("user", password="pw"))
    assert client.get("/admin/dashboard/").status_code == 302
    response = client.get("/admin/dashboard/data.json")
    assert response.status_code == 403 and response.json() == {"detail": "staff login required"}


@pytest.mark.django_db
def test_staff_without_the_run_view_permission_see_no_dashboard(client):
    """Every owner's queues, jobs and running runs are on it: the run pages' permission."""
    from django.contrib.auth.models import Permission

    staff = get_user_model().objects.create_user("staff", password="pw", is_staff=True)
    Job.objects.create(name="secret-job", handler="noop", run_at=timezone.now())
    client.force_login(staff)
    assert client.get("/admin/dashboard/").status_code == 403
    response = client.get("/admin/dashboard/data.json")
    assert response.status_code == 403 and "runs.view_run" in response.json()["detail"]

    staff.user_permissions.add(Permission.objects.get(codename="view_run"))
    client.force_login(get_user_model().objects.get(pk=staff.pk))
    assert client.get("/admin/dashboard/").status_code == 200
    assert client.get("/admin/dashboard/data.json").status_code == 200


@pytest.mark.django_db
def test_the_dashboard_is_linked_from_the_admin_index_and_serves_json(admin_client):
    assert 'href="/admin/dashboard/"' in admin_client.get("/admin/").content.decode()

    page = admin_client.get("/admin/dashboard/").content.decode()
    assert 'id="dashboard-snapshot"' in page and 'data-url="/admin/dashboard/data.json"' in page
    assert "runs/dashboard.js" in page

    data = admin_client.get("/admin/dashboard/data.json").json()
    assert set(data) == {"now", "totals", "queues", "series", "workers", "partitions",
                         "ownership"}
    assert len(data["series"]["lag_p99_s"]) == 60
