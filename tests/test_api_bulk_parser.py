"""The bulk endpoint's fast item parser agrees with JobCreateSerializer: whatever it
accepts, the serializer accepts with exactly the same validated data (it may decline
items the serializer accepts; those go through the serializer)."""

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework.exceptions import ValidationError

from jobs.api.bulk_serializers import FastItemParser
from jobs.api.serializers import JobCreateSerializer, iana_zones

pytestmark = pytest.mark.django_db

anything = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                     st.text(max_size=10), st.lists(st.integers(), max_size=2),
                     st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
offsets = st.integers(-23 * 60, 23 * 60).map(lambda m: timezone(timedelta(minutes=m)))
aware = st.builds(lambda d, tz: d.replace(tzinfo=tz).isoformat(),
                  st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)),
                  offsets)
# field -> (plausible values, edge values)
VALUES = {
    "handler": (st.sampled_from(["noop", "echo"]), st.sampled_from(["nope", "", " noop"])),
    "name": (st.text(min_size=1, max_size=30),
             st.sampled_from([" padded ", "", "x" * 201, "nul\x00", "\ud800", "\u3000x"])),
    "payload": (st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
                st.sampled_from([[], "x", 1])),
    "run_at": (aware, st.one_of(st.datetimes().map(datetime.isoformat), st.sampled_from([
        " 2030-01-01T00:00:00Z", "20300101T0000Z", "2030-01-01", "2030-01-01T00:00:00z",
        "0001-01-01T00:00:00+10:00", "2030-01-01T00:00:00+00:00:01.5"]))),
    "cron": (st.sampled_from(["*/5 * * * *", "@daily", "0 9 * * 1-5"]),
                 st.sampled_from([" @daily", "", "x" * 201, "\ud800"])),
    "timezone": (st.sampled_from(sorted(iana_zones())),
                 st.sampled_from(["UTC ", "Mars/Base", "", "utc"])),
    "misfire_policy": (st.sampled_from(["run_all", "run_once", "skip"]), st.just("never")),
    "queue": (st.from_regex(r"\A[A-Za-z0-9_.-]{1,64}\Z"),
              st.sampled_from(["a b", "q\n", " q", "", "q" * 65])),
    "priority": (st.integers(0, 9), st.integers(-2, 11)),
    "timeout_s": (st.integers(1, 86_400), st.integers(-1, 100_000)),
    "max_attempts": (st.integers(1, 100), st.integers(-1, 120)),
    "max_lag_s": (st.integers(0, 2**31 - 1), st.integers(-1, 2**32)),
    "jitter_s": (st.integers(0, 86_400), st.integers(-1, 90_000)),
}
# A plausible item with at most two fields spoilt, so that the parser accepts often
# enough for the comparison to mean something.
plausible = st.fixed_dictionaries({"handler": VALUES["handler"][0]}, optional={
    key: good for key, (good, _) in VALUES.items() if key != "handler"})
spoilt_field = st.sampled_from([*VALUES, "colour"]).flatmap(
    lambda key: st.tuples(st.just(key), st.one_of(VALUES[key][1], VALUES[key][1], anything)
                          if key in VALUES else st.just("red")))
items = st.builds(lambda item, spoilt: {**item, **dict(spoilt)}, plausible,
                  st.lists(spoilt_field, max_size=2))


@pytest.fixture(scope="module")
def parsers():
    return FastItemParser(), JobCreateSerializer()


@settings(max_examples=400, deadline=None, suppress_health_check=[
    HealthCheck.function_scoped_fixture])
@given(item=items)
def test_what_the_fast_parser_accepts_the_serializer_accepts_identically(parsers, item):
    fast_parser, serializer = parsers
    fast = fast_parser.parse(item)
    if fast is None:
        return
    try:
        slow = serializer.run_validation(item)
    except ValidationError as exc:
        pytest.fail(f"fast parser accepted {item!r}; the serializer refused: {exc.detail}")
    assert dict(slow) == fast
    assert {k: type(v) for k, v in slow.items()} == {k: type(v) for k, v in fast.items()}


def test_the_fast_parser_takes_the_plain_items_bulk_clients_send():
    parser = FastItemParser()

    one_off = parser.parse({"handler": "noop", "run_at": "2030-01-01T09:00:00+01:00",
                            "payload": {"n": 1}, "name": "invoice 1"})
    recurring = parser.parse({"handler": "echo", "cron": "*/5 * * * *",
                              "timezone": "Europe/Berlin", "priority": 2, "max_attempts": 1})

    assert one_off is not None and one_off["run_at"].utcoffset() == timedelta(0)
    assert recurring is not None and recurring["timezone"] == "Europe/Berlin"


def test_the_fast_parser_leaves_an_old_field_name_to_the_serializer():
    """The serializer renames schedule and max_retries and notes them for the
    Deprecation header (docs/api.md, "Job fields")."""
    assert FastItemParser().parse({"handler": "echo", "schedule": "@daily"}) is None
