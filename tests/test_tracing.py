"""OpenTelemetry tracing (docs/tracing.md, runs/tracing.py): a run stores the traceparent
of its enqueue span, a child of the span current where it was made; each attempt's span,
made in the worker's child where the handler runs, is a child of that context, so a
retry by another worker continues the trace; the http handler sends the attempt's
traceparent. A workflow's node runs continue the span of the upstream whose ack made
them; a trigger, a backfill and a callback continue the trace they were made in, a cron
occurrence starts one of its own. With tracing off nothing is stored and no span made.
On every broker/database pair, with the SDK's exporters (tests/spans.py)."""

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from jobs import services
from jobs.registry import handler
from runs.models import PENDING_STATES, Run, RunState
from runs.outbound.payload import http_payload
from runs.worker import Worker
from scheduler_core.exceptions import PermanentFailure, RetryAfter
from tests import http_server, spans
from tests.conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])
recorder = pytest.fixture(spans.recording)
server = pytest.fixture(http_server.serving)


@handler("tracing.second_time_lucky")
def second_time_lucky(ctx, payload):
    if ctx.attempt == 1:
        raise RetryAfter(0, "not yet")
    return "ok"


@handler("tracing.items")
def items(ctx, payload):
    return payload["items"]


def request_span():
    """A span as a web framework's instrumentation makes one around a request."""
    from opentelemetry import trace

    return trace.get_tracer("tests").start_as_current_span("POST /api/jobs/")


def drain(broker, max_runs: int | None = None) -> None:
    """Promote what is due, then run it with a worker of its own that stops once idle
    (or after ``max_runs`` runs); without ``max_runs``, again until no run is pending or
    running (a burst worker can stop before a run an ack made is pushed)."""
    def done() -> bool:
        broker.promote()
        Worker(["default"], concurrency=1, using=broker.using, burst=True,
               max_runs=max_runs).serve()
        return max_runs is not None or not Run.objects.using(broker.using).filter(
            state__in=[*PENDING_STATES, RunState.RUNNING]).exists()

    wait_until(done, timeout=60, interval=0.05, message="the runs to finish")


def test_a_retry_by_another_worker_continues_the_requests_trace(broker, recorder):
    with request_span() as request:
        job = services.create_job("tracing.second_time_lucky", using=broker.using)
    run = Run.objects.using(broker.using).get(job=job)
    [enqueue] = recorder.spans("scheduler.enqueue")
    request_id = f"0x{request.get_span_context().span_id:016x}"

    drain(broker, max_runs=1)  # the first attempt asks to be retried at once
    assert Run.objects.using(broker.using).get(pk=run.pk).state == RunState.RETRYING
    drain(broker)  # a second worker's attempt succeeds

    assert Run.objects.using(broker.using).get(pk=run.pk).state == RunState.SUCCEEDED
    assert enqueue["parent_id"] == request_id
    assert enqueue["attributes"]["scheduler.handler"] == "tracing.second_time_lucky"
    assert spans.span_id(run.trace_context) == enqueue["context"]["span_id"]
    attempts = sorted(recorder.spans("scheduler.attempt"),
                      key=lambda s: s["attributes"]["scheduler.attempt"])
    assert [s["attributes"]["scheduler.attempt"] for s in attempts] == [1, 2]
    for attempt in attempts:
        assert attempt["context"]["trace_id"] == enqueue["context"]["trace_id"]
        assert attempt["parent_id"] == enqueue["context"]["span_id"]
        assert attempt["attributes"]["scheduler.run_id"] == run.pk
    assert [s["status"]["status_code"] for s in attempts] == ["ERROR", "OK"]
    assert [s["attributes"]["scheduler.outcome"] for s in attempts] == ["failed", "succeeded"]
    by_attempt = lambda s: s["attributes"]["scheduler.attempt"]  # noqa: E731
    leases = sorted(recorder.spans("scheduler.lease"), key=by_attempt)
    acks = sorted(recorder.spans("scheduler.ack"), key=by_attempt)
    assert [by_attempt(s) for s in leases] == [by_attempt(s) for s in acks] == [1, 2]
    for span in leases + acks:
        assert span["parent_id"] == enqueue["context"]["span_id"]
        assert span["attributes"]["scheduler.run_id"] == run.pk
    assert [s["attributes"]["scheduler.outcome"] for s in acks] == ["failed", "succeeded"]
    assert all(s["attributes"]["scheduler.accepted"] for s in acks)


