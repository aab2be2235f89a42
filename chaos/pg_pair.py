"""A throwaway PostgreSQL primary with streaming replicas of its own, on free loopback
ports: for the read-replica tests (tests/test_read_replica.py) and the pg-failover fault
scenario (chaos/pg_failover.py). docs/scaling.md, "Read replicas", and
docs/reliability.md, "Scenarios", say what they show.

The primary is made with ``initdb`` (wal_level=replica, fsync off: durability is no
concern here), each replica with ``pg_basebackup -R`` from it, so it streams from the
primary as a production hot standby does. The binaries are found as scripts/test finds
them (PG_BINDIR, else the newest /usr/lib/postgresql/*/bin); as root they run as the
``postgres`` OS user (PG_OS_USER) through runuser(1), since PostgreSQL refuses root.
"""

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from glob import glob
from pathlib import Path

import psycopg

from chaos.cluster import ClusterError, free_port

DATABASE = "scheduler"


def pg_bindir() -> Path:
    """The directory of initdb, pg_ctl and pg_basebackup: PG_BINDIR, else the newest
    /usr/lib/postgresql/<version>/bin. Raises ClusterError when there is none."""
    if os.environ.get("PG_BINDIR"):
        candidates = [os.environ["PG_BINDIR"]]
    else:
        candidates = sorted(glob("/usr/lib/postgresql/*/bin"),
                            key=lambda p: int(Path(p).parent.name), reverse=True)
    for path in candidates:
        if os.access(Path(path) / "initdb", os.X_OK):
            return Path(path)
    raise ClusterError("no PostgreSQL server binaries (apt-get install postgresql, or set "
                       "PG_BINDIR)")


def _as_pg() -> list[str]:
    """The argv prefix that runs a PostgreSQL binary: runuser as PG_OS_USER when root."""
    return ["runuser", "-u", os.environ.get("PG_OS_USER", "postgres"), "--"] \
        if os.geteuid() == 0 else []


class PgServer:
    """One server of the pair: its data directory, port and log."""

    def __init__(self, pair: "PgPair", name: str):
        self.pair = pair
        self.name = name
        self.data = pair.workdir / name
        self.port = free_port()
        self.log = pair.workdir / f"{name}.log"

    @property
    def url(self) -> str:
        """This server's own URL for the test database (postgres://...)."""
        return f"postgres://postgres@127.0.0.1:{self.port}/{DATABASE}"

    def connect(self, dbname: str = DATABASE, **kwargs) -> psycopg.Connection:
        """An autocommit psycopg connection to this server."""
        return psycopg.connect(host="127.0.0.1", port=self.port, user="postgres",
                               dbname=dbname, autocommit=True, connect_timeout=5, **kwargs)

    def start(self) -> None:
        """Start the server and wait until it accepts connections (CalledProcessError)."""
        options = (f"-p {self.port} -c listen_addresses=127.0.0.1 "
                   f"-c unix_socket_directories={self.pair.workdir} -c fsync=off "
                   "-c wal_level=replica -c max_wal_senders=10 "
                   "-c hot_standby=on -c max_connections=200 -c wal_keep_size=256MB")
        self.pair.run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60",
                      "-o", options, "start")

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``mode``: fast or immediate); nothing if it is not running."""
        if (self.data / "postmaster.pid").exists():
            self.pair.run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60",
                          "stop", check=False)

    def promote(self) -> None:
        """Promote this replica to a primary and wait until it accepts writes."""
        self.pair.run("pg_ctl", "-D", str(self.data), "-w", "-t", "60", "promote")

    def in_recovery(self) -> bool:
        """True while this server is a standby."""
        with self.connect("postgres") as conn:
            return conn.execute("SELECT pg_is_in_recovery()").fetchone()[0]


class PgPair:
    """A primary and ``replicas`` streaming replicas in ``workdir`` (a new temporary
    folder when None), each on a free port, with the database ``scheduler`` made on the
    primary. ``start()`` returns self; ``close()`` stops every server and removes the
    folder it made. Raises ClusterError when the binaries or the runuser user are missing,
    subprocess.CalledProcessError when a step fails (its log is in the folder)."""

    def __init__(self, workdir: Path | None = None, replicas: int = 1):
        self.bindir = pg_bindir()
        self.own_workdir = workdir is None
        base = Path(workdir or tempfile.mkdtemp(prefix="pg-pair-"))
        self.workdir = base / "pg" if not self.own_workdir else base
        self.workdir.mkdir(parents=True, exist_ok=True)
        # The postgres user must reach its folders: mkdtemp makes them 0700 for root.
        for folder in {base, self.workdir}:
            os.chmod(folder, 0o755)
        if os.geteuid() == 0:
            user = pwd.getpwnam(os.environ.get("PG_OS_USER", "postgres"))
            os.chown(self.workdir, user.pw_uid, user.pw_gid)
        self.primary = PgServer(self, "primary")
        self.replicas = [PgServer(self, f"replica{i + 1}") for i in range(replicas)]

    def run(self, tool: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        """Run PostgreSQL's ``tool`` with ``args`` as the PostgreSQL OS user."""
        return subprocess.run([*_as_pg(), str(self.bindir / tool), *args], check=check,
                              capture_output=True, text=True, timeout=180)

    def start(self) -> "PgPair":
        try:
            self.run("initdb", "-D", str(self.primary.data), "-U", "postgres", "-A", "trust",
                     "-E", "UTF8", "--locale=C", "--no-sync")
            self.primary.start()
            with self.primary.connect("postgres") as conn:
                conn.execute(f"CREATE DATABASE {DATABASE}")
            for replica in self.replicas:
                self.run("pg_basebackup", "-h", "127.0.0.1", "-p", str(self.primary.port),
                         "-U", "postgres", "-D", str(replica.data), "-R", "-X", "stream",
                         "-c", "fast", "--no-sync")
                replica.start()
            self.wait_streaming()
        except subprocess.CalledProcessError as exc:
            raise ClusterError(f"{exc.cmd[-1]} failed: {exc.stderr.strip()[-500:]} "
                               f"(logs in {self.workdir})") from exc
        return self

    def wait_streaming(self, timeout: float = 30) -> None:
        """Wait until the primary has a streaming WAL sender for every replica."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.primary.connect("postgres") as conn:
                streaming = conn.execute(
                    "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'"
                ).fetchone()[0]
            if streaming >= len(self.replicas):
                return
            time.sleep(0.1)
        raise ClusterError(f"replicas not streaming after {timeout} s (logs in {self.workdir})")

    def make_synchronous(self) -> None:
        """Make every replica synchronous (``synchronous_standby_names = '*'`` on the
        primary only): a commit returns once a replica has it, so a failover loses
        nothing committed. A promoted replica has no such setting, so it does not wait
        for a standby it lacks."""
        with self.primary.connect("postgres") as conn:
            conn.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
            conn.execute("SELECT pg_reload_conf()")

    def multi_host_url(self, servers: list[PgServer] | None = None) -> str:
        """A libpq multi-host URL naming ``servers`` (default: primary, then replicas),
        with target_session_attrs=read-write: a client connects to whichever is the
        primary (docs/scaling.md, "Failover")."""
        servers = servers or [self.primary, *self.replicas]
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in servers)
        return f"postgres://postgres@{hosts}/{DATABASE}?target_session_attrs=read-write"

    def close(self) -> None:
        """Stop every server (immediate: nothing of it is kept) and remove its folder."""
        for server in [*self.replicas, self.primary]:
            try:
                server.stop("immediate")
            except (OSError, subprocess.SubprocessError):
                pass
        shutil.rmtree(self.workdir, ignore_errors=True)
