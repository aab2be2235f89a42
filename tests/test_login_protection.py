"""Logins and anonymous clients are bounded: django-axes refuses a username from an
address after LOGIN_FAILURE_LIMIT failed logins on either login page (even with the right
password, for the cool-off), requests without a valid login are throttled per address,
and Django's password validators refuse weak passwords (docs/security.md)."""

from io import StringIO

import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.contrib.auth.models import User
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.test import Client
from rest_framework.test import APIClient

from scheduler_core import conf
from scheduler_core.rest.throttling import parse_rate

pytestmark = pytest.mark.django_db
STRONG = "correct horse battery staple"
LOGIN_PAGES = ["/admin/login/", "/api/auth/login/"]


@pytest.fixture
def alice():
    return User.objects.create_user("alice", password=STRONG, is_staff=True)


def log_in(path: str, password: str, username="alice", address="127.0.0.1"):
    """POST the login form of ``path`` from ``address``; returns (response, logged in)."""
    browser = Client(REMOTE_ADDR=address)
    response = browser.post(path, {"username": username, "password": password,
                                   "next": "/api/jobs/"})
    return response, "_auth_user_id" in browser.session


@pytest.mark.parametrize("path", LOGIN_PAGES)
def test_the_right_password_after_30_wrong_ones_is_refused(alice, path):
    for i in range(30):
        log_in(path, f"wrong-{i}")

    response, logged_in = log_in(path, STRONG)

    assert not logged_in
    assert response.status_code == 429
    assert int(response["Retry-After"]) == settings.AXES_COOLOFF_TIME.total_seconds()


def test_the_api_login_answers_the_lockout_in_json(alice):
    for i in range(settings.AXES_FAILURE_LIMIT):
        log_in("/api/auth/login/", f"wrong-{i}")

    response, _ = log_in("/api/auth/login/", STRONG)

    assert response["Content-Type"] == "application/json"
    assert "too many failed logins" in response.json()["detail"]


def test_the_admin_login_answers_the_lockout_with_a_page(alice):
    for i in range(settings.AXES_FAILURE_LIMIT):
        log_in("/admin/login/", f"wrong-{i}")

    response, _ = log_in("/admin/login/", STRONG)

    assert response["Content-Type"].startswith("text/html")
    assert b"Login refused: too many failed logins" in response.content


def test_failures_below_the_limit_do_not_lock_and_a_success_resets_them(alice):
    for i in range(settings.AXES_FAILURE_LIMIT - 1):
        log_in("/admin/login/", f"wrong-{i}")

    assert log_in("/admin/login/", STRONG)[1]
    assert not AccessAttempt.objects.filter(username="alice").exists()


def test_the_lockout_holds_that_username_at_that_address_only(alice):
    User.objects.create_user("bob", password=STRONG)
    for i in range(settings.AXES_FAILURE_LIMIT):
        log_in("/admin/login/", f"wrong-{i}")

    assert not log_in("/api/auth/login/", STRONG)[1]  # the two pages share the count
    assert log_in("/api/auth/login/", STRONG, username="bob")[1]
    assert log_in("/api/auth/login/", STRONG, address="10.0.0.2")[1]


def test_an_operator_lifts_a_lockout_with_axes_command(alice):
    for i in range(settings.AXES_FAILURE_LIMIT):
        log_in("/admin/login/", f"wrong-{i}")

    call_command("axes_reset_username", "alice", stdout=StringIO())

    assert log_in("/admin/login/", STRONG)[1]


def test_requests_without_a_login_are_throttled_per_address():
    count, _ = parse_rate(conf.get("API_ANON_THROTTLE_RATE"))
    anonymous, other = APIClient(REMOTE_ADDR="10.0.0.1"), APIClient(REMOTE_ADDR="10.0.0.2")

    answers = [anonymous.get("/api/jobs/").status_code for _ in range(count)]
    refused = anonymous.get("/api/jobs/")

    assert set(answers) == {401}
    assert refused.status_code == 429
    assert int(refused["Retry-After"]) >= 1
    assert "throttled" in refused.json()["detail"].lower()
    assert other.get("/api/jobs/").status_code == 401
    assert anonymous.get("/healthz").status_code == 200


def test_the_anonymous_rate_is_low():
    count, period = parse_rate(conf.get("API_ANON_THROTTLE_RATE"))

    assert count / period <= 10  # requests per second per address


@pytest.mark.parametrize("weak", ["demo", "12345678", "password", "alice2026"])
def test_weak_passwords_are_refused(weak):
    alice = User(username="alice2026", email="alice@example.com")

    with pytest.raises(ValidationError):
        validate_password(weak, alice)


def test_the_admin_refuses_a_user_with_a_weak_password(admin_client):
    response = admin_client.post("/admin/auth/user/add/", {
        "username": "carol", "usable_password": "true",
        "password1": "carol", "password2": "carol"})

    assert response.status_code == 200  # the form again, with its errors
    assert not User.objects.filter(username="carol").exists()
    assert b"This password is too short" in response.content


