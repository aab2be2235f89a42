"""The bounds jobs/spec.py states are the bounds every way in enforces: each numeric
field takes its low and high and refuses one step beyond, each text field takes its
maximum length and refuses one more character, naming the field (docs/api.md, "Job
fields"). A change to validation that the spec does not follow fails here."""

import pytest

from jobs import spec
from jobs.validation import validate_job
from scheduler_core.exceptions import InvalidJob

pytestmark = pytest.mark.django_db

NUMERIC = [f for f in spec.FIELDS if f.low is not None]
TEXT = [f for f in spec.FIELDS if f.max_length is not None]
# Fields that only mean something beside another: the smallest spec that gives them one.
CONTEXT = {"max_lag_s": {"cron": "0 0 1 1 *"}, "jitter_s": {"cron": "0 0 1 1 *"},
           "unique_period_s": {"unique_key": "k"},
           "concurrency_limit": {"concurrency_key": "handler"}}


def base(field: str) -> dict:
    return {"handler": "noop", **CONTEXT.get(field, {})}


def refusal(values: dict) -> dict | None:
    try:
        validate_job(values)
    except InvalidJob as exc:
        return exc.errors
    return None


def test_the_spec_states_bounds_for_its_numbers_and_texts():
    assert {f.name for f in NUMERIC} >= {"delay_s", "priority", "timeout_s", "max_attempts",
                                         "max_lag_s", "jitter_s", "expires_in_s"}
    assert {f.name for f in TEXT} >= {"name", "queue", "shard_key", "unique_key"}


@pytest.mark.parametrize("field", NUMERIC, ids=lambda f: f.name)
def test_validation_takes_a_numbers_bounds_and_refuses_beyond_them(field):
    low, high = field.limits()
    assert refusal({**base(field.name), field.name: low}) is None
    assert refusal({**base(field.name), field.name: high}) is None
    for beyond in (low - 1, high + 1):
        errors = refusal({**base(field.name), field.name: beyond})
        assert errors is not None and field.name in errors, (field.name, beyond, errors)


@pytest.mark.parametrize("field", TEXT, ids=lambda f: f.name)
def test_validation_takes_a_texts_length_and_refuses_one_more(field):
    assert refusal({**base(field.name), field.name: "a" * field.max_length}) is None
    errors = refusal({**base(field.name), field.name: "a" * (field.max_length + 1)})
    assert errors is not None and field.name in errors, errors


@pytest.mark.parametrize("field", NUMERIC, ids=lambda f: f.name)
def test_rest_answers_a_number_beyond_its_bounds_with_a_400_naming_it(api, field):
    if spec.REST not in field.doors:
        pytest.skip(f"{field.name} is not a REST field")
    low, high = field.limits()
    answer = api.post("/api/jobs/", {**base(field.name), field.name: high + 1}, format="json")
    assert answer.status_code == 400, answer.content
    assert field.name in answer.json(), answer.json()
