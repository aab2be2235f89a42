"""Run by tests/test_read_replica.py as ``python -m tests.replica_probe STEP`` with the
project's own settings: DATABASE_URL a primary, DATABASE_REPLICA_URL its streaming
replica. Prints one JSON object of what it saw, for the test to check.

setup    a user ``reader`` with an API token and the view_run permission: {"token"}
routing  where the router and the explicit helper send reads, writes and a claim, by the
         queries each connection ran: {"list_on_replica", "atomic_on_replica", ...}
"""

import json
import sys

import django


def setup() -> dict:
    from django.contrib.auth.models import Permission, User

    from scheduler_core.rest.tokens import create_token

    user, _ = User.objects.get_or_create(username="reader", defaults={"is_staff": True})
    user.user_permissions.add(Permission.objects.get(codename="view_run"))
    return {"token": create_token(user)}


def make_runs(count: int) -> list:
    """A one-off job with ``count`` runs already due, made on the primary."""
    from datetime import timedelta

    from django.utils import timezone

    from jobs.models import Job
    from runs.models import Run

    now = timezone.now()
    job = Job.objects.create(name="probe", handler="noop", payload={}, run_at=now)
    return Run.objects.bulk_create([
        Run(job=job, scheduled_at=now + timedelta(microseconds=i), run_at=now,
            queue="default", priority=5, max_attempts=4, shard=0) for i in range(count)])


def routing() -> dict:
    from django.db import connections, transaction
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from jobs.models import Job
    from runs.brokers import get_broker
    from runs.execution.transitions import run_refs
    from runs.models import Run
    from scheduler_core.replicas import read_alias, replica_lag_s, replica_reads

    seen = {}
    replica = connections["replica_1"]

    def on_replica(fn) -> bool:
        with CaptureQueriesContext(replica) as queries:
            fn()
        return len(queries) > 0

    replica_lag_s("replica_1", fresh=True)  # measured now, not inside what is captured
    seen["read_alias"] = read_alias()
    seen["plain_read_on_replica"] = on_replica(lambda: Job.objects.count())
    with replica_reads():
        seen["list_on_replica"] = on_replica(lambda: list(Run.objects.all()[:5]))

        def in_atomic():
            with transaction.atomic():
                list(Run.objects.select_for_update().all()[:5])
                Job.objects.count()

        seen["atomic_on_replica"] = on_replica(in_atomic)
        runs = make_runs(3)
        broker = get_broker("default", name="database")

        def claim():
            broker.push(run_refs(Run.objects.using("default").filter(
                pk__in=[r.pk for r in runs])))
            seen["leased"] = len(broker.lease(["default"], 3, "probe:1:x"))

        seen["claim_on_replica"] = on_replica(claim)
        job = Job.objects.get(pk=runs[0].job_id)  # read from the replica, if it has it
        seen["job_read_from"] = job._state.db

        def save():
            job.name = "renamed by the probe"
            job.save(update_fields=["name"])

        seen["save_on_replica"] = on_replica(save)
    seen["saved"] = Job.objects.using("default").get(pk=job.pk).name
    client = Client(HTTP_HOST="127.0.0.1")
    from django.contrib.auth.models import User

    client.force_login(User.objects.get(username="reader"))
    response = None

    def dashboard():
        nonlocal response
        response = client.get("/admin/dashboard/data.json")

    seen["dashboard_on_replica"] = on_replica(dashboard)
    seen["dashboard_status"] = response.status_code
    return seen


if __name__ == "__main__":
    django.setup()
    print(json.dumps({"setup": setup, "routing": routing}[sys.argv[1]]()))
