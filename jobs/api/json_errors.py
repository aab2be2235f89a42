"""Every answer under /api/ is JSON, whatever fails (docs/api.md, "Errors").

DRF renders its own errors (400, 401, 403, 404 of an id, 405, 415, 429) as JSON, but some
answers never reach a DRF view: Django's 404 for a path no URL matches, the 400 of a
Host header not in ALLOWED_HOSTS, the 403 of a failed CSRF check on the login page, a 500,
a form body over DATA_UPLOAD_MAX_MEMORY_SIZE. This middleware, first in MIDDLEWARE, turns
those into ``{"detail": "..."}`` with the same status and headers, and answers 413 at
the door for a body over the API's largest cap, before anything reads it.
"""

import json

from django.conf import settings
from django.http import JsonResponse

from scheduler_core import conf
from scheduler_core.rest.parsers import content_length

PREFIX = "/api/"
JSON_TYPES = ("application/json", "application/problem+json")
FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")
DETAILS = {
    400: "Bad request.",
    403: "Forbidden.",
    404: "Not found: no API endpoint at this path (see /api/ and docs/api.md).",
    405: "Method not allowed.",
    413: "The request body is too large.",
    500: "Server error; it has been logged.",
}


def body_cap(request) -> int:
    """The most bytes a request body under /api/ may have before any view sees it: the
    bulk endpoint's JSON cap (API_BULK_MAX_BODY_BYTES, the largest of the API's caps;
    scheduler_core/rest/parsers.py applies each endpoint's own), or for a form body (only
    the login page takes one) Django's DATA_UPLOAD_MAX_MEMORY_SIZE."""
    content_type = request.META.get("CONTENT_TYPE", "").split(";")[0].strip().lower()
    if content_type in FORM_TYPES:
        return settings.DATA_UPLOAD_MAX_MEMORY_SIZE or 0
    return max(conf.get("API_BULK_MAX_BODY_BYTES"), conf.get("API_MAX_BODY_BYTES"))


class JsonApiErrorsMiddleware:
    """Under /api/: 413 JSON for a body over body_cap(); any error answer (status >= 400)
    that is not JSON and not DRF's own rendering (its browsable API answers HTML to
    browsers on purpose) gets a JSON body ``{"detail": <DETAILS or the reason phrase>}``,
    keeping its status, headers and cookies."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if not request.path_info.startswith(PREFIX):
            return self.get_response(request)
        length, cap = content_length(request), body_cap(request)
        if cap and length > cap:
            return JsonResponse({"detail": f"The request body is {length} bytes; "
                                           f"the cap is {cap}."}, status=413)
        response = self.get_response(request)
        if response.status_code < 400 or _is_json(response) or _rendered_by_drf(response):
            return response
        if getattr(response, "streaming", False):
            return JsonResponse({"detail": _detail(response)}, status=response.status_code)
        response.content = json.dumps({"detail": _detail(response)})
        response["Content-Type"] = "application/json"
        if response.has_header("Content-Length"):  # set by CommonMiddleware for the old body
            response["Content-Length"] = str(len(response.content))
        return response


def _is_json(response) -> bool:
    return response.get("Content-Type", "").startswith(JSON_TYPES)


def _rendered_by_drf(response) -> bool:
    # A DRF Response carries the renderer content negotiation chose.
    return getattr(response, "accepted_renderer", None) is not None


def _detail(response) -> str:
    return DETAILS.get(response.status_code, f"{response.reason_phrase}.")
