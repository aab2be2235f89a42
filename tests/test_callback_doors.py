"""on_success and on_failure at the ways in beyond REST and the Python API
(tests/test_callbacks.py has those): the admin's create form and ``@task`` options, each
storing what it was given and refusing an unknown handler naming the field
(docs/callbacks.md)."""

import pytest
from django.tasks import task
from django.tasks.exceptions import InvalidTask

from jobs.models import Job

pytestmark = pytest.mark.django_db

FORM = {"handler": "noop", "payload": "{}", "misfire_policy": "run_once",
        "queue": "default", "priority": "5", "timeout_s": "60", "max_attempts": "3"}


@task(on_success="echo", on_failure={"handler": "noop", "payload": {"team": "ops"}})
def called_back():
    return None


def plain():
    return None


def test_a_task_stores_its_callbacks_on_each_runs_job():
    result = called_back.enqueue()

    job = Job.objects.get(runs__pk=int(result.id))
    assert (job.on_success, job.on_failure) == (
        {"handler": "echo", "payload": {}}, {"handler": "noop", "payload": {"team": "ops"}})


@pytest.mark.parametrize("field", ["on_success", "on_failure"])
def test_a_task_naming_an_unknown_handler_is_refused_naming_the_field(field):
    with pytest.raises(InvalidTask, match=f"{field}: no handler is registered as 'nope'"):
        task(**{field: "nope"})(plain)


def test_the_admin_creates_a_job_with_callbacks(admin_client):
    form = {**FORM, "name": "cb", "on_success": "echo",
            "on_failure": '{"handler": "noop", "payload": {"k": 1}}'}

    admin_client.post("/admin/jobs/job/add/", form)

    job = Job.objects.get(name="cb")
    assert (job.on_success, job.on_failure) == (
        {"handler": "echo", "payload": {}}, {"handler": "noop", "payload": {"k": 1}})
    page = admin_client.get(f"/admin/jobs/job/{job.pk}/change/").content.decode()
    assert "echo" in page and "On success" in page


@pytest.mark.parametrize("field", ["on_success", "on_failure"])
def test_the_admin_refuses_an_unknown_handler_on_its_field(admin_client, field):
    form = {**FORM, "name": "bad", field: "nope"}

    page = admin_client.post("/admin/jobs/job/add/", form).content.decode()

    assert "no handler is registered as &#x27;nope&#x27;" in page
    assert not Job.objects.filter(name="bad").exists()


def test_the_admin_add_page_offers_empty_callbacks_and_saves_them_as_none(admin_client):
    """A browser posts back what the page rendered: an empty callback must render empty,
    not as JSON's null, which once read as a handler named 'null'."""
    page = admin_client.get("/admin/jobs/job/add/").content.decode()
    for field in ("on_success", "on_failure"):
        textarea = page[page.index(f'name="{field}"'):]
        assert textarea[textarea.index(">") + 1:textarea.index("</textarea>")].strip() == ""

    admin_client.post("/admin/jobs/job/add/",
                      {**FORM, "name": "plain", "on_success": "", "on_failure": "null"})

    job = Job.objects.get(name="plain")
    assert (job.on_success, job.on_failure) == (None, None)
