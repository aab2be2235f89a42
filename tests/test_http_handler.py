"""The built-in http handler against a real local HTTP server (tests/http_server.py):
success, retries (plain and Retry-After), no retry on other 4xx, the body excerpt cap,
redirects, and the SSRF guard (refusals, the allowlist, the checked address is the one
connected to). The handler is called in-process here; tests/test_http_runs.py runs it in
a worker."""

import ipaddress
import logging
from datetime import UTC, datetime

import httpcore
import pytest
from asgiref.sync import async_to_sync
from django.test import override_settings

from jobs import services
from runs.context import RunContext
from runs.outbound import guard
from runs.outbound.handler import HttpError, retry_after_s
from runs.outbound.handler import http as http_coroutine
from runs.outbound.payload import http_payload
from runs.outbound.transport import PinnedBackend
from scheduler_core.exceptions import PermanentFailure, RetryAfter
from tests import http_server

# The handler is a coroutine (docs/async-handlers.md); its ORM reads run on this thread.
http = async_to_sync(http_coroutine)

LOOPBACK = http_server.LOOPBACK
server = pytest.fixture(http_server.serving)


def ctx(job_id: int = 1) -> RunContext:
    now = datetime.now(UTC)
    return RunContext(run_id=1, job_id=job_id, attempt=1, scheduled_at=now, deadline=now,
                      handler="http", logger=logging.getLogger("tests.http"))


def call(url: str, **options):
    return http(ctx(), http_payload(url, **options))


@LOOPBACK
def test_a_2xx_is_the_result_with_status_chosen_headers_and_body(server):
    result = call(f"{server.url}/status/201", response_headers=["X-Trace", "Content-Type"])

    assert result["status"] == 201
    assert result["headers"] == {"x-trace": "t-1", "content-type": "text/plain"}
    assert result["body"] == "status 201" and result["body_truncated"] is False
    assert result["redirects"] == 0


@LOOPBACK
def test_a_json_body_is_sent_with_its_content_type_and_the_method(server):
    result = call(f"{server.url}/echo", method="PUT", json={"a": [1, 2]},
                  headers={"X-Plain": "p"})

    import json
    echoed = json.loads(result["body"])
    assert echoed["method"] == "PUT" and echoed["body"] == '{"a":[1,2]}'
    assert echoed["headers"]["Content-Type"] == "application/json"
    assert echoed["headers"]["X-Plain"] == "p"


@LOOPBACK
@pytest.mark.django_db
def test_a_secret_header_is_sent_decrypted(server):
    job = services.create_job("http", http_payload(
        f"{server.url}/echo", headers={"Authorization": "Bearer t0ken"}), delay_s=600)
    assert "t0ken" not in str(job.payload)

    http(ctx(job.pk), job.payload)

    assert server.requests[-1][2]["Authorization"] == "Bearer t0ken"


@LOOPBACK
@pytest.mark.parametrize("status", [500, 502, 503, 429])
def test_429_and_5xx_without_retry_after_raise_for_the_usual_backoff(server, status):
    with pytest.raises(HttpError, match=f"answered {status}"):
        call(f"{server.url}/status/{status}")


@LOOPBACK
def test_a_connection_error_raises_for_a_retry(server):
    http_server.stop(server)
    with pytest.raises(HttpError, match="ConnectError"):
        call(f"{server.url}/status/200")


@LOOPBACK
def test_a_timeout_raises_for_a_retry(server):
    with pytest.raises(HttpError, match=r"within 0.3 s \(the payload's timeout_s\)"):
        call(f"{server.url}/slow/3", timeout_s=0.3)


@LOOPBACK
def test_retry_after_sets_the_delay_up_to_the_cap(server):
    with pytest.raises(RetryAfter) as asked:
        call(f"{server.url}/retry-after/120")
    assert asked.value.delay_s == 120

    with pytest.raises(RetryAfter) as capped:
        call(f"{server.url}/retry-after/99999")
    assert capped.value.delay_s == 600  # HTTP_RETRY_AFTER_MAX_S


def test_retry_after_reads_seconds_and_http_dates():
    now = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
    assert retry_after_s("30", now) == 30
    assert retry_after_s("Tue, 01 Jan 2030 12:01:00 GMT", now) == 60
    assert retry_after_s("Tue, 01 Jan 2030 11:00:00 GMT", now) == 0
    assert retry_after_s("soon", now) is None and retry_after_s(None, now) is None


