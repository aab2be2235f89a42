"""Serializers of the jobs REST API: a job as shown, a job to create and a partial
update (the bulk create's are jobs/api/bulk_serializers.py).

The serializers parse and type-check, in the job spec's names (jobs/spec.py: ``cron``,
``timezone``, ``max_attempts``, as every way in names them); the old names ``schedule``
and ``max_retries`` still work this release, answered with a ``Deprecation`` header. The
rules every job obeys, whichever API created it, live in jobs/validation.py and run in
the service layer.
"""

from django.core.validators import MaxValueValidator, MinValueValidator
from rest_framework import serializers

from jobs import node_job_lists, spec
from jobs.api.flow_serializers import FLOW_FIELDS, FlowFieldsMixin
from jobs.api.json_fields import (
    AwareDateTimeField,
    HandedOnErrors,
    HandedOnInteger,
    HandedOnNumber,
    HandedOnRegex,
    HandedOnText,
    TextField,
)
from jobs.api.old_names import DeprecatedNamesMixin
from jobs.ingest.unique import ALL_STATES, KEY_MAX
from jobs.lifecycle import SHOWN_STATUSES, shown_status
from jobs.models import Job, MisfirePolicy
from jobs.schedules import cron
from jobs.schedules.cron import MAX_JITTER_S
from jobs.schedules.zones import known_zones, zone_problem
from jobs.validation import MAX_DELAY_S, QUEUE_RE
from runs.outbound.redact import shown_payload
from scheduler_core import conf
from scheduler_core.exceptions import InvalidJob, UnknownHandler
from scheduler_core.registry import creatable_handler_names
from scheduler_core.rest.strict_fields import StrictFields

UNIQUE_FIELDS = ("unique_key", "unique_period_s", "unique_states")

MAX_INT = 2_147_483_647  # PostgreSQL integer


def iana_zones() -> frozenset[str]:
    """The IANA timezone names a schedule may use: those the installed tz database knows,
    less those that mean a different zone on each host (jobs/schedules/zones.py)."""
    return known_zones()


class StrictFieldsMixin(StrictFields):
    """Refuse fields the serializer does not declare (``unknown field``), reported together
    with the other field errors (scheduler_core/rest/strict_fields.py), naming the job
    field probably meant. ``read_only_names`` are fields of the job that exist but
    cannot be set here; they get a clearer reason."""

    read_only_names: tuple[str, ...] = ()

    def unknown_reason(self, name: str) -> str:
        """Why field ``name``, which this serializer does not declare, is refused: with
        the field probably meant (jobs/spec.py, unknown_message)."""
        if name in self.read_only_names:
            return "cannot be changed; create a new job instead"
        return spec.unknown_message(name, set(self.fields) - set(spec.DEPRECATED))


class ShownStatusField(serializers.ChoiceField):
    """A job's status as shown: the stored one, or ``finished`` (jobs/lifecycle.py)."""

    def get_attribute(self, instance):
        return shown_status(instance)


class PayloadField(serializers.JSONField):
    """A job's payload (from the whole job, ``source="*"``); an http job's encrypted
    headers show as "(encrypted)" (docs/http-handler.md, "Secrets")."""

    def to_representation(self, job):
        return shown_payload(job.handler, job.payload)


class NextRunField(serializers.DateTimeField):
    """``next_run_at``, null unless the job is active: a paused job's stored value is the
    occurrence it was due at when paused, in the past once the pause lasts, and resume
    works out the next one (docs/cron.md, "Pause and resume")."""

    def get_attribute(self, instance):
        return instance.next_run_at if instance.status == Job.Status.ACTIVE else None


class NodeWorkflowField(serializers.IntegerField):
    """The id of the workflow whose node the job is, null for a plain job (from the whole
    job: jobs/node_job_lists.py)."""

    def get_attribute(self, instance):
        return node_job_lists.workflow_of(instance)


