"""A workflow node's job takes the flow fields of a plain job (jobs/spec.py, docs/api.md
"Job fields"): ``rate_key``, ``concurrency_key`` and ``concurrency_limit``, evaluated
from the node's payload, and its runs are held to them like any other run
(docs/isolation.md, "Concurrency keys")."""

import time

import pytest

from jobs.registry import handler
from runs.flow import control as flow
from runs.models import Attempt
from tests.test_flow_daemons import most_at_once
from tests.test_workflows_engine import drain, node
from workflows import services
from workflows.validation import InvalidWorkflow

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "sqlite"])


@handler("wf.nap")
def nap(ctx, payload):
    time.sleep(0.2)
    return {"me": payload["me"]}


@pytest.fixture
def pair(broker, settings):
    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": broker.name}
    return broker


@pytest.fixture(autouse=True)
def fresh_flow():
    yield
    for alias in ("default", "sqlite"):
        flow.forget_cache(alias)
    flow.forget_use()


def keyed(name, customer):
    return node(name, "wf.nap", payload={"me": name, "c": customer},
                concurrency_key="payload.c", concurrency_limit=1, rate_key="payload.c")


def test_a_nodes_flow_keys_are_stored_as_a_plain_jobs_are(pair):
    wf = services.create_workflow("keyed", [keyed("a", "acme")], using=pair.using)
    job = wf.nodes.get().job
    assert (job.concurrency_key, job.concurrency_limit, job.rate_key) == (
        "payload.c=acme", 1, "payload.c=acme")


def test_a_bad_node_key_is_refused_naming_the_node_and_field(pair):
    bad = node("b", "wf.nap", concurrency_key="payload.c")  # the payload has no c
    with pytest.raises(InvalidWorkflow) as caught:
        services.create_workflow("bad", [node("a"), bad], using=pair.using)
    assert "nodes[1].concurrency_key" in caught.value.errors, caught.value.errors


def test_parallel_nodes_of_one_key_value_never_run_at_once(pair):
    fan = [keyed(f"b{i}", "acme") for i in range(4)]
    wf = services.create_workflow("fan", [node("a"), *fan],
                                  [["a", f"b{i}"] for i in range(4)], using=pair.using)
    view = drain(pair, services.start_workflow_run(wf, using=pair.using))

    assert view["state"] == "succeeded"
    spans = list(Attempt.objects.using(pair.using)
                 .filter(run__job__concurrency_key="payload.c=acme")
                 .values_list("started_at", "finished_at"))
    assert len(spans) == 4
    assert most_at_once(spans) == 1, spans
