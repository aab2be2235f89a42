"""Real worker processes: SIGKILL mid-run, SIGTERM, timeouts, poison handlers, and
start-up against unreachable services."""

import os
import signal
import subprocess
import sys
from collections import Counter

import pytest
from django.utils import timezone

from jobs import services
from runs.models import Attempt, Run
from tests.conftest import ROOT, daemon_env, flush_redis, start_daemon, stop, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def env():
    flush_redis()
    yield daemon_env("redis", lease_ttl_s=3, dispatch_interval_s=0.1)
    flush_redis()


def worker_pid(worker_id: str) -> int:
    return int(worker_id.split(":")[1])


@pytest.mark.slow
def test_a_run_on_a_sigkilled_worker_finishes_on_another_after_its_lease_expires(env, tmp_path):
    dispatcher = start_daemon(["rundispatcher"], env, tmp_path / "dispatcher.log")
    workers = {}
    for i in range(2):
        proc = start_daemon(["runworker", "--concurrency", "1"], env, tmp_path / f"w{i}.log")
        workers[proc.pid] = proc
    try:
        job = services.create_job("sleep", {"seconds": 2}, delay_s=0, timeout_s=30)
        running = wait_until(lambda: Run.objects.filter(job=job, state="running").first(),
                             message="the run to start")
        victim = workers[worker_pid(running.worker_id)]
        victim.send_signal(signal.SIGKILL)

        done = wait_until(lambda: Run.objects.filter(job=job, state="succeeded").first(),
                          timeout=40, message="the run to succeed elsewhere")

        attempts = list(done.attempts.order_by("number"))
        assert [a.outcome for a in attempts] == ["lease_expired", "succeeded"]
        assert worker_pid(attempts[0].worker_id) == victim.pid
        assert worker_pid(attempts[1].worker_id) != victim.pid
        assert attempts[1].started_at > attempts[0].started_at
    finally:
        stop(dispatcher, *workers.values())


def test_sigterm_lets_short_runs_finish_and_releases_long_ones_at_once(env, tmp_path):
    dispatcher = start_daemon(["rundispatcher"], env, tmp_path / "dispatcher.log")
    worker = start_daemon(["runworker", "--concurrency", "2", "--grace", "1.5"], env,
                          tmp_path / "worker.log")
    try:
        short = services.create_job("sleep", {"seconds": 0.5}, delay_s=0)
        long = services.create_job("sleep", {"seconds": 30}, delay_s=0, max_attempts=1)
        wait_until(lambda: Run.objects.filter(state="running").count() == 2,
                   message="both runs to start")

        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=15) == 0

        assert Run.objects.get(job=short).state == "succeeded"
        released = Run.objects.get(job=long)
        assert released.state == "queued"
        assert released.attempts.get().outcome == "released"
        assert released.max_attempts == 2, "a released attempt must not use up the budget"
    finally:
        stop(dispatcher, worker)


def test_sigterm_to_the_whole_process_group_does_not_kill_in_flight_runs(env, tmp_path):
    # In flight means its handler began: a run leased ahead but not yet handed to a child
    # is released on a stop by design, and a loaded machine can hold it there a moment.
    executed = tmp_path / "exec.log"
    env = {**env, "CHAOS_EXEC_LOG": str(executed)}
    dispatcher = start_daemon(["rundispatcher"], env, tmp_path / "dispatcher.log")
    worker = start_daemon(["runworker", "--grace", "10"], env, tmp_path / "worker.log")
    try:
        job = services.create_job("chaos.work", {"seconds": 1.5}, delay_s=0)
        wait_until(lambda: executed.exists() and "start" in executed.read_text(),
                   message="the run's handler to start")

        os.killpg(worker.pid, signal.SIGTERM)  # what honcho or a terminal's Ctrl-C does
        assert worker.wait(timeout=15) == 0

        run = Run.objects.get(job=job)
        assert (run.state, [a.outcome for a in run.attempts.all()]) == (
            "succeeded", ["succeeded"])
    finally:
        stop(dispatcher, worker)


def test_stuck_and_poison_handlers_are_contained_and_the_worker_keeps_serving(env, tmp_path):
    dispatcher = start_daemon(["rundispatcher"], env, tmp_path / "dispatcher.log")
    worker = start_daemon(["runworker", "--concurrency", "2"], env, tmp_path / "worker.log")
    try:
        stuck = services.create_job("busy_loop", {}, delay_s=0, timeout_s=1, max_attempts=1)
        poison = services.create_job("suicide", {}, delay_s=0, max_attempts=2)
        others = [services.create_job("noop", {}, delay_s=0) for _ in range(10)]

        wait_until(lambda: Run.objects.filter(state__in=["succeeded", "dead"]).count() == 12,
                   timeout=40, message="every run to finish")

        assert worker.poll() is None, "the worker died"
        stuck_run = Run.objects.get(job=stuck)
        assert (stuck_run.state, stuck_run.attempts.get().outcome) == ("dead", "timed_out")
        poison_run = Run.objects.get(job=poison)
        assert poison_run.state == "dead"
        assert [a.outcome for a in poison_run.attempts.all()] == ["crashed", "crashed"]
        assert Run.objects.filter(job__in=others, state="succeeded").count() == 10
    finally:
        stop(dispatcher, worker)


