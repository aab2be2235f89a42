"""``manage.py runall`` on honcho's manager, and the Procfile under ``honcho start``: Ctrl-C
stops every process cleanly (each reports rc=0), a second Ctrl-C stops at once, releasing
in-flight runs (docs/architecture.md, "Daemons")."""

import os
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from jobs import services
from runs.models import Run
from tests.conftest import ROOT, daemon_env, flush_redis, start_daemon, stop, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def env():
    flush_redis()
    # A grace far longer than any wait below: only a forced stop ends a long run in time.
    yield daemon_env("redis", worker_grace_s=300, dispatch_interval_s=0.1)
    flush_redis()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def ctrl_c(proc: subprocess.Popen) -> None:
    """What a terminal's Ctrl-C does: SIGINT to the foreground process group (the
    supervisor's; honcho starts each process in a session of its own)."""
    os.killpg(proc.pid, signal.SIGINT)


def test_ctrl_c_stops_every_process_cleanly_and_runall_exits_with_honchos_status(env, tmp_path):
    port, log = free_port(), tmp_path / "runall.log"
    runall = start_daemon(["runall", "--web", "--bind", f"127.0.0.1:{port}"], env, log)
    try:
        wait_until(lambda: answers(f"http://127.0.0.1:{port}/healthz"), timeout=60,
                   message="the web server")
        # Every daemon serving first: one still importing Django when the SIGTERM comes is
        # killed by it (rc=-15), which says nothing of how a running one stops (CI, load 4).
        wait_until(lambda: all(f"{name}: started" in log.read_text()
                               for name in ("scheduler", "dispatcher", "worker")), timeout=60,
                   message="every daemon to start")

        ctrl_c(runall)
        status = runall.wait(timeout=120)

        output = log.read_text()
        assert status == 130, output  # honcho start's status after SIGINT
        for name in ("scheduler", "dispatcher", "worker.1", "web"):
            assert f"{name} stopped (rc=0)" in output, output
    finally:
        stop(runall)


def test_a_second_ctrl_c_releases_the_in_flight_run_at_once(env, tmp_path):
    log = tmp_path / "runall.log"
    runall = start_daemon(["runall", "--concurrency", "1"], env, log)
    try:
        job = services.create_job("sleep", {"seconds": 120}, delay_s=0)
        wait_until(lambda: Run.objects.filter(job=job, state="running").exists(), timeout=60,
                   message="the run to start")

        ctrl_c(runall)
        wait_until(lambda: "worker: stop requested" in log.read_text(), timeout=60)
        ctrl_c(runall)
        runall.wait(timeout=120)

        run = Run.objects.get(job=job)
        assert (run.state, [a.outcome for a in run.attempts.all()]) == (
            "queued", ["released"]), log.read_text()
        assert "worker.1 stopped (rc=0)" in log.read_text()
    finally:
        stop(runall)


def test_the_procfile_under_honcho_stops_every_process_cleanly(env, tmp_path):
    port, log = free_port(), tmp_path / "honcho.log"
    bin_dir = str(Path(sys.executable).parent)  # the Procfile calls python and gunicorn
    env = {**env, "PATH": f"{bin_dir}{os.pathsep}{env['PATH']}", "PORT": str(port),
           "WEB_CONCURRENCY": "1", "WORKER_CONCURRENCY": "1"}
    with open(log, "wb") as out:
        honcho = subprocess.Popen([sys.executable, "-m", "honcho", "start"], cwd=ROOT, env=env,
                                  stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_until(lambda: answers(f"http://127.0.0.1:{port}/healthz"), timeout=60,
                   message="the web server")
        # Every daemon serving first: one still importing Django when the SIGTERM comes is
        # killed by it (rc=-15), which says nothing of how a running one stops (CI, load 4).
        wait_until(lambda: all(f"{name}: started" in log.read_text()
                               for name in ("scheduler", "dispatcher", "worker")), timeout=60,
                   message="every daemon to start")

        ctrl_c(honcho)
        honcho.wait(timeout=120)

        output = log.read_text()
        for name in ("web", "scheduler", "dispatcher", "worker"):
            assert f"{name}.1 stopped (rc=0)" in output, output
    finally:
        stop(honcho)
