"""Serializers that refuse what they do not take, for the endpoints whose fields are not
a job's (the alert policies, the rate limits); the others name the field meant instead
(strict_fields.py, and jobs/api/serializers.py's StrictFieldsMixin for a job's)."""

from rest_framework import serializers


class StrictInput:
    """Put before a DRF Serializer: refuse, naming each, a field the serializer does not
    declare (listing those it takes) and one it only shows (read-only): a 400, where DRF
    ignores both silently, so a client setting a read-only ``webhook_secret`` or a
    misspelt ``burts`` believed it had (docs/api.md, "Conventions")."""

    def to_internal_value(self, data):
        refused = {}
        if isinstance(data, dict):
            settable = sorted(name for name, field in self.fields.items() if not field.read_only)
            for name in data:
                field = self.fields.get(name)
                if field is None:
                    refused[name] = [f"unknown field; this endpoint takes {', '.join(settable)}"]
                elif field.read_only:
                    refused[name] = ["is read-only: shown in the answer, never set"]
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            if refused and isinstance(exc.detail, dict):
                raise serializers.ValidationError({**exc.detail, **refused}) from exc
            raise
        if refused:
            raise serializers.ValidationError(refused)
        return value

