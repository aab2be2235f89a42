"""API tokens are stored hashed (django-rest-knox; scheduler_core/rest/tokens.py): no
table row and no admin page holds a token, yet it authenticates; DRF's plaintext tokens from before
are moved into the hashed store by a migration and keep working; wrong tokens are throttled
like requests with no login (docs/security.md)."""

import importlib
from io import StringIO

import pytest
from django.apps import apps
from django.contrib import admin
from django.contrib.auth.models import User
from django.core import serializers
from django.core.management import call_command
from django.db import connection
from knox.models import AuthToken
from rest_framework.test import APIClient

from scheduler_core import conf
from scheduler_core.rest.throttling import parse_rate

pytestmark = pytest.mark.django_db


def api_with(key: str) -> APIClient:
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return api


def new_token(username: str) -> str:
    out = StringIO()
    call_command("createapitoken", username, stdout=out)
    return out.getvalue().strip()


def every_row_as_text() -> str:
    """Every row of every installed model, serialized: what a database dump would hold."""
    return "".join(serializers.serialize("json", model._default_manager.all())
                   for model in apps.get_models() if not model._meta.proxy)


def test_a_token_is_stored_hashed_and_still_authenticates():
    User.objects.create_user("alice")

    key = new_token("alice")

    assert key not in every_row_as_text()
    assert api_with(key).get("/api/jobs/").status_code == 200


def test_no_admin_page_shows_a_token(admin_client):
    alice = User.objects.create_user("alice")
    key = new_token("alice")
    token = AuthToken.objects.get(user=alice)
    pages = [f"/admin/{model._meta.app_label}/{model._meta.model_name}/"
             for model in admin.site._registry]  # every model's list in the admin
    pages.append(f"/admin/knox/authtoken/{token.pk}/change/")

    for page in pages:
        response = admin_client.get(page)
        assert response.status_code == 200, page
        assert key.encode() not in response.content, page
    assert "/admin/knox/authtoken/" in pages


def test_the_admin_add_form_shows_a_new_token_once(admin_client):
    alice = User.objects.create_user("alice")

    response = admin_client.post("/admin/knox/authtoken/add/", {"user": alice.pk,
                                                                 "expiry": ""}, follow=True)

    (key,) = [m.message.removeprefix("TOKEN ") for m in response.context["messages"]
              if m.message.startswith("TOKEN ")]
    assert api_with(key).get("/api/jobs/").status_code == 200
    assert key.encode() not in admin_client.get("/admin/knox/authtoken/").content


def test_only_a_superuser_makes_a_token_for_another_user_in_the_admin(client):
    """knox.add_authtoken alone made a superuser's token, and with it superuser API power."""
    from tests.test_api_helpers import user_with

    root = User.objects.create_superuser("root", password="pw")
    clerk = user_with("clerk", "knox.add_authtoken", "knox.view_authtoken", is_staff=True)
    client.force_login(clerk)

    assert f'value="{clerk.pk}"' in client.get("/admin/knox/authtoken/add/").content.decode()
    refused = client.post("/admin/knox/authtoken/add/", {"user": root.pk, "expiry": ""},
                          follow=True)
    assert refused.status_code == 200 and not AuthToken.objects.filter(user=root).exists()
    assert "only a superuser makes a token for another user" in refused.content.decode()
    assert not [m for m in refused.context["messages"] if m.message.startswith("TOKEN ")]

    response = client.post("/admin/knox/authtoken/add/", {"user": clerk.pk, "expiry": ""},
                           follow=True)
    (key,) = [m.message.removeprefix("TOKEN ") for m in response.context["messages"]
              if m.message.startswith("TOKEN ")]
    assert AuthToken.objects.filter(user=clerk).count() == 1
    assert api_with(key).put("/api/limits/", {}, format="json").status_code == 403


@pytest.mark.postgresql_only("the migration runs inside a transaction, as PostgreSQL's "
                             "schema editor can; its fixture table is written in its SQL")
def test_drfs_plaintext_tokens_are_hashed_by_the_migration_and_keep_working():
    alice = User.objects.create_user("alice")
    key = "9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b"  # a DRF token: 40 hex characters
    with connection.cursor() as cursor:  # DRF's authtoken table, as it was
        cursor.execute("CREATE TABLE authtoken_token (key varchar(40) PRIMARY KEY, "
                       "created timestamptz NOT NULL, user_id integer NOT NULL UNIQUE)")
        cursor.execute("INSERT INTO authtoken_token VALUES (%s, now(), %s)", [key, alice.pk])
    migration = importlib.import_module("jobs.migrations.0007_hash_plaintext_api_tokens")

    with connection.schema_editor() as editor:
        migration.hash_plaintext_tokens(apps, editor)

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM authtoken_token")
        assert cursor.fetchone() == (0,)
    assert key not in every_row_as_text()
    assert api_with(key).get("/api/jobs/").status_code == 200


@pytest.mark.postgresql_only("the migration runs inside a transaction, as PostgreSQL's "
                             "schema editor can; its fixture table is written in its SQL")
def test_the_migration_does_nothing_without_drfs_table():
    migration = importlib.import_module("jobs.migrations.0007_hash_plaintext_api_tokens")

    with connection.schema_editor() as editor:
        migration.hash_plaintext_tokens(apps, editor)

    assert not AuthToken.objects.exists()


def test_wrong_tokens_are_throttled_like_requests_without_a_login():
    count, _ = parse_rate(conf.get("API_ANON_THROTTLE_RATE"))
    guesser = APIClient(REMOTE_ADDR="10.0.0.9")
    guesser.credentials(HTTP_AUTHORIZATION="Token " + "0" * 64)

    answers = [guesser.get("/api/jobs/").status_code for _ in range(count)]
    refused = guesser.get("/api/jobs/")

    assert set(answers) == {401}
    assert refused.status_code == 429


def test_a_token_sent_as_bearer_is_a_401_that_names_the_scheme_to_use():
    from scheduler_core.rest.tokens import create_token

    key = create_token(User.objects.create_user("bearer"))
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")

    response = api.get("/api/jobs/")

    assert response.status_code == 401
    assert "'Authorization: Token <token>', not Bearer" in response.json()["detail"]
    assert api_with(key).get("/api/jobs/").status_code == 200
