"""The REST API's error answers and their OpenAPI shapes, shared by every app's views
(docs/api.md, "Conventions": Errors): ``{"detail": "..."}`` for any error but a field
error, a field -> reasons object for a 400, a 409 for a state that forbids the request
and a 403 with the quota refused."""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers, status
from rest_framework.exceptions import APIException

from scheduler_core.exceptions import SchedulerError


class Conflict(APIException):
    """The request is valid but the job or run is in a state that forbids it."""

    status_code = status.HTTP_409_CONFLICT
    default_detail = "The request conflicts with the current state of the resource."
    default_code = "conflict"


class QuotaRefused(APIException):
    """Storing the request would take the owner over a quota (jobs or pending runs):
    403, with ``limit`` (the policy field) and ``value`` (the quota in force) beside
    ``detail`` (docs/isolation.md, "Tenant bounds")."""

    status_code = status.HTTP_403_FORBIDDEN
    default_code = "quota_exceeded"

    def __init__(self, exc: SchedulerError):
        """``exc``: the QuotaExceeded refused (runs/tenancy/quotas.py; jobs.tenants
        re-exports it), read for its message, ``limit`` and ``value``."""
        super().__init__(str(exc))
        self.detail = {"detail": str(exc), "limit": exc.limit, "value": exc.value}


class DetailSerializer(serializers.Serializer):
    """An error other than a field error: 401, 403, 404, 409, 413, 415, 422, 429."""

    detail = serializers.CharField()


FIELD_ERRORS = OpenApiResponse(
    OpenApiTypes.OBJECT, description="field name -> list of reasons; nothing was stored")
COMMON = {401: DetailSerializer, 403: DetailSerializer, 404: DetailSerializer,
          429: DetailSerializer}
LISTED = {400: FIELD_ERRORS, **COMMON}  # a bad filter value is a 400 naming the filter
