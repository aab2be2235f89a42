"""What a locked-out login answers, and the client address django-axes counts failures
by (docs/security.md, "Authentication, throttling and tokens").

``username`` (settings.AXES_USERNAME_CALLABLE) is the username as given, cut to the
length of axes' username column: a longer one was a 500 instead of a failed login.

django-axes calls ``lockout_response`` (settings.AXES_LOCKOUT_CALLABLE) when a login is
refused because its username failed too often from its address: the REST API's login
(/api/auth/login/) answers JSON, like every /api/ answer; the admin's a page in the
admin's look. Both are 429 with ``Retry-After`` (the cool-off, in seconds).
"""

import math

from axes.helpers import get_cool_off
from axes.models import AccessAttempt
from django.conf import settings
from django.contrib import admin
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.response import TemplateResponse

from scheduler_core.rest.client_address import client_ip as _client_ip


def username(request: HttpRequest, credentials: dict | None = None) -> str | None:
    """The username axes counts a login by: from ``credentials`` (authenticate()'s) or
    else the request's form, as axes' own default reads it, cut to the length of axes'
    username column (255). No user has a name that long (Django's is at most 150), so
    two names cut alike share only a count of failures that cannot log anyone in."""
    field = settings.AXES_USERNAME_FORM_FIELD
    given = (credentials.get(field) if credentials
             else getattr(request, "data", request.POST).get(field))
    if given is None:
        return None
    return str(given)[:AccessAttempt._meta.get_field("username").max_length]


def client_ip(request: HttpRequest) -> str | None:
    """The client address (scheduler_core/rest/client_address.py): REMOTE_ADDR, or, from a peer in
    TRUSTED_PROXY_NETWORKS, the address TRUSTED_PROXY_COUNT proxies put in
    X-Forwarded-For; the anonymous throttle reads the same, so a login lockout and the
    throttle count the same client."""
    return _client_ip(request)


def lockout_response(request: HttpRequest, original_response=None,
                     credentials: dict | None = None) -> HttpResponse:
    """The answer to a refused login: JSON ``{"detail": ...}`` under /api/, otherwise
    the admin's lockout page; status 429 with ``Retry-After`` in seconds."""
    seconds = math.ceil(get_cool_off(request).total_seconds())
    minutes = max(1, math.ceil(seconds / 60))
    detail = (f"too many failed logins for this username from your address "
              f"({settings.AXES_FAILURE_LIMIT}); logins are refused for {minutes} "
              f"minute(s), even with the right password")
    if request.path.startswith("/api/"):
        response = JsonResponse({"detail": detail}, status=429)
    else:
        context = {**admin.site.each_context(request), "title": "Login refused",
                   "detail": detail}
        response = TemplateResponse(request, "registration/locked_out.html", context,
                                    status=429).render()
    response["Retry-After"] = str(seconds)
    return response
