"""A NUL character (U+0000), which PostgreSQL's jsonb refuses, in a handler's result or a
job's payload, told apart from the six characters ``\\u0000`` (a backslash, then
"u0000"), which it stores (scheduler_core/json_text.py): json.dumps writes the first as
\\u0000 and the second as \\\\u0000, which holds the first as a substring. In-process
workers on real PostgreSQL and Redis."""

import json

import pytest

from jobs import services
from jobs.registry import handler
from runs.execution.transitions import run_refs
from runs.models import Run
from runs.worker import Worker
from runs.worker.results import result_problem
from scheduler_core.exceptions import InvalidJob
from scheduler_core.json_text import has_nul
from tests.conftest import make_runs

pytestmark = pytest.mark.django_db(transaction=True)

LITERAL = "C:\\u0000dir"  # a Windows path: a backslash, then "u0000dir"; no NUL
REFUSED = ("the handler's result contains a NUL character (\\u0000), which PostgreSQL "
           "cannot store")


@handler("tests.nul_in_value")
def nul_in_value(ctx, payload):
    return {"path": LITERAL, "nested": [{"name": "C:\\\x00dir"}]}


@handler("tests.nul_in_key")
def nul_in_key(ctx, payload):
    return {"path": LITERAL, "nested": [{"a\x00": 1}]}


def deep(value, depth: int) -> dict:
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.mark.parametrize("value, nul", [
    (LITERAL, False), ("\\\\u0000", False), ("u0000", False), ("\\", False),
    ("\x00", True), ("\\\x00", True), ("\\\\\x00", True), ("a\x00b", True),
])
def test_only_a_real_nul_counts(value, nul):
    assert (result_problem({"k": value}) is not None) is nul
    assert (result_problem({value: [1]}) is not None) is nul
    assert has_nul(json.dumps([value])) is nul
    if nul:
        with pytest.raises(InvalidJob) as caught:
            services.create_job("noop", {"x": [{value: 1}]}, delay_s=0)
        assert list(caught.value.errors) == ["payload"]
    else:
        assert services.create_job("noop", {value: [value]}, delay_s=0).payload == {
            value: [value]}


def test_a_result_holding_the_text_backslash_u0000_is_stored_as_it_is(rb):
    # Refused as "contains a NUL character": the run went to the dead letter.
    payload = {"path": LITERAL, LITERAL: [LITERAL, {"k": "\\\\u0000"}]}
    job = services.create_job("echo", payload, delay_s=0, max_attempts=1)

    Worker(["default"], concurrency=1, burst=True).serve(max_rounds=5000)

    run = Run.objects.get(job=job)
    assert (run.state, run.error) == ("succeeded", "")
    run.refresh_from_db()
    assert run.result == payload


@pytest.mark.parametrize("name", ["tests.nul_in_value", "tests.nul_in_key"])
def test_a_result_holding_a_nul_is_still_refused(rb, name):
    [run] = make_runs("default", 1, handler=name, max_attempts=1)
    rb.push(run_refs(Run.objects.filter(pk=run.pk)))

    Worker(["default"], concurrency=1, burst=True).serve(max_rounds=5000)

    run.refresh_from_db()
    assert (run.state, run.error, run.result) == ("dead", REFUSED, None)


def test_a_deep_payload_is_checked_without_a_walk():
    # The check walked the payload when its text held \u0000: some 600 levels deep, it
    # raised RecursionError out of the validation.
    assert services.create_job("noop", deep(LITERAL, 900), delay_s=0).pk
    with pytest.raises(InvalidJob) as caught:
        services.create_job("noop", deep("\x00", 900), delay_s=0)
    assert list(caught.value.errors) == ["payload"]
