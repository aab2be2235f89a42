"""Forms of the admin's job pages (docs/admin.md): create a job through the service
layer, and edit the fields a live job may change, its cron schedule included."""


from django import forms
from django.utils import timezone

from jobs import services, tenants
from jobs.models import Job, MisfirePolicy
from jobs.spec import unknown_message
from jobs.validation import validate_job
from runs.outbound.redact import shown_payload
from scheduler_core.exceptions import InvalidJob
from scheduler_core.registry import creatable_handler_names

EDITABLE = ("name", "payload", "priority", "timeout_s", "max_attempts")
FLOW_KEYS = ("rate_key", "concurrency_key", "concurrency_limit")
# A cron job's schedule, named as services.update_job names it.
SCHEDULE_FIELDS = ("cron", "timezone", "misfire_policy", "max_lag_s", "jitter_s")


def add_invalid_job_errors(form: forms.Form, exc: InvalidJob, aliases: dict) -> None:
    """Put each field error of ``exc`` on the form field it names (``aliases`` maps the
    service's names to the form's), or on the form when no field matches."""
    for field, reason in exc.errors.items():
        field = aliases.get(field, field)
        form.add_error(field if field in form.fields else None,
                       reason if field in form.fields else f"{field}: {reason}")


# What the admin's own pages post beside a form's fields.
ADMIN_CONTROLS = frozenset({"csrfmiddlewaretoken", "_save", "_continue", "_addanother",
                            "_saveasnew", "_popup", "_to_field", "_changelist_filters"})
# The change page's actions form (jobs/admin/job_admin.py) posts beside the form.
CHANGE_PAGE_CONTROLS = frozenset({"_selected_action"})
ACTIONS_PREFIX = "CHANGE_FORM-"


def posted_names(form: forms.Form) -> set[str]:
    """The names ``form``'s page posts: its fields, a split widget's parts
    (``run_at_0``), Django's ``initial-`` copies and the admin's controls."""
    names = set(form.fields) | ADMIN_CONTROLS
    names |= {f"initial-{name}" for name in form.fields}
    for name, field in form.fields.items():
        widgets = getattr(field.widget, "widgets", ())
        names |= {f"{name}_{i}" for i in range(len(widgets))}
    return names


def refuse_unknown_posted(form: forms.Form) -> None:
    """Add a form error for each posted name that is none of ``posted_names`` (on a
    change page, nor its actions form's): a form drops what it does not know, so a
    script's POST with ``schedule`` made a one-off job due now (docs/admin.md, "Jobs").
    The error names the field and the one likely meant (jobs/spec.py)."""
    known = posted_names(form)
    change_page = form.instance.pk is not None
    for key in sorted(set(form.data) - known):
        if change_page and (key in CHANGE_PAGE_CONTROLS or key.startswith(ACTIONS_PREFIX)):
            continue
        form.add_error(None, f"{key}: {unknown_message(key, form.fields)}")


class CallbackField(forms.JSONField):
    """on_success / on_failure: a handler's name as plain text, or JSON (a quoted name or
    {"handler": name, "payload": {...}}; docs/callbacks.md). Empty, or JSON's null, is no
    callback."""

    def prepare_value(self, value):
        # JSONField renders None as "null", which a browser posts back as a name.
        return "" if value is None else super().prepare_value(value)

    def to_python(self, value):
        text = value.strip() if isinstance(value, str) else value
        if isinstance(text, str) and text and text != "null" and text[0] not in '{["':
            return text
        return super().to_python(value)


