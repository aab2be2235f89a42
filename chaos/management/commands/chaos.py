from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from chaos.cluster import ClusterError
from chaos.report import lines, merge_json
from chaos.scenarios import SCENARIO_NAMES, run_scenario


class Command(BaseCommand):
    help = ("Run the real daemons under load, inject a fault scenario, and check that "
            "nothing is lost (docs/reliability.md). Exits 1 if any invariant breaks.")

    def add_arguments(self, parser):
        parser.add_argument("scenario", choices=[*SCENARIO_NAMES, "all"],
                            help="the scenario to run, or all of them in turn")
        parser.add_argument("--seed", type=int, default=1,
                            help="random seed: the same seed makes the same load and faults")
        parser.add_argument("--duration", type=float, default=None,
                            help="seconds of the fault window (default: per scenario)")
        parser.add_argument("--short", action="store_true",
                            help="the small CI version (each up to about a minute: "
                                 "docs/reliability.md, 'Sizes and time')")
        parser.add_argument("--json", type=Path, default=None,
                            help="merge the figures into this JSON file "
                                 "(docs/reliability.json)")

    def handle(self, *args, scenario, seed, duration, short, json, **options):
        if duration is not None and duration <= 0:
            raise CommandError("--duration must be a positive number of seconds")
        names = SCENARIO_NAMES if scenario == "all" else [scenario]
        failed = []
        for name in names:
            try:
                result = run_scenario(name, seed, short=short, duration=duration,
                                      out=self.stdout.write)
            except ClusterError as exc:
                raise CommandError(str(exc)) from exc
            self.stdout.write("\n".join(lines(result)) + "\n")
            if json is not None:
                merge_json(json, result)
            if not result.ok:
                failed.append(name)
        if failed:
            raise CommandError(f"invariants broken in: {', '.join(failed)}")
