"""Per-owner throttling: past API_THROTTLE_RATE an owner gets 429 with Retry-After, while
other owners go on; the default rate is high enough not to get in the way."""

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.test import override_settings

from scheduler_core import conf
from scheduler_core.rest.throttling import parse_rate
from tests.test_api_helpers import client_for

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fresh_cache():
    cache.clear()
    yield
    cache.clear()


@override_settings(SCHEDULER={"API_THROTTLE_RATE": "3/hour"})
def test_an_owner_over_the_rate_gets_429_with_retry_after_and_others_do_not():
    alice = client_for(User.objects.create_user("alice"))
    bob = client_for(User.objects.create_user("bob"))

    allowed = [alice.get("/api/jobs/").status_code for _ in range(3)]
    refused = alice.post("/api/jobs/", {"handler": "noop", "schedule": "@daily"},
                         format="json")

    assert allowed == [200, 200, 200]
    assert refused.status_code == 429
    assert 1 <= int(refused.headers["Retry-After"]) <= 3600
    assert "throttled" in refused.json()["detail"].lower()
    assert bob.get("/api/jobs/").status_code == 200
    assert alice.get("/healthz").status_code == 200  # probes are never throttled


def test_the_default_rate_is_high():
    count, period = parse_rate(conf.get("API_THROTTLE_RATE"))

    assert count / period >= 1000  # requests per second per owner


@pytest.mark.parametrize("rate, parsed", [("5/s", (5, 1)), ("100/minute", (100, 60)),
                                          ("7/hour", (7, 3600)), ("1/day", (1, 86400))])
def test_rates_read_like_drfs(rate, parsed):
    assert parse_rate(rate) == parsed


@override_settings(
    SCHEDULER={"API_THROTTLE_RATE": "1/hour"},
    CACHES={"default": {"BACKEND": "django_redis.cache.RedisCache",
                        "LOCATION": "redis://127.0.0.1:1/0",  # nothing listens there
                        "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 0.5}}})
def test_an_unreachable_cache_lets_requests_through_and_says_so(caplog):
    alice = client_for(User.objects.create_user("alice"))

    answers = [alice.get("/api/jobs/").status_code for _ in range(3)]

    assert answers == [200, 200, 200]
    assert "throttle: cache unavailable" in caplog.text
