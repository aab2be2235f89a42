"""The admin's lists at a common laptop size (1366x768), with the navigation sidebar open
as a new user first sees it (docs/admin.md, "Screen width"): the job list's status and
last run columns and the dead letter's reason column (and its whole row) are inside the
window and uncut."""

from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from jobs import services
from runs.models import Run, RunState

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

WIDTH, HEIGHT = 1366, 768
LONG_ERROR = ("Traceback (most recent call last):\n  File \"handlers.py\", line 9, in run\n"
              "jobs.handlers.HandlerFailure: the invoice service answered 503 Service "
              "Unavailable three times in a row for customer 4711")


def fully_shown(page, selector: str) -> None:
    """Every element matching ``selector`` lies inside the window and inside every
    ancestor that clips its content (the admin's table scrolls sideways within its box,
    so a column past that box's edge is hidden though inside the window), and shows all
    of its content (nothing cut by its own width)."""
    boxes = page.eval_on_selector_all(selector, """nodes => nodes.map(n => {
        const r = n.getBoundingClientRect();
        let right = window.innerWidth, left = 0;
        for (let a = n.parentElement; a; a = a.parentElement) {
            const style = getComputedStyle(a);
            if (style.overflowX !== "visible") {
                const c = a.getBoundingClientRect();
                right = Math.min(right, c.right);
                left = Math.max(left, c.left);
            }
        }
        return {left: r.left, right: r.right, clip_left: left, clip_right: right,
                scroll: n.scrollWidth, client: n.clientWidth, text: n.innerText};
    })""")
    assert boxes, selector
    for box in boxes:
        assert box["clip_left"] <= box["left"] and box["right"] <= box["clip_right"] + 0.5, \
            (selector, box)
        assert box["right"] <= WIDTH, (selector, box)
        assert box["scroll"] <= box["client"] + 1, (selector, box)


def test_the_job_list_shows_status_and_last_run_uncut(page):
    call_command("loaddemo", "--start-in", "0", stdout=StringIO())
    job = services.create_job("noop", name="demo: noop (succeeds at once)")
    Run.objects.filter(job=job).update(state=RunState.SUCCEEDED, started_at=timezone.now(),
                                       finished_at=timezone.now())

    page.set_viewport_size({"width": WIDTH, "height": HEIGHT})
    page.goto("/admin/jobs/job/")
    assert page.locator("#nav-sidebar").is_visible()  # as a new user sees it

    for column in ("status_display", "last_run_outcome"):
        fully_shown(page, f"#result_list thead th.column-{column}")
        fully_shown(page, f"#result_list tbody td.field-{column}")


def test_the_dead_letter_shows_the_reason_uncut(page):
    job = services.create_job("always_fails",
                              name="demo: always fails (ends in the dead letter)")
    Run.objects.filter(job=job).update(state=RunState.DEAD, attempt=3, error=LONG_ERROR,
                                       started_at=timezone.now(), finished_at=timezone.now())

    page.set_viewport_size({"width": WIDTH, "height": HEIGHT})
    page.goto("/admin/runs/deadrun/")
    assert page.locator("#nav-sidebar").is_visible()

    reason = page.locator("#result_list thead th[class*='column-reason']")
    assert reason.count() == 1
    fully_shown(page, "#result_list thead th[class*='column-reason']")
    fully_shown(page, "#result_list tbody td[class*='field-reason']")
    fully_shown(page, "#result_list thead th:last-child")  # and the row does not scroll
