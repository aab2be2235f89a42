"""The flow-kill scenario (docs/reliability.md, "Scenarios"; docs/isolation.md, "Rate
limits" and "Concurrency keys"): workers SIGKILLed while a handler rate limit and
concurrency keys hold a backlog back, over two workers and two dispatchers.

The load: one-off ``chaos.work`` jobs all due within the first two seconds, as many as
the rate lets start in the window, so the bucket runs dry; each
job's ``concurrency_key`` is ``payload.customer`` (ten values) with
``concurrency_limit`` 2. The runs of three "hot" customers take 0.5-1 s, so those keys
sit at their limit with runs parked behind them the whole window; the others' take
under 50 ms, so the rate, not the workers, is what holds them back. The handler's limit
is RATE per second with the default burst (one second's worth).

What it checks beyond the common invariants (chaos/invariants.py: nothing lost, no
duplicate execution an expired lease does not explain):

* no key value ever had more than KEY_LIMIT runs running at once. An attempt runs from
  its ``started_at`` to its ``finished_at``: the ack, or for a killed worker's attempt
  the reaper's time, when the lease had expired and the slot came back (isolation.md:
  "a killed worker's slots come back within LEASE_TTL_S"). An end and a start at the
  same instant are a slot freed, then taken;
* the rate held: over any WINDOW_S seconds, and over any span as long as the fault
  window, attempts started at most ``BURST + RATE * (span + START_LAG_S)`` times (a
  token bucket's bound; isolation.md states no tolerance, START_LAG_S is the
  measurement's, as in tests/test_flow_daemons.py);
* the load did saturate: at least one key reached its limit.
"""

import signal
from collections import defaultdict
from datetime import datetime, timedelta

from chaos.load import BULK_CHUNK, CRON_MAX_ATTEMPTS, owner, with_db_retry, work_seconds
from chaos.session import Scenario, Session, Size
from jobs import services
from runs.clock import db_now
from runs.flow import rate_limits as flow_limits
from runs.models import Attempt

HANDLER = "chaos.work"
RATE = 50  # starts per second, the handler's limit
BURST = 50  # the default: one second's worth
KEY_LIMIT = 2
CUSTOMERS = [f"c{i}" for i in range(10)]
# Hot keys: 5 % of the jobs each, 0.75 s a run on average, so a key's two slots (2.7
# runs/s) take about as long as the rate to get through its share.
HOT, HOT_SECONDS = CUSTOMERS[:3], (0.5, 1.0)
WEIGHTS = [5 if c in HOT else 85 / 7 for c in CUSTOMERS]
WINDOW_S = 10
# A start's started_at is written after its token was taken (the start's own statement),
# by up to a few tens of ms under load: a window of started_at may hold that much more.
START_LAG_S = 0.1
# Runs made per second of the fault window: the rate's worth, the burst on top, so the
# bucket stays empty until the window closes when the workers keep up (kills halve them
# for a second or two) and the drain is short.
BACKLOG_PER_S = RATE


