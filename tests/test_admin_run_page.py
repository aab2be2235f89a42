"""The admin's run page (docs/admin.md, "Runs"): both starts, each labelled beside the
figure measured from it (lag from the first attempt's start, duration from the last's),
and whether the run is a catch-up run."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from runs.admin.helpers import format_duration, stamp
from runs.models import AttemptOutcome, Run
from tests.test_admin import make_run, one_off, text

pytestmark = pytest.mark.django_db


def field(page: str, label: str) -> str:
    """The text of the read-only field labelled ``label`` on an admin page."""
    match = re.search(r"<label[^>]*>" + re.escape(label) +
                      r":</label> <div class=\"readonly\">(.*?)</div>", page, re.IGNORECASE)
    assert match, label
    return match.group(1)


def test_the_run_page_shows_both_starts_each_beside_what_it_measures(admin_client):
    scheduled = timezone.now() - timedelta(minutes=10)
    first = scheduled + timedelta(seconds=2)
    last = scheduled + timedelta(seconds=30)
    run = make_run(one_off(), scheduled_at=scheduled, attempts=[
        (first, first + timedelta(seconds=1), AttemptOutcome.FAILED, "boom", []),
        (last, last + timedelta(seconds=4), AttemptOutcome.SUCCEEDED, "", []),
    ])

    page = text(admin_client.get(f"/admin/runs/run/{run.pk}/change/"))

    assert field(page, "first attempt started") == stamp(first)
    assert field(page, "last attempt started") == stamp(last)
    lag_label = "lag (first attempt started − scheduled, or created if later)"
    assert field(page, lag_label) == format_duration(timedelta(seconds=2))
    assert field(page, "duration (last attempt: finished − started)") == format_duration(
        timedelta(seconds=4))
    assert field(page, "catch-up run") == "no"


def test_the_run_page_says_when_a_run_is_a_catch_up_run(admin_client):
    run = make_run(one_off())
    Run.objects.filter(pk=run.pk).update(catch_up=True)

    page = text(admin_client.get(f"/admin/runs/run/{run.pk}/change/"))

    assert field(page, "catch-up run").startswith("yes: late on purpose")
