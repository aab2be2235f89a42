"""The bulk create of the jobs REST API (POST /api/jobs/bulk/, docs/api.md): its request
and answers, and FastItemParser, which parses the plain items of a big batch without DRF's
per-field machinery.
"""

from datetime import datetime

from django.utils import timezone
from rest_framework import serializers

from jobs.api.flow_serializers import FLOW_FIELDS
from jobs.api.serializers import MAX_INT, UNIQUE_FIELDS, JobCreateSerializer, iana_zones
from jobs.models import MisfirePolicy
from jobs.schedules import cron
from jobs.schedules.cron import MAX_JITTER_S
from jobs.spec import DEPRECATED
from jobs.validation import MAX_DELAY_S, QUEUE_RE
from scheduler_core import conf
from scheduler_core.registry import creatable_handler_names


class FastItemParser:
    """Parse one bulk item exactly as JobCreateSerializer would, several times faster,
    for items whose every value is already of the plain expected type and in range; any
    other item gets None, and the caller runs the serializer on it (which also words the
    errors). Bulk ingest of 10,000 jobs spends most of its time in DRF's per-field
    machinery otherwise (BENCHMARKS.md, "Ingest (W1)"). tests/test_api_bulk_parser.py
    checks with hypothesis that whatever this accepts, the serializer accepts identically.
    """

    STRINGS = {"name": 200, "cron": 200, "shard_key": 200}
    INTS = {"priority": (0, 9), "max_lag_s": (0, MAX_INT), "jitter_s": (0, MAX_JITTER_S)}

    def __init__(self):
        self.handlers = frozenset(creatable_handler_names())
        self.zones = iana_zones()
        self.policies = frozenset(MisfirePolicy.values)
        self.ints = {**self.INTS, "timeout_s": (1, conf.get("MAX_TIMEOUT_S")),
                     "max_attempts": (1, conf.get("MAX_RETRIES") + 1)}
        # The old names (schedule, max_retries) take the serializer's path, which
        # renames them and notes their use for the Deprecation header.
        self.known = frozenset(JobCreateSerializer._declared_fields) - set(DEPRECATED)
        self.zone = timezone.get_current_timezone()  # DRF's DateTimeField converts to it

    def parse(self, item) -> dict | None:
        """The serializer's validated data for ``item``, or None to use the serializer."""
        if type(item) is not dict or not item.keys() <= self.known:
            return None
        data = {"payload": {}, "run_at": None, "delay_s": None, "cron": None,
                "timezone": "UTC",
                "misfire_policy": None, "max_lag_s": None, "jitter_s": None,
                "queue": None, "shard_key": "", "priority": None, "timeout_s": None,
                "max_attempts": None, **dict.fromkeys(UNIQUE_FIELDS),
                **dict.fromkeys(FLOW_FIELDS)}
        for key, value in item.items():
            if value is None and key not in ("handler", "name", "queue", "priority",
                                             "payload"):
                continue  # null is these fields' default
            parsed = self._value(key, value)
            if parsed is None:
                return None
            data[key] = parsed
        return data if "handler" in data else None

    def _value(self, key, value):
        if key in UNIQUE_FIELDS or key in FLOW_FIELDS:
            return None  # rare: the serializer parses them
        if key == "handler":
            return value if type(value) is str and value in self.handlers else None
        if key == "payload":
            return value if type(value) is dict else None
        if key in self.STRINGS:
            if (type(value) is not str or not value or value != value.strip()
                    or len(value) > self.STRINGS[key] or "\x00" in value
                    or not _encodable(value)):
                return None
            if key == "cron":
                try:
                    cron.normalize(value)
                except ValueError:
                    return None
            return value
        if key == "timezone":
            return value if type(value) is str and value in self.zones else None
        if key == "queue":
            return value if type(value) is str and QUEUE_RE.fullmatch(value) else None
        if key == "misfire_policy":
            return value if type(value) is str and value in self.policies else None
        if key == "run_at":
            return _aware(value, self.zone)
        if key == "delay_s":
            ok = type(value) in (int, float) and 0 <= value <= MAX_DELAY_S
            return float(value) if ok and value == value else None
        low, high = self.ints[key]
        return value if type(value) is int and low <= value <= high else None


def _encodable(text: str) -> bool:
    if text.isascii():  # the common case, without building the bytes
        return True
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _aware(value, zone) -> datetime | None:
    """An ISO 8601 string with an offset, as an aware datetime in ``zone`` (DRF's result
    for a string that ``datetime.fromisoformat`` reads)."""
    if type(value) is not str:
        return None
    try:
        parsed = datetime.fromisoformat(value)
        return parsed.astimezone(zone) if parsed.tzinfo is not None else None
    except (ValueError, OverflowError):
        return None


class BulkJobsSerializer(serializers.Serializer):
    """POST /api/jobs/bulk/: ``{"jobs": [job, ...]}``, 1 to API_BULK_MAX_JOBS (10,000)
    items, each as for POST /api/jobs/. All are created or none."""

    jobs = JobCreateSerializer(many=True)


class BulkCreatedSerializer(serializers.Serializer):
    """The answer to a bulk create: how many jobs, and their ids in request order."""

    count = serializers.IntegerField(help_text="jobs created")
    ids = serializers.ListField(child=serializers.IntegerField(),
                                help_text="one job per item: created, or a unique key's holder")
    conflicts = serializers.ListField(child=serializers.IntegerField(),
                                      help_text="items answered by the job holding their "
                                                "unique_key")


class BulkItemErrorSerializer(serializers.Serializer):
    index = serializers.IntegerField(help_text="0-based position in the request's jobs")
    errors = serializers.DictField(child=serializers.ListField(child=serializers.CharField()),
                                   help_text="field name -> reasons")


class BulkErrorSerializer(serializers.Serializer):
    """A refused bulk create: nothing was stored. ``detail`` says why; ``errors`` names
    each bad item by index (empty when the request as a whole is wrong: not a list, no
    job, too many jobs; absent when the body is not JSON)."""

    detail = serializers.CharField()
    errors = BulkItemErrorSerializer(many=True, required=False)
