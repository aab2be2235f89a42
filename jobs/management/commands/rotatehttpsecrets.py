"""``manage.py rotatehttpsecrets``: re-encrypt every stored secret header of the http jobs
under the current SECRET_KEY, after a rotation (docs/http-handler.md, "Secrets"), and
bind any encrypted before values were bound to their job (docs/security.md, "Encrypted
values").

Set the new SECRET_KEY with the old one in SECRET_KEY_FALLBACKS, restart, run this; then
the old key can leave SECRET_KEY_FALLBACKS.
"""

from django.core.management.base import BaseCommand, CommandError

from jobs.models import Job
from runs.outbound.reseal import reseal


class Command(BaseCommand):
    help = ("Re-encrypt the secret headers of every http job under the current SECRET_KEY "
            "(after a rotation; the old key must still be in SECRET_KEY_FALLBACKS).")

    def handle(self, *args, **options):
        done = reseal(Job)
        self.stdout.write(f"re-encrypted the secret headers of {done.rewritten} http jobs")
        problems = []
        if done.undecryptable:
            problems.append(
                f"{len(done.undecryptable)} jobs hold headers no key opens (not under "
                f"SECRET_KEY or SECRET_KEY_FALLBACKS): "
                f"{', '.join(map(str, done.undecryptable[:20]))}")
        if done.shared:
            problems.append(
                f"{len(done.shared)} jobs hold a header copied between owners' jobs, left "
                f"unusable (give its value again): {', '.join(map(str, done.shared[:20]))}")
        if problems:
            raise CommandError("; ".join(problems))
