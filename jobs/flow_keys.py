"""The job fields of flow control by key: ``rate_key``, ``concurrency_key`` (templates
such as ``payload.customer_id``) and ``concurrency_limit`` (docs/isolation.md, "Rate
limits" and "Concurrency keys"; docs/api.md, "Job fields").

A template is ``handler``, ``name`` or ``payload.<field>[.<field>...]``. It is evaluated
once, when the job is made (and again when its payload changes), and stored with its
value as ``"<template>=<value>"``: every run of the job carries that value
(runs/flow/control.py). A value must be text, a number or a boolean.
"""

from runs.flow import control as flow
from runs.flow.control import TEMPLATE_HINT, TEMPLATE_RE
from scheduler_core.text import line_problem

MAX_STORED = 255  # the columns' length: "<template>=<value>"
MAX_LIMIT = 100_000


def _value(template: str, spec: dict, payload) -> tuple[str | None, str | None]:
    """(the value of ``template`` in the job, None) or (None, the reason it has none)."""
    if template in ("handler", "name"):
        value = spec.get(template) or ""
    else:
        value = payload
        for part in template.split(".")[1:]:
            if not isinstance(value, dict) or part not in value:
                return None, f"the payload has no {template.removeprefix('payload.')}"
            value = value[part]
    if isinstance(value, bool):
        value = "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, str | int | float):
        return None, f"{template} must be text, a number or a boolean"
    text = str(value)
    if problem := line_problem(text):  # the rule of names: no C0/C1, bidi, invisibles
        return None, f"{template}: {problem}"
    return text, None


def evaluate(field: str, template, spec: dict, payload) -> tuple[str, str | None]:
    """The stored form of key ``field``'s ``template`` for job ``spec``: ("", None) for
    none, else ("<template>=<value>", None), or ("", reason) when it cannot be used."""
    if template in (None, ""):
        return "", None
    if not isinstance(template, str) or not TEMPLATE_RE.match(template):
        return "", f"must be {TEMPLATE_HINT}"
    value, problem = _value(template, spec, payload)
    if problem:
        return "", problem
    stored = f"{template}={value}"
    if len(stored) > MAX_STORED:
        return "", f"its value is too long: {template} and its value take at most " \
                   f"{MAX_STORED - 1} characters"
    return stored, None


def problems(spec: dict, clean: dict) -> dict[str, str]:
    """Check and evaluate ``spec``'s flow fields into ``clean`` (rate_key and
    concurrency_key stored, concurrency_limit an int, 1 by default). Returns field ->
    reason for each bad one."""
    errors: dict[str, str] = {}
    payload = clean.get("payload", spec.get("payload", {}))
    for field in ("rate_key", "concurrency_key"):
        clean[field], problem = evaluate(field, spec.get(field), clean, payload)
        if problem:
            errors[field] = problem
        elif clean[field]:
            flow.mark_in_use()
    limit = spec.get("concurrency_limit")
    if limit is None:
        clean["concurrency_limit"] = 1
    elif isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        errors["concurrency_limit"] = f"must be an integer from 1 to {MAX_LIMIT}"
    elif not spec.get("concurrency_key") and limit != 1:  # the default, as validation fills
        # it in (a cleaned spec validates again); another needs a key, as unique_period_s
        # needs a unique_key
        errors["concurrency_limit"] = "needs a concurrency_key: it limits the runs of one " \
                                      "key value"
    return errors


def template(stored: str) -> str:
    """The template of a stored key (what a client gave); "" for none."""
    return stored.partition("=")[0]


def templates(job) -> dict:
    """The flow fields of stored ``job`` as a spec gives them (its keys' templates), for
    a change to be checked and evaluated again."""
    spec = {"rate_key": template(job.rate_key), "concurrency_key": template(job.concurrency_key)}
    if job.concurrency_key:
        spec["concurrency_limit"] = job.concurrency_limit
    return spec


def changed(job, clean: dict) -> list[str]:
    """Set on ``job`` its keys evaluated again in ``clean`` (its payload or name may
    have changed); returns the names of the fields that changed."""
    fields = [f for f in ("rate_key", "concurrency_key") if clean.get(f, "") != getattr(job, f)]
    for field in fields:
        setattr(job, field, clean[field])
    return fields
