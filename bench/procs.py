"""Subprocesses of a bench run: every one in its own process group, all killed when the
run exits (bench/common.py re-exports these for the adapters, ours and the peers'). Stdlib
only, as bench/common.py."""

import atexit
import os
import signal
import subprocess
import sys

_GROUPS = []
_COMPILED = []
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def compile_sources():
    """Byte-compile this checkout's Python files (the bench's peer adapters included, the
    virtualenvs not), once per process. pip compiles a package it installs, so a peer's
    modules start from .pyc files; ours is installed editable, and where
    PYTHONDONTWRITEBYTECODE is set (as on this machine) every daemon compiled its ~180
    modules from source at each start, 0.16 s of a worker's (BENCHMARKS.md, "Rules")."""
    if _COMPILED:
        return
    import compileall
    import re

    compileall.compile_dir(ROOT, quiet=1, rx=re.compile(r"/(\.venv|\.venvs|\.git|node_modules)/"))
    _COMPILED.append(True)


def spawn(cmd, env=None, cwd=None, log_path=None):
    """Start cmd in a new session (its own process group) and remember it for kill_all().

    Output goes to log_path (appended) or is discarded. Returns the Popen.
    """
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL
    parent = os.getpid()
    proc = subprocess.Popen(
        cmd, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        preexec_fn=lambda: _die_with_parent(parent),
    )
    _GROUPS.append(proc)
    return proc


def _die_with_parent(parent):
    # Our own session escapes a SIGKILL sent to the adapter's process group (bench/run.py's
    # timeout): ask Linux to SIGTERM the leader when the adapter dies, so the peer's own
    # warm shutdown takes its children down.
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the adapter died before prctl took effect
        os._exit(1)


def stop(proc, grace_s=10.0):
    """SIGTERM proc's process group, wait up to grace_s seconds, then SIGKILL it."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
    # Children (prefork pool, forked workers) may outlive the leader: kill the group anyway.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    if proc in _GROUPS:
        _GROUPS.remove(proc)


def kill_all():
    """Stop every process group started by spawn() that is still registered."""
    for proc in list(_GROUPS):
        stop(proc, grace_s=3.0)


def _on_signal(signum, frame):
    kill_all()
    sys.exit(128 + signum)


atexit.register(kill_all)


def install_signal_handlers():
    """Make SIGTERM/SIGINT/SIGHUP kill our process groups before exiting."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _on_signal)
