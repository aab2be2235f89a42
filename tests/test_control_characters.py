"""Single-line fields refuse control characters at every way in (scheduler_core/text.py,
docs/security.md "Daemons' fault isolation"): a job, workflow or node name holding a
linefeed reached an alert e-mail's subject and stopped the dispatcher. REST answers 400
naming the field, the Python API raises InvalidJob naming it, the admin's form shows it;
nothing is stored."""

import pytest

from jobs import services
from jobs.models import Job
from scheduler_core.exceptions import InvalidJob
from scheduler_core.text import line_problem, one_line
from workflows import services as workflows
from workflows.models import Workflow

pytestmark = pytest.mark.django_db

# C0 (NUL, TAB, LF, CR, ESC, US), DEL, C1 (U+0080, NEL, U+009F), LINE/PARAGRAPH SEPARATOR
CONTROLS = ["\x00", "\t", "\n", "\r", "\x1b", "\x1f", "\x7f", "\x80", "\x85", "\x9f",
            "\u2028", "\u2029"]
NODE = {"name": "a", "handler": "noop"}


@pytest.mark.parametrize("char", CONTROLS)
def test_the_rule_refuses_every_control_character_and_names_it(char):
    problem = line_problem(f"night{char}ly")

    assert problem is not None and "control characters" in problem
    assert "position 5" in problem
    assert one_line(f"night{char}ly") == "night ly"


@pytest.mark.parametrize("text", ["nightly", "Überweisung", "日次", "ok 🙂", "a-b_c.d e"])
def test_ordinary_text_passes(text):
    assert line_problem(text) is None
    assert one_line(text) == text


@pytest.mark.parametrize("field, options", [
    ("name", {"name": "nightly\nBcc: x@example.com"}),
    ("name", {"name": "\x1b[31mred"}),
    ("shard_key", {"shard_key": "a\rb"}),
    ("unique_key", {"unique_key": "k\x85"}),
])
def test_the_python_api_refuses_a_control_character_naming_the_field(field, options):
    with pytest.raises(InvalidJob) as caught:
        services.create_job("noop", {}, delay_s=0, **options)

    assert "control characters" in caught.value.errors[field]
    assert not Job.objects.exists()


def test_a_job_renamed_through_the_python_api_is_refused_too():
    job = services.create_job("noop", {}, delay_s=3600, name="nightly")

    with pytest.raises(InvalidJob) as caught:
        services.update_job(job.pk, {"name": "nightly\n"})

    assert "name" in caught.value.errors
    job.refresh_from_db()
    assert job.name == "nightly"


@pytest.mark.parametrize("name, nodes, field", [
    ("nightly\nBcc: x@example.com", [NODE], "name"),
    ("nightly", [{"name": "a\x1b", "handler": "noop"}], "nodes[0].name"),
])
def test_the_python_api_refuses_a_workflow_or_node_name_with_one(name, nodes, field):
    with pytest.raises(InvalidJob) as caught:
        workflows.create_workflow(name, nodes, schedule="@daily")

    assert "control characters" in caught.value.errors[field], caught.value.errors
    assert (Workflow.objects.count(), Job.objects.count()) == (0, 0)


def test_a_workflow_run_key_with_one_is_refused():
    workflow = workflows.create_workflow("w", [NODE])

    with pytest.raises(InvalidJob) as caught:
        workflows.start_workflow_run(workflow, run_key="k\n1")

    assert "control characters" in caught.value.errors["run_key"]


@pytest.mark.parametrize("url, body, field", [
    ("/api/jobs/", {"handler": "noop", "name": "nightly\r\nBcc: x@example.com"}, "name"),
    ("/api/jobs/", {"handler": "noop", "name": "a\u2028b"}, "name"),
    ("/api/workflows/", {"name": "nightly\nBcc: x", "nodes": [NODE]}, "name"),
    ("/api/workflows/", {"name": "w", "nodes": [{"name": "a\x1b[2J", "handler": "noop"}]},
     "nodes[0].name"),
])
def test_rest_answers_400_naming_the_field(api, url, body, field):
    response = api.post(url, body, format="json")

    assert response.status_code == 400, response.content
    assert "control characters" in response.json()[field][0], response.json()
    assert (Workflow.objects.count(), Job.objects.count()) == (0, 0)


