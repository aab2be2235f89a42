"""The ordering filter of the REST API's lists: an ``ordering`` it cannot honour is a 400
(docs/api.md, "Conventions": ordering and parameters)."""

from rest_framework.exceptions import ValidationError
from rest_framework.filters import OrderingFilter


class StrictOrderingFilter(OrderingFilter):
    """DRF's OrderingFilter, except that an ``ordering`` naming a field the list does not
    sort by is a 400 listing the allowed ones: DRF drops it silently, and the client reads
    the default order as the one asked for."""

    def get_ordering(self, request, queryset, view):
        given = request.query_params.get(self.ordering_param)
        if given:
            allowed = [name for name, _ in self.get_valid_fields(queryset, view,
                                                                 {"request": request})]
            bad = [term.strip() for term in given.split(",")
                   if term.strip().removeprefix("-") not in allowed]
            if bad:
                listed = ", ".join(allowed)
                raise ValidationError({self.ordering_param: [
                    f"cannot sort by {bad[0]!r}; give one or more of {listed}, each "
                    "optionally prefixed with '-' for descending, separated by commas"]})
        return super().get_ordering(request, queryset, view)
