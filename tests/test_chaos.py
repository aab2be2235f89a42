"""The short version of every fault scenario (docs/reliability.md): real daemons, a private
redis-server, the test database; each fails if any invariant breaks. Plus the checker
itself, shown to fail on a lost occurrence and on an unexplained duplicate execution."""

import re
import subprocess
import sys
from datetime import timedelta

import pytest
from django.db import connections

from chaos.invariants import Result, check
from chaos.load import owner
from chaos.scenarios import SCENARIO_NAMES
from jobs import services
from jobs.models import Job
from runs.clock import db_now
from runs.models import Attempt, Run
from tests.conftest import ROOT, daemon_env

pytestmark = pytest.mark.django_db(transaction=True)


def run_short(scenario: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "chaos", scenario, "--short", "--seed", "7"],
        env=daemon_env("redis"), cwd=ROOT, capture_output=True, text=True, timeout=280,
    )
    # A PostgreSQL restart broke this process's connection too.
    connections.close_all()
    return proc


@pytest.mark.slow
@pytest.mark.parametrize("scenario", [n for n in SCENARIO_NAMES
                                      if n not in ("many-daemons", "workflow-kill")])
def test_short_scenario_keeps_every_invariant(scenario):
    proc = run_short(scenario)

    report = proc.stdout + proc.stderr
    assert proc.returncode == 0, report
    assert "verdict              PASS" in proc.stdout, report
    assert "runs lost            0 " in proc.stdout, report


@pytest.mark.slow
def test_three_of_each_daemon_stopped_in_turns_move_partitions_and_shards_and_lose_nothing():
    proc = run_short("many-daemons")

    report = proc.stdout + proc.stderr
    assert proc.returncode == 0, report
    assert "verdict              PASS" in proc.stdout, report
    assert "runs lost            0 " in proc.stdout, report
    assert "duplicate run rows   0" in proc.stdout, report
    for kind in ("partition", "shard"):
        moves = re.search(rf"{kind}s: (\d+) holds passed to another holder", proc.stdout)
        assert moves and int(moves.group(1)) > 0, report


@pytest.mark.slow
def test_workers_killed_under_workflow_runs_leave_every_node_run_once_and_no_run_stuck():
    proc = run_short("workflow-kill")

    report = proc.stdout + proc.stderr
    assert proc.returncode == 0, report
    assert "verdict              PASS" in proc.stdout, report
    assert "runs lost            0 " in proc.stdout, report
    assert "duplicate run rows   0" in proc.stdout, report
    assert re.search(r"duplicate executions \d+  \(explained by an expired lease \d+, "
                     r"unexplained 0\)", proc.stdout), report
    figures = re.search(r"workflow runs (\d+) \{'succeeded': (\d+)\}: stuck 0, node runs "
                        r"(\d+), missing nodes 0, duplicate node runs 0, stray runs 0, "
                        r"downstream starts before an upstream's success 0", proc.stdout)
    assert figures, report
    runs, succeeded, node_runs = map(int, figures.groups())
    from chaos.workflow_kill import NODES
    assert runs == succeeded > 0 and node_runs == len(NODES) * runs, report
    assert "nodes not in their rule's state 0" in proc.stdout, report
    assert "sub-workflow node runs without one succeeded child 0" in proc.stdout, report
    callbacks = re.search(r"callback parents (\d+) \{'dead': (\d+), 'succeeded': (\d+)\}: "
                          r"callbacks (\d+), missing 0, duplicate 0, of the other outcome 0, "
                          r"jobs without one run 0, not succeeded 0", proc.stdout)
    assert callbacks, report
    parents, dead, succeeded, made = map(int, callbacks.groups())
    assert parents == dead + succeeded == made > 0 and dead > 0, report
    # The kills land between acks and the runs they continued (none were, under the
    # chaos owner's policy limit, before workflow-kill lifted it).
    continued = re.search(r"runs started in the ack that made them \(continued\) (\d+)",
                          proc.stdout)
    assert continued and int(continued.group(1)) > 0, report


