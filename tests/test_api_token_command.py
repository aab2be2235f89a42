"""``manage.py createapitoken USER``: prints the user's token, creating it if missing."""

from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db


def run(*args) -> str:
    out = StringIO()
    call_command("createapitoken", *args, stdout=out)
    return out.getvalue().strip()


def test_it_creates_a_token_that_the_api_accepts_and_prints_the_same_one_again():
    User.objects.create_user("alice")

    key = run("alice")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {key}")

    assert key == Token.objects.get(user__username="alice").key
    assert run("alice") == key
    assert api.get("/api/jobs/").status_code == 200


def test_rotate_replaces_the_token():
    User.objects.create_user("alice")
    old = run("alice")

    new = run("alice", "--rotate")

    assert new != old
    assert not Token.objects.filter(key=old).exists()


def test_an_unknown_or_inactive_user_is_a_clear_error():
    User.objects.create_user("gone", is_active=False)

    with pytest.raises(CommandError, match="no user 'nobody'"):
        run("nobody")
    with pytest.raises(CommandError, match="inactive"):
        run("gone")
