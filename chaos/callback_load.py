"""Callbacks under workflow-kill (docs/callbacks.md, "Exactly once"; docs/reliability.md,
"Scenarios"): one-off jobs of the ``chaos`` owner with ``on_success`` and ``on_failure``,
run by the same SIGKILLed workers as the workflow runs. Three in four run ``chaos.work``
and succeed; the fourth runs ``chaos.fail``, which fails for good (dead at once). Both
callbacks are ``chaos.work``, so the common invariants (chaos/invariants.py) cover the
callback runs too.

What ``figures`` checks, per parent run: exactly one callback job of its outcome's field
(``on_success`` for a succeeded run, ``on_failure`` for a dead one), none of the other,
and that job has exactly one run, which succeeded (none stuck).
"""

import random
from collections import Counter
from datetime import datetime, timedelta

from jobs import services
from jobs.models import Job
from runs.models import Run, RunState

MAX_ATTEMPTS = 10  # as the rest of the load: repeated kills must not dead-letter
EXPECTED = {RunState.SUCCEEDED: "on_success", RunState.DEAD: "on_failure"}


def create(user, rng: random.Random, count: int, base: datetime, window: float) -> list[int]:
    """Create ``count`` parent jobs of ``user``, due from ``base`` over ``window``
    seconds; returns their ids. Their handlers take 0.05-0.6 s, so kills find some in
    flight and some in their ack."""
    callback = {"handler": "chaos.work", "payload": {"seconds": 0.05}}
    specs = [{"handler": "chaos.fail" if i % 4 == 3 else "chaos.work",
              "payload": {"seconds": round(rng.uniform(0.05, 0.6), 3)},
              "run_at": base + timedelta(seconds=rng.uniform(0, window)),
              "max_attempts": MAX_ATTEMPTS, "timeout_s": 60,
              "on_success": callback, "on_failure": callback}
             for i in range(count)]
    return [job.pk for job in services.create_jobs(specs, owner=user)]


def figures(parent_jobs: list[int]) -> dict:
    """The callback figures of the parents ``parent_jobs`` (module docstring)."""
    parents = dict(Run.objects.filter(job_id__in=parent_jobs).values_list("pk", "state"))
    made = list(Job.objects.filter(callback_of__in=list(parents))
                .values_list("pk", "callback_of", "callback_on"))
    per = Counter((run, kind) for _, run, kind in made)
    runs_of = Counter(Run.objects.filter(job_id__in=[pk for pk, _, _ in made])
                      .values_list("job_id", flat=True))
    states = Counter(parents.values())
    return {
        "callback_parents": len(parents),
        "callback_parent_states": dict(sorted(states.items())),  # a stable order to read
        "callbacks": len(made),
        "missing_callbacks": sum(1 for run, state in parents.items()
                                 if state in EXPECTED and not per[(run, EXPECTED[state])]),
        "duplicate_callbacks": sum(n - 1 for n in per.values() if n > 1),
        "wrong_callbacks": sum(n for (run, kind), n in per.items()
                               if EXPECTED.get(parents[run]) != kind),
        "callback_jobs_not_one_run": sum(1 for pk, _, _ in made if runs_of[pk] != 1),
        "stuck_callbacks": Run.objects.filter(job_id__in=[pk for pk, _, _ in made])
        .exclude(state=RunState.SUCCEEDED).count(),
    }
