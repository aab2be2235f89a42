"""Idempotency-Key on POST: a retried request gets the first response instead of creating
a second job (the IETF draft "The Idempotency-Key HTTP Header Field", as Stripe does it).

The first successful response per (owner, key) is stored in IdempotencyKey, in the same
transaction as the jobs it created, so either both exist or neither does. The key's row is
inserted *before* the work: a concurrent request with the same key blocks on the unique
constraint until the first commits, then fails to insert and replays the stored response;
if the first rolled back (a 400), the second simply runs. Error responses are not stored:
nothing was created, so a retry is validated afresh.

``response`` holds ``{"body": <the first response's JSON, as text>, "headers": {its
Location}, "request_sha256": <digest of method, path and the parsed JSON body>}``; the
body is kept as text because jsonb would reorder its keys. The same key sent with a
different request is refused with 422, as the draft recommends.
"""

import hashlib
import json
from collections.abc import Callable
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone
from rest_framework import status
from rest_framework.exceptions import APIException
from rest_framework.response import Response
from rest_framework.utils.encoders import JSONEncoder

from jobs.models import IdempotencyKey
from scheduler_core import conf

HEADER = "Idempotency-Key"
REPLAY_HEADER = "Idempotent-Replayed"
KEY_MAX = 255
REPLAYED_HEADERS = ("Location",)


class KeyReused(APIException):
    """The Idempotency-Key was first used with a different request."""

    status_code = status.HTTP_422_UNPROCESSABLE_ENTITY
    default_detail = ("This Idempotency-Key was first used with a different request; "
                      "use a new key for a new request.")
    default_code = "idempotency_key_reused"


class BadKey(APIException):
    """The Idempotency-Key header is malformed."""

    status_code = status.HTTP_400_BAD_REQUEST
    default_detail = f"The {HEADER} header must be 1-{KEY_MAX} printable ASCII characters."
    default_code = "invalid_idempotency_key"


class _Refused(Exception):
    """Carries a non-2xx response out of the transaction so that it rolls back."""

    def __init__(self, response: Response):
        self.response = response


def request_digest(request) -> str:
    """SHA-256 of the method, path and canonical JSON of the parsed body."""
    body = json.dumps(request.data, sort_keys=True, separators=(",", ":"), default=str)
    text = f"{request.method} {request.path}\n{body}"
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def idempotent(request, produce: Callable[[], Response]) -> Response:
    """Run ``produce()`` (which creates things and returns the Response) at most once per
    (owner, Idempotency-Key header); without the header just call it.

    Raises BadKey (400) for a malformed key and KeyReused (422) when the key was
    first used with a different request. A replayed response carries the header
    ``Idempotent-Replayed: true``.
    """
    key = request.headers.get(HEADER)
    if key is None:
        return produce()
    if not 1 <= len(key) <= KEY_MAX or not key.isprintable() or not key.isascii():
        raise BadKey()
    owner, digest = request.user, request_digest(request)
    stored = _live(owner, key)
    if stored is not None:
        return _replay(stored, digest)
    try:
        with transaction.atomic():
            record = IdempotencyKey.objects.create(
                owner=owner, key=key, method=request.method, path=request.path[:255],
                status_code=0, response={})
            response = produce()
            if not 200 <= response.status_code < 300:
                raise _Refused(response)
            record.status_code = response.status_code
            record.response = {
                "body": json.dumps(response.data, cls=JSONEncoder),
                "headers": {name: response[name] for name in REPLAYED_HEADERS
                            if response.has_header(name)},
                "request_sha256": digest,
            }
            record.save(update_fields=["status_code", "response"])
    except _Refused as refused:
        return refused.response
    except IntegrityError:
        # A concurrent request with this key committed first: answer as it did.
        stored = _live(owner, key)
        if stored is None:
            raise
        return _replay(stored, digest)
    return response


def _live(owner, key: str) -> IdempotencyKey | None:
    """The stored first response for (owner, key), dropping it once IDEMPOTENCY_TTL_S old."""
    stored = IdempotencyKey.objects.filter(owner=owner, key=key).first()
    if stored is None:
        return None
    if stored.created_at < timezone.now() - timedelta(seconds=conf.get("IDEMPOTENCY_TTL_S")):
        stored.delete()
        return None
    return stored


def _replay(stored: IdempotencyKey, digest: str) -> Response:
    if stored.response.get("request_sha256") != digest:
        raise KeyReused()
    return Response(json.loads(stored.response["body"]), status=stored.status_code,
                    headers={**stored.response.get("headers", {}), REPLAY_HEADER: "true"})