class JobSerializer(serializers.ModelSerializer):
    """A job as the API shows it; ``cron`` is the cron expression (recurring jobs),
    null for a one-off job, whose time is ``run_at``; ``paused_at`` is when a paused job
    was paused (null otherwise; docs/cron.md, "Pause and resume"). ``schedule`` and
    ``max_retries`` repeat ``cron`` and ``max_attempts - 1`` under their old names, this
    release only."""

    cron = serializers.CharField(source="schedule.cron", allow_null=True, default=None)
    schedule = serializers.CharField(source="schedule.cron", allow_null=True, default=None,
                                     help_text="deprecated: cron's old name")
    timezone = serializers.CharField(source="schedule.timezone", allow_null=True, default=None)
    misfire_policy = serializers.ChoiceField(
        source="schedule.misfire_policy", choices=MisfirePolicy.choices, allow_null=True,
        default=None)
    max_lag_s = serializers.IntegerField(source="schedule.max_lag_s", allow_null=True,
                                         default=None)
    jitter_s = serializers.IntegerField(source="schedule.jitter_s", allow_null=True,
                                        default=None)
    max_retries = serializers.SerializerMethodField(
        help_text="deprecated: max_attempts - 1")
    owner = serializers.CharField(source="owner.username", allow_null=True, default=None)
    status = ShownStatusField(
        choices=SHOWN_STATUSES, read_only=True,
        help_text="active, paused or cancelled; finished: a one-off job with no run left "
                  "to run (docs/api.md, \"Job status\")")
    payload = PayloadField(source="*", read_only=True)
    next_run_at = NextRunField(
        read_only=True, allow_null=True,
        help_text="the next cron occurrence the scheduler will run; null for a one-off, "
                  "paused or cancelled job")
    workflow = NodeWorkflowField(
        read_only=True, allow_null=True,
        help_text="the workflow whose node this job is (its runs are the workflow's; "
                  "docs/workflows.md, \"Node jobs\"), null for a plain job")

    class Meta:
        model = Job
        fields = ["id", "name", "owner", "handler", "payload", "queue", "shard_key", "priority",
                  "status", "paused_at",
                  "run_at", "cron", "timezone", "misfire_policy", "max_lag_s", "jitter_s",
                  "next_run_at", "timeout_s", "max_attempts", "unique_key", "retry",
                  "expires_at", "expires_in_s", "rate_key", "concurrency_key",
                  "concurrency_limit", "on_success", "on_failure", "callback_of",
                  "callback_on", "created_at", "updated_at", "workflow", "schedule",
                  "max_retries"]
        read_only_fields = fields

    def get_max_retries(self, job) -> int:
        """Retries after the first attempt (``max_attempts - 1``)."""
        return job.max_attempts - 1


def _limits(serializer) -> None:
    # Caps are tunables read per request, so they cannot be class-level field arguments.
    serializer.fields["timeout_s"].max_value = conf.get("MAX_TIMEOUT_S")
    serializer.fields["max_retries"].max_value = conf.get("MAX_RETRIES")
    serializer.fields["max_attempts"].max_value = conf.get("MAX_RETRIES") + 1
    for field in ("timeout_s", "max_retries", "max_attempts"):
        _reset_validators(serializer.fields[field])


def _reset_validators(field) -> None:
    field.validators = [v for v in field.validators
                        if not isinstance(v, MinValueValidator | MaxValueValidator)]
    if field.max_value is not None:
        field.validators.append(MaxValueValidator(
            field.max_value, message=f"must be at most {field.max_value}"))
    if field.min_value is not None:
        field.validators.append(MinValueValidator(
            field.min_value, message=f"must be at least {field.min_value}"))


def _check_cron(value):
    # Also checked by the service layer; checked here too so that a bad schedule is named
    # in the same 400 as the other fields' errors.
    if value is not None:
        try:
            cron.normalize(value)
        except ValueError as exc:
            raise serializers.ValidationError(str(exc)) from None
    return value


def _check_timezone(value):
    if value is not None and (problem := zone_problem(value)):
        raise serializers.ValidationError(problem)
    return value


