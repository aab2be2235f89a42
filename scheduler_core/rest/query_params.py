"""A list endpoint refuses a query parameter it does not know: DRF and django-filter drop
one silently, so ``?state=dead`` (for ``status``) or ``?page_sise=10`` answered the whole
unfiltered list as if it were the one asked for (docs/api.md, "Conventions")."""

import difflib

from django_filters.rest_framework import DjangoFilterBackend
from rest_framework.exceptions import ValidationError
from rest_framework.filters import BaseFilterBackend
from rest_framework.settings import api_settings

# Every paginator's parameters, whichever the list uses.
PAGINATION_PARAMS = ("page_query_param", "page_size_query_param", "cursor_query_param",
                     "limit_query_param", "offset_query_param")


class KnownParameters(BaseFilterBackend):
    """Put first in a list view's ``filter_backends``: on the list action, a query
    parameter that is none of the view's filters (its django-filter FilterSet), its
    ordering parameter, its paginator's parameters or DRF's ``format`` is a 400 naming
    it, with the likely intended one and the ones the list takes. Other actions (one
    object's GET, which DRF filters too) are left alone."""

    def filter_queryset(self, request, queryset, view):
        if getattr(view, "action", "list") != "list":
            return queryset
        unknown = sorted(set(request.query_params) - allowed(view, queryset))
        if unknown:
            raise ValidationError({unknown[0]: [message(unknown[0], allowed(view,
                                                                          queryset))]})
        return queryset


def allowed(view, queryset) -> set[str]:
    """The query parameters list ``view`` takes."""
    names = {api_settings.URL_FORMAT_OVERRIDE}
    filterset = DjangoFilterBackend().get_filterset_class(view, queryset)
    if filterset is not None:
        names |= set(filterset.base_filters)
    for backend in getattr(view, "filter_backends", ()):
        if getattr(backend, "ordering_param", None):
            names.add(backend.ordering_param)
    paginator = getattr(view, "paginator", None)
    for attr in PAGINATION_PARAMS:
        if name := getattr(paginator, attr, None):
            names.add(name)
    return names


def message(name: str, names: set[str]) -> str:
    """The reason unknown parameter ``name`` is refused: "unknown query parameter (did
    you mean 'status'?); this list takes cursor, format, ...". """
    close = difflib.get_close_matches(name, sorted(names), n=1, cutoff=0.6)
    meant = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown query parameter{meant}; this list takes {', '.join(sorted(names))}"
