"""``manage.py createapitoken USER``: makes a new token and prints it, once."""

from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.utils import timezone
from knox.models import AuthToken
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db


def run(*args) -> str:
    out = StringIO()
    call_command("createapitoken", *args, stdout=out)
    return out.getvalue().strip()


def status_with(key: str) -> int:
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return api.get("/api/jobs/").status_code


def test_it_makes_a_new_token_each_time_and_the_api_accepts_both():
    User.objects.create_user("alice")

    first, second = run("alice"), run("alice")

    assert first != second and len(first) == 64
    assert AuthToken.objects.filter(user__username="alice").count() == 2
    assert status_with(first) == status_with(second) == 200


def test_rotate_revokes_the_users_other_tokens():
    User.objects.create_user("alice")
    old = run("alice")

    new = run("alice", "--rotate")

    assert status_with(old) == 401
    assert status_with(new) == 200
    assert AuthToken.objects.filter(user__username="alice").count() == 1


def test_expires_in_sets_the_tokens_expiry():
    User.objects.create_user("alice")
    before = timezone.now()

    key = run("alice", "--expires-in", "3600")

    (token,) = AuthToken.objects.all()
    assert before + timedelta(seconds=3600) <= token.expiry <= timezone.now() + timedelta(
        seconds=3600)
    assert status_with(key) == 200
    with pytest.raises(CommandError, match="--expires-in must be a positive"):
        run("alice", "--expires-in", "0")


def test_an_unknown_or_inactive_user_is_a_clear_error():
    User.objects.create_user("gone", is_active=False)

    with pytest.raises(CommandError, match="no user 'nobody'"):
        run("nobody")
    with pytest.raises(CommandError, match="inactive"):
        run("gone")
