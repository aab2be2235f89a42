"""scripts/demo refuses to listen beyond the loopback without DEMO_ALLOW_REMOTE=1: it has
DEBUG on and the superuser demo/demo (docs/demo.md, "What it does")."""

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("bind", ["0.0.0.0:8126", "192.168.1.10:8000", "[::]:8000"])
def test_the_demo_refuses_a_non_loopback_bind_before_installing_anything(bind):
    env = {**os.environ, "BIND": bind}
    env.pop("DEMO_ALLOW_REMOTE", None)
    done = subprocess.run(["bash", "scripts/demo"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert f"refusing BIND={bind}" in done.stderr
    assert "DEMO_ALLOW_REMOTE=1" in done.stderr
    assert "migrating" not in done.stderr


def test_the_demo_refuses_a_taken_address_before_touching_the_database():
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        bind = f"127.0.0.1:{taken.getsockname()[1]}"
        env = {**os.environ, "BIND": bind}
        done = subprocess.run(["bash", "scripts/demo"], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert f"{bind} is in use by another process" in done.stderr
    assert "migrating" not in done.stderr
