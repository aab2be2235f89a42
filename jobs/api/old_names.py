"""The old names of job fields in the REST API (jobs/spec.py, DEPRECATED), kept one
release: ``schedule`` for ``cron`` and ``max_retries`` for ``max_attempts`` (docs/api.md,
"Job fields"). A request that uses one is answered with a ``Deprecation`` header."""

from rest_framework import serializers

from jobs import spec


class DeprecatedNamesMixin:
    """Take the old names ``schedule`` and ``max_retries`` (jobs/spec.py, DEPRECATED) for
    ``cron`` and ``max_attempts`` this release: validated data carries the new names;
    ``deprecated_used`` collects the old names seen, which the view answers with a
    ``Deprecation`` header (RFC 9745) and a ``Warning`` naming them."""

    def to_internal_value(self, data):
        both = {old: [f"give {spec.DEPRECATED[old].new!r} only ({old!r} is its deprecated "
                      "name)"] for old in ("schedule", "max_retries")
                if isinstance(data, dict) and old in data and spec.DEPRECATED[old].new in data}
        attrs = super().to_internal_value(data)
        if both:
            raise serializers.ValidationError(both)
        for old in ("schedule", "max_retries"):
            if old in attrs:
                value = attrs.pop(old)
                # Not an int: handed on as given, for validation to refuse.
                attrs[spec.DEPRECATED[old].new] = (value + 1 if old == "max_retries"
                                                   and type(value) is int else value)
                self.deprecated_used = {*getattr(self, "deprecated_used", ()), old}
        return attrs


def deprecation_headers(names) -> dict[str, str]:
    """The response headers of a request that used the old field ``names``: none when it
    used none."""
    if not names:
        return {}
    said = "; ".join(spec.deprecation(name, "this request") for name in sorted(names))
    return {"Deprecation": "true", "Warning": '299 - "' + said.replace('"', "'") + '"'}


def mark_deprecated_in_schema(result: dict, generator, request, public) -> dict:
    """drf-spectacular's postprocessing hook (SPECTACULAR_SETTINGS["POSTPROCESSING_HOOKS"]):
    the old names ``schedule`` and ``max_retries`` are ``deprecated: true`` in each schema
    that also has their new names, so the Swagger UI strikes them through. A workflow's own
    ``schedule`` field (beside no ``cron``) stays as it is."""
    for component in result.get("components", {}).get("schemas", {}).values():
        properties = component.get("properties", {})
        for old in ("schedule", "max_retries"):
            if old in properties and spec.DEPRECATED[old].new in properties:
                properties[old]["deprecated"] = True
    return result
