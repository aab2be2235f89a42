"""The clock-skew scenario: daemons whose local clock is minutes off, through libfaketime
(docs/reliability.md, "Scenarios"; docs/architecture.md, "One clock")."""

import subprocess
import time

from chaos.cluster import Cluster
from chaos.invariants import read_exec_log
from chaos.session import Scenario, Session, Size
from runs.models import Attempt


class ClockSkew(Scenario):
    """Workers, a scheduler and a dispatcher whose local clock is minutes off (libfaketime);
    every claim uses the database's or Redis's clock, so runs still start on time."""

    name = "clock-skew"
    schedulers = 2
    short = Size(one_off=400, cron=40, duration_s=16)
    long = Size(one_off=10_000, cron=500, duration_s=150, workers=4, concurrency=3)
    SKEWS = {"worker": ["+5m", "-3m"], "scheduler": ["+5m"], "dispatcher": ["+2m"]}

    def start_daemons(self, s: Session) -> None:
        for kind, count in (("scheduler", self.schedulers), ("dispatcher", self.dispatchers)):
            skews = self.SKEWS[kind]
            for i in range(count):
                skew = skews[i] if i < len(skews) else None
                s.cluster.add(f"{kind}-{i + 1}", [f"run{kind}"], skew=skew)
                if skew:
                    s.fault(f"clock {skew}", f"{kind}-{i + 1}")
        skews = self.SKEWS["worker"]
        for i in range(s.size.workers):
            skew = skews[i] if i < len(skews) else None
            worker = s.add_worker(skew=skew)
            if skew:
                s.fault(f"clock {skew}", worker.name)
        s.extra["probe"] = {skew: probe_skew(s.cluster, skew) for skew in ("+5m", "-3m")}

    def verify(self, s: Session) -> None:
        # The handler's wall clock at "start" against the attempt's started_at (database
        # clock, a few ms earlier): the skew the handler really saw.
        started = {(r, n): at.timestamp() for r, n, at in Attempt.objects.filter(
            run__job__owner=s.user).values_list("run_id", "number", "started_at")}
        seen: dict[int, int] = {}
        for line in read_exec_log(s.cluster.exec_log):
            if line.kind == "start" and (line.run_id, line.attempt) in started:
                skew = round((line.wall - started[line.run_id, line.attempt]) / 60)
                seen[skew] = seen.get(skew, 0) + 1
        s.result.notes.append(f"faketime probe (s): {s.extra.get('probe')}; executions by "
                              f"handler clock skew in minutes: {dict(sorted(seen.items()))}")
        for minutes in (5, -3):
            if not seen.get(minutes):
                s.result.failures.append(
                    f"no execution saw a {minutes:+d} min clock: libfaketime did not take")
        for fault in s.result.fault_log:
            fault.recovery_s = None  # a skew lasts the whole scenario: nothing to recover


def probe_skew(cluster: Cluster, skew: str) -> float:
    """Seconds by which ``time.time()`` is off in a Python process started the way skewed
    daemons are (checks that libfaketime really takes)."""
    import sys

    env = dict(cluster.base_env)
    env.update(cluster.add("probe", ["check"], skew=skew, start=False).env)
    del cluster.daemons["probe"]
    before = time.time()
    out = subprocess.run([sys.executable, "-c", "import time; print(time.time())"], env=env,
                         capture_output=True, text=True, timeout=30, check=True)
    return round(float(out.stdout) - before, 1)
