"""A hostile or careless tenant against the workflows' REST API and the ingest's Python
API: what a client may not make a node run (the internal django_task handler, a task of
its choosing: docs/security.md, "Tenants and limits"), and malformed input answered 400
naming the field, never a 500, with nothing stored."""

import pytest

from jobs import services as job_services
from jobs.models import Job, Schedule
from jobs.tenants import QuotaExceeded, set_owner_policy
from runs.brokers import get_broker
from runs.models import Run
from scheduler_core.exceptions import InvalidJob
from workflows import services
from workflows.models import Workflow, WorkflowRun

pytestmark = pytest.mark.django_db


def post(api, nodes, **body):
    return api.post("/api/workflows/", {"name": "w", "nodes": nodes, **body}, format="json")


@pytest.mark.parametrize("node, field", [
    ({"name": "a", "handler": "django_task",
      "payload": {"task": "tests.djtasks_tasks.add", "args": [1, 2]}}, "nodes[0].handler"),
    ({"name": "a", "task": "tests.djtasks_tasks.add", "args": [1, 2]}, "nodes[0].task"),
])
def test_a_client_cannot_make_a_node_run_a_django_task(api, node, field):
    response = post(api, [node])

    assert response.status_code == 400, response.content
    assert field in response.json()
    assert Workflow.objects.count() == 0 and Job.objects.count() == 0


def test_the_python_api_refuses_the_django_task_handler_by_name(alice):
    with pytest.raises(InvalidJob) as caught:
        services.create_workflow("w", [{"name": "a", "handler": "django_task",
                                        "payload": {"task": "os.system", "args": ["id"]}}])

    assert "nodes[0].handler" in caught.value.errors
    assert Job.objects.count() == 0


@pytest.mark.parametrize("path", ["tests.\ud800", ".relative", "tests..djtasks_tasks",
                                  "tests.djtasks_tasks.add\x00"])
def test_a_task_path_that_is_no_module_path_is_a_field_error(path):
    with pytest.raises(InvalidJob) as caught:
        services.create_workflow("w", [{"name": "a", "task": path}])

    assert "nodes[0].task" in caught.value.errors


@pytest.mark.parametrize("name", [["x"], {"x": 1}, 7])
def test_a_node_name_that_is_not_text_is_a_400(api, name):
    response = post(api, [{"name": name, "handler": "noop"}])

    assert response.status_code == 400, response.content
    assert "nodes[0].name" in response.json()
    assert Workflow.objects.count() == 0


def test_a_max_lag_beyond_the_column_is_a_field_error_not_a_database_error():
    with pytest.raises(InvalidJob) as caught:
        job_services.create_jobs([{"handler": "noop", "cron": "* * * * *",
                                   "max_lag_s": 10 ** 30}])

    assert list(caught.value.errors) == ["[0].max_lag_s"]
    assert Job.objects.count() == 0 and Schedule.objects.count() == 0


def _fan(name: str, width: int, owner) -> Workflow:
    nodes = [{"name": "root", "handler": "noop"}, *(
        {"name": f"n{i}", "handler": "noop"} for i in range(width))]
    return services.create_workflow(name, nodes, [["root", f"n{i}"] for i in range(width)],
                                    owner=owner)


def test_a_start_counts_every_node_against_max_pending_not_only_the_roots(alice):
    """One root fanning out to five: a start adds six pending runs in time. Counting only
    the root let a tenant at max_pending=4 start four such runs, 24 runs in all."""
    set_owner_policy(alice, max_pending=4)
    workflow = _fan("fan", 5, alice)

    with pytest.raises(QuotaExceeded) as caught:
        services.start_workflow_run(workflow)

    assert caught.value.limit == "max_pending"
    assert WorkflowRun.objects.count() == 0 and Run.objects.count() == 0


def test_nodes_a_live_workflow_run_has_not_started_count_as_pending(alice):
    set_owner_policy(alice, max_pending=7)
    workflow = _fan("fan", 3, alice)
    services.start_workflow_run(workflow, run_key="first")  # 1 run now, 3 nodes to come

    with pytest.raises(QuotaExceeded) as caught:
        services.start_workflow_run(workflow, run_key="second")  # 4 + 4 > 7

    assert "3 of them not yet made" in str(caught.value)
    assert WorkflowRun.objects.count() == 1 and Run.objects.count() == 1