def test_rest_refuses_a_rename_with_one(api):
    job = api.post("/api/jobs/", {"handler": "noop", "cron": "@daily", "name": "n"},
                   format="json").json()

    response = api.patch(f"/api/jobs/{job['id']}/", {"name": "n\x07"}, format="json")

    assert response.status_code == 400
    assert "control characters" in response.json()["name"][0]
    assert Job.objects.get(pk=job["id"]).name == "n"


def test_the_admin_add_form_refuses_one_naming_the_field(admin_client):
    form = {"name": "night\r\nly", "handler": "noop", "payload": "{}",
            "misfire_policy": "run_once", "queue": "default", "priority": "5",
            "timeout_s": "60", "max_attempts": "4"}

    response = admin_client.post("/admin/jobs/job/add/", form)

    assert response.status_code == 200  # the form again, with the error
    assert "control characters" in response.content.decode()
    assert "name" in response.context["adminform"].form.errors
    assert not Job.objects.exists()


def test_a_bulk_create_names_the_job_and_field_and_stores_none(api):
    response = api.post("/api/jobs/bulk/", {"jobs": [
        {"handler": "noop", "name": "fine"}, {"handler": "noop", "name": "a\nb"}]},
        format="json")

    assert response.status_code == 400
    [bad] = response.json()["errors"]
    assert bad["index"] == 1 and "control characters" in bad["errors"]["name"][0]
    assert not Job.objects.exists()


# Direction controls and invisible format characters (Unicode Cf): spoofed names.
FORMATS = ["\u202a", "\u202e", "\u2066", "\u2069", "\u200e", "\u200f", "\u061c", "\u200b",
           "\u2060", "\u2064", "\ufeff", "\u00ad", "\U000e0041"]


@pytest.mark.parametrize("char", FORMATS)
def test_the_rule_refuses_direction_and_invisible_characters_naming_them(char):
    problem = line_problem(f"night{char}ly")

    assert problem is not None and f"U+{ord(char):04X}" in problem
    assert "position 5" in problem
    assert one_line(f"night{char}ly") == "nightly"


@pytest.mark.parametrize("text", ["👩\u200d💻", "🏳️\u200d🌈", "می\u200cخواهم", "क्\u200dष"])
def test_zero_width_joiner_and_non_joiner_pass(text):
    """Emoji sequences need ZWJ; Persian and Indic spelling need ZWNJ and ZWJ."""
    assert line_problem(text) is None
    assert one_line(text) == text


@pytest.mark.parametrize("url, body, field", [
    ("/api/jobs/", {"handler": "noop", "name": "invoice\u202efdp.exe"}, "name"),
    ("/api/workflows/", {"name": "\u202e", "nodes": [NODE]}, "name"),
    ("/api/workflows/", {"name": "w", "nodes": [{"name": "a\u200bb", "handler": "noop"}]},
     "nodes[0].name"),
])
def test_rest_refuses_a_direction_or_invisible_character_naming_it(api, url, body, field):
    """{"name": "\\u202e", ...} was a 201."""
    response = api.post(url, body, format="json")

    assert response.status_code == 400, response.content
    assert "U+20" in response.json()[field][0], response.json()
    assert (Workflow.objects.count(), Job.objects.count()) == (0, 0)


def test_rest_accepts_zwj_emoji_and_zwnj_names(api):
    for name in ["deploy 👩\u200d💻", "گزارش\u200cها"]:
        response = api.post("/api/jobs/", {"handler": "noop", "name": name}, format="json")

        assert response.status_code == 201, response.content
        assert Job.objects.get(pk=response.json()["id"]).name == name
