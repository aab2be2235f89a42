"""/api/limits/ and the admin's owner policies (docs/isolation.md): who may read and set an owner's
concurrency limit and default queue, that the broker enforces what was set, and that an
owner's jobs land in its default (tenant) queue."""

import pytest
import redis
from django.conf import settings
from django.contrib.auth.models import User

from jobs.models import Job, OwnerPolicy
from runs.brokers import get_broker
from tests.conftest import flush_redis
from tests.test_api_helpers import client_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def staff():
    return client_for(User.objects.create_user("ops", is_staff=True, is_superuser=True))


@pytest.fixture(autouse=True)
def clean_redis():
    flush_redis()
    yield
    flush_redis()


def redis_limits() -> dict[str, int]:
    broker = get_broker()
    client = redis.Redis.from_url(settings.REDIS_URL)
    return {k.decode(): int(v) for k, v in client.hgetall(broker.keys.limits("")).items()}


def test_an_owner_reads_its_own_limits(api, alice, settings):
    settings.SCHEDULER = {"OWNER_CONCURRENCY": 8}
    body = api.get("/api/limits/").json()
    assert body == {
        "owner": "alice", "max_running": None, "max_pending": None, "max_jobs": None,
        "highest_priority": None, "max_timeout_s": None, "max_attempts": None,
        "max_map_items": None,
        "queues": [], "default_queue": "", "effective_max_running": 8, "running": 0,
        "pending": 0, "pending_not_yet_made": 0, "jobs": 0,
        "effective": {"max_running": 8, "max_pending": 10_000, "max_jobs": 10_000,
                      "highest_priority": 3, "max_timeout_s": 3600, "max_attempts": 10,
                      "max_map_items": 1000, "queues": ["default"]}}


def test_an_owner_cannot_set_limits_or_read_anothers(api, alice):
    User.objects.create_user("bob")
    assert api.put("/api/limits/", {"max_running": 100}, format="json").status_code == 403
    assert api.get("/api/limits/?owner=bob").status_code == 403
    assert not OwnerPolicy.objects.exists()


def test_staff_set_an_owners_limit_and_the_broker_enforces_it_at_once(staff, alice, api):
    response = staff.put("/api/limits/", {"owner": "alice", "max_running": 4,
                                          "default_queue": "tenant-a"}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["effective_max_running"] == 4
    assert redis_limits() == {f"o:{alice.pk}": 4}
    assert api.get("/api/limits/").json()["max_running"] == 4

    # The owner's jobs default to its tenant queue; a job naming a queue it may use keeps
    # it; one naming a queue it was not given is refused.
    later = "2030-01-01T00:00:00Z"
    plain = api.post("/api/jobs/", {"handler": "noop", "run_at": later}, format="json")
    shared = api.post("/api/jobs/", {"handler": "noop", "run_at": later,
                                     "queue": "default"}, format="json")
    other = api.post("/api/jobs/", {"handler": "noop", "run_at": later, "queue": "web"},
                     format="json")
    assert plain.status_code == shared.status_code == 201, plain.content
    assert Job.objects.get(pk=plain.json()["id"]).queue == "tenant-a"
    assert Job.objects.get(pk=shared.json()["id"]).queue == "default"
    assert other.status_code == 400
    assert "'web' is not one of this owner's queues" in other.json()["queue"][0]


def test_bad_limits_are_refused_naming_the_field_and_nothing_is_stored(staff, alice):
    for body, field in (({"owner": "alice", "max_running": 0}, "max_running"),
                        ({"owner": "alice", "max_running": "many"}, "max_running"),
                        ({"owner": "alice", "default_queue": "no spaces"}, "default_queue")):
        response = staff.put("/api/limits/", body, format="json")
        assert response.status_code == 400
        assert field in response.json()
    assert staff.put("/api/limits/", {"owner": "nobody", "max_running": 2},
                     format="json").status_code == 404
    assert not OwnerPolicy.objects.exists()
    assert redis_limits() == {}


def test_an_owner_name_with_a_nul_character_is_a_400_naming_the_field(staff):
    """PostgreSQL text holds no NUL: the name reached the query and answered a 500."""
    response = staff.get("/api/limits/?owner=a%00b")

    assert response.status_code == 400, response.content
    assert "Null characters" in response.json()["owner"][0]


def test_the_admin_sets_and_removes_an_owners_limit(alice, client):
    admin = User.objects.create_superuser("root", password="pw")
    client.force_login(admin)
    response = client.post("/admin/jobs/ownerpolicy/add/",
                           {"owner": alice.pk, "max_running": 2, "default_queue": ""})
    assert response.status_code == 302, response.content[:2000]
    assert redis_limits() == {f"o:{alice.pk}": 2}

    response = client.post(f"/admin/jobs/ownerpolicy/{alice.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert not OwnerPolicy.objects.exists()
    assert redis_limits() == {}
