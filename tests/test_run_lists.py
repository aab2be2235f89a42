"""The run lists at scale (docs/api.md, "Lists at scale"; docs/admin.md, "Counts at
scale"): an owner of few jobs pages job by job (scheduler_core/rest/owner_lists.py) and gets exactly
the pages, order and cursors of the plain query, never another owner's runs; the admin's
history lists count by the planner's estimate or up to a cap, not every row."""

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from runs.admin import paginator as admin_paginator
from runs.api import views as run_views
from runs.models import Run, RunState
from tests.test_api_helpers import client_for, recurring, user_with

pytestmark = pytest.mark.django_db


def walk(api, query, backwards=False):
    """Every page of /api/runs/ (query, page size 3) from the first, then, with
    ``backwards``, back again by the previous links; the ids in the order served."""
    pages = [api.get("/api/runs/", {**query, "page_size": 3}).json()]
    while pages[-1]["next"]:
        pages.append(api.get(pages[-1]["next"]).json())
    if backwards:
        while pages[-1]["previous"]:
            pages.append(api.get(pages[-1]["previous"]).json())
    return [[r["id"] for r in page["results"]] for page in pages]


@pytest.fixture
def history(alice):
    """alice's 3 jobs with runs that tie on scheduled_at across jobs (a third of them
    dead), and bob's job with more runs, newer than all of alice's."""
    start = timezone.now().replace(microsecond=0) - timedelta(days=2)
    jobs = [recurring(alice) for _ in range(3)]
    bob = user_with("bob")
    Run.objects.bulk_create(
        [Run(job=job, scheduled_at=start + timedelta(minutes=i), run_at=start,
             state=RunState.DEAD if i % 3 == 0 else RunState.SUCCEEDED,
             queue="default", finished_at=start + timedelta(minutes=i // 2))
         for n, job in enumerate(jobs) for i in range(n, 14, 1 + n)]
        + [Run(job=recurring(bob), scheduled_at=start + timedelta(hours=1, minutes=i),
               run_at=start, state=RunState.SUCCEEDED, finished_at=start)
           for i in range(30)])
    return jobs


def mine(alice, states=None):
    runs = Run.objects.filter(job__owner=alice)
    return set((runs.filter(state__in=states) if states else runs)
               .values_list("pk", flat=True))


@pytest.mark.parametrize("query", [
    {}, {"ordering": "id"}, {"ordering": "-id"}, {"state": "dead"},
    {"state": ["dead", "succeeded"]}, {"scheduled_after": "2000-01-01T00:00:00Z"},
])
def test_an_owner_of_few_jobs_gets_the_pages_of_the_plain_query(history, alice, query):
    """Total orders (ties on scheduled_at broken by id): the same runs in the same order
    as the plain query a user with view_run gets, forward and back."""
    states = query.get("state")
    own = mine(alice, [states] if isinstance(states, str) else states)
    viewer = client_for(user_with("viewer", "runs.view_run"))  # every run: plain query

    pages = walk(client_for(alice), query, backwards=True)

    forward = pages[:len(pages) // 2 + 1]
    served = [pk for page in forward for pk in page]
    assert len(served) == len(set(served)) == len(own) and set(served) == own
    assert served == [pk for page in walk(viewer, query) for pk in page if pk in own]
    assert pages[len(pages) // 2:] == forward[::-1]  # back by the previous links


def test_an_owner_paging_by_scheduled_at_ties_gets_each_run_once_in_order(history, alice):
    """``ordering=scheduled_at`` alone: runs of different jobs tie; each still comes once,
    in non-decreasing scheduled_at."""
    pages = walk(client_for(alice), {"ordering": "scheduled_at"})
    served = [pk for page in pages for pk in page]
    assert len(served) == len(set(served)) and set(served) == mine(alice)
    times = [Run.objects.get(pk=pk).scheduled_at for pk in served]
    assert times == sorted(times)


def test_an_owner_past_the_job_limit_gets_the_plain_query(history, alice, monkeypatch):
    expected = walk(client_for(alice), {})
    monkeypatch.setattr(run_views, "OWNER_JOBS_MAX", 2)
    assert run_views.owner_job_ids(alice) is None
    assert walk(client_for(alice), {}) == expected


def test_an_owner_without_jobs_lists_nothing(history):
    assert client_for(user_with("carol")).get("/api/runs/").json()["results"] == []


def test_the_dead_letter_of_an_owner_pages_as_the_plain_query(history, alice):
    mine = Run.objects.filter(job__owner=alice, state=RunState.DEAD)
    expected = list(mine.order_by("-finished_at", "-id").values_list("pk", flat=True))
    api, served, url = client_for(alice), [], "/api/dead-letter/?page_size=2"
    while url:
        page = api.get(url).json()
        served += [r["id"] for r in page["results"]]
        url = page["next"]
    assert served == expected


@pytest.mark.postgresql_only("the unfiltered count is the planner's row estimate (pg_class); "
                             "on SQLite the admin counts exactly")
def test_the_admin_run_list_shows_an_estimate_unfiltered_and_a_capped_count_filtered(
        history, monkeypatch, admin_client):
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE runs_run")
    total = Run.objects.count()
    monkeypatch.setattr(admin_paginator, "EXACT_UP_TO", 1)
    monkeypatch.setattr(admin_paginator, "COUNT_CAP", 5)

    unfiltered = admin_client.get("/admin/runs/run/")
    dead = admin_client.get("/admin/runs/run/", {"state__exact": "dead"})

    assert unfiltered.status_code == dead.status_code == 200
    estimate = admin_paginator.estimated_rows(Run, "default")
    assert estimate == total  # just analysed: the planner's figure is exact here
    assert unfiltered.context["cl"].result_count == estimate
    assert dead.context["cl"].result_count == 5  # 9 dead, counted up to the cap
    assert admin_client.get("/admin/runs/attempt/").status_code == 200
    assert admin_client.get("/admin/runs/logline/").status_code == 200
