"""What every view of the REST API authenticates, permits, throttles and parses with, set
on the views themselves rather than taken from the project's ``REST_FRAMEWORK`` defaults
(docs/own-project.md, "Settings"): in a project of its own whose defaults are DRF's
(AllowAny, no throttles, Basic and Session authentication), the API refused valid tokens
with a 403 and, worse, left its endpoints without the login requirement and the per-owner
throttles that docs/isolation.md promises. A view's own class attributes still win (a
viewset's owner permission, a list's ordering filter)."""

from rest_framework.authentication import SessionAuthentication

from scheduler_core.rest.parsers import CappedJSONParser
from scheduler_core.rest.throttling import (
    AnonymousRateThrottle,
    IsAuthenticatedOrThrottled,
    OwnerRateThrottle,
)
from scheduler_core.rest.tokens import TokenAuthentication


class ApiPolicy:
    """A mixin, first among a view's bases: the scheduler API's authentication (API tokens,
    tokens.py, and sessions), permission (logged in: throttling.py), throttles (per owner
    and per client address: docs/api.md, "Throttling"), parser (JSON capped at
    API_MAX_BODY_BYTES: docs/api.md); the views that filter name django-filter
    themselves. The OpenAPI schema class cannot be set here: drf-spectacular takes the one of an
    ``@extend_schema`` on a method from DEFAULT_SCHEMA_CLASS (scheduler_core/drf_settings.py)."""

    authentication_classes = (TokenAuthentication, SessionAuthentication)
    permission_classes = (IsAuthenticatedOrThrottled,)
    throttle_classes = (OwnerRateThrottle, AnonymousRateThrottle)
    parser_classes = (CappedJSONParser,)