class FlowKill(Scenario):
    """A random worker SIGKILLed every 1.5-3.5 s and started again (as worker-kill),
    under a saturated handler rate limit and saturated concurrency keys."""

    name = "flow-kill"
    dispatchers = 2
    short = Size(one_off=0, cron=0, duration_s=15, workers=2, concurrency=8, drain_s=120)
    long = Size(one_off=0, cron=0, duration_s=60, workers=2, concurrency=8, drain_s=300)

    def create_load(self, s: Session) -> None:
        flow_limits.set_rate_limit("handler", HANDLER, RATE, BURST)
        count = int(s.size.duration_s * BACKLOG_PER_S)
        user = owner()
        base = db_now() + timedelta(seconds=1)
        specs = []
        for _ in range(count):
            customer = s.rng.choices(CUSTOMERS, weights=WEIGHTS)[0]
            seconds = (round(s.rng.uniform(*HOT_SECONDS), 3) if customer in HOT
                       else work_seconds(s.rng, 0))
            specs.append({"name": "chaos flow", "handler": HANDLER,
                          "payload": {"customer": customer, "seconds": seconds},
                          "run_at": base + timedelta(seconds=s.rng.uniform(0, 1)),
                          "timeout_s": 60, "max_attempts": CRON_MAX_ATTEMPTS,
                          "concurrency_key": "payload.customer",
                          "concurrency_limit": KEY_LIMIT})
        for start in range(0, count, BULK_CHUNK):
            services.create_jobs(specs[start:start + BULK_CHUNK], owner=user)
        s.say(f"{count} jobs over {len(CUSTOMERS)} keys of limit {KEY_LIMIT}, "
              f"handler limit {RATE}/s burst {BURST}")

    def inject(self, s: Session) -> None:
        while s.left() > 3:
            s.tick(s.rng.uniform(1.5, 3.5))
            victim = s.rng.choice([w for w in s.cluster.of_kind("worker") if w.alive()])
            s.fault("SIGKILL", victim.name, s.held_by(victim))
            s.cluster.kill(victim, signal.SIGKILL)
        s.until_deadline()

    def verify(self, s: Session) -> None:
        rows = with_db_retry(lambda: list(
            Attempt.objects.filter(run__job__owner=s.user)
            .values_list("run__job__concurrency_key", "started_at", "finished_at")))
        figures = flow_figures(rows, s.size.duration_s)
        s.result.figures.update(figures)
        if figures["key_peak"] > KEY_LIMIT:
            s.result.failures.append(
                f"key {figures['key_peak_key']} had {figures['key_peak']} runs running at "
                f"once at {figures['key_peak_at']} (limit {KEY_LIMIT})")
        if figures["keys_at_limit"] == 0:
            s.result.failures.append("no key reached its limit: the load did not saturate")
        for span, most in ((WINDOW_S, figures["starts_max_10s"]),
                           (s.size.duration_s, figures["starts_max_window"])):
            bound = BURST + RATE * (span + START_LAG_S)
            if most > bound:
                s.result.failures.append(
                    f"{most} starts within {span} s, above the bucket's {bound:.0f} "
                    f"({RATE}/s x ({span} + {START_LAG_S}) s + burst {BURST})")
        s.result.notes.append(
            f"flow: key peak {figures['key_peak']} (limit {KEY_LIMIT}; keys at the limit "
            f"{figures['keys_at_limit']} of {len(CUSTOMERS)}), starts in the busiest "
            f"{WINDOW_S} s {figures['starts_max_10s']} (bound "
            f"{BURST + RATE * (WINDOW_S + START_LAG_S):.0f}), in the busiest "
            f"{s.size.duration_s:g} s {figures['starts_max_window']} (bound "
            f"{BURST + RATE * (s.size.duration_s + START_LAG_S):.0f}), attempts "
            f"{figures['attempts']}")


def flow_figures(rows: list[tuple[str, datetime, datetime | None]], span_s: float) -> dict:
    """The flow-kill figures from attempts (concurrency key value, started_at,
    finished_at; database clock): each key's most attempts open at once, and the most
    starts within WINDOW_S and within ``span_s`` seconds (any such window). An attempt
    without finished_at counts as open to the end."""
    by_key: dict[str, list] = defaultdict(list)
    for key, started, finished in rows:
        by_key[key].append((started, finished or datetime.max.replace(tzinfo=started.tzinfo)))
    peaks = {key: most_at_once(spans) for key, spans in by_key.items()}
    worst = max(peaks, key=lambda k: peaks[k][0]) if peaks else None
    starts = sorted(started for _, started, _ in rows)
    return {
        "attempts": len(rows),
        "key_peak": peaks[worst][0] if worst else 0,
        "key_peak_key": worst,
        "key_peak_at": peaks[worst][1].isoformat() if worst and peaks[worst][1] else None,
        "keys_at_limit": sum(1 for peak, _ in peaks.values() if peak >= KEY_LIMIT),
        "starts_max_10s": most_within(starts, WINDOW_S),
        "starts_max_window": most_within(starts, span_s),
    }


def most_at_once(spans: list[tuple[datetime, datetime]]) -> tuple[int, datetime | None]:
    """The most spans (start, end) open at one instant, and the first instant it was
    reached; an end before a start at the same instant (a slot freed, then taken)."""
    events = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    most, now, at = 0, 0, None
    for when, step in events:
        now += step
        if now > most:
            most, at = now, when
    return most, at


def most_within(times: list[datetime], span_s: float) -> int:
    """The most of the sorted ``times`` within any half-open window of ``span_s`` s."""
    span = timedelta(seconds=span_s)
    most = first = 0
    for last, when in enumerate(times):
        while when - times[first] >= span:
            first += 1
        most = max(most, last - first + 1)
    return most
