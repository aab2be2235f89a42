"""``manage.py createapitoken USER [--rotate] [--expires-in SECONDS]``: make a REST API
token for USER and print it, once (scheduler_core/rest/tokens.py).

A thin command on django-rest-knox's own API (``AuthToken.objects.create``): DRF's
``drf_create_token`` works on DRF's plaintext tokens, which this project no longer keeps
(docs/security.md), and knox ships no command of its own.
"""

from datetime import timedelta

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from knox.models import AuthToken

from scheduler_core.rest.tokens import create_token


class Command(BaseCommand):
    help = ("Make a new REST API token for an existing user and print it; it is stored "
            "hashed and cannot be shown again. With --rotate, the user's other tokens stop "
            "working.")

    def add_arguments(self, parser):
        parser.add_argument("username", metavar="USER", help="an existing username")
        parser.add_argument("--rotate", action="store_true",
                            help="delete the user's other tokens (they stop working at once)")
        parser.add_argument("--expires-in", type=int, metavar="SECONDS",
                            help="the token stops working this many seconds from now "
                                 "(default: never, until deleted)")

    def handle(self, *args, username, rotate, expires_in, **options):
        users = get_user_model()
        try:
            user = users.objects.get(**{users.USERNAME_FIELD: username})
        except users.DoesNotExist:
            raise CommandError(
                f"no user {username!r}; create one first (manage.py createsuperuser, or "
                "the admin)") from None
        if not user.is_active:
            raise CommandError(f"user {username!r} is inactive; its token would be refused")
        if expires_in is not None and expires_in <= 0:
            raise CommandError(f"--expires-in must be a positive number of seconds; got "
                               f"{expires_in}")
        with transaction.atomic():
            if rotate:
                AuthToken.objects.filter(user=user).delete()
            token = create_token(
                user, timedelta(seconds=expires_in) if expires_in is not None else None)
        self.stdout.write(token)
