"""The pg-failover scenario: PostgreSQL's primary stopped mid-load and its streaming
replica promoted, the daemons finding the new primary through libpq's host list
(docs/reliability.md, "Scenarios"; docs/scaling.md, "Failover").

The scenario brings its own database: a primary with one synchronous replica
(chaos/pg_pair.py) on free loopback ports, migrated, and the harness's ``default``
database and every daemon's DATABASE_URL switched to
``postgres://...@primary,replica/scheduler?target_session_attrs=read-write``. The
database the command was started with is not touched.
"""

import time
from contextlib import contextmanager
from pathlib import Path

from django.core.management import call_command
from django.db import connections

from chaos.pg_pair import PgPair
from chaos.session import Scenario, Session, Size

# Seconds between the primary's death and the promotion: what a failover manager
# (Patroni, repmgr) takes to decide the primary is gone; the processes see no database
# that accepts writes meanwhile.
DETECT_S = 3.0


class PgFailover(Scenario):
    """At 1/3 of the window the primary is stopped as by a crash (``pg_ctl -m
    immediate``); DETECT_S later the replica is promoted. Replication is synchronous, so
    every commit the processes were told of is on the replica. The daemons must not exit
    and must reconnect to the new primary by themselves; every invariant holds."""

    name = "pg-failover"
    short = Size(one_off=270, cron=30, duration_s=15)
    long = Size(one_off=6_000, cron=300, duration_s=150, workers=4, concurrency=3)

    def __init__(self):
        self.pair: PgPair | None = None

    @contextmanager
    def database(self, workdir: Path, out):
        from scheduler_project.settings import database_config

        pair = PgPair(workdir, replicas=1).start()
        connection = connections["default"]
        saved = dict(connection.settings_dict)
        try:
            pair.make_synchronous()
            connection.close()
            connection.settings_dict.update(database_config(pair.multi_host_url(), pooler=""))
            out(f"pg-failover: primary 127.0.0.1:{pair.primary.port}, synchronous replica "
                f"127.0.0.1:{pair.replicas[0].port}; migrating")
            call_command("migrate", verbosity=0)
            self.pair = pair
            yield
        finally:
            connections.close_all()
            connection.settings_dict.clear()
            connection.settings_dict.update(saved)
            pair.close()

    def inject(self, s: Session) -> None:
        primary, replica = self.pair.primary, self.pair.replicas[0]
        s.tick(s.size.duration_s / 3)
        outage = s.fault("stop (immediate) + promote replica",
                         f"postgresql primary 127.0.0.1:{primary.port}")
        primary.stop("immediate")
        s.tick(DETECT_S)
        began = time.monotonic()
        replica.promote()
        outage.ended_at = time.time()
        s.extra["promote_s"] = round(time.monotonic() - began, 2)
        s.say(f"replica 127.0.0.1:{replica.port} promoted in {s.extra['promote_s']} s")
        s.until_deadline()

    def verify(self, s: Session) -> None:
        """The harness and the daemons ended up on the promoted replica."""
        replica = self.pair.replicas[0]
        with connections["default"].cursor() as cursor:
            cursor.execute("SELECT inet_server_port(), pg_is_in_recovery(), pg_backend_pid()")
            port, in_recovery, own_pid = cursor.fetchone()
        if port != replica.port or in_recovery:
            s.result.failures.append(f"the harness is on port {port} (recovery "
                                     f"{in_recovery}), not the promoted {replica.port}")
        with replica.connect() as conn:
            clients = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND backend_type = 'client backend' AND pid NOT IN (pg_backend_pid(), %s)",
                [own_pid]).fetchone()[0]
        s.result.figures.update({"detect_s": DETECT_S, "promote_s": s.extra.get("promote_s"),
                                 "connections_on_new_primary": clients})
        if not clients:
            s.result.failures.append("no daemon is connected to the promoted replica")
