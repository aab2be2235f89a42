"""Secret header values at rest (docs/http-handler.md, "Secrets"): encrypted with
cryptography's Fernet (AES-128-CBC + HMAC-SHA256, timestamped tokens) under a key derived
from Django's SECRET_KEY by HKDF-SHA256, so no second secret has to be deployed.

Rotation follows Django's: the new SECRET_KEY encrypts, every key of SECRET_KEY_FALLBACKS
still decrypts (MultiFernet), and ``manage.py rotatehttpsecrets`` re-encrypts what is
stored under the current key, after which the old key can leave the fallbacks.
"""

import base64
import functools

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings

# Binds the derived key to this use: the same SECRET_KEY signs sessions (Django), and a
# key for one purpose must not be the key for another.
PURPOSE = b"django-job-scheduler: http handler secret headers"


class Undecryptable(ValueError):
    """A secret header was encrypted under a key this deployment no longer has."""


def derive(secret: str) -> Fernet:
    """The Fernet key derived from ``secret`` (a SECRET_KEY) by HKDF-SHA256."""
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=PURPOSE).derive(
        secret.encode("utf-8"))
    return Fernet(base64.urlsafe_b64encode(key))


@functools.lru_cache(maxsize=4)
def _keys(current: str, fallbacks: tuple[str, ...]) -> MultiFernet:
    return MultiFernet([derive(current), *(derive(k) for k in fallbacks)])


def keys() -> MultiFernet:
    """SECRET_KEY's key first (it encrypts), then one per SECRET_KEY_FALLBACKS entry."""
    return _keys(settings.SECRET_KEY, tuple(getattr(settings, "SECRET_KEY_FALLBACKS", ())))


def encrypt(value: str) -> str:
    """``value`` as a Fernet token (text) under the current key."""
    return keys().encrypt(value.encode("utf-8")).decode("ascii")


def decrypt(token: str) -> str:
    """The value of a token made by ``encrypt``. Raises Undecryptable when no key of this
    deployment opens it (or it is not a token)."""
    try:
        return keys().decrypt(token.encode("ascii")).decode("utf-8")
    except (InvalidToken, UnicodeError, AttributeError) as exc:
        raise Undecryptable("not encrypted under SECRET_KEY or SECRET_KEY_FALLBACKS") from exc


def rotate(token: str) -> str:
    """``token`` re-encrypted under the current key. Raises Undecryptable."""
    try:
        return keys().rotate(token.encode("ascii")).decode("ascii")
    except (InvalidToken, UnicodeError, AttributeError) as exc:
        raise Undecryptable("not encrypted under SECRET_KEY or SECRET_KEY_FALLBACKS") from exc
