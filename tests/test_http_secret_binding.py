"""An http job's sealed secret is bound to where it was made (docs/security.md,
"Encrypted values"): the workflow API shows no ciphertext, clients never send ciphertext
(a token copied into another job, another owner's job or another header is a 400 naming
the field), a token planted in another job's row is never opened, and a header value h11
would refuse (and echo) is refused at input, never echoed later."""

import logging
from datetime import UTC, datetime

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import User

from jobs import services
from jobs.models import Job
from runs.context import RunContext
from runs.outbound import redact, secrets
from runs.outbound.handler import failure_text
from runs.outbound.handler import http as http_coroutine
from runs.outbound.payload import http_payload, opened
from runs.outbound.reseal import reseal
from scheduler_core.exceptions import InvalidJob, PermanentFailure
from tests import http_server
from tests.sealed import secret_of

# The handler is a coroutine (docs/async-handlers.md); its ORM reads run on this thread.
http = async_to_sync(http_coroutine)

pytestmark = pytest.mark.django_db
URL = "https://hooks.example.com/x"
SECRET = "Bearer s3cret-t0ken"
server = pytest.fixture(http_server.serving)


def ctx(job_id: int) -> RunContext:
    now = datetime.now(UTC)
    return RunContext(run_id=1, job_id=job_id, attempt=1, scheduled_at=now, deadline=now,
                      handler="http", logger=logging.getLogger("tests.http"))


def sealed_job(owner, url=URL, name="Authorization") -> Job:
    job = services.create_job("http", http_payload(url, headers={name: SECRET}), owner=owner,
                              delay_s=600)
    return Job.objects.get(pk=job.pk)


def test_the_workflow_api_shows_a_nodes_secret_redacted(api):
    node = {"name": "call", "handler": "http",
            "payload": {"url": URL, "headers": {"Authorization": SECRET}}}
    created = api.post("/api/workflows/", {"name": "w", "nodes": [node]}, format="json")
    assert created.status_code == 201, created.content
    token = Job.objects.get(pk=created.json()["nodes"][0]["job"]).payload[
        "encrypted_headers"]["Authorization"]

    shown = api.get(f"/api/workflows/{created.json()['id']}/")

    for answer in (created, shown):
        text = answer.content.decode()
        assert token not in text and secrets.TOKEN_PREFIX not in text and "s3cret" not in text
        assert answer.json()["nodes"][0]["payload"]["encrypted_headers"] == {
            "Authorization": redact.REDACTED}


@pytest.mark.parametrize("where", ["own job", "other owner", "other header"])
def test_a_token_copied_into_a_new_job_is_a_400_naming_the_header(api, alice, where):
    bob = User.objects.create_user("bob")
    source = sealed_job(bob if where == "other owner" else alice)
    token = source.payload["encrypted_headers"]["Authorization"]
    name = "X-Api-Key" if where == "other header" else "Authorization"

    response = api.post("/api/jobs/", {"handler": "http", "delay_s": 600, "payload": {
        "url": URL, "encrypted_headers": {name: token}}}, format="json")

    assert response.status_code == 400, response.content
    assert "payload.headers" in response.json()[f"payload.encrypted_headers.{name}"][0]
    assert Job.objects.count() == 1


def test_a_token_copied_into_another_job_by_patch_is_a_400(api, alice):
    source, target = sealed_job(alice), sealed_job(alice)
    token = source.payload["encrypted_headers"]["Authorization"]

    response = api.patch(f"/api/jobs/{target.pk}/", {"payload": {
        "url": URL, "encrypted_headers": {"Authorization": token}}}, format="json")

    assert response.status_code == 400, response.content
    assert "payload.encrypted_headers.Authorization" in response.json()
    assert Job.objects.get(pk=target.pk).payload == target.payload


def test_a_token_in_a_bulk_or_workflow_create_is_a_400(api, alice):
    token = sealed_job(alice).payload["encrypted_headers"]["Authorization"]
    payload = {"url": URL, "encrypted_headers": {"Authorization": token}}

    bulk = api.post("/api/jobs/bulk/", {"jobs": [{"handler": "http", "payload": payload}]},
                    format="json")
    flow = api.post("/api/workflows/", {"name": "w", "nodes": [
        {"name": "n", "handler": "http", "payload": payload}]}, format="json")

    assert bulk.status_code == flow.status_code == 400, (bulk.content, flow.content)
    assert "payload.encrypted_headers.Authorization" in bulk.content.decode()
    assert "nodes[0].payload.encrypted_headers.Authorization" in flow.json()
    assert Job.objects.count() == 1


def test_the_python_api_refuses_a_token_too(alice):
    token = sealed_job(alice).payload["encrypted_headers"]["Authorization"]
    with pytest.raises(InvalidJob) as bad:
        services.create_job("http", {"url": URL, "encrypted_headers": {"Authorization": token}},
                            owner=alice, delay_s=60)
    assert "payload.encrypted_headers.Authorization" in bad.value.errors


@http_server.LOOPBACK
@pytest.mark.parametrize("where", ["same owner", "other owner", "other header"])
def test_a_token_planted_in_another_jobs_row_is_never_opened(server, alice, where):
    """What no client can do any more, done straight in the database: the worker still
    refuses, naming the header, and the listener receives nothing."""
    bob = User.objects.create_user("bob")
    victim = sealed_job(bob)
    thief = sealed_job(alice if where == "other owner" else bob, url=f"{server.url}/echo")
    name = "X-Api-Key" if where == "other header" else "Authorization"
    token = victim.payload["encrypted_headers"]["Authorization"]
    planted = {**thief.payload, "encrypted_headers": {name: token}}
    Job.objects.filter(pk=thief.pk).update(payload=planted)

    with pytest.raises(PermanentFailure) as refused:
        http(ctx(thief.pk), planted)

    assert f"payload.encrypted_headers.{name}" in str(refused.value)
    assert "another job" in str(refused.value) and "s3cret" not in str(refused.value)
    assert server.requests == []