def test_the_checker_counts_a_missing_cron_occurrence_and_an_unexplained_duplicate(tmp_path):
    user = owner()
    cron_job = services.create_job("chaos.work", {}, owner=user, cron="* * * * *",
                                   misfire_policy="run_all")
    one_off = services.create_job("chaos.work", {}, owner=user, delay_s=0)
    first = db_now().replace(second=0, microsecond=0) - timedelta(minutes=3)
    Job.objects.filter(pk=cron_job.pk).update(next_run_at=first + timedelta(minutes=3))
    for minute in (0, 2):  # minute 1 was never materialised: lost
        at = first + timedelta(minutes=minute)
        Run.objects.create(job=cron_job, scheduled_at=at, run_at=at, state="succeeded")
    run = Run.objects.get(job=one_off)
    Run.objects.filter(pk=run.pk).update(state="succeeded", attempt=2)
    Attempt.objects.create(run=run, number=1, worker_id="w:1:a", started_at=run.run_at,
                           outcome="released")
    Attempt.objects.create(run=run, number=2, worker_id="w:2:b", started_at=run.run_at,
                           outcome="succeeded")
    log = tmp_path / "exec.log"
    log.write_text(f"end {run.pk} 1 11 1.0 1.0\nend {run.pk} 2 12 2.0 2.0\n")

    result = check(Result("unit", 0), user, {cron_job.pk: first}, db_now(), log)

    assert (result.missing_occurrences, result.lost) == (1, 1)
    assert result.duplicate_executions == 1
    assert result.unexplained_duplicates == [
        f"run {run.pk} attempt 1 ran to its end but was recorded released"]
    assert not result.ok


def test_the_workflow_checker_counts_missing_nodes_stray_runs_and_early_downstream_starts():
    from chaos.workflow_kill import EDGES, NODES, _figures
    from workflows import services as workflow_services
    from workflows.models import NodeRun

    user = owner()
    workflow = workflow_services.create_workflow(
        "checked", [{"name": n, "handler": "chaos.work"} for n in NODES], EDGES, owner=user)
    workflow_run = workflow_services.start_workflow_run(workflow)
    root = NodeRun.objects.get(workflow_run=workflow_run, node__name="a")
    now = db_now()
    Run.objects.filter(pk=root.run_id).update(state="succeeded", attempt=1)
    Attempt.objects.create(run_id=root.run_id, number=1, worker_id="w:1:a", started_at=now,
                           finished_at=now + timedelta(seconds=2), outcome="succeeded")
    b1 = NodeRun.objects.get(workflow_run=workflow_run, node__name="b1")
    early = Run.objects.create(job_id=b1.node.job_id, scheduled_at=workflow_run.scheduled_at,
                               run_at=now, state="succeeded", attempt=1)
    Attempt.objects.create(run=early, number=1, worker_id="w:1:a",
                           started_at=now + timedelta(seconds=1))
    NodeRun.objects.filter(pk=b1.pk).update(state="running", run_id=early.pk)
    Run.objects.create(job_id=b1.node.job_id, scheduled_at=now - timedelta(days=1),
                       run_at=now)  # no node run points at it

    figures = _figures(workflow.pk, len(NODES))

    assert figures["workflow_runs"] == figures["stuck"] == 1
    assert figures["missing_nodes"] == len(NODES) - 2
    assert figures["stray_runs"] == 1
    assert figures["early_downstream"] == 1
    assert figures["duplicate_node_runs"] == 0


def test_the_workflow_checker_counts_a_sub_workflow_node_without_its_one_child():
    from chaos.workflow_kill import CHILD_EDGES, CHILD_NODES, _wrong_children
    from workflows import services as workflow_services
    from workflows.models import NodeRun, WorkflowRun

    user = owner()
    child = workflow_services.create_workflow(
        "child", [{"name": n, "handler": "chaos.work"} for n in CHILD_NODES], CHILD_EDGES,
        owner=user)
    parent = workflow_services.create_workflow(
        "parent", [{"name": "sub", "workflow": child.pk}], owner=user)
    workflow_services.start_workflow_run(parent)  # sub is a root: its child starts now
    assert _wrong_children(parent.pk, child.pk) == 1  # its child has not succeeded
    child_run = WorkflowRun.objects.get(workflow=child)
    for node_run in NodeRun.objects.filter(workflow_run=child_run):
        NodeRun.objects.filter(pk=node_run.pk).update(state="succeeded")
        if node_run.run_id is None:  # x's run was made; y's and z's stand in by hand
            run = Run.objects.create(job_id=node_run.node.job_id, state="succeeded",
                                     scheduled_at=child_run.scheduled_at, run_at=db_now())
            NodeRun.objects.filter(pk=node_run.pk).update(run_id=run.pk)
    WorkflowRun.objects.filter(pk=child_run.pk).update(state="succeeded")
    assert _wrong_children(parent.pk, child.pk) == 0
    workflow_services.start_workflow_run(child)  # a child run no node started
    assert _wrong_children(parent.pk, child.pk) == 1
