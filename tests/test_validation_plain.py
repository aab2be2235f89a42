"""validate_job's short way for a spec that gives none of the optional groups' fields
(jobs/validation.py, ``plain``): it must clean and refuse exactly as the long way does."""

from datetime import UTC, datetime

import pytest

from jobs import validation
from jobs.api.serializers import to_spec
from scheduler_core.exceptions import InvalidJob

NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)

SPECS = [
    {"handler": "noop"},
    {"handler": "noop", "payload": {"i": 1}, "run_at": NOW},
    {"handler": "noop", "name": "nightly", "queue": "reports", "priority": 2,
     "timeout_s": 30, "max_attempts": 3, "shard_key": "a"},
    {"handler": "noop", "delay_s": 5},
    # What a REST create hands on: every schedule field named, as None or its default.
    to_spec({"handler": "noop", "payload": {"x": "y"}}),
    to_spec({"handler": "noop", "timezone": "", "run_at": NOW}),
    # What a django.tasks enqueue hands on: its options None when the task sets none.
    {"handler": "noop", "retry": None, "expires_in_s": None, "rate_key": None,
     "concurrency_key": None, "concurrency_limit": None, "on_success": None,
     "on_failure": None, "unique_key": None},
    # Refused: the short way must name the same fields with the same reasons.
    {"handler": "noop", "priority": 12, "name": "a\nb"},
    {"handler": "no-such-handler", "payload": [], "run_at": "tomorrow"},
    {"handler": "noop", "run_at": NOW, "delay_s": 1, "cron": None},
    # Not plain: each takes the long way, which must still agree with itself.
    {"handler": "noop", "max_lag_s": None},
    {"handler": "noop", "timezone": "Europe/Paris"},
    {"handler": "noop", "retry": {"kind": "fixed", "delay_s": 1}},
    {"handler": "noop", "concurrency_key": "x", "concurrency_limit": 2},
    {"handler": "noop", "cron": "*/5 * * * *", "timezone": "UTC"},
]


def outcome(spec: dict):
    try:
        return validation.validate_job(spec)
    except InvalidJob as exc:
        return ("refused", exc.errors)


@pytest.mark.parametrize("spec", SPECS)
def test_short_way_cleans_and_refuses_as_the_long_way(spec, monkeypatch):
    short = outcome(spec)
    monkeypatch.setattr(validation, "plain", lambda spec: False)
    assert outcome(spec) == short


@pytest.mark.parametrize(("spec", "expected"), [
    ({"handler": "noop", "payload": {}}, True),
    (to_spec({"handler": "noop"}), True),
    ({"handler": "noop", "timezone": "UTC", "cron": None, "misfire_policy": None}, True),
    ({"handler": "noop", "max_lag_s": None}, False),
    ({"handler": "noop", "timezone": "Asia/Tokyo"}, False),
    ({"handler": "noop", "unique_key": "k"}, False),
    ({"handler": "noop", "on_failure": "noop"}, False),
    ({"handler": "noop", "jitter_s": 0}, False),
])
def test_plain_names_specs_without_optional_fields(spec, expected):
    assert validation.plain(spec) is expected


def test_short_way_fills_the_groups_defaults():
    clean = validation.validate_job({"handler": "noop"})
    assert {key: clean[key] for key in ("retry", "rate_key", "concurrency_key",
                                         "concurrency_limit", "on_success", "on_failure")} \
        == {"retry": None, "rate_key": "", "concurrency_key": "", "concurrency_limit": 1,
            "on_success": None, "on_failure": None}
