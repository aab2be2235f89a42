"""/api/limits/: an owner's isolation policy and bounds (docs/isolation.md; docs/scaling.md).

GET answers the caller's own policy (``?owner=<username>`` asks for anyone's, with the
jobs.view_ownerpolicy permission); PUT, with the jobs.change_ownerpolicy permission, sets
any of an owner's ``max_running``, ``max_pending``, ``max_jobs``, ``highest_priority``,
``max_timeout_s``, ``max_attempts`` (null: the settings default), ``queues`` and
``default_queue`` (blank: "default"); a field left out keeps its value. An owner cannot
raise their own limits. is_staff alone grants nothing (scheduler_core/rest/permissions.py).
"""

from django.contrib.auth import get_user_model
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import NotFound, PermissionDenied, ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from jobs.models import QUEUE_RE, Job, OwnerPolicy
from jobs.tenants import POLICY_FIELDS, bounds_from, pending_load, set_owner_policy
from runs.models import Run, RunState
from scheduler_core.exceptions import SchedulerError
from scheduler_core.rest.errors import COMMON, FIELD_ERRORS
from scheduler_core.rest.permissions import may_change_all, may_view_all, perm
from scheduler_core.rest.view_defaults import ApiPolicy


def _bound(field: str, meaning: str) -> serializers.IntegerField:
    """The serializer field of the policy bound ``field`` (a key of POLICY_FIELDS)."""
    low, high, setting = POLICY_FIELDS[field]
    return serializers.IntegerField(
        min_value=low, max_value=high, allow_null=True, required=False,
        help_text=f"{meaning}; null: the settings default ({setting})")


class OwnerPolicySerializer(serializers.Serializer):
    """One owner's policy: each bound null takes its settings default; ``effective`` holds
    the bounds in force (0: none) and ``running``, ``pending``, ``jobs`` what the owner
    uses now (docs/isolation.md, "Tenant bounds"). ``pending`` is the figure max_pending
    is held to: runs waiting to run and, of them, ``pending_not_yet_made``, the runs its
    live workflow runs will still make."""

    owner = serializers.CharField(required=False, help_text="username (another's needs "
                                  "the jobs.view_ownerpolicy permission; default: yourself)")
    max_running = _bound("max_running", "most runs of this owner running at once, "
                                        "cluster-wide")
    max_pending = _bound("max_pending", "most runs waiting to run")
    max_jobs = _bound("max_jobs", "most jobs that are not cancelled")
    highest_priority = _bound("highest_priority", "most urgent priority its jobs may ask "
                                                  "for (0 most urgent)")
    max_timeout_s = _bound("max_timeout_s", "longest timeout_s (seconds)")
    max_attempts = _bound("max_attempts", "most attempts, first try included")
    max_map_items = _bound("max_map_items", "most items a mapped workflow node runs for")
    queues = serializers.ListField(
        child=serializers.RegexField(QUEUE_RE, max_length=64), required=False,
        help_text='queues this owner may use besides "default" (and its default_queue)')
    default_queue = serializers.RegexField(
        QUEUE_RE, max_length=64, allow_blank=True, required=False,
        help_text='queue of jobs that name none (tenant queue); blank: "default"')
    effective = serializers.DictField(child=serializers.JSONField(), read_only=True)
    effective_max_running = serializers.IntegerField(read_only=True, allow_null=True)
    running = serializers.IntegerField(read_only=True)
    pending = serializers.IntegerField(read_only=True, help_text="what max_pending "
                                       "counts: runs waiting to run, those not yet made "
                                       "included")
    pending_not_yet_made = serializers.IntegerField(
        read_only=True, help_text="of pending, the runs its live workflow runs will still "
                                  "make (nodes not started)")
    jobs = serializers.IntegerField(read_only=True)


OWNER = OpenApiParameter("owner", OpenApiTypes.STR, description="username (another's needs "
                         "the jobs.view_ownerpolicy permission)")


def _describe(user) -> dict:
    policy = OwnerPolicy.objects.filter(owner=user).first()
    bounds = bounds_from(user.pk, policy)
    made, later = pending_load(bounds)
    effective = {field: getattr(bounds, field) for field in POLICY_FIELDS}
    effective["queues"] = sorted(bounds.queues)
    owned = {field: getattr(policy, field) if policy else None for field in POLICY_FIELDS}
    return {
        "owner": user.get_username(), **owned,
        "queues": policy.queue_names if policy else [],
        "default_queue": policy.default_queue if policy else "",
        "effective": effective, "effective_max_running": bounds.max_running or None,
        "running": Run.objects.filter(state=RunState.RUNNING, job__owner=user).count(),
        "pending": made + later, "pending_not_yet_made": later,
        "jobs": Job.objects.filter(owner=user).exclude(status=Job.Status.CANCELLED).count(),
    }


class LimitsView(ApiPolicy, APIView):
    """Read (GET) or, with the change permission, set (PUT) an owner's bounds, queues and
    default queue."""

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

    @extend_schema(summary="An owner's bounds, queues and default queue",
                   parameters=[OWNER], responses={200: OwnerPolicySerializer, **COMMON})
    def get(self, request):
        asked = request.query_params.get("owner")
        if asked:  # the PUT body's rules (no NUL, which PostgreSQL refuses)
            query = OwnerPolicySerializer(data={"owner": asked}, partial=True)
            query.is_valid(raise_exception=True)
        user = self._owner(request, asked)
        return Response(OwnerPolicySerializer(_describe(user)).data)

    @extend_schema(summary="Set an owner's bounds, queues and default queue "
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
        user = self._owner(request, values.pop("owner", None))
        try:
            set_owner_policy(user, **values)
        except SchedulerError as exc:
            raise ValidationError({"detail": [str(exc)]}) from exc
        return Response(OwnerPolicySerializer(_describe(user)).data)