def test_a_bulk_create_gives_each_run_its_enqueue_span(broker, recorder):
    specs = [{"handler": "noop", "name": f"n{i}"} for i in range(3)]
    with request_span():
        services.create_jobs(specs, using=broker.using)

    [enqueue] = recorder.spans("scheduler.enqueue")
    assert enqueue["attributes"]["scheduler.jobs"] == 3
    contexts = set(Run.objects.using(broker.using).values_list("trace_context", flat=True))
    assert len(contexts) == 1
    assert spans.span_id(contexts.pop()) == enqueue["context"]["span_id"]


def test_with_tracing_off_no_context_is_stored_and_no_span_made(broker, recorder, settings):
    settings.SCHEDULER = {**settings.SCHEDULER, "TRACING": False}
    with request_span():
        job = services.create_job("noop", using=broker.using)
    drain(broker)

    run = Run.objects.using(broker.using).get(job=job)
    assert run.trace_context is None and run.state == RunState.SUCCEEDED
    assert [s["name"] for s in recorder.spans()] == ["POST /api/jobs/"]


def test_the_http_handler_sends_its_attempts_traceparent(broker, recorder, settings, server):
    settings.SCHEDULER = {**settings.SCHEDULER, "HTTP_ALLOWLIST": "127.0.0.1"}
    with request_span():
        job = services.create_job("http", http_payload(f"{server.url}/echo"),
                                  using=broker.using)
    drain(broker)

    assert Run.objects.using(broker.using).get(job=job).state == RunState.SUCCEEDED
    [attempt] = recorder.spans("scheduler.attempt")
    sent = {k.lower(): v for k, v in server.requests[-1][2].items()}["traceparent"]
    assert spans.trace_id(sent) == attempt["context"]["trace_id"]
    assert spans.span_id(sent) == attempt["context"]["span_id"]


def test_a_traceparent_the_job_gives_is_sent_as_given(broker, recorder, settings, server):
    settings.SCHEDULER = {**settings.SCHEDULER, "HTTP_ALLOWLIST": "127.0.0.1"}
    own = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    services.create_job("http", http_payload(f"{server.url}/echo",
                                             headers={"TraceParent": own}),
                        using=broker.using)
    drain(broker)

    headers = {k.lower(): v for k, v in server.requests[-1][2].items()}
    assert headers["traceparent"] == own


def test_the_run_column_holds_a_w3c_traceparent(broker, recorder):
    with request_span() as request:
        job = services.create_job("noop", using=broker.using)

    stored = Run.objects.using(broker.using).get(job=job).trace_context
    version, trace, parent, flags = stored.split("-")
    assert version == "00" and int(flags, 16) & 1 and len(stored) == 55  # sampled
    assert int(trace, 16) == request.get_span_context().trace_id
    assert parent != f"{request.get_span_context().span_id:016x}"  # the enqueue span's


def test_a_django_task_enqueued_in_a_span_runs_in_its_trace(broker, recorder, settings):
    from tests import djtasks_tasks

    settings.TASKS = {"default": {"BACKEND": "scheduler_tasks.backend.SchedulerBackend",
                                  "QUEUES": [], "OPTIONS": {"DATABASE": broker.using}}}
    with request_span() as request:
        djtasks_tasks.add.enqueue(1, b=2)
    drain(broker)

    [enqueue] = recorder.spans("scheduler.enqueue")
    [attempt] = recorder.spans("scheduler.attempt")
    assert enqueue["parent_id"] == f"0x{request.get_span_context().span_id:016x}"
    assert attempt["parent_id"] == enqueue["context"]["span_id"]
    assert attempt["status"]["status_code"] == "OK"