@http_server.LOOPBACK
def test_a_jobs_own_secret_is_sent(server, alice):
    job = sealed_job(alice, url=f"{server.url}/echo")
    http(ctx(job.pk), job.payload)
    assert server.requests[-1][2]["Authorization"] == SECRET


def legacy(value: str) -> str:
    """A token as made before values were bound: the bare value."""
    return secrets.keys().encrypt(value.encode()).decode()


def test_reseal_binds_legacy_tokens_but_not_one_shared_across_owners(alice):
    bob = User.objects.create_user("bob")
    own, original, copy = sealed_job(alice), sealed_job(alice), sealed_job(bob)
    shared = legacy("Bearer shared")
    Job.objects.filter(pk=own.pk).update(payload={
        "url": URL, "headers": {}, "encrypted_headers": {"Authorization": legacy(SECRET)}})
    for job in (original, copy):
        Job.objects.filter(pk=job.pk).update(payload={
            **job.payload, "encrypted_headers": {"Authorization": shared}})

    done = reseal(Job)

    assert secret_of(own, "Authorization") == SECRET
    assert done.shared == [original.pk, copy.pk]
    for job in (original, copy):
        with pytest.raises(secrets.Misbound):
            secret_of(job, "Authorization")


def test_a_legacy_token_is_refused_at_run_time_until_bound(alice):
    job = sealed_job(alice)
    Job.objects.filter(pk=job.pk).update(payload={
        **job.payload, "encrypted_headers": {"Authorization": legacy(SECRET)}})
    with pytest.raises(PermanentFailure, match="rotatehttpsecrets"):
        http(ctx(job.pk), Job.objects.get(pk=job.pk).payload)


# ---- finding 4: a header value h11 refuses must never be echoed ------------------------

@pytest.mark.parametrize("value", [" Bearer s3cret", "Bearer s3cret ", "Bearer s3cret\t",
                                   "Bearer s3cret\x0b"])
@pytest.mark.parametrize("name", ["Authorization", "X-Plain"])
def test_a_header_value_with_outer_whitespace_is_a_400_naming_it(api, name, value):
    response = api.post("/api/jobs/", {"handler": "http", "delay_s": 60, "payload": {
        "url": URL, "headers": {name: value}}}, format="json")

    assert response.status_code == 400, response.content
    assert f"payload.headers.{name}" in response.json()
    assert "s3cret" not in response.content.decode()


@http_server.LOOPBACK
@pytest.mark.parametrize("secret", [True, False])
def test_a_stored_value_h11_refuses_is_never_echoed(server, alice, caplog, secret):
    """A value stored before the input rule (planted here): the run fails naming the
    header, and neither its error nor its log line holds the value."""
    job = sealed_job(alice, url=f"{server.url}/echo")
    payload = dict(job.payload)
    if secret:
        binding = secrets.Binding(alice.pk, payload[redact.SEAL], "Authorization")
        payload["encrypted_headers"] = {"Authorization": secrets.seal(" Bearer s3cret ", binding)}
    else:
        payload["headers"] = {"X-Plain": " Bearer s3cret "}
    Job.objects.filter(pk=job.pk).update(payload=payload)

    with caplog.at_level(logging.INFO), pytest.raises(PermanentFailure) as failed:
        http(ctx(job.pk), payload)

    assert ("Authorization" if secret else "payload.headers.X-Plain") in str(failed.value)
    assert "s3cret" not in str(failed.value) and "s3cret" not in caplog.text
    assert server.requests == []


def test_the_transport_error_text_holds_no_header_value():
    import h11
    import httpx

    headers = {"Authorization": " Bearer s3cret ", "X-Other": "pl41n-value"}
    try:
        h11.Request(method="GET", target="/", headers=[("Host", "x"),
                                                       ("Authorization", " Bearer s3cret ")])
    except h11.LocalProtocolError as exc:
        local = httpx.LocalProtocolError(str(exc))
    assert "s3cret" in str(local)  # what the transport says

    assert "s3cret" not in failure_text(local, headers)
    echoed = httpx.ConnectError("refused while sending pl41n-value and b' Bearer s3cret '")
    assert "s3cret" not in failure_text(echoed, headers)
    assert "pl41n-value" not in failure_text(echoed, headers)


@pytest.mark.django_db(transaction=True)
def test_the_migration_binds_the_tokens_stored_before_it(alice):
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    before = ("jobs", "0011_job_unique_lock_partial")
    latest = MigrationExecutor(connection).loader.graph.leaf_nodes()
    try:
        executor = MigrationExecutor(connection)
        executor.migrate([before])
        # The model as it was at 0011: today's has columns later migrations added.
        OldJob = executor.loader.project_state(before).apps.get_model("jobs", "Job")
        job = OldJob.objects.create(
            name="old", owner_id=alice.pk, handler="http", run_at=datetime.now(UTC),
            payload={"url": URL, "headers": {},
                     "encrypted_headers": {"Authorization": legacy(SECRET)}})

        after = ("jobs", "0012_bind_http_secrets")
        executor = MigrationExecutor(connection)
        executor.migrate([after])

        stored = executor.loader.project_state(after).apps.get_model("jobs", "Job")
        row = stored.objects.get(pk=job.pk)
        assert opened(row.payload, row.owner_id)["Authorization"] == SECRET
    finally:
        # Every later test expects the whole schema: leave the database at its leaves.
        MigrationExecutor(connection).migrate(latest)
