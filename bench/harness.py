"""Running one adapter of the side-by-side benchmark: its virtualenv (made from its pinned
requirements.txt, PyPI only), the subprocess with a timeout, and its JSON result line
(the adapter contract is in bench/run.py's docstring)."""

import hashlib
import json
import os
import platform
import shlex
import signal
import subprocess
import time
from pathlib import Path

import common
import cpu_meter
import rows

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
VENVS = BENCH / ".venvs"


# --- virtualenvs -----------------------------------------------------------------------


def peer_python(peer: str) -> tuple[list[str], dict]:
    """The interpreter (argv prefix, extra env) a peer's venv is made with: its
    python.txt version through pyenv ("3.12.1"), else scripts/find-python's answer."""
    wanted = BENCH / "peers" / peer / "python.txt"
    if wanted.exists():
        version = wanted.read_text().strip()
        minor = ".".join(version.split(".")[:2])
        return [f"python{minor}"], {"PYENV_VERSION": version}
    path = subprocess.run([str(ROOT / "scripts" / "find-python")], capture_output=True,
                          text=True, check=True).stdout.strip()
    return [path], {}


def ensure_venv(peer: str, notes: list[str]) -> Path:
    """bench/.venvs/<venv>/bin/python for system ``peer`` (rows.venv_of: a system may share
    another's), created or brought to its requirements.txt's pins when the file's hash
    differs from the one stored in the venv. Never deletes a venv: pip moves it to the pins
    (a peer helper may be using it)."""
    peer = rows.venv_of(peer) or peer
    requirements = BENCH / "peers" / peer / "requirements.txt"
    venv = VENVS / peer
    python = venv / "bin" / "python"
    digest = hashlib.sha256(requirements.read_bytes()).hexdigest()
    stamp = venv / ".requirements.sha256"
    if python.exists() and stamp.exists() and stamp.read_text().strip() == digest:
        return python
    if not python.exists():
        argv, extra = peer_python(peer)
        common.log(f"[run] creating {venv} with {' '.join(argv)}")
        subprocess.run([*argv, "-m", "venv", str(venv)], check=True,
                       env={**os.environ, **extra})
    common.log(f"[run] installing {requirements} into {venv}")
    subprocess.run([str(python), "-m", "pip", "install", "-q", "-r", str(requirements)],
                   check=True)
    stamp.write_text(digest + "\n")
    notes.append(f"{peer}: virtualenv installed from requirements.txt ({digest[:12]})")
    return python


# --- running adapters ------------------------------------------------------------------


def last_json(stdout: str) -> dict | None:
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                return None
        if line:
            return None
    return None


def run_adapter(cmd: list[str], workload: str, timeout: float, log_path: Path) -> dict:
    """Run one adapter (its own process group, killed on timeout); returns its JSON
    result, or {"failed": why}."""
    common.log(f"[run] {shlex.join(cmd)}")
    began = time.monotonic()
    with open(log_path, "w") as err:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=err, text=True,
                                start_new_session=True)
        try:
            stdout, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _stop_group(proc)
            stdout, _ = proc.communicate()
            return {"workload": workload, "failed": f"timed out after {timeout:.0f} s",
                    "elapsed_s": round(time.monotonic() - began, 1), "log": str(log_path)}
        finally:
            _stop_group(proc)
    elapsed = round(time.monotonic() - began, 1)
    result = last_json(stdout)
    if result is None or proc.returncode:
        tail = log_path.read_text(errors="replace").strip().splitlines()[-3:]
        why = f"exit code {proc.returncode}" if proc.returncode else "no JSON result line"
        return {"workload": workload, "failed": f"{why}: {' | '.join(tail)[-400:]}",
                "elapsed_s": elapsed, "log": str(log_path)}
    result["elapsed_s"] = elapsed
    return result


def _stop_group(proc: subprocess.Popen, grace_s: float = 15.0) -> None:
    """SIGTERM the adapter's process group, give it up to ``grace_s`` seconds, then
    SIGKILL the group. The adapters start their workers in sessions of their own
    (common.spawn), which a signal to the adapter's group does not reach: only the
    adapter's SIGTERM handler (common.install_signal_handlers) stops them, so it must get
    the chance to run before the SIGKILL."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            common.log(f"[run] adapter {proc.pid} still running {grace_s:.0f} s after "
                       f"SIGTERM: SIGKILL")
    # Whatever is left in the adapter's own group (e.g. a psql child).
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


# --- facts about the machine -----------------------------------------------------------


def hardware() -> dict:
    """CPU model, cores, RAM, PostgreSQL, Redis and Python versions."""
    line = common.hardware()
    try:
        pg = common.pg_exec_sql("postgres", "SHOW server_version").split()[0]
    except (subprocess.CalledProcessError, OSError) as exc:
        pg = f"unknown ({exc})"
    try:
        client = common.Redis(0)
        info = client.execute("INFO", "server").decode()
        client.close()
        redis_version = next(x.split(":", 1)[1] for x in info.splitlines()
                             if x.startswith("redis_version:"))
    except (OSError, RuntimeError, StopIteration) as exc:
        redis_version = f"unknown ({exc})"
    cpu = line.split(",")[0]
    mem = next((p.strip() for p in line.split(",") if "GiB" in p), "")
    return {"cpu": cpu, "cores": os.cpu_count(), "ram": mem, "postgresql": pg,
            "redis": redis_version, "python": platform.python_version(),
            "os": f"{platform.system()} {platform.release()}", "line": line,
            "load_1m_at_start": round(os.getloadavg()[0], 2)}


def settle(idle_share: float = 0.85, window_s: float = 3.0, most_s: float = 120.0) -> dict:
    """Wait until the machine has been at least ``idle_share`` idle over a ``window_s``
    window (seconds), for at most ``most_s`` seconds, and return {"waited_s",
    "idle_share"} (the last window's). A workload's first pair ran in the tail of the one
    before: the first W3 chain, run just after the W2 drains, had a p99 two to three
    times the later chains' (BENCHMARKS.md, "Where we lose"). Off Linux it waits for
    nothing."""
    if not os.path.exists("/proc/stat"):
        return {"waited_s": 0.0, "idle_share": None}
    began = time.monotonic()
    while True:
        idle, total = cpu_meter.machine_idle()
        time.sleep(window_s)
        idle2, total2 = cpu_meter.machine_idle()
        share = (idle2 - idle) / max(total2 - total, 1)
        waited = time.monotonic() - began
        if share >= idle_share or waited >= most_s:
            return {"waited_s": round(waited, 1), "idle_share": round(share, 2)}
