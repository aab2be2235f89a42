"""An http job's secret headers never leave the database in the clear, nor as their
ciphertext: the REST API and the admin show "(encrypted)", and sending that back (PATCH,
the admin's form) keeps the stored secret (docs/http-handler.md, "Secrets")."""

import json

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission

from jobs import services
from jobs.models import Job
from runs.outbound.payload import http_payload
from tests.sealed import secret_of

pytestmark = pytest.mark.django_db
URL = "https://hooks.example.com/x"
SECRET = "Bearer s3cret-t0ken"


def http_job(owner=None) -> Job:
    payload = http_payload(URL, headers={"Authorization": SECRET, "X-Plain": "p"})
    return services.create_job("http", payload, owner=owner, delay_s=600)


def token_of(job: Job) -> str:
    return Job.objects.get(pk=job.pk).payload["encrypted_headers"]["Authorization"]


def test_the_api_shows_encrypted_headers_redacted(api, alice):
    job = http_job(owner=alice)
    token = token_of(job)

    for body in (api.get(f"/api/jobs/{job.pk}/").content, api.get("/api/jobs/").content):
        text = body.decode()
        assert "s3cret" not in text and token not in text
        assert '"encrypted_headers":{"Authorization":"(encrypted)"}' in text.replace(" ", "")


def test_a_patch_sending_back_the_redacted_payload_keeps_the_secret(api, alice):
    job = http_job(owner=alice)
    shown = api.get(f"/api/jobs/{job.pk}/").json()["payload"]
    shown["headers"]["X-Plain"] = "changed"

    response = api.patch(f"/api/jobs/{job.pk}/", {"payload": shown}, format="json")

    assert response.status_code == 200, response.content
    stored = Job.objects.get(pk=job.pk).payload
    assert stored["headers"] == {"X-Plain": "changed"}
    assert secret_of(job, "Authorization") == SECRET


def test_a_patch_with_a_new_secret_replaces_it(api, alice):
    job = http_job(owner=alice)
    response = api.patch(f"/api/jobs/{job.pk}/", {"payload": {
        "url": URL, "headers": {"Authorization": "Bearer new"}}}, format="json")

    assert response.status_code == 200, response.content
    assert secret_of(job, "Authorization") == "Bearer new"
    assert "new" not in response.content.decode()


def test_the_admins_change_page_shows_no_secret_and_a_save_keeps_it(admin_client):
    job = http_job()
    token = token_of(job)
    url = f"/admin/jobs/job/{job.pk}/change/"

    page = admin_client.get(url).content.decode()
    assert "s3cret" not in page and token not in page and "(encrypted)" in page

    edited = {"url": URL, "headers": {"X-Plain": "q"},
              "encrypted_headers": {"Authorization": "(encrypted)"}}
    response = admin_client.post(url, {"name": "hook", "payload": json.dumps(edited),
                                       "priority": "5", "timeout_s": "60",
                                       "max_attempts": "4", "_save": "Save"})
    assert response.status_code == 302, response.content.decode()[-2000:]
    stored = Job.objects.get(pk=job.pk).payload
    assert stored["headers"] == {"X-Plain": "q"}
    assert secret_of(job, "Authorization") == SECRET


def test_a_view_only_admin_page_shows_no_secret(client):
    user = get_user_model().objects.create_user("viewer", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_job"))
    client.force_login(user)
    job = http_job()
    token = token_of(job)

    page = client.get(f"/admin/jobs/job/{job.pk}/change/").content.decode()

    assert "X-Plain" in page  # the payload is shown...
    assert "s3cret" not in page and token not in page  # ...without its secrets


def test_bulk_creation_stores_secrets_encrypted_and_answers_them_redacted(api):
    jobs = [{"handler": "http", "run_at": "2030-01-01T09:00:00Z",
             "payload": {"url": URL, "headers": {"X-Api-Key": f"k3y-{i}"}}} for i in range(3)]
    response = api.post("/api/jobs/bulk/", {"jobs": jobs}, format="json")

    assert response.status_code == 201, response.content
    assert "k3y" not in response.content.decode()
    made = list(Job.objects.order_by("pk"))
    stored = [job.payload for job in made]
    # Every value but the ciphertexts and seals: random base64 may contain "k3y" (it did,
    # once in CI), which says nothing of the secret.
    plain = [{**p, "encrypted_headers": sorted(p["encrypted_headers"]), "seal": None}
             for p in stored]
    assert "k3y" not in json.dumps(plain)
    assert [secret_of(job, "X-Api-Key") for job in made] == [
        "k3y-0", "k3y-1", "k3y-2"]


def test_a_patch_moving_the_url_to_another_origin_must_give_the_secret_again(api, alice):
    job = http_job(owner=alice)
    token = token_of(job)
    for url in ("https://attacker.example.net/echo", "http://hooks.example.com/x",
                "https://hooks.example.com:8443/x"):
        response = api.patch(f"/api/jobs/{job.pk}/", {"payload": {
            "url": url, "encrypted_headers": {"Authorization": "(encrypted)"}}}, format="json")

        assert response.status_code == 400, (url, response.content)
        assert "origin" in response.json()["payload.encrypted_headers.Authorization"][0]
        stored = Job.objects.get(pk=job.pk).payload
        assert stored["url"] == URL and stored["encrypted_headers"]["Authorization"] == token


def test_a_patch_to_another_origin_with_the_secret_given_again_is_stored(api, alice):
    job = http_job(owner=alice)
    response = api.patch(f"/api/jobs/{job.pk}/", {"payload": {
        "url": "https://elsewhere.example.net/y",
        "headers": {"Authorization": "Bearer other"}}}, format="json")

    assert response.status_code == 200, response.content
    assert secret_of(job, "Authorization") == "Bearer other"


def test_a_patch_keeping_the_origin_keeps_the_secret_on_a_new_path(api, alice):
    job = http_job(owner=alice)
    response = api.patch(f"/api/jobs/{job.pk}/", {"payload": {
        "url": "https://HOOKS.example.com:443/other?q=1",
        "encrypted_headers": {"Authorization": "(encrypted)"}}}, format="json")

    assert response.status_code == 200, response.content
    assert secret_of(job, "Authorization") == SECRET


def test_the_admin_refuses_to_move_a_stored_secret_to_another_origin(admin_client):
    job = http_job()
    token = token_of(job)
    edited = {"url": "http://attacker.example.net/echo",
              "encrypted_headers": {"Authorization": "(encrypted)"}}

    response = admin_client.post(f"/admin/jobs/job/{job.pk}/change/", {
        "name": "hook", "payload": json.dumps(edited), "priority": "5", "timeout_s": "60",
        "max_attempts": "4", "_save": "Save"})

    assert response.status_code == 200  # the form again, with the error
    assert "origin" in response.content.decode() and token not in response.content.decode()
    stored = Job.objects.get(pk=job.pk).payload
    assert stored["url"] == URL and stored["encrypted_headers"]["Authorization"] == token


def test_a_new_value_beside_the_marker_replaces_the_stored_secret(api, alice):
    job = http_job(owner=alice)
    shown = api.get(f"/api/jobs/{job.pk}/").json()["payload"]
    shown["headers"]["Authorization"] = "Bearer replaced"

    response = api.patch(f"/api/jobs/{job.pk}/", {"payload": shown}, format="json")

    assert response.status_code == 200, response.content
    assert secret_of(job, "Authorization") == "Bearer replaced"
