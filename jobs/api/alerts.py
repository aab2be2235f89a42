"""/api/alerts/ and /api/jobs/<id>/alerts/: which alerts an owner and each of its jobs
ask for, by which channel (docs/alerts.md).

``/api/alerts/``: GET the caller's own policy, with its webhook URL and signing secret (the
receiver needs it to verify); PUT sets any of ``email``, ``webhook``, ``on_dead``,
``on_misfire``, ``late_after_s``, ``webhook_url`` and, with ``rotate_secret: true``, makes
a new secret. ``/api/jobs/<id>/alerts/``: GET, PUT and DELETE the job's overrides (a null
field follows the owner's policy), for the job's owner or a user with the change_job
permission. A field left out of a PUT keeps its value.
"""

from django.db import transaction
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.exceptions import NotFound
from rest_framework.response import Response
from rest_framework.views import APIView

from jobs.models import Job
from runs.alerts.models import AlertPolicy, new_secret
from runs.alerts.policy import FIELDS, merge
from runs.outbound.payload import url_problem
from scheduler_core.rest.errors import COMMON, FIELD_ERRORS
from scheduler_core.rest.permissions import may_change_all
from scheduler_core.rest.strict_input import StrictInput
from scheduler_core.rest.view_defaults import ApiPolicy


def _switch(help_text: str) -> serializers.BooleanField:
    return serializers.BooleanField(allow_null=True, required=False, help_text=help_text)


class JobAlertsSerializer(StrictInput, serializers.Serializer):
    """A job's overrides; null: as the owner's policy says. ``effective`` is what
    applies to the job's runs."""

    email = _switch("send this job's alerts by email")
    webhook = _switch("send this job's alerts to the owner's webhook")
    on_dead = _switch("alert when a run lands in the dead letter")
    on_misfire = _switch("alert when the misfire policy skips an occurrence")
    late_after_s = serializers.IntegerField(
        min_value=0, max_value=30 * 86_400, allow_null=True, required=False,
        help_text="alert when a due run has not started this many seconds after its run_at "
                  "(0: never)")
    effective = serializers.DictField(child=serializers.JSONField(), read_only=True)


class OwnerAlertsSerializer(JobAlertsSerializer):
    """The caller's policy (a null field takes the default of docs/alerts.md), with
    its webhook URL and the secret webhooks are signed with."""

    webhook_url = serializers.URLField(max_length=2000, allow_blank=True, required=False,
                                       help_text="where alerts are POSTed; blank: none")
    webhook_secret = serializers.CharField(read_only=True)
    rotate_secret = serializers.BooleanField(write_only=True, required=False,
                                             help_text="true: a new webhook secret")

    def validate_webhook_url(self, value: str) -> str:
        # Webhooks are runs of the http handler: its URL rule (http or https, a host, no
        # credentials) applies now, not at the first delivery (docs/http-handler.md).
        if value and (problem := url_problem(value)):
            raise serializers.ValidationError(problem)
        return value


def _effective(owner_row, job_row) -> dict:
    policy = merge(owner_row, job_row)
    return {field: getattr(policy, field) for field in FIELDS}


def _owner_data(user) -> dict:
    row = AlertPolicy.objects.filter(owner=user).first()
    data = {field: getattr(row, field) if row else None for field in FIELDS}
    return {**data, "webhook_url": row.webhook_url if row else "",
            "webhook_secret": row.webhook_secret if row else "",
            "effective": _effective(row, None)}


def _job_data(job: Job) -> dict:
    row = AlertPolicy.objects.filter(job=job).first()
    data = {field: getattr(row, field) if row else None for field in FIELDS}
    owner_row = AlertPolicy.objects.filter(owner_id=job.owner_id).first()
    return {**data, "effective": _effective(owner_row, row)}


class OwnerAlertsView(ApiPolicy, APIView):
    """The caller's alert policy."""

    @extend_schema(summary="Your alert policy", responses={200: OwnerAlertsSerializer,
                                                          **COMMON})
    def get(self, request):
        return Response(OwnerAlertsSerializer(_owner_data(request.user)).data)

    @extend_schema(summary="Set your alert policy", request=OwnerAlertsSerializer,
                   responses={200: OwnerAlertsSerializer, 400: FIELD_ERRORS, **COMMON})
    def put(self, request):
        data = OwnerAlertsSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = dict(data.validated_data)
        rotate = values.pop("rotate_secret", False)
        with transaction.atomic():
            row, _ = AlertPolicy.objects.select_for_update().get_or_create(owner=request.user)
            for field, value in values.items():
                setattr(row, field, value)
            if rotate:
                row.webhook_secret = new_secret()
            row.save()
        return Response(OwnerAlertsSerializer(_owner_data(request.user)).data)


class JobAlertsView(ApiPolicy, APIView):
    """One job's alert overrides."""

    def _job(self, request, job_pk: int) -> Job:
        job = Job.objects.filter(pk=job_pk).first()
        if job is None or (job.owner_id != request.user.pk
                           and not may_change_all(request.user, Job)):
            raise NotFound(f"no job {job_pk} of yours")
        return job

    @extend_schema(summary="A job's alert overrides",
                   responses={200: JobAlertsSerializer, **COMMON})
    def get(self, request, job_pk: int):
        return Response(JobAlertsSerializer(_job_data(self._job(request, job_pk))).data)

    @extend_schema(summary="Set a job's alert overrides", request=JobAlertsSerializer,
                   responses={200: JobAlertsSerializer, 400: FIELD_ERRORS, **COMMON})
    def put(self, request, job_pk: int):
        job = self._job(request, job_pk)
        data = JobAlertsSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        with transaction.atomic():
            row, _ = AlertPolicy.objects.select_for_update().get_or_create(
                job=job, defaults={"webhook_secret": ""})
            for field, value in data.validated_data.items():
                setattr(row, field, value)
            row.save()
        return Response(JobAlertsSerializer(_job_data(job)).data)

    @extend_schema(summary="Drop a job's alert overrides (the owner's policy applies)",
                   responses={204: None, **COMMON})
    def delete(self, request, job_pk: int):
        AlertPolicy.objects.filter(job=self._job(request, job_pk)).delete()
        return Response(status=204)
