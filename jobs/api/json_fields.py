"""DRF fields that take a JSON value only of the JSON type the job spec gives its field
(jobs/spec.py: an integer field a JSON integer, a number an integer or a float, text a
string; docs/api.md, "Job fields"), where DRF would coerce ``"5"`` to 5, ``true`` to 1.0
and ``123`` to ``"123"``.

A field jobs/validation.py checks in every way in (``HandedOn``) hands a value of another
type on as it came, unchecked, so that the service layer refuses it in the Python API's
own words: one rule, worded once, whatever the way in. A field the service layer would
not refuse, or would read differently, refuses such a value here (``TextField``).
``HandedOnErrors`` words them in the serializer's own 400 when another field fails there.
"""

from django.utils.dateparse import parse_datetime
from rest_framework import serializers
from rest_framework.fields import empty

from jobs.validation import validate_job
from scheduler_core.exceptions import InvalidJob

NAIVE = "give an ISO 8601 datetime with a UTC offset, e.g. 2026-01-01T09:00:00+01:00"


class HandedOn:
    """Put before a DRF field: a value whose JSON type is not one of ``json_types`` (exact
    types: a bool is not an int) skips the field's parsing and validators and is handed
    on as given, for jobs/validation.py to refuse naming the field. Null and absence
    keep the field's own handling."""

    json_types: tuple[type, ...] = ()

    def hands_on(self, data) -> bool:
        """Whether ``data`` (a parsed JSON value) goes on unchecked."""
        return data is not empty and data is not None and type(data) not in self.json_types

    def run_validation(self, data=empty):
        return data if self.hands_on(data) else super().run_validation(data)


# The fields whose value another field's rule reads (jitter_s means something beside a
# cron only); the old name a value may come under.
CONTEXT = ("handler", "cron")
OLD = {"max_retries": "max_attempts", "schedule": "cron"}


class HandedOnErrors:
    """Put before a DRF Serializer with HandedOn fields: when another field fails there,
    the values handed on are refused in that same 400, all at once (docs/api.md,
    "Errors"), in jobs/validation.py's words, rather than in a second 400 once the others
    are fixed."""

    def to_internal_value(self, data):
        try:
            return super().to_internal_value(data)
        except serializers.ValidationError as exc:
            if isinstance(data, dict) and isinstance(exc.detail, dict) \
                    and (refused := handed_on_errors(self.fields, data)):
                raise serializers.ValidationError({**refused, **exc.detail}) from exc
            raise


def handed_on_errors(fields, data: dict) -> dict[str, list[str]]:
    """{name: [reason]} for each value of ``data`` that its HandedOn field in ``fields``
    hands on, as validate_job words it beside ``data``'s CONTEXT fields."""
    handed = {name: OLD.get(name, name) for name, value in data.items()
              if isinstance(fields.get(name), HandedOn) and fields[name].hands_on(value)}
    if not handed:
        return {}
    spec = {OLD.get(key, key): data[key] for key in (*CONTEXT, "schedule") if key in data}
    try:
        validate_job({**spec, **{new: data[name] for name, new in handed.items()}})
    except InvalidJob as exc:
        return {name: [exc.errors[new]] for name, new in handed.items() if new in exc.errors}
    return {}


class HandedOnInteger(HandedOn, serializers.IntegerField):
    """An integer field of the job spec: a JSON integer, else handed on."""

    json_types = (int,)


class HandedOnNumber(HandedOn, serializers.FloatField):
    """A number field of the job spec: a JSON integer or float, else handed on."""

    json_types = (int, float)


class TextField(serializers.CharField):
    """A CharField that takes a JSON string only (DRF's takes a number too, as its text)
    and refuses lone UTF-16 surrogates, which JSON escapes can carry but PostgreSQL
    cannot store (DRF already refuses NUL characters)."""

    default_error_messages = {"surrogate": "must be valid Unicode text (no lone surrogates)",
                              "invalid": "must be text"}

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        value = super().to_internal_value(data)
        try:
            value.encode()
        except UnicodeEncodeError:
            self.fail("surrogate")
        return value


class HandedOnText(HandedOn, TextField):
    """A text field of the job spec that jobs/validation.py checks: a JSON string, else
    handed on."""

    json_types = (str,)


class HandedOnRegex(HandedOn, serializers.RegexField):
    """A text field of the job spec with a pattern: a JSON string, else handed on."""

    json_types = (str,)


class AwareDateTimeField(serializers.DateTimeField):
    """ISO 8601 with a UTC offset; a naive datetime is refused rather than guessed, and so
    is one whose UTC equivalent falls outside years 1-9999."""

    default_error_messages = {"naive": NAIVE, "range": "is outside the years 1-9999 in UTC"}

    def to_internal_value(self, value):
        if isinstance(value, str):
            try:
                parsed = parse_datetime(value.strip())
            except ValueError:
                parsed = None
            if parsed is not None and parsed.tzinfo is None:
                self.fail("naive")
        try:
            return super().to_internal_value(value)
        except OverflowError:
            self.fail("range")
