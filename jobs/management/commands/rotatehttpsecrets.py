"""``manage.py rotatehttpsecrets``: re-encrypt every stored secret header of the http jobs
under the current SECRET_KEY, after a rotation (docs/http-handler.md, "Secrets").

Set the new SECRET_KEY with the old one in SECRET_KEY_FALLBACKS, restart, run this; then
the old key can leave SECRET_KEY_FALLBACKS.
"""

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from jobs.models import Job
from runs.outbound import secrets

BATCH = 500


class Command(BaseCommand):
    help = ("Re-encrypt the secret headers of every http job under the current SECRET_KEY "
            "(after a rotation; the old key must still be in SECRET_KEY_FALLBACKS).")

    def handle(self, *args, **options):
        ids = list(Job.objects.filter(handler="http", payload__has_key="encrypted_headers")
                   .order_by("pk").values_list("pk", flat=True))
        rotated, failed = 0, []
        for start in range(0, len(ids), BATCH):
            with transaction.atomic():
                for job in Job.objects.select_for_update().filter(
                        pk__in=ids[start:start + BATCH]):
                    sealed = job.payload.get("encrypted_headers") or {}
                    try:
                        job.payload["encrypted_headers"] = {
                            name: secrets.rotate(token) for name, token in sealed.items()}
                    except secrets.Undecryptable:
                        failed.append(job.pk)
                        continue
                    job.save(update_fields=["payload"])
                    rotated += 1
        self.stdout.write(f"re-encrypted the secret headers of {rotated} http jobs")
        if failed:
            raise CommandError(
                f"{len(failed)} jobs hold headers no key opens (not under SECRET_KEY or "
                f"SECRET_KEY_FALLBACKS): {', '.join(map(str, failed[:20]))}")
