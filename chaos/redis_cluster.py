"""A throwaway Redis Cluster on free loopback ports, for the tests and the fault scenarios
(docs/testing.md, docs/reliability.md): ``masters`` redis-server processes in cluster mode,
each with ``replicas`` replicas, joined by ``redis-cli --cluster create``, without
persistence, in a folder of their own.

Run as a script it starts one, prints its URL (``redis+cluster://127.0.0.1:<port>/``,
docs/deploy.md, "Environment") on stdout and its folder on the second line, and stays in the
foreground until it gets SIGTERM or SIGINT, when it stops every node (scripts/test).
"""

import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NODE_TIMEOUT_MS = 2000  # a master unreachable this long is failed over to its replica


class RedisClusterError(Exception):
    """The cluster could not be started (the message says which step failed)."""


def _free_port() -> int:
    """A port free a moment ago whose cluster bus port (+10,000) was free too; below
    55,536, as redis-server requires in cluster mode."""
    while True:
        port = random.randrange(20000, 45000)
        try:
            for candidate in (port, port + 10000):
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", candidate))
        except OSError:
            continue
        return port


def _cli(port: int, *args: str, timeout: float = 30) -> str:
    out = subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True,
                         text=True, timeout=timeout)
    return out.stdout + out.stderr


class RedisCluster:
    """``start()`` the nodes, read ``url``, ``stop()`` them. ``nodes`` maps each port to
    its redis-server process; ``masters()`` asks the cluster which ports serve slots."""

    def __init__(self, masters: int = 3, replicas: int = 1, workdir: Path | None = None):
        for tool in ("redis-server", "redis-cli"):
            if shutil.which(tool) is None:
                raise RedisClusterError(f"{tool} is not installed (apt-get install redis-server)")
        self.masters_wanted = masters
        self.replicas = replicas
        self.own_dir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="redis-cluster-"))
        self.nodes: dict[int, subprocess.Popen] = {}

    @property
    def url(self) -> str:
        """The broker URL of this cluster (any node serves as the seed)."""
        return f"redis+cluster://127.0.0.1:{next(iter(self.nodes))}/"

    def start_node(self, port: int) -> None:
        """Start (or restart, empty) the node on ``port``: no RDB, no AOF."""
        folder = self.workdir / str(port)
        folder.mkdir(parents=True, exist_ok=True)
        self.nodes[port] = subprocess.Popen(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1",
             "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
             "--cluster-node-timeout", str(NODE_TIMEOUT_MS), "--save", "",
             "--appendonly", "no", "--dir", str(folder), "--logfile", "redis.log"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(100):
            if _cli(port, "ping").strip() == "PONG":
                return
            time.sleep(0.05)
        raise RedisClusterError(f"redis-server on port {port} did not answer PING")

    def start(self) -> "RedisCluster":
        """Start the nodes and create the cluster; waits until every node reports
        ``cluster_state:ok``. Raises RedisClusterError (nodes stopped) on a failure."""
        try:
            for _ in range(self.masters_wanted * (1 + self.replicas)):
                self.start_node(_free_port())
            out = _cli(next(iter(self.nodes)), "--cluster", "create",
                       *[f"127.0.0.1:{p}" for p in self.nodes],
                       "--cluster-replicas", str(self.replicas), "--cluster-yes", timeout=60)
            if "[OK] All 16384 slots covered" not in out:
                raise RedisClusterError(f"redis-cli --cluster create failed:\n{out}")
            self.wait_ok()
        except BaseException:
            self.stop()
            raise
        return self

    def wait_ok(self, timeout: float = 30) -> None:
        """Wait until every running node says ``cluster_state:ok`` and knows every node."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.cluster_ok():
                return
            time.sleep(0.1)
        raise RedisClusterError(f"the cluster did not reach cluster_state:ok in {timeout} s")

    def wait_synced(self, timeout: float = 30) -> None:
        """Wait until every running replica's link to its master is up. A replica still
        in its first sync (diskless, ``repl-diskless-sync-delay`` 5 s after it asks) is
        never promoted: its master's death leaves the master's slots unserved."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            infos = [_cli(p, "info", "replication") for p, proc in self.nodes.items()
                     if proc.poll() is None]
            if all("master_link_status:up" in info for info in infos if "role:slave" in info):
                return
            time.sleep(0.1)
        raise RedisClusterError(f"the replicas were not in sync after {timeout} s")

    def cluster_ok(self) -> bool:
        """Whether every running node says ``cluster_state:ok``."""
        live = [p for p, proc in self.nodes.items() if proc.poll() is None]
        return all("cluster_state:ok" in _cli(p, "cluster", "info") for p in live)

    def masters(self) -> list[int]:
        """Ports of the nodes serving slots now, as a live node sees it."""
        for port, proc in self.nodes.items():
            if proc.poll() is None:
                lines = _cli(port, "cluster", "nodes").splitlines()
                return sorted(int(line.split()[1].split(":")[1].split("@")[0])
                              for line in lines
                              if "master" in line.split()[2] and "fail" not in line.split()[2]
                              and len(line.split()) > 8)
        return []

    def stop(self) -> None:
        """Stop every node and, if this object made it, remove the folder."""
        for proc in self.nodes.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.nodes.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self.own_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)


def main() -> None:
    """Start a cluster in the folder named by argv[1] (optional), print its URL, and stop
    it on SIGTERM/SIGINT."""
    cluster = RedisCluster(workdir=Path(sys.argv[1]) if len(sys.argv) > 1 else None)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        cluster.start()
        print(cluster.url, flush=True)
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
