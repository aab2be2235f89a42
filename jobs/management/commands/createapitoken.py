"""``manage.py createapitoken USER [--rotate]``: print USER's REST API token, creating it
if missing (DRF's authtoken; send it as ``Authorization: Token <key>``)."""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from rest_framework.authtoken.models import Token


class Command(BaseCommand):
    help = ("Print the REST API token of an existing user, creating it if missing. "
            "With --rotate, replace it with a new one (the old token stops working).")

    def add_arguments(self, parser):
        parser.add_argument("username", metavar="USER", help="an existing username")
        parser.add_argument("--rotate", action="store_true",
                            help="delete the user's current token and print a new one")

    def handle(self, *args, username, rotate, **options):
        users = get_user_model()
        try:
            user = users.objects.get(**{users.USERNAME_FIELD: username})
        except users.DoesNotExist:
            raise CommandError(
                f"no user {username!r}; create one first (manage.py createsuperuser, or "
                "the admin)") from None
        if not user.is_active:
            raise CommandError(f"user {username!r} is inactive; its token would be refused")
        with transaction.atomic():
            if rotate:
                Token.objects.filter(user=user).delete()
            token, _ = Token.objects.get_or_create(user=user)
        self.stdout.write(token.key)