def test_runs_queued_behind_a_crashing_or_stuck_run_in_a_child_still_run_once(env, tmp_path):
    # Short runs make the worker hand each child several runs at once (Slot); a child
    # that dies or is cut off must give back the runs waiting behind its current one.
    # Handlers alone in their shard would be leased apart from the no-ops: one shard.
    dispatcher = start_daemon(["rundispatcher"], env, tmp_path / "dispatcher.log")
    worker = start_daemon(["runworker", "--concurrency", "2"], env, tmp_path / "worker.log")
    try:
        warm = services.create_jobs([{"handler": "noop", "run_at": timezone.now()}
                                     for _ in range(100)])
        wait_until(lambda: Run.objects.filter(state="succeeded").count() == 100,
                   message="the warm-up runs")
        now = timezone.now()
        specs = [{"handler": "noop", "run_at": now} for _ in range(300)]
        specs[50] = {"handler": "suicide", "run_at": now, "max_attempts": 1}
        specs[150] = {"handler": "busy_loop", "run_at": now, "timeout_s": 1,
                      "max_attempts": 1}
        specs[250] = {"handler": "suicide", "run_at": now, "max_attempts": 1}
        jobs = services.create_jobs(specs)
        wait_until(lambda: Run.objects.filter(job__in=jobs, state__in=["succeeded", "dead"])
                   .count() == 300, timeout=60, message="every run to finish")

        outcomes = Counter(Attempt.objects.filter(run__job__in=jobs)
                           .values_list("run__job__handler", "outcome"))
        assert outcomes == {("noop", "succeeded"): 297, ("suicide", "crashed"): 2,
                            ("busy_loop", "timed_out"): 1}
        assert len(warm) == 100 and worker.poll() is None
    finally:
        stop(dispatcher, worker)


def test_handler_logs_are_stored_on_the_attempt(env, tmp_path):
    dispatcher = start_daemon(["rundispatcher"], env, tmp_path / "dispatcher.log")
    worker = start_daemon(["runworker"], env, tmp_path / "worker.log")
    try:
        job = services.create_job("flaky", {"fail_first": 1}, delay_s=0)
        run = wait_until(lambda: Run.objects.filter(job=job, state="succeeded").first(),
                         timeout=20, message="the flaky run to succeed")
        first, second = run.attempts.order_by("number")
        assert "HandlerFailure" in first.error
        assert [ln.message for ln in first.log_lines.all()] == ["attempt 1 fails on purpose"]
        assert [ln.message for ln in second.log_lines.all()] == ["attempt 2 succeeds"]
        assert (second.started_at - first.finished_at).total_seconds() >= 1.0
    finally:
        stop(dispatcher, worker)


@pytest.mark.parametrize("command", ["runworker", "rundispatcher", "runscheduler"])
@pytest.mark.parametrize("unreachable", ["database", "redis"])
def test_a_daemon_exits_non_zero_with_a_clear_message_when_a_service_is_down(command,
                                                                             unreachable):
    env = daemon_env("redis")
    if unreachable == "database":
        env["DATABASE_URL"] = "postgres://postgres@127.0.0.1:1/nowhere"
    else:
        env["REDIS_URL"] = "redis://127.0.0.1:1/0"

    proc = subprocess.run([sys.executable, str(ROOT / "manage.py"), command], env=env,
                          capture_output=True, text=True, timeout=60)

    assert proc.returncode != 0
    expected = "database 'default' is unreachable" if unreachable == "database" \
        else "broker is unreachable"
    assert f"{command[3:]} cannot start" in proc.stderr
    assert expected in proc.stderr


def test_a_worker_registers_heartbeats_and_signs_off(env, tmp_path):
    from runs.metrics.stats import live_workers, queue_stats
    from runs.models import WorkerProcess

    worker = start_daemon(["runworker", "--queues", "default,reports"], env,
                          tmp_path / "worker.log")
    try:
        registered = wait_until(lambda: WorkerProcess.objects.filter(pid=worker.pid).first(),
                                message="the worker to register")
        assert registered.queues == ["default", "reports"]
        assert list(live_workers()) == [registered]
        assert {s.queue: s.live_workers for s in queue_stats()} == {"default": 1, "reports": 1}
        beat = registered.last_heartbeat_at
        wait_until(lambda: WorkerProcess.objects.get(pk=registered.pk).last_heartbeat_at > beat,
                   timeout=5, message="a heartbeat")
    finally:
        stop(worker)
    assert WorkerProcess.objects.get(pk=registered.pk).stopped_at is not None
    assert list(live_workers()) == []


def test_a_result_postgres_cannot_store_fails_its_run_and_nothing_else(env, tmp_path):
    dispatcher = start_daemon(["rundispatcher"], env, tmp_path / "dispatcher.log")
    worker = start_daemon(["runworker", "--concurrency", "2"], env, tmp_path / "worker.log")
    try:
        poison = services.create_job("sleep", {"seconds": "nan"}, delay_s=0, max_attempts=1)
        others = [services.create_job("noop", {}, delay_s=0) for _ in range(4)]

        wait_until(lambda: Run.objects.filter(state__in=["succeeded", "dead"]).count() == 5,
                   timeout=30, message="every run to finish")

        dead = Run.objects.get(job=poison)
        assert dead.state == "dead"
        assert "not JSON-serialisable" in dead.attempts.get().error
        assert all(r.attempt == 1 for r in Run.objects.filter(job__in=others))
    finally:
        stop(dispatcher, worker)
