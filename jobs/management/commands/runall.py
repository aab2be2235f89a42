"""``manage.py runall``: scheduler, dispatcher and worker (and with --web, the web server)
as one process tree, for development and the README's first command."""

import signal
import subprocess
import sys
import time

from django.conf import settings
from django.core.management.base import BaseCommand

from scheduler_project.startup import refuse_insecure_start

RESTART_DELAY_S = 1.0


class Command(BaseCommand):
    help = "Run scheduler, dispatcher and workers (and --web) as one process tree."

    def add_arguments(self, parser):
        parser.add_argument("--web", action="store_true", help="also serve the API and admin")
        parser.add_argument("--bind", default="127.0.0.1:8000", help="address for --web")
        parser.add_argument("--workers", type=int, default=1, help="worker processes")
        parser.add_argument("--concurrency", type=int, default=4,
                            help="child processes per worker")
        parser.add_argument("--queues", default="default")

    def handle(self, *args, web, bind, workers, concurrency, queues, **options):
        # Before any child starts: one message instead of each child failing in a loop.
        refuse_insecure_start("runall", web=web)
        manage = [sys.executable, str(settings.BASE_DIR / "manage.py")]
        commands = {
            "scheduler": manage + ["runscheduler"],
            "dispatcher": manage + ["rundispatcher"],
        }
        for i in range(workers):
            commands[f"worker.{i + 1}"] = manage + [
                "runworker", "--queues", queues, "--concurrency", str(concurrency)]
        if web:
            commands["web"] = manage + ["runserver", bind, "--noreload"]
        self.children: dict[str, subprocess.Popen] = {}
        self.stopping = False
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)
        for name, argv in commands.items():
            self.start(name, argv)
        if web:
            self.stdout.write(f"runall: API at http://{bind}/api/jobs/ , admin at "
                              f"http://{bind}/admin/ ; Ctrl-C stops everything")
        while not self.stopping:
            time.sleep(0.2)
            for name, proc in list(self.children.items()):
                if proc.poll() is not None and not self.stopping:
                    self.stderr.write(f"runall: {name} exited with {proc.returncode}; "
                                      f"restarting in {RESTART_DELAY_S:.0f} s")
                    time.sleep(RESTART_DELAY_S)
                    self.start(name, commands[name])
        for proc in self.children.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for name, proc in self.children.items():
            try:
                proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                self.stderr.write(f"runall: {name} did not stop; killing it")
                proc.kill()
        self.stdout.write("runall: stopped")

    def start(self, name: str, argv: list[str]) -> None:
        # Own session: Ctrl-C reaches only runall, which forwards one SIGTERM, so the
        # children stop gracefully instead of seeing two signals and forcing.
        self.children[name] = subprocess.Popen(argv, start_new_session=True)
        self.stdout.write(f"runall: started {name} (pid {self.children[name].pid})")

    def stop(self, signum, frame) -> None:
        if self.stopping:
            for proc in self.children.values():
                if proc.poll() is None:
                    proc.kill()
        self.stopping = True