class JobCreateSerializer(DeprecatedNamesMixin, StrictFieldsMixin, HandedOnErrors,
                          FlowFieldsMixin, serializers.Serializer):
    """POST /api/jobs/ (and each item of /api/jobs/bulk/): at most one of ``run_at`` or
    ``delay_s`` (one-off) or ``cron`` (a cron expression, recurring); none of them
    means a one-off job that runs now (docs/api.md, "Create"). Giving two is
    refused by jobs/validation.py, naming both fields."""

    name = HandedOnText(max_length=200, required=False,
                        help_text="free text; defaults to the handler name")
    handler = serializers.ChoiceField(
        choices=[], help_text="a registered handler name",
        # The Python API's words, registration hint included (UnknownHandler).
        error_messages={"invalid_choice": UnknownHandler("{input}").errors["handler"]})
    payload = serializers.JSONField(
        required=False, default=dict,
        help_text="a JSON object passed to the handler (at most MAX_PAYLOAD_BYTES, "
                  "256 KiB by default)")
    run_at = AwareDateTimeField(
        required=False, allow_null=True, default=None,
        help_text="one-off: ISO 8601 with a UTC offset; a past time means now")
    delay_s = HandedOnNumber(
        required=False, allow_null=True, default=None, min_value=0,
        max_value=MAX_DELAY_S,
        help_text="one-off: seconds from now; give at most one of run_at, delay_s or "
                  "cron, none means run once now")
    cron = TextField(max_length=200, required=False, allow_null=True, default=None,
                     validators=[_check_cron],
                     help_text="recurring: five-field cron expression or @hourly, "
                               "@daily, @weekly, @monthly, @yearly")
    schedule = TextField(max_length=200, required=False, allow_null=True,
                         validators=[_check_cron], help_text="deprecated: use cron")
    timezone = TextField(max_length=64, required=False, default="UTC", trim_whitespace=False,
                         validators=[_check_timezone],
                         help_text="IANA timezone the cron expression is read in")
    misfire_policy = serializers.ChoiceField(
        choices=MisfirePolicy.choices, required=False, allow_null=True, default=None,
        help_text="what to do with occurrences missed while the scheduler was down "
                  "(default run_once)")
    max_lag_s = HandedOnInteger(
        required=False, allow_null=True, default=None, min_value=0, max_value=MAX_INT,
        help_text="missed occurrences older than this many seconds are dropped")
    jitter_s = HandedOnInteger(
        required=False, allow_null=True, default=None, min_value=0, max_value=MAX_JITTER_S,
        help_text="spread each occurrence's run over this many seconds after it "
                  "(cron jobs; default 0)")
    queue = HandedOnRegex(
        QUEUE_RE, max_length=64, required=False, default=None,
        help_text='default: the owner\'s default queue (tenant queues), else "default"',
        error_messages={"invalid": "1-64 characters of letters, digits, '_', '.', '-'"})
    shard_key = TextField(
        max_length=200, required=False, allow_blank=True, default="",
        help_text="runs go to shard crc32(shard_key or handler) % SHARDS of the queue")
    priority = HandedOnInteger(
        required=False, default=None, min_value=0, max_value=9,
        help_text="0 most urgent, 9 least; default 5, or the owner's highest_priority when "
                  "that is less urgent")
    timeout_s = HandedOnInteger(
        required=False, allow_null=True, default=None, min_value=1,
        help_text="seconds one attempt may run (at most MAX_TIMEOUT_S)")
    max_attempts = HandedOnInteger(
        required=False, allow_null=True, default=None, min_value=1,
        help_text="attempts before the dead letter, the first try included (at most "
                  "MAX_RETRIES + 1)")
    max_retries = HandedOnInteger(
        required=False, allow_null=True, min_value=0,
        help_text="deprecated: use max_attempts (max_retries + 1)")
    unique_key = HandedOnText(
        max_length=KEY_MAX, required=False, allow_null=True, default=None,
        help_text="while an earlier job of yours with this key counts, answer it (200, "
                  "conflict true) instead of creating another (docs/api.md, Unique jobs)")
    unique_period_s = HandedOnInteger(
        required=False, allow_null=True, default=None, min_value=1, max_value=MAX_INT,
        help_text="the key counts this many seconds after the job's creation (default: "
                  "no end)")
    unique_states = serializers.ListField(
        child=serializers.ChoiceField(choices=ALL_STATES), required=False, allow_null=True,
        default=None, allow_empty=False,
        help_text="run states in which a one-off job holds its key (default: scheduled, "
                  "queued, running, retrying)")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["handler"].choices = creatable_handler_names()
        _limits(self)

    def to_internal_value(self, data):
        if isinstance(data, dict) and data.get("timezone") is None:
            data = {k: v for k, v in data.items() if k != "timezone"}
        return super().to_internal_value(data)