@LOOPBACK
@pytest.mark.parametrize("status", [400, 401, 403, 404, 410, 422])
def test_another_4xx_fails_without_retry(server, status):
    with pytest.raises(PermanentFailure, match=f"answered {status}"):
        call(f"{server.url}/status/{status}")


@LOOPBACK
def test_the_success_statuses_are_the_jobs_choice(server):
    assert call(f"{server.url}/status/404", success_statuses=[404])["status"] == 404
    with pytest.raises(PermanentFailure):
        call(f"{server.url}/status/200", success_statuses=[201])


@override_settings(SCHEDULER={"HTTP_ALLOWLIST": "127.0.0.1", "HTTP_BODY_EXCERPT_BYTES": 1000})
def test_the_body_excerpt_is_capped_and_reading_stops(server):
    result = call(f"{server.url}/big/200000")

    assert result["body"] == "x" * 1000
    assert result["body_truncated"] is True


@LOOPBACK
def test_a_redirect_to_another_scheme_is_refused_without_retry(server):
    with pytest.raises(PermanentFailure, match="scheme 'file'"):
        call(f"{server.url}/redirect?to=file:///etc/passwd")
    with pytest.raises(PermanentFailure, match="refused: "):
        call(f"{server.url}/redirect?to=http://%5B::1")  # a garbled Location


@LOOPBACK
def test_a_303_turns_a_post_into_a_get_without_its_body(server):
    result = call(f"{server.url}/redirect303?to={server.url}/echo", json={"a": 1})

    import json
    assert json.loads(result["body"])["method"] == "GET"
    assert json.loads(result["body"])["body"] == ""


@LOOPBACK
def test_redirects_are_followed_up_to_the_cap(server):
    target = f"{server.url}/status/200"
    once = f"{server.url}/redirect?to={target}"
    result = call(once)
    assert result["status"] == 200 and result["redirects"] == 1 and result["url"] == target

    chain = target
    for _ in range(4):  # HTTP_MAX_REDIRECTS is 3
        chain = f"{server.url}/redirect?to={chain.replace('?', '%3F').replace('=', '%3D')}"
    with pytest.raises(PermanentFailure, match="more than 3 redirects"):
        call(chain)


@LOOPBACK
@pytest.mark.parametrize("private", ["http://169.254.169.254/latest/meta-data/",
                                     "http://10.0.0.1/", "http://[::1]:8/",
                                     "http://[::ffff:127.0.0.2]/", "http://0.0.0.0/"])
def test_a_redirect_to_a_private_address_is_refused(server, private):
    with pytest.raises(guard.Refused, match="not on SCHEDULER_HTTP_ALLOWLIST"):
        call(f"{server.url}/redirect?to={private}")
    assert [r[1] for r in server.requests] == [f"/redirect?to={private}"]


def test_loopback_is_refused_unless_allowlisted(server):
    port = server.server_address[1]
    for url in (f"http://localhost:{port}/status/200", f"{server.url}/status/200"):
        with pytest.raises(guard.Refused, match="127.0.0.1, which is loopback"):
            call(url)
    assert server.requests == []  # refused before connecting

    with override_settings(SCHEDULER={"HTTP_ALLOWLIST": "localhost"}):
        assert call(f"http://localhost:{port}/status/200")["status"] == 200
    with override_settings(SCHEDULER={"HTTP_ALLOWLIST": "10.0.0.0/8, 127.0.0.0/8"}):
        assert call(f"http://localhost:{port}/status/200")["status"] == 200


def test_the_metadata_address_is_refused_unless_allowlisted(monkeypatch):
    with pytest.raises(guard.Refused, match="169.254.169.254, which is link-local"):
        call("http://169.254.169.254/latest/meta-data/")
    monkeypatch.setattr(guard, "resolver", lambda host, port: ["169.254.169.254"])
    with pytest.raises(guard.Refused, match="metadata.test resolves to 169.254.169.254"):
        call("http://metadata.test/latest/meta-data/")
    with override_settings(SCHEDULER={"HTTP_ALLOWLIST": "169.254.169.254"}):
        assert guard.check("169.254.169.254", 80) == ["169.254.169.254"]