class JobCreateForm(forms.ModelForm):
    """Create a job the way the API does: ``validate_job`` checks it, then
    ``services.create_job`` stores it (and a one-off job's run) in one transaction."""

    handler = forms.ChoiceField(choices=())
    payload = forms.JSONField(initial=dict, required=False,
                              help_text="A JSON object passed to the handler.")
    cron = forms.CharField(
        required=False, label="cron schedule",
        help_text="Five fields (minute hour day month weekday) or @hourly, @daily …; "
                  "leave empty for a one-off job.")
    timezone = forms.CharField(initial="UTC", required=False, help_text="IANA timezone.")
    misfire_policy = forms.ChoiceField(choices=MisfirePolicy.choices,
                                       initial=MisfirePolicy.RUN_ONCE)
    max_lag_s = forms.IntegerField(
        min_value=0, required=False, label="max lag (s)",
        help_text="Missed occurrences older than this are dropped (default 3600).")
    concurrency_limit = forms.IntegerField(
        min_value=1, required=False, help_text="Most runs of one concurrency key value "
                                               "running at once (default 1).")
    on_success = CallbackField(required=False, label="on success")
    on_failure = CallbackField(required=False, label="on failure")

    class Meta:
        model = Job
        fields = ["name", "handler", "payload", "run_at", "cron", "timezone",
                  "misfire_policy", "max_lag_s", "queue", "priority", "timeout_s",
                  "max_attempts", "retry", "expires_at", "expires_in_s", "rate_key",
                  "concurrency_key", "concurrency_limit", "on_success", "on_failure"]
        help_texts = {
            "run_at": "When a one-off job runs. Leave this and the cron schedule empty to "
                      "run once now.",
            "priority": "0 is most urgent, 9 least.",
            "timeout_s": "Seconds one attempt may take.",
            "max_attempts": "Attempts before the run goes to the dead letter (first try "
                            "included).",
            "retry": 'The retry strategy, e.g. {"kind": "linear", "base_s": 10, '
                     '"never_retry_on": ["ValueError"]}; empty: 1 s doubling.',
            "expires_at": "One-off jobs: a run not started by then ends expired.",
            "expires_in_s": "A run not started this many seconds after its scheduled "
                            "time ends expired.",
            "rate_key": "handler, name or payload.<field>: a rate limit of this key "
                        "holds per value.",
            "concurrency_key": "As rate_key: at most concurrency limit runs of one value "
                               "run at once.",
            "on_success": 'A handler run once with each successful run\'s result: "name" '
                          'or {"handler": "name", "payload": {}} (docs/callbacks.md).',
            "on_failure": "As on success, with the error of each run that ends dead or "
                          "expired.",
        }

    owner = None  # the user creating the job: JobAdmin.get_form sets it

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # A blank first choice: no handler is picked for the operator (the first name
        # alphabetically was always_fails).
        self.fields["handler"].choices = [("", "---------"),
                                          *((name, name) for name in
                                            creatable_handler_names())]
        self.spec: dict | None = None

    def clean(self):
        data = self.cleaned_data
        refuse_unknown_posted(self)
        if self.errors:
            return data
        spec = {key: data.get(key) for key in ("name", "handler", "queue", "priority",
                                               "timeout_s", "max_attempts", "retry",
                                               "expires_at", "expires_in_s", "on_success",
                                               "on_failure")}
        # The flow keys as given (templates): create_job evaluates them again.
        self.flow = {key: data[key] for key in FLOW_KEYS if data.get(key) not in (None, "")}
        if not data.get("concurrency_key"):
            self.flow.pop("concurrency_limit", None)
        spec.update(self.flow)
        spec["payload"] = {} if data.get("payload") in (None, "") else data["payload"]
        if data.get("cron"):
            spec.update(cron=data["cron"], timezone=data.get("timezone") or "UTC",
                        misfire_policy=data.get("misfire_policy"))
            if data.get("max_lag_s") is not None:
                spec["max_lag_s"] = data["max_lag_s"]
            if data.get("run_at"):  # refused beside a cron, as REST refuses it
                spec["run_at"] = data["run_at"]
        else:
            spec["run_at"] = data.get("run_at") or timezone.now()
        bounds = tenants.bounds_of(self.owner.pk if self.owner else None)
        try:
            self.spec = validate_job(spec)
            # As given: create_job seals an http job's secrets for the job it makes.
            self.spec["payload"] = spec["payload"]
            if bounds is not None:
                if problems := tenants.field_problems(spec, bounds):
                    raise InvalidJob(problems)
                tenants.check_quotas(bounds, 1, 0 if spec.get("cron") else 1)
        except InvalidJob as exc:
            add_invalid_job_errors(self, exc, {"schedule": "cron"})
        except tenants.QuotaExceeded as exc:
            self.add_error(None, str(exc))
        return data

    def validate_unique(self):
        # The job does not exist yet as a model instance: services.create_job validates
        # (validate_job above) and the database constraints still guard the insert.
        return None


class JobChangeForm(forms.ModelForm):
    """Edit the fields that are safe to change on a live job and, for a cron job, its
    schedule: expression, timezone, misfire policy, max lag and jitter. The changed fields
    are checked by ``services.check_update``, the rule PATCH /api/jobs/{id}/ applies, and
    JobAdmin.save_model writes them with ``services.update_job``, which recomputes
    ``next_run_at`` (docs/admin.md, "Jobs")."""

    cron = forms.CharField(
        required=False, label="cron schedule", max_length=200,
        help_text="Five fields (minute hour day month weekday) or @hourly, @daily …; a "
                  "change recomputes the next run and drops runs made ahead for the old "
                  "schedule.")
    timezone = forms.CharField(required=False, max_length=64, help_text="IANA timezone.")
    misfire_policy = forms.ChoiceField(choices=MisfirePolicy.choices, required=False)
    max_lag_s = forms.IntegerField(
        min_value=0, required=False, label="max lag (s)",
        help_text="Missed occurrences older than this are dropped.")
    jitter_s = forms.IntegerField(
        min_value=0, required=False, label="jitter (s)",
        help_text="Spread each occurrence's run over this many seconds after it.")

    class Meta:
        model = Job
        fields = list(EDITABLE)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # An http job's secrets show as "(encrypted)"; sent back, that keeps them.
        self.initial["payload"] = shown_payload(self.instance.handler, self.instance.payload)
        schedule = self.instance.schedule if self.instance.schedule_id else None
        if schedule is None:
            for name in SCHEDULE_FIELDS:
                del self.fields[name]
            return
        for name in SCHEDULE_FIELDS:
            self.fields[name].required = name != "jitter_s"
            self.initial[name] = getattr(schedule, name)

    def changes(self) -> dict:
        """The changed fields in ``services.update_job``'s terms."""
        data = self.cleaned_data
        changes = {k: data[k] for k in EDITABLE if k in self.changed_data}
        changes.update({k: 0 if data[k] is None else data[k]  # only jitter may be empty
                        for k in SCHEDULE_FIELDS if k in self.changed_data and k in data})
        return changes

    def clean(self):
        data = super().clean()
        refuse_unknown_posted(self)
        if self.errors:
            return data
        try:
            services.check_update(self.instance, self.changes())
        except InvalidJob as exc:
            add_invalid_job_errors(self, exc, {"schedule": "cron"})
        return data
