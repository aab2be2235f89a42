"""The admin's API token pages (jobs/admin/tokens.py) as a staff user holding every
``knox.*`` permission but not a superuser: nothing on them changes whose token a row is or
which token it is, and another user's tokens are out of reach (add, change, delete, the
bulk delete action). A superuser still manages everyone's (docs/security.md, "API
tokens")."""

import pytest
from django.contrib.auth.models import User
from knox.models import AuthToken
from rest_framework.test import APIClient

from scheduler_core.rest.tokens import create_token
from tests.test_api_helpers import user_with

pytestmark = pytest.mark.django_db

EVERY_KNOX_PERMISSION = ("knox.add_authtoken", "knox.change_authtoken",
                         "knox.delete_authtoken", "knox.view_authtoken")


@pytest.fixture
def clerk_client(client):
    """A logged-in staff user with every knox permission; ``client.clerk`` is the user."""
    client.clerk = user_with("clerk", *EVERY_KNOX_PERMISSION, is_staff=True)
    client.force_login(client.clerk)
    return client


def token_of(user: User) -> AuthToken:
    create_token(user)
    return AuthToken.objects.filter(user=user).latest("created")


def change_url(token: AuthToken) -> str:
    return f"/admin/knox/authtoken/{token.pk}/change/"


def test_add_keeps_a_staff_user_to_tokens_of_their_own(clerk_client):
    root = User.objects.create_superuser("root")

    clerk_client.post("/admin/knox/authtoken/add/", {"user": root.pk, "expiry": ""})

    assert not AuthToken.objects.filter(user=root).exists()


def test_change_cannot_hand_ones_own_token_to_another_user(clerk_client):
    """Reassigning one's own token to a superuser gave its holder superuser API power."""
    root = User.objects.create_superuser("root")
    mine = token_of(clerk_client.clerk)

    clerk_client.post(change_url(mine), {"user": root.pk, "digest": mine.digest,
                                         "token_key": mine.token_key, "expiry": ""})

    assert not AuthToken.objects.filter(user=root).exists()
    assert AuthToken.objects.get(pk=mine.pk).user == clerk_client.clerk


def test_change_cannot_plant_a_token_of_ones_choosing(clerk_client):
    """With ``digest`` editable, a known token's digest was saved as a new row, for any
    user: a token its planter holds, authenticating as someone else."""
    from knox.crypto import hash_token

    root = User.objects.create_superuser("root")
    planted = "a" * 64
    mine = token_of(clerk_client.clerk)

    clerk_client.post(change_url(mine), {"user": root.pk, "digest": hash_token(planted),
                                         "token_key": planted[:15], "expiry": ""})

    assert not AuthToken.objects.filter(digest=hash_token(planted)).exists()
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {planted}")
    assert api.get("/api/jobs/").status_code == 401


def test_the_change_form_has_no_field_to_edit(clerk_client):
    mine = token_of(clerk_client.clerk)

    page = clerk_client.get(change_url(mine)).content.decode()

    for field in ("user", "digest", "token_key", "expiry"):
        assert f'name="{field}"' not in page, field


def test_another_users_token_is_neither_listed_nor_opened(clerk_client):
    alice = User.objects.create_user("alice")
    hers = token_of(alice)
    mine = token_of(clerk_client.clerk)

    listing = clerk_client.get("/admin/knox/authtoken/").content.decode()
    opened = clerk_client.get(change_url(hers))

    assert mine.digest in listing and hers.digest not in listing
    assert opened.status_code == 302  # the admin's "does not exist", back to the list
    assert clerk_client.get(f"/admin/knox/authtoken/{hers.pk}/history/").status_code == 302


def test_delete_of_another_users_token_is_refused(clerk_client):
    alice = User.objects.create_user("alice")
    hers = token_of(alice)

    clerk_client.post(f"/admin/knox/authtoken/{hers.pk}/delete/", {"post": "yes"})

    assert AuthToken.objects.filter(pk=hers.pk).exists()


def test_the_bulk_delete_action_leaves_another_users_tokens(clerk_client):
    alice = User.objects.create_user("alice")
    hers, mine = token_of(alice), token_of(clerk_client.clerk)

    clerk_client.post("/admin/knox/authtoken/", {
        "action": "delete_selected", "_selected_action": [hers.pk, mine.pk], "post": "yes"})

    assert AuthToken.objects.filter(pk=hers.pk).exists()
    assert not AuthToken.objects.filter(pk=mine.pk).exists()


def test_a_superuser_manages_everyones_tokens(admin_client):
    alice = User.objects.create_user("alice")
    hers = token_of(alice)

    assert hers.digest in admin_client.get("/admin/knox/authtoken/").content.decode()
    assert admin_client.get(change_url(hers)).status_code == 200
    admin_client.post("/admin/knox/authtoken/", {
        "action": "delete_selected", "_selected_action": [hers.pk], "post": "yes"})
    assert not AuthToken.objects.filter(pk=hers.pk).exists()
    admin_client.post("/admin/knox/authtoken/add/", {"user": alice.pk, "expiry": ""})
    assert AuthToken.objects.filter(user=alice).count() == 1
