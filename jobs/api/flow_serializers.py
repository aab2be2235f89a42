"""The REST fields of a job's retry strategy and expiry (jobs/retry_fields.py checks them
as every way in does; docs/retries-and-expiry.md) and of its flow keys (jobs/flow_keys.py;
docs/isolation.md)."""

from rest_framework import serializers

from jobs import flow_keys
from jobs.api.json_fields import AwareDateTimeField, HandedOnInteger, HandedOnText
from runs.tenancy.quotas import MAX_INT

FLOW_FIELDS = ("retry", "expires_at", "expires_in_s", "rate_key", "concurrency_key",
               "concurrency_limit", "on_success", "on_failure")


class FlowFieldsMixin(serializers.Serializer):
    """``retry``, ``expires_at``, ``expires_in_s``, ``rate_key``, ``concurrency_key``,
    ``concurrency_limit``, ``on_success`` and ``on_failure`` of a job created over REST."""

    retry = serializers.JSONField(
        required=False, allow_null=True, default=None,
        help_text="the retry strategy: {kind: fixed|linear|exponential, base_s, cap_s, "
                  "jitter_s, retry_on: [class names], never_retry_on: [...]}; null: the "
                  "default backoff (docs/retries-and-expiry.md)")
    expires_at = AwareDateTimeField(
        required=False, allow_null=True, default=None,
        help_text="one-off jobs: ISO 8601 with a UTC offset, after the run's time and now; "
                  "a run not started by then ends expired and never runs")
    expires_in_s = HandedOnInteger(
        required=False, allow_null=True, default=None, min_value=1, max_value=MAX_INT,
        help_text="a run not started this many seconds after its scheduled_at ends expired")
    rate_key = HandedOnText(
        required=False, allow_null=True, default=None, max_length=200,
        help_text="handler, name or payload.<field>: its runs share the rate limit of this "
                  "template, one bucket per value (docs/isolation.md, Rate limits)")
    concurrency_key = HandedOnText(
        required=False, allow_null=True, default=None, max_length=200,
        help_text="as rate_key: at most concurrency_limit runs of one value run at once "
                  "(docs/isolation.md, Concurrency keys)")
    concurrency_limit = HandedOnInteger(
        required=False, allow_null=True, default=None, min_value=1,
        max_value=flow_keys.MAX_LIMIT,
        help_text="most runs of one concurrency_key value running at once (default 1)")
    on_success = serializers.JSONField(
        required=False, allow_null=True, default=None,
        help_text='a registered handler, or {"handler": name, "payload": {...}}, run once '
                  "with each successful run's result (docs/callbacks.md)")
    on_failure = serializers.JSONField(
        required=False, allow_null=True, default=None,
        help_text="as on_success, run once with the error of each run that ends dead or "
                  "expired")