def to_spec(data: dict) -> dict:
    """The ``services.create_jobs`` spec of one validated JobCreateSerializer item; a
    priority, timeout_s or max_attempts not given stays None, for create_jobs to fill in
    within the owner's bounds (jobs/tenants.py, defaults_within)."""
    job = {
        "name": data.get("name"), "handler": data["handler"],
        "payload": data.get("payload") if data.get("payload") is not None else {},
        "run_at": data.get("run_at"), "delay_s": data.get("delay_s"),
        "cron": data.get("cron"),
        "timezone": data.get("timezone") or "UTC",
        "misfire_policy": data.get("misfire_policy"), "queue": data.get("queue"),
        "shard_key": data.get("shard_key") or "",
        "priority": data.get("priority"), "timeout_s": data.get("timeout_s"),
        "max_attempts": data.get("max_attempts"),
    }
    for optional in ("max_lag_s", "jitter_s", *UNIQUE_FIELDS, *FLOW_FIELDS):
        if data.get(optional) is not None:
            job[optional] = data[optional]
    return job


class CreatedJobSerializer(JobSerializer):
    """The answer to POST /api/jobs/: the job, and whether it is an earlier job holding
    the unique_key given (200) rather than a new one (201)."""

    conflict = serializers.BooleanField()

    class Meta(JobSerializer.Meta):
        fields = [*JobSerializer.Meta.fields, "conflict"]
        read_only_fields = fields


class JobUpdateSerializer(DeprecatedNamesMixin, StrictFieldsMixin, HandedOnErrors,
                          serializers.Serializer):
    """PATCH /api/jobs/{id}/: any subset of these fields. A one-off job takes ``run_at``
    (only while its run has not started); a recurring job takes ``cron``,
    ``timezone``, ``misfire_policy``, ``max_lag_s`` and ``jitter_s``. ``priority``,
    ``timeout_s`` and ``max_attempts`` apply to runs created after the change; ``payload``
    to every run that has not started."""

    read_only_names = ("id", "owner", "handler", "queue", "status", "next_run_at",
                       "created_at", "updated_at")

    name = HandedOnText(max_length=200, required=False)
    payload = serializers.JSONField(required=False)
    run_at = AwareDateTimeField(required=False)
    cron = TextField(max_length=200, required=False, validators=[_check_cron])
    schedule = TextField(max_length=200, required=False, validators=[_check_cron],
                         help_text="deprecated: use cron")
    timezone = TextField(max_length=64, required=False, trim_whitespace=False,
                         validators=[_check_timezone])
    misfire_policy = serializers.ChoiceField(choices=MisfirePolicy.choices, required=False)
    max_lag_s = HandedOnInteger(required=False, min_value=0, max_value=MAX_INT)
    jitter_s = HandedOnInteger(required=False, min_value=0, max_value=MAX_JITTER_S)
    priority = HandedOnInteger(required=False, min_value=0, max_value=9)
    timeout_s = HandedOnInteger(required=False, min_value=1)
    max_attempts = HandedOnInteger(required=False, min_value=1)
    max_retries = HandedOnInteger(required=False, min_value=0,
                                           help_text="deprecated: use max_attempts")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _limits(self)

    def to_changes(self) -> dict:
        """The validated fields as services.update_job takes them (the same names)."""
        return dict(self.validated_data)


def api_errors(errors: dict[str, str], old_names=()) -> dict[str, list[str]]:
    """Service-layer field errors as a 400 body, in the job spec's names (jobs/spec.py);
    a field the request gave under an old name (``old_names``) is named as it was given."""
    back = {spec.DEPRECATED[old].new: old for old in old_names}
    return {back.get(field, field): [reason] for field, reason in errors.items()}


def invalid_job_errors(exc: InvalidJob) -> dict[str, list[str]]:
    """The 400 body of an InvalidJob raised by the service layer."""
    return api_errors(exc.errors)
