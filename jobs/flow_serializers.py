"""The REST fields of a job's retry strategy and expiry (jobs/flow_fields.py checks them
as every way in does; docs/retries-and-expiry.md)."""

from rest_framework import serializers

from runs.quotas import MAX_INT

FLOW_FIELDS = ("retry", "expires_at", "expires_in_s")


class FlowFieldsMixin(serializers.Serializer):
    """``retry``, ``expires_at`` and ``expires_in_s`` of a job created over REST."""

    retry = serializers.JSONField(
        required=False, allow_null=True, default=None,
        help_text="the retry strategy: {kind: fixed|linear|exponential, base_s, cap_s, "
                  "jitter_s, retry_on: [class names], never_retry_on: [...]}; null: the "
                  "default backoff (docs/retries-and-expiry.md)")
    expires_at = serializers.DateTimeField(
        required=False, allow_null=True, default=None,
        help_text="one-off jobs: a run not started by then ends expired and never runs")
    expires_in_s = serializers.IntegerField(
        required=False, allow_null=True, default=None, min_value=1, max_value=MAX_INT,
        help_text="a run not started this many seconds after its scheduled_at ends expired")
