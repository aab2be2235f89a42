"""Serializers that refuse what they do not take, for the endpoints whose fields are not
a job's (the alert policies, the rate limits); the others name the field meant instead
(strict_fields.py, and jobs/api/serializers.py's StrictFieldsMixin for a job's)."""

from scheduler_core.rest.strict_fields import StrictFields


class StrictInput(StrictFields):
    """Put before a DRF Serializer: refuse, naming each, a field the serializer does not
    declare (listing those it takes) and one it only shows (read-only): a 400, where DRF
    ignores both silently, so a client setting a read-only ``webhook_secret`` or a
    misspelt ``burts`` believed it had (docs/api.md, "Conventions"). The refusals join
    the other field errors (StrictFields)."""

    def unknown_reason(self, name: str) -> str:
        settable = sorted(n for n, field in self.fields.items() if not field.read_only)
        return f"unknown field; this endpoint takes {', '.join(settable)}"

    def refusals(self, data: dict) -> dict[str, list[str]]:
        refused = {}
        for name in data:
            field = self.fields.get(name)
            if field is None:
                refused[name] = [self.unknown_reason(name)]
            elif field.read_only:
                refused[name] = ["is read-only: shown in the answer, never set"]
        return refused
