"""Serializers of the seed REST API (POST/GET jobs, runs of a job)."""

from rest_framework import serializers

from jobs import conf
from jobs.exceptions import InvalidJob
from jobs.models import Job
from runs.models import Attempt, Run

FIELD_ALIASES = {"cron": "schedule", "max_attempts": "max_retries"}


class AwareDateTimeField(serializers.DateTimeField):
    """ISO 8601 with a UTC offset; a naive datetime is refused rather than guessed."""

    def to_internal_value(self, value):
        parsed = super().to_internal_value(value)
        if isinstance(value, str) and not _has_offset(value):
            raise serializers.ValidationError(
                "give an ISO 8601 datetime with a UTC offset, e.g. 2026-01-01T09:00:00+01:00")
        return parsed


def _has_offset(text: str) -> bool:
    tail = text.strip()[10:]
    return tail.endswith("Z") or "+" in tail or "-" in tail


class JobSerializer(serializers.ModelSerializer):
    """A job as the API shows it; ``schedule`` is the cron expression (recurring jobs)."""

    schedule = serializers.CharField(source="schedule.cron", allow_null=True, default=None)
    timezone = serializers.CharField(source="schedule.timezone", allow_null=True, default=None)
    misfire_policy = serializers.CharField(source="schedule.misfire_policy", allow_null=True,
                                           default=None)
    max_retries = serializers.SerializerMethodField()
    owner = serializers.CharField(source="owner.username", default=None)

    class Meta:
        model = Job
        fields = ["id", "name", "owner", "handler", "payload", "queue", "priority", "status",
                  "run_at", "schedule", "timezone", "misfire_policy", "next_run_at",
                  "timeout_s", "max_retries", "created_at", "updated_at"]
        read_only_fields = fields

    def get_max_retries(self, job) -> int:
        return job.max_attempts - 1


class JobCreateSerializer(serializers.Serializer):
    """POST /api/jobs/: exactly one of ``run_at`` or ``schedule`` (cron)."""

    name = serializers.CharField(max_length=200, required=False)
    handler = serializers.CharField(max_length=200)
    payload = serializers.JSONField(required=False, default=dict)
    run_at = AwareDateTimeField(required=False, allow_null=True, default=None)
    schedule = serializers.CharField(max_length=200, required=False, allow_null=True,
                                     default=None)
    timezone = serializers.CharField(max_length=64, required=False, default="UTC")
    misfire_policy = serializers.CharField(required=False, allow_null=True, default=None)
    queue = serializers.CharField(max_length=64, required=False, default="default")
    priority = serializers.IntegerField(required=False, default=5)
    timeout_s = serializers.IntegerField(required=False, default=None, allow_null=True)
    max_retries = serializers.IntegerField(required=False, default=None, allow_null=True,
                                           min_value=0, max_value=99)

    def validate(self, attrs):
        unknown = set(self.initial_data) - set(self.fields)
        if unknown:
            raise serializers.ValidationError(
                {name: "unknown field" for name in sorted(unknown)})
        return attrs

    def to_spec(self) -> dict:
        data = self.validated_data
        max_retries, timeout_s = data.get("max_retries"), data.get("timeout_s")
        return {
            "name": data.get("name"), "handler": data["handler"],
            "payload": data.get("payload") or {}, "run_at": data.get("run_at"),
            "cron": data.get("schedule"), "timezone": data.get("timezone") or "UTC",
            "misfire_policy": data.get("misfire_policy"), "queue": data.get("queue"),
            "priority": data.get("priority"),
            "timeout_s": conf.get("DEFAULT_TIMEOUT_S") if timeout_s is None else timeout_s,
            "max_attempts": conf.get("DEFAULT_MAX_ATTEMPTS") if max_retries is None
            else max_retries + 1,
        }


def invalid_job_errors(exc: InvalidJob) -> dict:
    """Map service-layer field names to the API's (cron -> schedule, ...)."""
    return {FIELD_ALIASES.get(field, field): [reason] for field, reason in exc.errors.items()}


class AttemptSerializer(serializers.ModelSerializer):
    class Meta:
        model = Attempt
        fields = ["number", "worker_id", "started_at", "finished_at", "outcome", "error",
                  "result"]


class RunSerializer(serializers.ModelSerializer):
    """A run with its attempts."""

    attempts = AttemptSerializer(many=True, read_only=True)
    lag_s = serializers.SerializerMethodField()

    class Meta:
        model = Run
        fields = ["id", "job", "scheduled_at", "run_at", "state", "queue", "priority",
                  "attempt", "max_attempts", "worker_id", "lease_expires_at", "started_at",
                  "finished_at", "lag_s", "error", "result", "attempts"]

    def get_lag_s(self, run) -> float | None:
        """Seconds between scheduled_at and the first attempt's start."""
        attempts = list(run.attempts.all())
        if not attempts:
            return None
        return round((attempts[0].started_at - run.scheduled_at).total_seconds(), 3)


