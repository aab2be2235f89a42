"""Serializers of the runs REST API: runs with their attempts, log lines, dead letters and
queue figures. All read-only: runs change only through runs/services.py."""

import logging

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from runs.models import Attempt, AttemptOutcome, LogLine, Run, lag_origin


class AttemptSerializer(serializers.ModelSerializer):
    """One try of a run by one worker under one lease; ``error`` holds the traceback."""

    class Meta:
        model = Attempt
        fields = ["number", "worker_id", "started_at", "finished_at", "outcome", "error",
                  "result"]
        read_only_fields = fields


class RunSerializer(serializers.ModelSerializer):
    """A run with its attempts. ``attempt`` counts attempts started; ``lag_s`` is the
    seconds from ``scheduled_at`` (or the run's creation, if later: a backdated one-off)
    to the first attempt's start (null before it);
    ``catch_up`` is true for a run made late on purpose, for an occurrence missed while
    the scheduler was down or held by a pause (docs/cron.md, "Catch-up runs");
    ``backfill_id`` names the backfill that made the run (null: none; docs/cron.md,
    "Backfill"); ``callback_of`` the run whose end made this callback run, and
    ``callback_on`` which field (docs/callbacks.md)."""

    handler = serializers.CharField(source="job.handler", read_only=True)
    callback_of = serializers.IntegerField(
        source="job.callback_of", read_only=True, allow_null=True,
        help_text="the run whose end made this callback run (docs/callbacks.md); null: "
                  "not a callback")
    callback_on = serializers.CharField(
        source="job.callback_on", read_only=True,
        help_text="on_success or on_failure for a callback run, else empty")
    attempts = AttemptSerializer(many=True, read_only=True)
    lag_s = serializers.SerializerMethodField()

    class Meta:
        model = Run
        fields = ["id", "job", "handler", "scheduled_at", "run_at", "state", "queue",
                  "priority", "attempt", "max_attempts", "worker_id", "lease_expires_at",
                  "started_at", "finished_at", "lag_s", "catch_up", "backfill_id",
                  "callback_of", "callback_on", "error", "result", "attempts"]
        read_only_fields = fields

    def get_lag_s(self, run) -> float | None:
        attempts = list(run.attempts.all())
        if not attempts:
            return None
        return round((attempts[0].started_at - lag_origin(run)).total_seconds(), 3)


class LogLineSerializer(serializers.ModelSerializer):
    """One log record of an attempt; ``level`` is the logging number (20 = INFO)."""

    attempt = serializers.IntegerField(source="attempt.number", read_only=True,
                                       help_text="the attempt's number within its run")
    level_name = serializers.SerializerMethodField()

    class Meta:
        model = LogLine
        fields = ["id", "attempt", "created_at", "level", "level_name", "logger", "message"]
        read_only_fields = fields

    def get_level_name(self, line) -> str:
        return logging.getLevelName(line.level)


class LastAttemptSerializer(serializers.ModelSerializer):
    class Meta:
        model = Attempt
        fields = ["number", "outcome", "error", "worker_id", "started_at", "finished_at"]
        read_only_fields = fields


class DeadRunSerializer(serializers.ModelSerializer):
    """A run in the dead letter: ``reason`` says why it died in one line, ``error`` is the
    last failure in full, ``last_attempt`` that attempt's outcome."""

    job_name = serializers.CharField(source="job.name", read_only=True)
    handler = serializers.CharField(source="job.handler", read_only=True)
    reason = serializers.SerializerMethodField()
    last_attempt = serializers.SerializerMethodField()

    class Meta:
        model = Run
        fields = ["id", "job", "job_name", "handler", "queue", "scheduled_at", "finished_at",
                  "attempt", "max_attempts", "reason", "error", "last_attempt"]
        read_only_fields = fields

    def _last(self, run) -> Attempt | None:
        attempts = list(run.attempts.all())
        return attempts[-1] if attempts else None

    def get_reason(self, run) -> str:
        last = self._last(run)
        outcome = AttemptOutcome(last.outcome).label if last else "none"
        # A traceback's last line names the exception and its message.
        lines = (run.error or (last.error if last else "")).strip().splitlines()
        why = lines[-1] if lines else "no error recorded"
        return (f"{run.attempt} of {run.max_attempts} attempts used; "
                f"last attempt: {outcome}: {why}")

    @extend_schema_field(LastAttemptSerializer(allow_null=True))
    def get_last_attempt(self, run) -> dict | None:
        last = self._last(run)
        return LastAttemptSerializer(last).data if last else None


class ThroughputSerializer(serializers.Serializer):
    """Runs that reached each final state per second over the last 60 s (runs/metrics/stats.py
    WINDOW_S)."""

    succeeded = serializers.FloatField()
    dead = serializers.FloatField()
    cancelled = serializers.FloatField()


class LagSerializer(serializers.Serializer):
    """Seconds from ``run_at`` to start of the ``count`` runs started in the last 60 s that
    are running or finished: median, 99th percentile, maximum."""

    count = serializers.IntegerField()
    p50_s = serializers.FloatField()
    p99_s = serializers.FloatField()
    max_s = serializers.FloatField()


class ShardStatsSerializer(serializers.Serializer):
    """One shard of a queue: the queue's figures restricted to the shard."""

    shard = serializers.IntegerField()
    ready = serializers.IntegerField()
    delayed = serializers.IntegerField()
    leased = serializers.IntegerField()
    oldest_ready_age_s = serializers.FloatField(allow_null=True)
    throughput_per_s = ThroughputSerializer()
    lag_s = LagSerializer(allow_null=True)


class QueueStatsSerializer(serializers.Serializer):
    """One queue (runs/metrics/stats.py): broker depth by state, the age in seconds of the oldest
    due run not started (null when none is), live workers serving it and their slots,
    throughput and lag over the last 60 s (lag null when no run started), and the same
    figures per shard."""

    queue = serializers.CharField()
    ready = serializers.IntegerField()
    delayed = serializers.IntegerField()
    leased = serializers.IntegerField()
    oldest_ready_age_s = serializers.FloatField(allow_null=True)
    live_workers = serializers.IntegerField()
    worker_slots = serializers.IntegerField()
    throughput_per_s = ThroughputSerializer()
    lag_s = LagSerializer(allow_null=True)
    shards = ShardStatsSerializer(many=True)
