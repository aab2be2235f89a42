"""The scenarios that take a service away under load (docs/reliability.md, "Scenarios"):
Redis losing its data or stopping, and a PostgreSQL restart."""

import os
import shlex
import subprocess
import time
from pathlib import Path

from django.db import connections

from chaos.session import Scenario, Session, Size


class RedisLoss(Scenario):
    """FLUSHALL mid-load; later stop redis-server, keep it down a few seconds, start it
    again empty. The dispatcher rebuilds the broker from the database."""

    name = "redis-loss"
    short = Size(one_off=350, cron=40, duration_s=14)
    long = Size(one_off=15_000, cron=500, duration_s=150, workers=4, concurrency=3)

    def inject(self, s: Session) -> None:
        window = s.size.duration_s
        s.tick(window / 3)
        s.fault("FLUSHALL", "redis")
        s.cluster.redis.client().flushall()
        s.tick(window / 3)
        outage = s.fault("stop+restart", "redis")
        s.cluster.redis.stop()
        s.tick(3)
        s.cluster.redis.start()
        outage.ended_at = time.time()
        s.until_deadline()


class PostgresRestart(Scenario):
    """Restart the PostgreSQL cluster mid-load (twice in the long version). Daemons must
    reconnect without exiting; the harness's own queries retry through the restart."""

    name = "postgres-restart"
    short = Size(one_off=270, cron=30, duration_s=12)
    long = Size(one_off=6_000, cron=300, duration_s=150, workers=4, concurrency=3)

    def inject(self, s: Session) -> None:
        restarts = 1 if s.size.duration_s < 60 else 2
        for _ in range(restarts):
            s.tick(s.size.duration_s / (restarts + 1))
            outage = s.fault("restart", "postgresql")
            restart_postgres()
            outage.ended_at = time.time()
            connections.close_all()
        s.until_deadline()


def restart_postgres(timeout: float = 120) -> None:
    """Restart the test database's server: the command in TEST_POSTGRES_RESTART (a shell
    word list; scripts/test sets it to its throwaway server's ``pg_ctl restart``), else
    ``pg_ctlcluster <version> main restart`` for the newest cluster in /etc/postgresql.
    Raises subprocess.CalledProcessError or TimeoutExpired if the restart fails."""
    command = os.environ.get("TEST_POSTGRES_RESTART")
    if command:
        argv = shlex.split(command)
    else:
        versions = sorted(p.name for p in Path("/etc/postgresql").iterdir())
        argv = ["pg_ctlcluster", "--skip-systemctl-redirect", versions[-1], "main", "restart"]
    subprocess.run(argv, check=True, timeout=timeout, capture_output=True)
