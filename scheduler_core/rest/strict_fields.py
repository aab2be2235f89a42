"""Serializers that refuse a field they do not declare, naming the one probably meant,
where DRF ignores it silently (docs/api.md, "Conventions"): the dead letter's bulk body,
and, through jobs/api/serializers.py's StrictFieldsMixin, the job and workflow bodies."""

import difflib

from rest_framework import serializers


class StrictFields:
    """Put before a DRF Serializer: refuse fields the serializer does not declare
    (``unknown field``, with the closest declared name when one is close), reported
    together with the other field errors. A subclass words the reason its own way by
    overriding ``unknown_reason``."""

    def unknown_reason(self, name: str) -> str:
        """Why field ``name``, which this serializer does not declare, is refused:
        "unknown field (did you mean 'queue'?)" by difflib's closest spelling, or
        "unknown field"."""
        close = difflib.get_close_matches(str(name), sorted(self.fields), n=1, cutoff=0.6)
        return f"unknown field (did you mean {close[0]!r}?)" if close else "unknown field"

    def refusals(self, data: dict) -> dict[str, list[str]]:
        """{field name: [reason]} for each field of the body ``data`` refused beside DRF's
        own checks: here those the serializer does not declare."""
        return {name: [self.unknown_reason(name)] for name in data if name not in self.fields}

    def to_internal_value(self, data):
        extra = self.refusals(data) if isinstance(data, dict) else {}
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            if extra and isinstance(exc.detail, dict):
                raise serializers.ValidationError({**exc.detail, **extra}) from exc
            raise
        if extra:
            raise serializers.ValidationError(extra)
        return value