def node_runs(using: str, workflow_run) -> dict[str, int]:
    """{node name: its run's id} of ``workflow_run``'s node runs that have a run."""
    from workflows.models import NodeRun

    return dict(NodeRun.objects.using(using).filter(
        workflow_run=workflow_run, run_id__isnull=False).values_list("node__name", "run_id"))


def of_run(recorder, run_id: int) -> dict[str, list[dict]]:
    """{span name: the spans of run ``run_id``} (lease, attempt, ack)."""
    found: dict[str, list[dict]] = {}
    for span in recorder.spans():
        if span["attributes"].get("scheduler.run_id") == run_id:
            found.setdefault(span["name"], []).append(span)
    return found


def releasing_span(recorder, run_id: int) -> str:
    """The span id of what run ``run_id``'s ack gives the runs it makes: its ack span,
    or its attempt's when its child acked it (no ack span then)."""
    spans = of_run(recorder, run_id)
    [span] = spans.get("scheduler.ack") or spans["scheduler.attempt"]
    return span["context"]["span_id"]


def parents(recorder, run_id: int) -> set[str]:
    """The parent span ids of run ``run_id``'s lease, attempt and ack spans."""
    return {s["parent_id"] for spans in of_run(recorder, run_id).values() for s in spans}


@pytest.mark.parametrize("child_acks", [True, False], ids=["child acks", "worker acks"])
def test_each_node_continues_the_span_of_the_upstream_whose_ack_made_it(
        broker, recorder, settings, child_acks):
    from workflows import services as workflows

    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": broker.name,
                          "WORKER_CHILD_ACKS": child_acks}
    nodes = [{"name": f"n{i}", "handler": "noop"} for i in range(5)]
    workflow = workflows.create_workflow(
        "traced", nodes, [["n0", "n1"], ["n1", "n2"], ["n1", "n3"], ["n2", "n4"],
                          ["n3", "n4"]], using=broker.using)
    with request_span() as request:
        workflow_run = workflows.start_workflow_run(workflow, using=broker.using)
    drain(broker)

    assert Run.objects.using(broker.using).filter(state=RunState.SUCCEEDED).count() == 5
    run = node_runs(broker.using, workflow_run)
    assert {s["context"]["trace_id"] for s in recorder.spans("scheduler.attempt")} == {
        f"0x{request.get_span_context().trace_id:032x}"}
    assert parents(recorder, run["n0"]) == {f"0x{request.get_span_context().span_id:016x}"}
    for node, upstream in [("n1", "n0"), ("n2", "n1"), ("n3", "n1")]:
        assert parents(recorder, run[node]) == {releasing_span(recorder, run[upstream])}
    # A join continues the upstream whose ack made it ready: the later of the two.
    [joined] = parents(recorder, run["n4"])
    assert joined in {releasing_span(recorder, run["n2"]), releasing_span(recorder, run["n3"])}


def test_a_rest_create_stores_the_requests_context(api, recorder):
    with request_span() as request:
        answer = api.post("/api/jobs/", {"handler": "noop"}, format="json")

    assert answer.status_code == 201, answer.content
    [enqueue] = recorder.spans("scheduler.enqueue")
    assert enqueue["parent_id"] == f"0x{request.get_span_context().span_id:016x}"
    stored = Run.objects.get(job_id=answer.json()["id"]).trace_context
    assert spans.span_id(stored) == enqueue["context"]["span_id"]


