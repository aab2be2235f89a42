"""Refuse admin requests whose query string holds a NUL character (docs/admin.md,
"Decisions"). PostgreSQL text cannot hold NUL, so a filter value, search or ordering with one
reached the database and failed the page with a 500 (DataError). One check here covers
every change list's filters, ours and the stock ones (a field's choices, the owner, the
search box, knox's and axes' pages), where a check per filter would miss the next one.
Forms need none: Django's form fields already refuse NUL."""

from django.http import HttpResponseBadRequest

ADMIN_PREFIX = "/admin/"


class AdminNulGuardMiddleware:
    """A 400 naming the parameter for a GET or POST to /admin/ whose query string has a
    NUL character in a name or value; any other request passes untouched."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.path.startswith(ADMIN_PREFIX):
            for name, values in request.GET.lists():
                if "\x00" in name or any("\x00" in value for value in values):
                    return HttpResponseBadRequest(
                        f"the query parameter {name!r} holds a NUL character, which no "
                        "filter value, search or ordering may contain",
                        content_type="text/plain; charset=utf-8")
        return self.get_response(request)
