"""Recycling a worker's children (runs/worker/recycle.py, docs/deploy.md): by runs and by
resident memory, with real worker processes; every run succeeds exactly once, on more
children than one child would have been."""

import os
import re
from collections import Counter

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command
from prometheus_client import generate_latest

from jobs import services
from jobs.registry import handler
from runs.metrics.endpoint import registry
from runs.models import Attempt, ChildRecycleCount, Run
from runs.worker import Worker
from tests.conftest import daemon_env, flush_redis, start_daemon, stop, wait_until
from workflows import services as workflows
from workflows.models import NodeRun

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])


@handler("recycle.pid")
def child_pid(ctx, payload):
    return os.getpid()


@pytest.fixture
def env():
    flush_redis()
    yield daemon_env("redis", lease_ttl_s=3, dispatch_interval_s=0.1)
    flush_redis()


def run_all(env, tmp_path, worker_args: list[str], jobs: list[tuple[str, dict]]) -> list[Run]:
    """Start a dispatcher and a worker with ``worker_args``, run ``jobs`` (handler,
    payload) to their end, stop both (the worker flushes its counts as it stops)."""
    dispatcher = start_daemon(["rundispatcher"], env, tmp_path / "dispatcher.log")
    worker = start_daemon(["runworker", *worker_args], env, tmp_path / "worker.log")
    try:
        made = [services.create_job(handler, payload, delay_s=0, max_attempts=1)
                for handler, payload in jobs]
        wait_until(lambda: Run.objects.filter(job__in=made, state__in=["succeeded", "dead"])
                   .count() == len(made), timeout=60, message="every run to finish")
        assert worker.poll() is None, "the worker died"
    finally:
        stop(dispatcher, worker)
    return list(Run.objects.filter(job__in=made))


def assert_each_succeeded_once(runs: list[Run]) -> None:
    assert [run.state for run in runs] == ["succeeded"] * len(runs)
    attempts = Counter(Attempt.objects.filter(run__in=runs).values_list("run_id", "outcome"))
    assert attempts == {(run.pk, "succeeded"): 1 for run in runs}


def recycles() -> dict[str, float]:
    """The /metrics counter scheduler_worker_child_recycles_total, by reason."""
    text = generate_latest(registry).decode()
    prefix = 'scheduler_worker_child_recycles_total{reason="'
    return {line[len(prefix):].split('"')[0]: float(line.split()[-1])
            for line in text.splitlines() if line.startswith(prefix)}


def test_a_child_is_replaced_after_its_runs_and_no_run_is_lost_or_repeated(env, tmp_path):
    # No-ops are short, so the worker hands each child several runs at once: the cap
    # holds at the hand, not only once the child has run past it.
    runs = run_all(env, tmp_path, ["--concurrency", "2", "--max-runs-per-child", "3"],
                   [("chaos.pid", {})] * 10)

    assert_each_succeeded_once(runs)
    pids = Counter(run.result["pid"] for run in runs)
    assert len(pids) >= 4, pids
    assert max(pids.values()) <= 3, pids
    # Every child given 3 runs was replaced, one line each (one given 3 may have had
    # some taken back for the other child: run_all's runs are short, not stalled, so
    # hardly ever).
    log = (tmp_path / "worker.log").read_text()
    replaced = len(re.findall(r"recycled after \d runs \(max_runs_per_child=3\)", log))
    assert replaced >= sum(1 for n in pids.values() if n == 3)
    assert ChildRecycleCount.objects.get(reason="runs").count == replaced
    assert recycles() == {"runs": replaced}


def test_a_child_past_its_memory_cap_is_replaced_and_every_run_succeeds(env, tmp_path):
    # Each run keeps 50 MiB more in its child for good: a leak. A child holds the
    # worker's pages too (60-100 MiB), so 200 MiB is passed within a few runs.
    runs = run_all(env, tmp_path, ["--concurrency", "1", "--max-memory-per-child", "200"],
                   [("chaos.hog", {"mb": 50})] * 6)

    assert_each_succeeded_once(runs)
    by_start = sorted(runs, key=lambda run: run.started_at)
    pids = [run.result["pid"] for run in by_start]
    assert len(set(pids)) >= 2, pids
    # A new child starts with nothing kept: what one child held never grew past the cap
    # by more than the run that crossed it.
    assert max(run.result["held_mb"] for run in runs) <= 200
    # One line per child replaced: each but the last, which may have crossed it too.
    log = (tmp_path / "worker.log").read_text()
    replaced = len(re.findall(r"MiB resident after \d runs \(max_memory_per_child=200 MiB\)", log))
    assert len(set(pids)) - 1 <= replaced <= len(set(pids))
    assert ChildRecycleCount.objects.get(reason="memory").count == replaced
    assert recycles() == {"memory": replaced}


def test_recycling_limits_are_checked_before_the_worker_starts(settings):
    with pytest.raises(CommandError, match="--max-runs-per-child must be 0"):
        call_command("runworker", "--max-runs-per-child", "-1")
    with pytest.raises(CommandError, match="--max-memory-per-child must be 0"):
        call_command("runworker", "--max-memory-per-child", "-5")
    settings.SCHEDULER = {"MAX_MEMORY_PER_CHILD_MB": -1}
    # The setting is refused as it is read (scheduler_core/conf.py, count), as the system
    # check scheduler.E004 refuses it.
    with pytest.raises(ImproperlyConfigured, match="MAX_MEMORY_PER_CHILD_MB=-1: give 0 or"):
        Worker(["default"], 1)
    settings.SCHEDULER = {"MAX_RUNS_PER_CHILD": 7}
    assert Worker(["default"], 1, max_memory_per_child_mb=64).config.recycle.max_runs == 7


def test_a_chain_acked_in_the_children_runs_once_in_order_across_recycled_children(
        broker, settings):
    # On PostgreSQL a child acks a node's success and starts the next node itself
    # (runs/worker/handoff.py): a child at its cap must stop doing so, or it never ends.
    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": broker.name}
    n = 8
    workflow = workflows.create_workflow(
        "recycled", [{"name": f"n{i}", "handler": "recycle.pid"} for i in range(n)],
        [[f"n{i}", f"n{i + 1}"] for i in range(n - 1)], using=broker.using)
    workflow_run = workflows.start_workflow_run(workflow, using=broker.using)
    broker.promote()

    worker = Worker(["default"], concurrency=1, using=broker.using, burst=True,
                    max_runs_per_child=2)
    worker.serve()

    nodes = dict(NodeRun.objects.using(broker.using).filter(workflow_run=workflow_run)
                 .values_list("node__name", "run_id"))
    runs = {run.pk: run for run in Run.objects.using(broker.using).filter(
        pk__in=nodes.values())}
    assert {run.state for run in runs.values()} == {"succeeded"}
    assert Attempt.objects.using(broker.using).filter(run_id__in=runs).count() == n
    pids = [runs[nodes[f"n{i}"]].result for i in range(n)]
    assert max(Counter(pids).values()) <= 2, pids
    # A child replaced never comes back: each pid's runs are one stretch of the chain.
    stretches = [pid for i, pid in enumerate(pids) if i == 0 or pids[i - 1] != pid]
    assert len(stretches) == len(set(pids)), pids