@pytest.mark.parametrize("address, reason", [
    ("127.0.0.1", "loopback"), ("10.1.2.3", "private"), ("172.16.0.1", "private"),
    ("192.168.1.1", "private"), ("169.254.169.254", "link-local"), ("224.0.0.1", "multicast"),
    ("240.0.0.1", "reserved"), ("0.0.0.0", "unspecified"), ("100.64.0.1", "not global"),
    ("::1", "loopback"), ("fe80::1", "link-local"), ("fc00::1", "private"),
    ("::ffff:169.254.169.254", "link-local"), ("2002:7f00:1::", "loopback"),
    ("ff02::1", "multicast"), ("::", "unspecified"),
])
def test_non_public_addresses_are_named(address, reason):
    assert guard.why_not_public(ipaddress.ip_address(address)) == reason


@pytest.mark.parametrize("address", ["93.184.216.34", "8.8.8.8", "2606:4700:4700::1111"])
def test_public_addresses_pass(address):
    assert guard.why_not_public(ipaddress.ip_address(address)) is None


@LOOPBACK
def test_the_address_checked_is_the_one_connected_to(server, monkeypatch):
    # A rebinding resolver: the checked answer first, a different one afterwards. The
    # request succeeds only if it went to the first answer, and it asks once.
    answers = iter([["127.0.0.1"], ["10.9.9.9"], ["10.9.9.9"]])
    asked = []

    def resolver(host, port):
        asked.append((host, port))
        return next(answers)

    monkeypatch.setattr(guard, "resolver", resolver)
    port = server.server_address[1]

    result = call(f"http://rebind.test:{port}/echo")

    assert result["status"] == 200 and asked == [("rebind.test", port)]
    assert '"Host": "rebind.test:' in result["body"]  # the name, not the address


@override_settings(SCHEDULER={"HTTP_ALLOWLIST": "127.0.0.0/8"})
def test_each_checked_address_is_tried_in_turn(server, monkeypatch):
    # 127.0.0.2 is loopback too, but nothing listens there: the second answer serves.
    monkeypatch.setattr(guard, "resolver", lambda host, port: ["127.0.0.2", "127.0.0.1"])
    port = server.server_address[1]

    assert call(f"http://two.test:{port}/status/200")["status"] == 200


@LOOPBACK
def test_a_name_with_any_private_answer_is_refused(monkeypatch):
    monkeypatch.setattr(guard, "resolver", lambda host, port: ["8.8.8.8", "10.0.0.5"])
    with pytest.raises(guard.Refused, match="10.0.0.5, which is private"):
        call("http://mixed.test/")


def test_the_pinned_backend_connects_nowhere_else():
    backend = PinnedBackend("example.com", 443, ["93.184.216.34"])
    with pytest.raises(httpcore.ConnectError, match="not checked"):
        async_to_sync(backend.connect_tcp)("other.example", 443)
    with pytest.raises(httpcore.ConnectError, match="not checked"):
        async_to_sync(backend.connect_tcp)("example.com", 80)


def test_a_bad_allowlist_entry_is_named():
    with pytest.raises(ValueError, match="10.0.0.0/33"):
        guard.allowlist("10.0.0.0/33")
    names, suffixes, networks = guard.allowlist("Hooks.Internal, .svc.local, 10.0.0.0/8")
    assert guard.host_allowed("hooks.internal", names, suffixes)
    assert guard.host_allowed("a.svc.local", names, suffixes)
    assert not guard.host_allowed("evilsvc.local", names, suffixes)


@override_settings(SCHEDULER={"HTTP_ALLOWLIST": "127.0.0.1, localhost"})
def test_secret_headers_do_not_follow_a_redirect_to_another_origin(server):
    port = server.server_address[1]
    url = f"{server.url}/redirect?to=http://localhost:{port}/echo"
    result = call(url, headers={"Authorization": "Bearer t", "X-Sig": "s", "X-Plain": "p"},
                  secret_headers=["X-Sig"])

    assert result["status"] == 200
    sent = server.requests[-1][2]
    assert "Authorization" not in sent and "X-Sig" not in sent and sent["X-Plain"] == "p"
