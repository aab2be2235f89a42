"""scripts/test, the README's second command (docs/testing.md): the system tools it checks
first, its throwaway servers removed at the end (also on Ctrl-C), and the browser tests
skipped with their reason when chromium is missing. Each test runs the real script or a
real pytest in a subprocess."""

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

SCRIPT = ROOT / "scripts" / "test"
# A quick test that needs the run's PostgreSQL and Redis.
PROBE = ["tests/test_broker_contract.py", "-k", "redis and heartbeat_extends", "-q"]
# A test of several seconds (the last -m wins over --quick's, without asking for the full
# run's chromium and libfaketime); -v names it as it starts.
LONG_PROBE = ["--quick", "tests/test_redis_loss.py", "-m", "slow", "-v"]


def fresh_env(**extra) -> dict:
    """This process's environment without the test servers it was given, as on a fresh
    machine, plus ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("TEST_DATABASE_URL", "TEST_REDIS_URL", "TEST_REDIS_CLUSTER_URL",
                        "SCHEDULER_REDIS_PREFIX")}
    env.update(extra)
    return env


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def servers_of(output: str) -> tuple[list[int], Path]:
    """The loopback ports of the servers a run said it started (PostgreSQL, Redis, the
    Redis Cluster's seed node), and their folder."""
    ports = [int(p) for p in re.findall(r" on 127\.0\.0\.1:(\d+)$", output, re.MULTILINE)]
    assert len(ports) == 2, output
    ports += [int(p) for p in re.findall(r" at redis\+cluster://127\.0\.0\.1:(\d+)/$", output,
                                         re.MULTILINE)]
    assert len(ports) == 3, output
    return ports, Path(re.search(r"data and logs in (\S+) ", output)[1])


def test_each_missing_tool_is_named_with_its_packages_and_nothing_starts():
    env = fresh_env(CHROMIUM="/nonexistent/chromium", FAKETIME_LIB="/nonexistent/libfaketime.so",
                    PG_BINDIR="/nonexistent/bin")
    proc = subprocess.run([SCRIPT], env=env, capture_output=True, text=True, timeout=60)

    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stderr.splitlines()
    for what, apt, brew in [("PostgreSQL server", "postgresql", "postgresql@17"),
                            ("chromium", "chromium", "--cask chromium"),
                            ("libfaketime", "faketime", "libfaketime")]:
        [line] = [line for line in lines if line.strip().startswith(what)]
        assert f"apt-get install {apt} " in line and line.endswith(f"brew install {brew}"), line
    assert "PostgreSQL 1" not in proc.stderr and "===" not in proc.stdout


def test_the_quick_run_needs_neither_chromium_nor_faketime():
    env = fresh_env(CHROMIUM="/nonexistent/chromium", FAKETIME_LIB="/nonexistent/lib.so",
                    PG_BINDIR="/nonexistent/bin")
    proc = subprocess.run([SCRIPT, "--quick"], env=env, capture_output=True, text=True,
                          timeout=60)

    assert proc.returncode == 1
    assert "PostgreSQL server" in proc.stderr
    assert "chromium" not in proc.stderr and "faketime" not in proc.stderr


def test_a_given_database_needs_no_postgresql_binaries():
    env = fresh_env(TEST_DATABASE_URL="postgres://postgres@127.0.0.1:1/none",
                    PG_BINDIR="/nonexistent/bin", CHROMIUM="/nonexistent/chromium")
    proc = subprocess.run([SCRIPT], env=env, capture_output=True, text=True, timeout=60)

    assert proc.returncode == 1  # for chromium
    assert "chromium" in proc.stderr and "PostgreSQL server" not in proc.stderr


def test_browser_tests_are_skipped_with_the_reason_when_chromium_is_missing():
    env = fresh_env(CHROMIUM="/nonexistent/chromium",
                    # Were a browser test to run, it would need a database: none here.
                    TEST_DATABASE_URL="postgres://postgres@127.0.0.1:1/none")
    proc = subprocess.run([sys.executable, "-m", "pytest", "tests/e2e", "-p", "no:cacheprovider",
                           "-rs"], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=120)

    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = proc.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"=+ \d+ skipped in .*", summary), summary
    assert "/nonexistent/chromium is missing: apt-get install chromium" in proc.stdout


@pytest.mark.slow
def test_a_run_starts_its_own_servers_and_leaves_none_behind(tmp_path):
    said = tmp_path / "tmpdir"
    proc = subprocess.run([SCRIPT, "--quick", "-p", "tests.probe_tmpdir", *PROBE],
                          env=fresh_env(PROBE_TMPDIR_OUT=str(said)), cwd=ROOT,
                          capture_output=True, text=True, timeout=280)
    output = proc.stdout + proc.stderr

    assert proc.returncode == 0, output
    assert "2 passed" in output  # on the Redis the script started, and on its Redis Cluster
    ports, workdir = servers_of(output)
    assert not any(listening(port) for port in ports), output
    assert not workdir.exists()
    # The tests' temporary files (the fault scenarios' logs, say) were in that folder too.
    assert Path(said.read_text()).is_relative_to(workdir), output
    prefix = re.search(r"key prefix (\S+);", output)[1]
    assert not list(ROOT.glob(f"test-broker-{prefix}.sqlite3*"))


def interrupted_run(send) -> tuple[int, str]:
    """Start scripts/test on a test of several seconds, call ``send(proc)`` once pytest is
    inside that test, and return the script's exit status and output, after checking that
    its servers were running then and are gone now, with their folder."""
    # A terminal's Ctrl-C goes to the script's process group, whose members must not
    # inherit an ignored SIGINT.
    with subprocess.Popen([SCRIPT, *LONG_PROBE], env=fresh_env(), cwd=ROOT,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          start_new_session=True,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
                          ) as proc:
        output = ""
        while "test_flushall_mid_load_loses_no_run" not in output:
            chunk = os.read(proc.stdout.fileno(), 4096).decode()
            assert chunk, output
            output += chunk
        ports, workdir = servers_of(output)
        assert workdir.exists() and all(listening(port) for port in ports), output
        send(proc)
        output += proc.stdout.read().decode()
        proc.wait(120)

    assert "stopped and removed postgres redis redis_cluster" in output
    assert not any(listening(port) for port in ports), output
    assert not workdir.exists()
    return proc.returncode, output


@pytest.mark.slow
def test_ctrl_c_interrupts_pytest_then_removes_the_servers():
    status, output = interrupted_run(lambda proc: os.killpg(proc.pid, signal.SIGINT))

    assert status == 130, output
    assert "KeyboardInterrupt" in output and "1 passed" not in output


@pytest.mark.slow
def test_a_term_to_the_script_alone_interrupts_pytest_at_once():
    # bash runs traps between commands: were pytest in the foreground, the TERM would
    # wait until the test had passed.
    status, output = interrupted_run(lambda proc: proc.terminate())

    assert status == 143, output
    assert "KeyboardInterrupt" in output and "1 passed" not in output