def test_a_requeue_counts_the_nodes_it_revives_against_max_pending(alice, settings):
    """A requeue of a dead root counted one run, but revives its upstream_failed fan-out
    too: a tenant at max_pending 10 requeued the roots of two failed 1-to-8 fan-outs and
    held 18 pending runs in time (an adversary's finding, 984 at max_pending 300)."""
    from runs import services as run_services
    from runs.models import AttemptOutcome
    from runs.types import Outcome
    from tests.test_workflows_races import lease_all
    from workflows.models import NodeRun

    # The database broker: its ready runs are rows this test's transaction sees.
    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": "database"}
    set_owner_policy(alice, max_pending=10)
    workflow = services.create_workflow(
        "fan", [{"name": "root", "handler": "noop", "max_attempts": 1},
                *({"name": f"n{i}", "handler": "noop"} for i in range(8))],
        [["root", f"n{i}"] for i in range(8)], owner=alice)
    broker = get_broker("default", name="database")
    roots = []
    for key in ("first", "second"):
        services.start_workflow_run(workflow, run_key=key)
        [lease] = lease_all(broker, 1)
        broker.complete([Outcome(lease, AttemptOutcome.FAILED, error="boom", retry=False)])
        roots.append(lease.run_id)
    assert NodeRun.objects.filter(state="upstream_failed").count() == 16

    with pytest.raises(QuotaExceeded) as caught:
        run_services.requeue(roots, strict=True)
    assert caught.value.limit == "max_pending"
    assert run_services.requeue(roots) == 1  # 9 of 10: the second would make 18
    assert NodeRun.objects.filter(state="upstream_failed").count() == 8


def test_a_schedule_over_the_column_is_a_400_naming_it_and_stores_nothing(api):
    every = (",".join(str(m) for m in range(60)) + " "
             + ",".join(str(h) for h in range(24)) + " * * *")
    response = post(api, [{"name": "a", "handler": "noop"}], schedule=every)

    assert response.status_code == 400, response.content
    assert "at most 200 characters" in str(response.json()["schedule"])
    assert Workflow.objects.count() == 0 and Schedule.objects.count() == 0


def test_a_lone_surrogate_is_named_as_such_and_only_where_it_is():
    """A lone surrogate in a node's name was reported as 'must be text of at most 200
    characters', and one in the workflow's name under nodes[0].name as well (through the
    node's job name, which the workflow's name begins)."""
    with pytest.raises(InvalidJob) as caught:
        services.create_workflow("w\udc00", [{"name": "a\udc00", "handler": "noop"},
                                             {"name": "b", "handler": "noop"}])

    assert caught.value.errors == {
        "name": "must be valid Unicode text (it holds a lone UTF-16 surrogate)",
        "nodes[0].name": "must be valid Unicode text (it holds a lone UTF-16 surrogate)"}
    assert Workflow.objects.count() == 0 and Job.objects.count() == 0


@pytest.mark.parametrize("call, field", [
    (lambda wf: services.start_workflow_run(wf, started_by="evil"), "started_by"),
    (lambda wf: services.create_workflow("w2", [{"name": "a", "handler": "noop"}], owner=7),
     "owner"),
])
def test_bad_python_api_arguments_are_field_errors_storing_nothing(call, field):
    """started_by "evil" was stored as it was; an owner given as an id failed with an
    AttributeError."""
    workflow = services.create_workflow("w", [{"name": "a", "handler": "noop"}])
    with pytest.raises(InvalidJob) as caught:
        call(workflow)

    assert list(caught.value.errors) == [field]
    assert WorkflowRun.objects.count() == 0 and Workflow.objects.count() == 1


def test_edges_none_is_a_workflow_without_edges():
    workflow = services.create_workflow("w", [{"name": "a", "handler": "noop"}], None)

    assert workflow.edges.count() == 0


def test_every_way_in_counts_the_nodes_a_live_workflow_run_has_not_made_yet(api, alice):
    """Only a workflow's start and a retry counted them: a job create, a bulk create, a
    trigger and a resume with catch_up saw 2 pending runs where the owner held 5, and a
    tenant went about 2x over max_pending."""
    from runs.brokers import get_broker
    from tests.test_pause_resume import paused_cron_job

    paused, _, _ = paused_cron_job(get_broker("default"))  # its held run: 1 pending
    recurring = job_services.create_job("noop", cron="@daily")
    Job.objects.filter(pk__in=[paused.pk, recurring.pk]).update(owner=alice)
    set_owner_policy(alice, max_pending=5)
    services.start_workflow_run(_fan("fan", 3, alice))  # 1 run now, 3 nodes to come
    assert Run.objects.filter(state__in=["scheduled", "queued"]).count() == 2
    runs_before = Run.objects.count()

    answers = {
        "create": api.post("/api/jobs/", {"handler": "noop"}, format="json"),
        "bulk": api.post("/api/jobs/bulk/", {"jobs": [{"handler": "noop"}]}, format="json"),
        "trigger": api.post(f"/api/jobs/{recurring.pk}/trigger/"),
        "resume": api.post(f"/api/jobs/{paused.pk}/resume/", {"catch_up": "latest"},
                           format="json"),
    }

    for path, response in answers.items():
        assert response.status_code == 403, (path, response.content)
        assert "3 of them not yet made" in response.json()["detail"], path
    with pytest.raises(QuotaExceeded):
        job_services.create_job("noop", owner=alice)
    assert Run.objects.count() == runs_before
    assert Job.objects.get(pk=paused.pk).status == "paused"
