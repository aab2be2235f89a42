"""The OpenAPI schema and its Swagger UI, answering errors as JSON like the rest of /api/
(docs/api.md, "Errors"). drf-spectacular's views render an error with the renderer the
page itself uses: a YAML body from /api/schema/, and from /api/docs/ a bare
``401 Unauthorized`` as text/html that does not say how to get in."""

from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework import exceptions
from rest_framework.renderers import JSONRenderer

from scheduler_core.rest.view_defaults import ApiPolicy

LOG_IN_HINT = ("log in at /admin/ (or /api/auth/login/) in this browser first, then open "
               "/api/docs/ again; API clients send an Authorization: Token header")


class JSONErrors:
    """Mixin of an APIView: an answer of status 400 or more is rendered as JSON, whatever
    renderer the request negotiated."""

    def finalize_response(self, request, response, *args, **kwargs):
        response = super().finalize_response(request, response, *args, **kwargs)
        if response.status_code >= 400 and getattr(response, "data", None) is not None:
            response.accepted_renderer = JSONRenderer()
            response.accepted_media_type = JSONRenderer.media_type
        return response


class SchemaView(JSONErrors, ApiPolicy, SpectacularAPIView):
    """``GET /api/schema/``: the OpenAPI 3 schema (YAML; ``?format=json``); errors JSON."""


class DocsView(JSONErrors, ApiPolicy, SpectacularSwaggerView):
    """``GET /api/docs/``: the Swagger UI; without a login a JSON 401/403 whose detail says
    where to log in (docs/api.md, "The schema")."""

    def permission_denied(self, request, message=None, code=None):
        if request.authenticators and not request.successful_authenticator:
            raise exceptions.NotAuthenticated(
                f"Authentication credentials were not provided: {LOG_IN_HINT}.")
        super().permission_denied(request, message, code)
