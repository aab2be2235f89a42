"""The admin's lists fit 1280 px with long names (runs/admin/cells.py): a long job,
handler, owner or workflow name is cut by the stylesheet, whole in its title."""

import html
from pathlib import Path

import pytest
from django.contrib.auth.models import User

from jobs import services
from tests.test_api_helpers import finished_run

pytestmark = pytest.mark.django_db
CSS = Path(__file__).resolve().parents[1] / "runs" / "static" / "runs" / "admin.css"
LONG = "nightly export of every invoice line to the warehouse " * 3


def cut_cells(page) -> list[str]:
    text = page.content.decode()
    return [html.unescape(part.split('"', 1)[0])
            for part in text.split('class="cell-cut')[1:]
            for part in [part.split('title="', 1)[1]]]


def test_long_names_are_cut_in_the_lists_and_whole_on_hover(admin_client):
    owner = User.objects.create_user("operations-team-of-the-eastern-region-" * 2)
    job = services.create_job("noop", {}, name=LONG.strip(), owner=owner, cron="@daily")
    finished_run(job)

    jobs = admin_client.get("/admin/jobs/job/")
    runs = admin_client.get("/admin/runs/run/")

    assert jobs.status_code == runs.status_code == 200
    assert LONG.strip() in cut_cells(jobs) and owner.username in cut_cells(jobs)
    assert "noop" in cut_cells(jobs)
    assert LONG.strip() in cut_cells(runs)
    css = CSS.read_text()
    assert ".cell-cut {" in css and "text-overflow: ellipsis" in css
