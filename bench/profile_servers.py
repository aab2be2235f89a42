"""A private PostgreSQL and Redis for bench/profile_runs.py, on free loopback ports, so
that pg_stat_statements (which needs shared_preload_libraries, hence a server of its own),
the PostgreSQL and Redis CPU and Redis' INFO commandstats count this benchmark's work
only, not that of others sharing the machine's servers.

The PostgreSQL server mirrors the shared one's settings that bear on cost (fsync and
synchronous_commit on, 128 MB shared_buffers, autovacuum off); as root it runs as the
``postgres`` OS user (chaos/pg_pair.py's binaries and runuser prefix).
"""

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import common

from chaos.cluster import free_port
from chaos.pg_pair import _as_pg, pg_bindir

PG_SETTINGS = {"shared_preload_libraries": "pg_stat_statements", "fsync": "on",
               "synchronous_commit": "on", "shared_buffers": "128MB", "autovacuum": "off",
               "max_connections": "100", "pg_stat_statements.track": "top",
               "listen_addresses": "127.0.0.1", "unix_socket_directories": "''"}


class PrivateServers:
    """Start with start(), stop with close(); ``pg_port`` and ``redis_port`` then name
    them. Raises subprocess.CalledProcessError when initdb or pg_ctl fails."""

    def __init__(self):
        self.workdir = Path(tempfile.mkdtemp(prefix="bench-profile-"))
        self.workdir.chmod(0o777)
        self.pg_port = free_port()
        self.redis_port = free_port()
        self.redis = None

    def _pg(self, tool: str, *args: str) -> None:
        subprocess.run([*_as_pg(), str(pg_bindir() / tool), *args], check=True,
                       capture_output=True)

    def start(self) -> "PrivateServers":
        """initdb and start PostgreSQL, start Redis; returns self. Raises
        subprocess.CalledProcessError when initdb or pg_ctl fails."""
        data = self.workdir / "pg"
        self._pg("initdb", "-D", str(data), "-U", "postgres", "-A", "trust")
        options = " ".join(f"-c {k}={v}" for k, v in PG_SETTINGS.items())
        self._pg("pg_ctl", "-D", str(data), "-l", str(self.workdir / "pg.log"), "-w",
                 "-t", "60", "-o", f"-p {self.pg_port} {options}", "start")
        self.redis = common.spawn(["redis-server", "--port", str(self.redis_port),
                                   "--bind", "127.0.0.1", "--save", "", "--appendonly",
                                   "no"], log_path=self.workdir / "redis.log")
        common.wait_until(lambda: _redis_up(self.redis_port), 10, 0.05)
        return self

    def close(self) -> None:
        """Stop both servers and delete their folder."""
        if self.redis is not None:
            common.stop(self.redis)
        subprocess.run([*_as_pg(), str(pg_bindir() / "pg_ctl"), "-D",
                        str(self.workdir / "pg"), "-m", "fast", "-w", "stop"],
                       capture_output=True)
        time.sleep(0.2)
        shutil.rmtree(self.workdir, ignore_errors=True)


def _redis_up(port: int) -> bool:
    try:
        client = common.Redis(0, port=port, timeout_s=1.0)
    except OSError:
        return False
    try:
        return client.execute("PING") in (b"PONG", "PONG")
    finally:
        client.close()
