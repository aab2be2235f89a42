"""REST API tokens, stored hashed (django-rest-knox; docs/security.md, "Authentication,
throttling and tokens").

A token is 64 random hex characters; the database keeps its SHA-512 digest and its first
15 characters (knox's lookup key), never the token itself, so it is shown once, when it
is made (``manage.py createapitoken``, ``manage.py loaddemo``, or the admin's add form),
and can never be read back. Clients send it as ``Authorization: Token <token>``.
"""

from datetime import timedelta

from drf_spectacular.contrib.knox_auth_token import KnoxTokenScheme
from knox.auth import TokenAuthentication as KnoxTokenAuthentication
from knox.models import AuthToken
from rest_framework.exceptions import AuthenticationFailed

from scheduler_core.rest.throttling import throttle_anonymous


def create_token(user, expires_in: timedelta | None = None) -> str:
    """Make a new API token for ``user`` and return it, the only time it is readable.
    ``expires_in``: how long it is accepted (None: until deleted; the settings'
    REST_KNOX TOKEN_TTL is not used here, so scripts' tokens never lapse unasked)."""
    return AuthToken.objects.create(user=user, expiry=expires_in)[1]


class TokenAuthentication(KnoxTokenAuthentication):
    """knox's token authentication, whose failures (a wrong, expired or revoked token)
    count against the client address's anonymous rate like requests with no login, so
    guessing tokens is throttled too (429 past API_ANON_THROTTLE_RATE, then 401)."""

    def authenticate(self, request):
        scheme = request.META.get("HTTP_AUTHORIZATION", "").split(" ", 1)[0]
        try:
            if scheme.lower() == "bearer":
                # Otherwise "credentials were not provided", though they were, in the
                # scheme /metrics uses (docs/api.md, "Conventions": Login).
                raise AuthenticationFailed("this API takes 'Authorization: Token <token>', "
                                           "not Bearer")
            return super().authenticate(request)
        except AuthenticationFailed:
            # The Django request: DRF's own would authenticate again to find its user.
            throttle_anonymous(request._request, None)
            raise


class TokenScheme(KnoxTokenScheme):
    """The OpenAPI security scheme of :class:`TokenAuthentication` (``Authorization: Token
    <token>``): drf-spectacular's knox extension, registered for our subclass, which it
    does not match on its own (``manage.py check --deploy`` warned W001 per view)."""

    target_class = "scheduler_core.rest.tokens.TokenAuthentication"
