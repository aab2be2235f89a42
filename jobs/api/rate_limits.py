"""/api/limits/rates/: the rate limits by handler and by key, set at run time
(docs/isolation.md, "Rate limits"; runs/flow/rate_limits.py does the work).

GET lists them (any user of the API); PUT sets one (``{"scope": "handler"|"key", "name",
"rate", "burst"}``) with the runs.change_ratelimit permission (and runs.add_ratelimit for
a new one); DELETE
``?scope=&name=`` removes one with runs.delete_ratelimit. A bad value is a 400 naming
its field. is_staff alone grants nothing (scheduler_core/rest/permissions.py).
"""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import NotFound, PermissionDenied, ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from runs.flow import rate_limits as flow_limits
from runs.flow.models import RateLimit
from scheduler_core.exceptions import InvalidJob
from scheduler_core.rest.errors import COMMON, FIELD_ERRORS
from scheduler_core.rest.permissions import perm
from scheduler_core.rest.strict_input import StrictInput
from scheduler_core.rest.view_defaults import ApiPolicy


class RateLimitSerializer(StrictInput, serializers.Serializer):
    """One rate limit: ``rate`` runs started per second, a bucket of ``burst`` runs."""

    scope = serializers.ChoiceField(choices=RateLimit.Scope.choices,
                                    help_text="handler: one bucket for the handler's runs; "
                                              "key: one bucket per value of a rate_key")
    name = serializers.CharField(max_length=200, help_text="the handler, or the rate_key "
                                                           "template (payload.customer_id)")
    rate = serializers.FloatField(help_text="runs started per second, above 0")
    burst = serializers.FloatField(required=False, allow_null=True,
                                   help_text="bucket size in runs, at least 1 (default: "
                                             "one second's worth)")
    updated_at = serializers.DateTimeField(read_only=True)


SCOPE = OpenApiParameter("scope", OpenApiTypes.STR, required=True,
                         description="handler or key")
NAME = OpenApiParameter("name", OpenApiTypes.STR, required=True,
                        description="the handler or the rate_key template")


class RateLimitsView(ApiPolicy, APIView):
    """List (GET), set (PUT) or remove (DELETE) rate limits by handler or key."""

    @extend_schema(summary="Rate limits by handler and by key",
                   responses={200: RateLimitSerializer(many=True), **COMMON})
    def get(self, request):
        return Response(RateLimitSerializer(flow_limits.rate_limit_rows(), many=True).data)

    @extend_schema(summary="Set a rate limit (runs.change_ratelimit permission)",
                   request=RateLimitSerializer,
                   responses={200: RateLimitSerializer, 400: FIELD_ERRORS, **COMMON})
    def put(self, request):
        if not request.user.has_perm(perm(RateLimit, "change")):
            raise PermissionDenied(f"setting rate limits needs the "
                                   f"{perm(RateLimit, 'change')} permission")
        data = RateLimitSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        # A PUT of a new limit adds one: the add permission, as the admin's add page asks.
        if not request.user.has_perm(perm(RateLimit, "add")) and not RateLimit.objects.filter(
                scope=values["scope"], name=values["name"]).exists():
            raise PermissionDenied(f"adding a rate limit needs the "
                                   f"{perm(RateLimit, 'add')} permission")
        try:
            limit = flow_limits.set_rate_limit(values["scope"], values["name"],
                                               values["rate"], values.get("burst"))
        except InvalidJob as exc:
            raise ValidationError({field: [reason] for field, reason in exc.errors.items()}
                                  ) from exc
        return Response(RateLimitSerializer(limit).data)

    @extend_schema(summary="Remove a rate limit (runs.delete_ratelimit permission)",
                   parameters=[SCOPE, NAME], responses={204: None, **COMMON})
    def delete(self, request):
        if not request.user.has_perm(perm(RateLimit, "delete")):
            raise PermissionDenied(f"removing rate limits needs the "
                                   f"{perm(RateLimit, 'delete')} permission")
        scope, name = request.query_params.get("scope"), request.query_params.get("name")
        if scope not in RateLimit.Scope.values:
            raise ValidationError({"scope": [f"must be one of "
                                             f"{', '.join(RateLimit.Scope.values)}"]})
        if not name:
            raise ValidationError({"name": ["this parameter is required"]})
        if not flow_limits.delete_rate_limit(scope, name):
            raise NotFound(f"no {scope} rate limit named {name!r}")
        return Response(status=204)