def test_without_the_api_installed_tracing_is_off_and_imports_nothing():
    """A process where ``import opentelemetry`` fails, as without the extra."""
    code = (
        "import sys; sys.modules['opentelemetry'] = None\n"
        "import django; django.setup()\n"
        "from runs import tracing\n"
        "import runs.worker.child, jobs.ingest.bulk, runs.outbound.handler\n"
        "headers = {}\n"
        "tracing.inject(headers)\n"
        "assert not tracing.on() and tracing.current() is None and headers == {}\n"
        "with tracing.enqueue('noop') as span:\n"
        "    assert span is None\n"
        "print('ok')\n")
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "scheduler_project.settings_test",
           "SCHEDULER_TRACING": "true"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=60, cwd=Path(__file__).resolve().parents[1])

    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_a_context_source_that_fails_costs_no_run(broker, recorder, caplog):
    from runs import tracing

    def broken(run_ids, using):
        raise RuntimeError("the context's database is gone")

    tracing.SOURCES.insert(0, broken)
    try:
        job = services.create_job("noop", using=broker.using)
        Run.objects.using(broker.using).filter(job=job).update(trace_context=None)
        drain(broker)
    finally:
        tracing.SOURCES.remove(broken)

    assert Run.objects.using(broker.using).get(job=job).state == RunState.SUCCEEDED
    assert "no trace context for runs" in caplog.text
    [attempt] = recorder.spans("scheduler.attempt")
    assert attempt["parent_id"] is None  # a trace of its own


def test_a_mapped_nodes_items_continue_its_upstream_and_the_node_below_an_item(
        broker, recorder, settings):
    from workflows import services as workflows
    from workflows.models import MapItem

    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": broker.name}
    workflow = workflows.create_workflow("mapped", [
        {"name": "root", "handler": "tracing.items", "payload": {"items": [1, 2, 3]}},
        {"name": "each", "handler": "noop", "map": "root"},
        {"name": "after", "handler": "noop"}], [["each", "after"]], using=broker.using)
    with request_span():
        workflow_run = workflows.start_workflow_run(workflow, using=broker.using)
    drain(broker)

    run = node_runs(broker.using, workflow_run)
    items = list(MapItem.objects.using(broker.using).filter(
        node_run__workflow_run=workflow_run).values_list("run_id", flat=True))
    assert len(recorder.spans("scheduler.attempt")) == 5  # the root's, 3 items', after's
    for item in items:
        assert parents(recorder, item) == {releasing_span(recorder, run["root"])}
    [after] = parents(recorder, run["after"])
    assert after in {releasing_span(recorder, item) for item in items}


def test_a_sub_workflows_child_continues_the_span_of_its_nodes_upstream(
        broker, recorder, settings):
    from workflows import services as workflows
    from workflows.models import NodeRun, WorkflowRun

    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": broker.name}
    child = workflows.create_workflow("inner", [{"name": "c0", "handler": "noop"}],
                                      using=broker.using)
    parent = workflows.create_workflow("outer", [
        {"name": "p0", "handler": "noop"}, {"name": "sub", "workflow": child.pk}],
        [["p0", "sub"]], using=broker.using)
    with request_span():
        workflow_run = workflows.start_workflow_run(parent, using=broker.using)
    drain(broker)

    inner = WorkflowRun.objects.using(broker.using).get(pk=NodeRun.objects.using(
        broker.using).get(workflow_run=workflow_run, node__name="sub").child_run_id)
    assert inner.state == "succeeded"
    p0 = node_runs(broker.using, workflow_run)["p0"]
    assert parents(recorder, node_runs(broker.using, inner)["c0"]) == {
        releasing_span(recorder, p0)}


def enqueue_of(recorder, traceparent: str) -> dict:
    """The enqueue span ``traceparent`` (a run's stored context) names."""
    [span] = [s for s in recorder.spans("scheduler.enqueue")
              if s["context"]["span_id"] == spans.span_id(traceparent)]
    return span


def test_a_trigger_stores_an_enqueue_span_of_the_span_current(broker, recorder):
    job = services.create_job("noop", cron="0 0 1 1 *", using=broker.using)
    with request_span() as request:
        run = services.trigger(job.pk, using=broker.using)
    drain(broker)

    stored = Run.objects.using(broker.using).get(pk=run.pk)
    assert stored.state == RunState.SUCCEEDED
    enqueue = enqueue_of(recorder, stored.trace_context)
    assert enqueue["parent_id"] == f"0x{request.get_span_context().span_id:016x}"
    assert parents(recorder, run.pk) == {enqueue["context"]["span_id"]}


