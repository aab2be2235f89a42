"""Workflows against real daemons (``manage.py runworker``, ``rundispatcher``,
``runscheduler`` processes): a worker SIGKILLed while it runs a node loses nothing (the
node's run finishes elsewhere once its lease expires and the workflow run completes, one
run row per node), and two scheduler processes start one workflow run per cron occurrence
(docs/workflows.md).

They run on one broker/database pair, redis on PostgreSQL: what they add to the in-process
tests is the daemons, whose workflow logic is the same on every pair. The same behaviour
is tested on every pair in process: the expired node lease in test_workflows_engine.py,
the racing schedulers in test_workflows_races.py, a lease's expiry and retry in
test_broker_contract.py (docs/testing.md, "What is slow")."""

import signal
from datetime import timedelta

import pytest

from runs.clock import db_now
from runs.models import Run
from tests.conftest import daemon_env, start_daemon, stop, wait_until
from workflows import services
from workflows.models import NodeRun, Workflow, WorkflowRun

pytestmark = [pytest.mark.django_db(transaction=True, databases=["default", "sqlite"]),
              pytest.mark.slow, pytest.mark.parametrize("broker", ["redis"], indirect=True)]


@pytest.fixture
def env(broker, settings):
    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": broker.name}
    return daemon_env(broker.name, broker.using, lease_ttl_s=3, dispatch_interval_s=0.1,
                      retry_backoff_base_s=0.1, workflow_reconcile_s=1)


def test_a_sigkilled_workers_node_finishes_elsewhere_and_the_workflow_run_completes(
        broker, env, tmp_path):
    using = broker.using
    wf = services.create_workflow("diamond", [
        {"name": "a", "handler": "noop"},
        {"name": "slow", "handler": "sleep", "payload": {"seconds": 2}, "timeout_s": 30},
        {"name": "quick", "handler": "echo", "payload": {"n": 1}},
        {"name": "join", "handler": "noop"},
    ], [["a", "slow"], ["a", "quick"], ["slow", "join"], ["quick", "join"]], using=using)
    procs = [start_daemon(["rundispatcher"], env, tmp_path / "dispatcher.log"),
             start_daemon(["runscheduler"], env, tmp_path / "scheduler.log")]
    workers = {}
    for i in range(2):
        proc = start_daemon(["runworker", "--concurrency", "1"], env, tmp_path / f"w{i}.log")
        workers[proc.pid] = proc
    try:
        wr = services.start_workflow_run(wf, using=using)
        slow = wf.nodes.using(using).get(name="slow")
        running = wait_until(lambda: Run.objects.using(using).filter(
            job_id=slow.job_id, state="running").first(), message="the slow node to start")
        workers[int(running.worker_id.split(":")[1])].send_signal(signal.SIGKILL)
        wait_until(lambda: WorkflowRun.objects.using(using).get(pk=wr.pk).state != "running",
                   timeout=90, message="the workflow run to end")
    finally:
        stop(*procs, *workers.values())

    view = services.get_workflow_run(wr.pk, using=using)
    assert view["state"] == "succeeded", view
    jobs = list(NodeRun.objects.using(using).filter(workflow_run=wr)
                .values_list("node__job_id", flat=True))
    assert Run.objects.using(using).filter(job_id__in=jobs).count() == 4
    outcomes = list(Run.objects.using(using).get(pk=running.pk).attempts
                    .order_by("number").values_list("outcome", flat=True))
    assert outcomes == ["lease_expired", "succeeded"]


def test_two_scheduler_processes_start_one_workflow_run_per_occurrence(broker, env, tmp_path):
    using = broker.using
    wfs = [services.create_workflow(f"cron{i}", [{"name": "a", "handler": "noop"}],
                                    schedule={"cron": "* * * * *", "misfire_policy": "run_all"},
                                    using=using) for i in range(20)]
    start = (db_now(using) - timedelta(minutes=5)).replace(second=0, microsecond=0)
    Workflow.objects.using(using).update(next_run_at=start)
    env = {**env, "SCHEDULER_PARTITIONS": "8"}  # the two split them by lease

    procs = [start_daemon(["runscheduler", "--max-ticks", "3"], env, tmp_path / f"s{i}.log")
             for i in range(2)]
    codes = [p.wait(timeout=120) for p in procs]

    assert codes == [0, 0], [(tmp_path / f"s{i}.log").read_text()[-2000:] for i in range(2)]
    for wf in wfs:
        times = list(WorkflowRun.objects.using(using).filter(workflow=wf)
                     .order_by("scheduled_at").values_list("scheduled_at", flat=True))
        assert times[:6] == [start + timedelta(minutes=m) for m in range(6)]
        assert len(times) == len(set(times))
    assert Run.objects.using(using).count() == WorkflowRun.objects.using(using).count()
