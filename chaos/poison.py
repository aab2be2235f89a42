"""The hung-and-poison scenario: handlers that hang past their timeout or kill their own
process, among normal load (docs/reliability.md, "Scenarios")."""

from chaos.session import Scenario, Session, Size
from jobs import services
from runs.models import Run, RunState


class HungAndPoison(Scenario):
    """Handlers that busy-loop or sleep past timeout_s, and one that kills its own process,
    among normal load: the hung ones are cut off and retried, the poison one is
    dead-lettered after max_attempts, the pool keeps serving."""

    name = "hung-and-poison"
    short = Size(one_off=290, cron=30, duration_s=13, concurrency=3)
    long = Size(one_off=10_000, cron=300, duration_s=150, workers=4, concurrency=3)
    BAD = {  # handler -> (payload, timeout_s, max_attempts, the outcome of every attempt)
        "busy_loop": ({}, 2, 2, "timed_out"),
        "sleep": ({"seconds": 60}, 2, 2, "timed_out"),
        "suicide": ({}, 60, 3, "crashed"),
    }

    def create_load(self, s: Session) -> None:
        super().create_load(s)
        per_kind = 2 if s.size.duration_s < 60 else 5
        s.extra["bad"] = {}
        for i in range(per_kind):
            s.tick(s.size.duration_s * 0.6 / per_kind)
            for handler, (payload, timeout_s, attempts, _) in self.BAD.items():
                job = services.create_job(handler, payload, owner=s.user, delay_s=0,
                                          timeout_s=timeout_s, max_attempts=attempts,
                                          name=f"chaos {handler} {i}")
                run_id = Run.objects.get(job=job).pk
                s.extra["bad"][run_id] = handler
                s.fault(handler, f"run {run_id}", [run_id])

    def verify(self, s: Session) -> None:
        for run_id, handler in s.extra.get("bad", {}).items():
            _, _, attempts, outcome = self.BAD[handler]
            run = Run.objects.get(pk=run_id)
            got = list(run.attempts.order_by("number").values_list("outcome", flat=True))
            if run.state != RunState.DEAD or got != [outcome] * attempts:
                s.result.failures.append(
                    f"{handler} run {run_id}: {run.state} with attempts {got}, expected dead "
                    f"with {attempts} x {outcome}")
        normal = Run.objects.filter(job__owner=s.user, job__handler="chaos.work")
        s.result.notes.append(
            f"normal runs: {normal.filter(state=RunState.SUCCEEDED).count()} succeeded of "
            f"{normal.count()} while {len(s.extra.get('bad', {}))} bad runs were in the pool")
