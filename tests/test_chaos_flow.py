"""The flow-kill checker (chaos/flow_kill.py) on attempts made up here: it must see a key
over its limit, a slot freed and taken at one instant as no overlap, a killed worker's
attempt as open until the reaper's time, and starts above the bucket's bound."""

from datetime import UTC, datetime, timedelta

from chaos.flow_kill import BURST, RATE, flow_figures, most_within

T0 = datetime(2026, 12, 6, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_three_attempts_of_one_key_open_at_once_are_the_peak():
    rows = [("payload.customer=c1", at(0), at(2)), ("payload.customer=c1", at(1), at(3)),
            ("payload.customer=c1", at(1.5), at(1.6)), ("payload.customer=c2", at(0), at(9))]

    figures = flow_figures(rows, 15)

    assert figures["key_peak"] == 3
    assert figures["key_peak_key"] == "payload.customer=c1"
    assert figures["key_peak_at"] == at(1.5).isoformat()


def test_a_slot_freed_and_taken_at_one_instant_is_no_overlap():
    rows = [("k=a", at(0), at(1)), ("k=a", at(0), at(2)), ("k=a", at(1), at(3))]

    assert flow_figures(rows, 15)["key_peak"] == 2


def test_a_killed_workers_attempt_counts_until_the_reaper_finished_it():
    # Killed at 1 s, its lease reaped at 5 s: the two started meanwhile make three.
    rows = [("k=a", at(0), at(5)), ("k=a", at(0.5), at(6)), ("k=a", at(2), at(3))]

    assert flow_figures(rows, 15)["key_peak"] == 3


def test_starts_above_the_buckets_bound_in_some_window_are_counted():
    # The burst at once, then the rate for 10 s, then one start too many.
    starts = [at(0)] * BURST + [at(i / RATE) for i in range(10 * RATE)] + [at(9.99)]
    rows = [("k=a", s, s) for s in starts]

    assert most_within(sorted(starts), 10) == BURST + 10 * RATE + 1
    assert flow_figures(rows, 15)["starts_max_10s"] == BURST + 10 * RATE + 1
    # Past the window: the first start is out of it.
    assert most_within(sorted(starts + [at(10)]), 10) == BURST + 10 * RATE + 1
