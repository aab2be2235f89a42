"""Requeue and discard the dead letter in bulk by filter: POST /api/dead-letter/requeue/
and /discard/, and ``manage.py deadletter`` (runs/api/dead_letter.py; the rules are
runs/services.py's, the admin's actions')."""

from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.utils import timezone

from runs import services
from runs.api import dead_letter
from runs.models import Run, RunState
from tests.test_api_helpers import client_for, finished_run, one_off, user_with

pytestmark = pytest.mark.django_db


@pytest.fixture
def dead(alice):
    """Alice's dead letter: two runs of a noop job in queue default, one of an echo job,
    one dead for two days; and a run of bob's."""
    noop, echo = one_off(alice), one_off(alice, handler="echo")
    bob = User.objects.create_user("bob")
    runs = {"noop1": finished_run(noop), "noop2": finished_run(noop),
            "echo": finished_run(echo), "bob": finished_run(one_off(bob))}
    Run.objects.filter(pk=runs["noop2"].pk).update(
        finished_at=timezone.now() - timedelta(days=2))
    return runs


def states(runs) -> dict[str, str]:
    return {name: Run.objects.get(pk=run.pk).state for name, run in runs.items()}


def test_requeue_by_handler_and_age_touches_only_what_the_filter_picks(api, dead):
    dry = api.post("/api/dead-letter/requeue/", {"handler": "noop", "dry_run": True},
                   format="json")
    assert dry.json() == {"matched": 2, "requeued": 0, "dry_run": True}
    assert set(states(dead).values()) == {"dead"}

    answer = api.post("/api/dead-letter/requeue/",
                      {"handler": "noop", "older_than_s": 86_400}, format="json")
    assert answer.status_code == 200
    assert answer.json() == {"matched": 1, "requeued": 1, "dry_run": False}
    assert states(dead) == {"noop1": "dead", "noop2": RunState.SCHEDULED, "echo": "dead",
                            "bob": "dead"}


def test_discard_reaches_only_your_own_runs_without_the_change_permission(api, dead):
    answer = api.post("/api/dead-letter/discard/", {}, format="json").json()
    assert answer == {"matched": 3, "discarded": 3, "dry_run": False}
    assert states(dead)["bob"] == "dead"

    operator = client_for(user_with("op", "runs.change_run"))
    assert operator.post("/api/dead-letter/discard/", {"owner": "bob"},
                         format="json").json()["discarded"] == 1


def test_a_bad_filter_is_a_400_naming_the_field(api, dead):
    answer = api.post("/api/dead-letter/requeue/", {"older_than_s": -1, "state": "dead"},
                      format="json")
    assert answer.status_code == 400
    assert set(answer.json()) == {"older_than_s", "state"}
    assert set(states(dead).values()) == {"dead"}


def test_the_command_counts_requeues_and_discards_by_filter(dead):
    out = StringIO()
    call_command("deadletter", "requeue", "--owner", "alice", "--handler", "echo",
                 "--dry-run", stdout=out)
    assert out.getvalue().strip() == "1 dead runs match; they would be requeued (dry run)."
    assert states(dead)["echo"] == "dead"

    out = StringIO()
    call_command("deadletter", "requeue", "--owner", "alice", "--handler", "echo", stdout=out)
    assert out.getvalue().strip() == "1 of 1 dead runs requeued."

    out = StringIO()
    call_command("deadletter", "discard", "--queue", "default", "--older-than", "3600",
                 stdout=out)
    assert out.getvalue().strip() == "1 of 1 dead runs discarded."
    assert states(dead) == {"noop1": "dead", "noop2": "cancelled",
                            "echo": RunState.SCHEDULED, "bob": "dead"}

    with pytest.raises(CommandError, match="--older-than"):
        call_command("deadletter", "discard", "--older-than", "-5")

    with pytest.raises(CommandError, match="--queue must not contain a NUL"):
        call_command("deadletter", "count", "--queue", "a\x00b")


def test_a_bulk_requeue_leaves_a_run_discarded_after_it_was_listed_discarded(
        dead, monkeypatch):
    # One run per batch, and between the batches someone discards the next run: the
    # requeue must not bring a discarded (cancelled) run back to life.
    monkeypatch.setattr(dead_letter, "BATCH", 1)
    picked = dead_letter.DeadFilter(handler="noop", owner="alice").select()
    later = dead["noop2"]  # the higher id, so the second batch

    def discard_the_later(n):
        services.discard([later.pk])

    matched, requeued = dead_letter.apply("requeue", picked, advance=discard_the_later)
    assert (matched, requeued) == (2, 1)
    assert states(dead)["noop1"] == RunState.SCHEDULED
    assert states(dead)["noop2"] == RunState.CANCELLED


@pytest.mark.parametrize("body", ["[]", "null", "false", "0", '""'])
def test_a_body_that_is_not_an_object_is_refused_and_changes_nothing(api, dead, body):
    # Read as "no filter", such a body discarded the whole dead letter.
    answer = api.post("/api/dead-letter/discard/", body, content_type="application/json")
    assert answer.status_code == 400, answer.content
    assert set(states(dead).values()) == {"dead"}


def test_an_empty_body_is_the_whole_dead_letter_you_may_change(api, dead):
    answer = api.post("/api/dead-letter/discard/")
    assert answer.json() == {"matched": 3, "discarded": 3, "dry_run": False}
    assert states(dead)["bob"] == "dead"
