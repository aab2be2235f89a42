"""``manage.py runall``: scheduler, dispatcher and worker (and with --web, the web server)
as one process tree, for development and the README's first command.

The supervision is honcho's (``honcho.manager.Manager``, what ``honcho start`` runs on the
Procfile): every process in its own session with its output prefixed by its name; Ctrl-C
or SIGTERM sends SIGTERM to each process group; when one process exits, the others are
stopped; runall exits with honcho's status. What runall adds (docs/architecture.md,
"Daemons"): the commands, a stop window as long as a worker's grace instead of honcho's
5 s, and a second Ctrl-C passed on as a second SIGTERM, the daemons' "force".
"""

import errno
import shlex
import signal
import socket
import sys

import honcho.manager
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError

from runs.worker.main import DEFAULT_CONCURRENCY, default_concurrency
from scheduler_core import conf
from scheduler_core.startup import refuse_insecure_start

# Beyond the worker's grace: its release of unfinished runs and the children's exit.
STOP_MARGIN_S = 10.0


class Supervisor(honcho.manager.Manager):
    """honcho's Manager, where a second SIGINT/SIGTERM is passed on to the processes still
    running as a second SIGTERM (daemons: stop at once; docs/architecture.md, "Daemons")
    instead of being ignored until honcho's kill timeout."""

    def _start(self):
        # loop() installs its signal handlers just before calling _start; wrap them.
        honcho_handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        signals_seen = []

        def on_signal(signum, frame):
            signals_seen.append(signum)
            if len(signals_seen) == 1:
                honcho_handlers[signum](signum, frame)
            else:
                self._system_print("second signal: stopping at once\n")
                self._killall()

        for sig in honcho_handlers:
            signal.signal(sig, on_signal)
        super()._start()


def wsgi_app() -> str:
    """settings.WSGI_APPLICATION ("pkg.wsgi.application") as gunicorn's "pkg.wsgi:application":
    the project's own, which is this checkout's scheduler_project.wsgi only in this
    checkout (docs/own-project.md, "Daemons"). Raises ImproperlyConfigured when the setting
    is missing or not a dotted path."""
    path = getattr(settings, "WSGI_APPLICATION", None) or ""
    module, _, name = path.rpartition(".")
    if not module:
        raise ImproperlyConfigured(
            f"runall --web serves settings.WSGI_APPLICATION, a dotted path such as "
            f"'mysite.wsgi.application'; it is {path!r}")
    return f"{module}:{name}"


def commands(*, web: bool, bind: str, workers: int, concurrency: int, queues: str
             ) -> dict[str, list[str]]:
    """The processes runall starts, name -> argv: the Procfile's, with this interpreter."""
    manage = [sys.executable, str(settings.BASE_DIR / "manage.py")]
    found = {"scheduler": manage + ["runscheduler"], "dispatcher": manage + ["rundispatcher"]}
    for i in range(workers):
        found[f"worker.{i + 1}"] = manage + [
            "runworker", "--queues", queues, "--concurrency", str(concurrency)]
    if web:
        # gunicorn, as in the Procfile: it stops cleanly on SIGTERM (runserver dies of it).
        # No control socket: its default path is per user, so two runalls would share it.
        found["web"] = [sys.executable, "-m", "gunicorn", wsgi_app(),
                        "--bind", bind, "--workers", "2", "--access-logfile", "-",
                        "--no-control-socket"]
    return found


def address_taken(bind: str) -> bool:
    """Whether another process listens on ``bind`` ("host:port", "[v6]:port"; a "unix:"
    path or anything else is not checked: False). Bound as gunicorn binds (SO_REUSEADDR),
    so a closed connection's TIME_WAIT does not count as taken."""
    host, sep, port = bind.rpartition(":")
    if not sep or not port.isdigit() or host.startswith("unix"):
        return False
    host = host.strip("[]") or "0.0.0.0"
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, int(port)))
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False


class Command(BaseCommand):
    help = "Run scheduler, dispatcher and workers (and --web) as one process tree."

    def add_arguments(self, parser):
        parser.add_argument("--web", action="store_true", help="also serve the API and admin")
        parser.add_argument("--bind", default="127.0.0.1:8000", help="address for --web")
        parser.add_argument("--workers", type=int, default=1, help="worker processes")
        parser.add_argument(
            "--concurrency", type=int, default=None,
            help="child processes per worker (default: runworker's, the environment's "
                 f"WORKER_CONCURRENCY, else {DEFAULT_CONCURRENCY})")
        parser.add_argument("--queues", default="default")

    def handle(self, *args, web, bind, workers, concurrency, queues, **options):
        if concurrency is None:
            try:
                concurrency = default_concurrency()
            except ValueError as exc:
                raise CommandError(str(exc)) from exc
        if workers < 1 or concurrency < 1:
            raise CommandError("--workers and --concurrency must be at least 1")
        # Before any child starts: one message instead of each child failing in a loop.
        refuse_insecure_start("runall", web=web)
        if web and address_taken(bind):
            # gunicorn's own "Address already in use" scrolls by among the daemons' lines,
            # and then every process stops.
            raise CommandError(f"{bind} is in use by another process: give runall "
                               f"--bind HOST:PORT (scripts/demo: BIND=HOST:PORT)")
        # honcho kills what still runs this long after the first stop; its default, 5 s,
        # would cut a worker's grace for in-flight runs short.
        honcho.manager.KILL_WAIT = conf.get("WORKER_GRACE_S") + STOP_MARGIN_S
        supervisor = Supervisor()
        for name, argv in commands(web=web, bind=bind, workers=workers,
                                   concurrency=concurrency, queues=queues).items():
            # exec: the shell honcho starts becomes the process, so SIGTERM reaches it and
            # its exit status is its own (not the shell's -15).
            supervisor.add_process(name, "exec " + shlex.join(argv))
        if web:
            self.stdout.write(f"runall: API at http://{bind}/api/jobs/ , admin at "
                              f"http://{bind}/admin/ ; Ctrl-C stops everything")
        self.stdout.flush()
        supervisor.loop()
        status = supervisor.returncode or 0
        # A process killed by signal N reports -N; a shell's status for that is 128 + N.
        sys.exit(128 - status if status < 0 else status)
