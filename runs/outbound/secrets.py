"""Secret header values at rest (docs/http-handler.md, "Secrets"; docs/security.md,
"Encrypted values"): encrypted with cryptography's Fernet (AES-128-CBC + HMAC-SHA256,
timestamped tokens) under a key derived from Django's SECRET_KEY by HKDF-SHA256, so no
second secret has to be deployed.

Each value is sealed together with where it belongs (a Binding: the job's owner, the
job's random seal and the header's name), inside the authenticated plaintext: a token
copied into another job, another owner's job or another header does not open there.

Rotation follows Django's: the new SECRET_KEY encrypts, every key of SECRET_KEY_FALLBACKS
still decrypts (MultiFernet), and ``manage.py rotatehttpsecrets`` re-encrypts what is
stored under the current key, after which the old key can leave the fallbacks.
"""

import base64
import functools
import json
import secrets as random
from dataclasses import dataclass

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings

# Binds the derived key to this use: the same SECRET_KEY signs sessions (Django), and a
# key for one purpose must not be the key for another.
PURPOSE = b"django-job-scheduler: http handler secret headers"
# Starts every sealed plaintext. A header value cannot hold NUL, so no value encrypted
# before values were bound (the bare value) can pass for a sealed one.
ENVELOPE = b"\x00bound-v1\x00"
# What every token of this encryption starts with (Fernet's version byte and timestamp
# in base64): tests look for it in everything shown to users.
TOKEN_PREFIX = "gAAAAA"


class Undecryptable(ValueError):
    """A secret header was encrypted under a key this deployment no longer has, or it is
    not a token."""


class Misbound(ValueError):
    """A token opened, but it was sealed for another owner, job or header (or before
    values were bound at all): it is not given out."""


@dataclass(frozen=True)
class Binding:
    """Where a sealed value belongs: the job owner's id (None for a job without an
    owner), the job's seal (payload.SEAL, random text made with the job) and the header
    name (compared lowercase)."""

    owner_id: int | None
    seal: str
    header: str

    def record(self) -> dict:
        return {"o": self.owner_id, "s": self.seal, "h": self.header.lower()}


def new_seal() -> str:
    """A fresh random seal for a job (128 bits, URL-safe text)."""
    return random.token_urlsafe(16)


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


def seal(value: str, binding: Binding) -> str:
    """``value`` (text) as a Fernet token under the current key, bound to ``binding``."""
    record = json.dumps({**binding.record(), "v": value}, separators=(",", ":"))
    return keys().encrypt(ENVELOPE + record.encode("utf-8")).decode("ascii")


def _plaintext(token) -> bytes:
    try:
        return keys().decrypt(token.encode("ascii"))
    except (InvalidToken, UnicodeError, AttributeError) as exc:
        raise Undecryptable("not encrypted under SECRET_KEY or SECRET_KEY_FALLBACKS") from exc


def unseal(token: str, binding: Binding) -> str:
    """The value sealed in ``token`` for ``binding``. Raises Undecryptable (no key of
    this deployment opens it, or it is no token) or Misbound (sealed for another owner,
    job or header, or before values were bound)."""
    plain = _plaintext(token)
    if not plain.startswith(ENVELOPE):
        raise Misbound("encrypted before secrets were bound to their job "
                       "(manage.py rotatehttpsecrets binds it)")
    record = json.loads(plain[len(ENVELOPE):])
    if {k: record.get(k) for k in ("o", "s", "h")} != binding.record():
        raise Misbound("sealed for another job, owner or header")
    return record["v"]


def bind_legacy(token: str, binding: Binding) -> str:
    """A token made before values were bound (the bare value) sealed again for
    ``binding`` under the current key; a token already bound is only rotated. Raises
    Undecryptable."""
    plain = _plaintext(token)
    if plain.startswith(ENVELOPE):
        return rotate(token)
    return seal(plain.decode("utf-8"), binding)


def is_bound(token: str) -> bool:
    """Whether ``token`` holds a bound value. Raises Undecryptable."""
    return _plaintext(token).startswith(ENVELOPE)


def rotate(token: str) -> str:
    """``token`` re-encrypted under the current key, its binding kept. Raises
    Undecryptable."""
    try:
        return keys().rotate(token.encode("ascii")).decode("ascii")
    except (InvalidToken, UnicodeError, AttributeError) as exc:
        raise Undecryptable("not encrypted under SECRET_KEY or SECRET_KEY_FALLBACKS") from exc