def test_a_rest_trigger_stores_the_requests_context(api, recorder):
    made = api.post("/api/jobs/", {"handler": "noop", "cron": "0 0 1 1 *"}, format="json")
    assert made.status_code == 201, made.content
    with request_span() as request:
        answer = api.post(f"/api/jobs/{made.json()['id']}/trigger/")

    assert answer.status_code == 201, answer.content
    enqueue = enqueue_of(recorder, Run.objects.get(pk=answer.json()["id"]).trace_context)
    assert enqueue["parent_id"] == f"0x{request.get_span_context().span_id:016x}"


def test_a_backfills_runs_share_one_enqueue_span_of_the_span_current(broker, recorder):
    from jobs.schedules.backfill import backfill_job
    from runs.clock import db_now

    job = services.create_job("noop", cron="0 * * * *", using=broker.using)
    start = (db_now(broker.using) - timedelta(days=1)).replace(minute=0, second=0,
                                                               microsecond=0)
    with request_span() as request:
        record = backfill_job(job.pk, start, start + timedelta(hours=3), using=broker.using)

    contexts = set(Run.objects.using(broker.using).filter(backfill_id=record.pk)
                   .values_list("trace_context", flat=True))
    assert record.made == 3 and len(contexts) == 1
    enqueue = enqueue_of(recorder, contexts.pop())
    assert enqueue["parent_id"] == f"0x{request.get_span_context().span_id:016x}"


@handler("tracing.refused")
def refused(ctx, payload):
    raise PermanentFailure("no")


@pytest.mark.parametrize("kind", ["on_success", "on_failure"])
def test_a_callback_continues_the_trace_of_the_run_that_fired_it(broker, recorder, kind):
    with request_span() as request:
        job = services.create_job("noop" if kind == "on_success" else "tracing.refused",
                                  **{kind: "noop"}, using=broker.using)
    drain(broker)

    fired = Run.objects.using(broker.using).get(job=job)
    callback = Run.objects.using(broker.using).get(job__callback_of=fired.pk)
    assert callback.state == RunState.SUCCEEDED
    [ack] = of_run(recorder, fired.pk)["scheduler.ack"]  # the ack that made the callback
    assert spans.span_id(callback.trace_context) == ack["context"]["span_id"]
    assert parents(recorder, callback.pk) == {ack["context"]["span_id"]}
    assert ack["context"]["trace_id"] == f"0x{request.get_span_context().trace_id:032x}"


def test_each_cron_occurrence_starts_a_trace_of_its_own(broker, recorder):
    from jobs.models import Job
    from jobs.schedules.scheduler import Scheduler
    from runs.clock import db_now

    with request_span() as request:
        job = services.create_job("noop", cron="* * * * *", misfire_policy="run_all",
                                  using=broker.using)
    minute = db_now(broker.using).replace(second=0, microsecond=0)
    Job.objects.using(broker.using).filter(pk=job.pk).update(
        next_run_at=minute - timedelta(minutes=2))
    Scheduler(using=broker.using, partitions=1).tick()

    runs = list(Run.objects.using(broker.using).filter(job=job))
    assert len(runs) >= 3
    enqueues = [enqueue_of(recorder, run.trace_context) for run in runs]
    assert all(s["parent_id"] is None for s in enqueues)  # a trace of its own
    assert all(s["attributes"]["scheduler.job_id"] == job.pk for s in enqueues)
    traces = {s["context"]["trace_id"] for s in enqueues}
    assert len(traces) == len(runs)
    assert f"0x{request.get_span_context().trace_id:032x}" not in traces


def test_a_resumes_catch_up_runs_start_traces_of_their_own(broker, recorder):
    from tests.test_pause_resume import paused_cron_job

    job, _, _ = paused_cron_job(broker, paused_min=6.5, max_lag_s=150)
    with request_span() as request:
        services.resume([job.pk], using=broker.using, catch_up="all")

    runs = list(Run.objects.using(broker.using).filter(job=job, catch_up=True))
    assert runs
    enqueues = [enqueue_of(recorder, run.trace_context) for run in runs]
    assert all(s["parent_id"] is None for s in enqueues)
    assert f"0x{request.get_span_context().trace_id:032x}" not in {
        s["context"]["trace_id"] for s in enqueues}
