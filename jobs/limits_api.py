"""/api/limits/: an owner's isolation policy (docs/isolation.md; docs/scaling.md).

GET answers the caller's own policy (``?owner=<username>`` asks for anyone's, with the
jobs.view_ownerpolicy permission); PUT, with the jobs.change_ownerpolicy permission, sets
an owner's ``max_running`` (null: the SCHEDULER OWNER_CONCURRENCY default) and/or
``default_queue`` (blank: "default"); a field left out keeps its value. An owner cannot
raise their own limit. is_staff alone grants nothing (jobs/access.py).
"""

from django.contrib.auth import get_user_model
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import NotFound, PermissionDenied, ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from jobs import conf
from jobs.access import may_change_all, may_view_all, perm
from jobs.api import COMMON, FIELD_ERRORS
from jobs.exceptions import SchedulerError
from jobs.models import OwnerPolicy
from jobs.validation import QUEUE_RE
from runs.limits import MAX_RUNNING, set_owner_policy
from runs.models import Run, RunState


class OwnerPolicySerializer(serializers.Serializer):
    """One owner's policy; ``effective_max_running`` is the limit in force (null: none)
    and ``running`` how many of the owner's runs run now."""

    owner = serializers.CharField(required=False, help_text="username (another's needs "
                                  "the jobs.view_ownerpolicy permission; default: yourself)")
    max_running = serializers.IntegerField(
        min_value=1, max_value=MAX_RUNNING, allow_null=True, required=False,
        help_text="most runs of this owner running at once, cluster-wide; null: the "
                  "settings default (OWNER_CONCURRENCY)")
    default_queue = serializers.RegexField(
        QUEUE_RE, max_length=64, allow_blank=True, required=False,
        help_text='queue of jobs that name none (tenant queue); blank: "default"')
    effective_max_running = serializers.IntegerField(read_only=True, allow_null=True)
    running = serializers.IntegerField(read_only=True)


OWNER = OpenApiParameter("owner", OpenApiTypes.STR, description="username (another's needs "
                         "the jobs.view_ownerpolicy permission)")


def _describe(user) -> dict:
    policy = OwnerPolicy.objects.filter(owner=user).first()
    own = policy.max_running if policy else None
    effective = own if own is not None else (conf.get("OWNER_CONCURRENCY") or None)
    return {
        "owner": user.get_username(), "max_running": own,
        "default_queue": policy.default_queue if policy else "",
        "effective_max_running": effective,
        "running": Run.objects.filter(state=RunState.RUNNING, job__owner=user).count(),
    }


class LimitsView(APIView):
    """Read (GET) or, with the change permission, set (PUT) an owner's concurrency limit
    and default queue."""

    def _owner(self, request, username: str | None):
        if not username or username == request.user.get_username():
            return request.user
        if not may_view_all(request.user, OwnerPolicy):
            raise PermissionDenied("reading another owner's limits needs the "
                                   f"{perm(OwnerPolicy, 'view')} permission")
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise NotFound(f"no owner named {username!r}")
        return user

    @extend_schema(summary="An owner's concurrency limit and default queue",
                   parameters=[OWNER], responses={200: OwnerPolicySerializer, **COMMON})
    def get(self, request):
        user = self._owner(request, request.query_params.get("owner"))
        return Response(OwnerPolicySerializer(_describe(user)).data)

    @extend_schema(summary="Set an owner's concurrency limit and default queue "
                           "(jobs.change_ownerpolicy permission)",
                   request=OwnerPolicySerializer,
                   responses={200: OwnerPolicySerializer, 400: FIELD_ERRORS, **COMMON})
    def put(self, request):
        if not may_change_all(request.user, OwnerPolicy):
            raise PermissionDenied(f"setting limits needs the {perm(OwnerPolicy, 'change')} "
                                   "permission")
        data = OwnerPolicySerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        user = self._owner(request, values.get("owner"))
        current = OwnerPolicy.objects.filter(owner=user).first()
        try:
            set_owner_policy(
                user,
                max_running=values.get("max_running",
                                       current.max_running if current else None),
                default_queue=values.get("default_queue",
                                         current.default_queue if current else ""))
        except SchedulerError as exc:
            raise ValidationError({"detail": [str(exc)]}) from exc
        return Response(OwnerPolicySerializer(_describe(user)).data)