PUBLIC_PEER, ROUTER = "203.0.113.5", "10.1.2.3"  # a client on the Internet; a router inside


def test_a_rotating_x_forwarded_for_sent_straight_to_the_web_server_changes_nothing(
        alice, settings):
    """With TRUSTED_PROXY_COUNT=1 and gunicorn reachable directly, a new X-Forwarded-For
    each try made a new client of every request: no lockout, no anonymous throttle."""
    settings.TRUSTED_PROXY_COUNT = 1
    count, _ = parse_rate(conf.get("API_ANON_THROTTLE_RATE"))

    for i in range(settings.AXES_FAILURE_LIMIT):
        Client(REMOTE_ADDR=PUBLIC_PEER, HTTP_X_FORWARDED_FOR=f"198.51.100.{i}").post(
            "/admin/login/", {"username": "alice", "password": f"wrong-{i}"})
    locked = Client(REMOTE_ADDR=PUBLIC_PEER, HTTP_X_FORWARDED_FOR="198.51.100.200").post(
        "/admin/login/", {"username": "alice", "password": STRONG})
    answers = [APIClient(REMOTE_ADDR=PUBLIC_PEER, HTTP_X_FORWARDED_FOR=f"192.0.2.{i}")
               .get("/api/jobs/").status_code for i in range(count + 1)]

    assert locked.status_code == 429
    assert answers[-1] == 429


def test_behind_a_trusted_proxy_the_address_it_wrote_is_the_client(alice, settings):
    """The entry TRUSTED_PROXY_COUNT from the right is the router's; what a client puts
    before it is its own invention, and an entry that is no address is ignored."""
    from scheduler_core.rest.client_address import client_ip

    settings.TRUSTED_PROXY_COUNT = 1

    def seen(forwarded: str, peer: str = ROUTER) -> str:
        request = Client().request(REMOTE_ADDR=peer, HTTP_X_FORWARDED_FOR=forwarded).wsgi_request
        return client_ip(request)

    assert seen("192.0.2.1, 198.51.100.7") == "198.51.100.7"
    assert seen("198.51.100.7") == "198.51.100.7"
    assert seen("not-an-address") == ROUTER
    assert seen("198.51.100.7", peer=PUBLIC_PEER) == PUBLIC_PEER
    settings.TRUSTED_PROXY_NETWORKS = ["203.0.113.0/24"]
    assert seen("198.51.100.7", peer=PUBLIC_PEER) == "198.51.100.7"
    settings.TRUSTED_PROXY_COUNT = 0
    assert seen("198.51.100.7") == ROUTER


@pytest.mark.parametrize("path", LOGIN_PAGES)
def test_a_username_longer_than_axes_column_is_a_failed_login_not_a_500(path):
    """A 300-character username overflowed axes' username column (varchar 255): 500."""
    response, logged_in = log_in(path, "wrong", username="u" * 300)

    assert response.status_code == 200 and not logged_in  # the form again
    assert AccessAttempt.objects.get().username == "u" * 255


def test_an_ipv6_scope_id_in_x_forwarded_for_is_dropped(settings):
    """``fe80::1%<300 characters>`` from a trusted peer reached axes' address column whole."""
    from scheduler_core.rest.client_address import client_ip

    settings.TRUSTED_PROXY_COUNT = 1
    forwarded = "fe80::1%" + "x" * 300
    request = Client().request(REMOTE_ADDR=ROUTER, HTTP_X_FORWARDED_FOR=forwarded).wsgi_request

    assert client_ip(request) == "fe80::1"
    response = Client(REMOTE_ADDR=ROUTER, HTTP_X_FORWARDED_FOR=forwarded).post(
        "/admin/login/", {"username": "alice", "password": "wrong"})
    assert response.status_code == 200
    assert AccessAttempt.objects.get().ip_address == "fe80::1"


@pytest.mark.parametrize("forwarded", ["198.51.100.7", "192.0.2.1, 198.51.100.7"])
def test_a_negative_proxy_count_reads_no_x_forwarded_for(settings, forwarded):
    """TRUSTED_PROXY_COUNT=-1 raised IndexError on one entry and, on two, picked the one
    the client wrote (scheduler.E010 refuses the setting; client_ip must not crash)."""
    from scheduler_core.rest.client_address import client_ip

    settings.TRUSTED_PROXY_COUNT = -1
    request = Client().request(REMOTE_ADDR=ROUTER, HTTP_X_FORWARDED_FOR=forwarded).wsgi_request

    assert client_ip(request) == ROUTER


def test_the_api_login_without_next_lands_on_the_api_root(alice):
    """It redirected to Django's default /accounts/profile/, a 404."""
    browser = Client()
    response = browser.post("/api/auth/login/", {"username": "alice", "password": STRONG})

    assert response.status_code == 302 and response["Location"] == "/api/"
    assert browser.get("/api/").status_code == 200
    with_next = browser.post("/api/auth/login/?next=/api/jobs/",
                             {"username": "alice", "password": STRONG, "next": "/api/jobs/"})
    assert with_next["Location"] == "/api/jobs/"
