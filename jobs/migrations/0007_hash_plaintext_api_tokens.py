"""Move DRF's plaintext API tokens (table authtoken_token, from before django-rest-knox)
into knox's hashed store and empty the plaintext table: every token keeps working, none
stays readable (docs/security.md, "Authentication, throttling and tokens"). A database
that never had DRF's tokens has nothing to move."""

from django.db import migrations
from knox.crypto import hash_token
from knox.settings import CONSTANTS

PLAINTEXT_TABLE = "authtoken_token"


def hash_plaintext_tokens(apps, schema_editor):
    """Copy each (key, user) of authtoken_token as a knox AuthToken (SHA-512 digest, the
    key's first 15 characters for lookup, no expiry), then delete the plaintext rows."""
    connection = schema_editor.connection
    if PLAINTEXT_TABLE not in connection.introspection.table_names():
        return
    table = schema_editor.quote_name(PLAINTEXT_TABLE)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT key, user_id FROM {table}")
        rows = cursor.fetchall()
        AuthToken = apps.get_model("knox", "AuthToken")
        AuthToken.objects.bulk_create(
            [AuthToken(digest=hash_token(key), token_key=key[:CONSTANTS.TOKEN_KEY_LENGTH],
                       user_id=user_id, expiry=None) for key, user_id in rows],
            ignore_conflicts=True)
        cursor.execute(f"DELETE FROM {table}")


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0006_job_paused_at"),
        ("knox", "0009_extend_authtoken_field"),
    ]

    operations = [
        migrations.RunPython(hash_plaintext_tokens, migrations.RunPython.noop, elidable=True),
    ]
