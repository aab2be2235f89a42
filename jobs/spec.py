"""The one definition of a job's fields: their names, types, defaults and bounds, which
way in takes which, the names each way in used before (kept one release, deprecated), and
the error an unknown field gets (docs/api.md, "Job fields").

Every way in translates to these names: REST (jobs/api/serializers.py), ``services.create_job``
and ``create_jobs``, the admin form (jobs/admin/forms.py), ``@task`` options
(scheduler_tasks/backend.py), workflow nodes and schedules (workflows/validation.py),
crontab import and ``loaddemo``. The rules themselves run once, in jobs/validation.py,
whatever the way in. tests/test_job_spec.py fails when a way in drifts from this table or
docs/api.md's copy of it.
"""

import difflib
import functools
import warnings
from dataclasses import dataclass

from jobs.flow_keys import MAX_LIMIT as MAX_CONCURRENCY
from jobs.schedules.cron import MAX_JITTER_S
from jobs.validation import MAX_DELAY_S, NAME_MAX
from runs.tenancy.quotas import MAX_INT

# The ways in, as the table's columns name them.
REST, CREATE_JOB, CREATE_JOBS, ADMIN, TASK, NODE, WORKFLOW_SCHEDULE, UPDATE = (
    "REST", "create_job", "create_jobs", "admin", "@task", "node", "workflow schedule",
    "update")
ALL = frozenset({REST, CREATE_JOB, CREATE_JOBS})
SCHEDULE = frozenset({*ALL, ADMIN, TASK, WORKFLOW_SCHEDULE, UPDATE})


@dataclass(frozen=True)
class Field:
    """One field of a job: ``kind`` its JSON type, ``default`` and ``bounds`` as
    documented, ``doors`` the ways in that take it. ``low``/``high`` (a number, or the
    name of the tunable that gives it) and ``max_length`` are the bounds as numbers:
    tests/test_job_spec_bounds.py holds validation and REST to them."""

    name: str
    kind: str
    default: str
    bounds: str
    doors: frozenset
    doc: str
    low: int | None = None
    high: int | str | None = None
    max_length: int | None = None

    def limits(self) -> tuple[int | None, int | None]:
        """(low, high) with a tunable's name read from the settings; MAX_RETRIES, which
        counts retries, gives max_attempts' high as MAX_RETRIES + 1."""
        high = self.high
        if isinstance(high, str):
            from scheduler_core import conf

            high = conf.get(high) + (1 if high == "MAX_RETRIES" else 0)
        return self.low, high


FIELDS = (
    Field("name", "text", "the handler's name", f"at most {NAME_MAX} characters",
          ALL | {ADMIN, NODE, UPDATE}, "free text shown in lists", max_length=NAME_MAX),
    Field("handler", "text", "(required)", "a registered handler", ALL | {ADMIN, NODE},
          "what runs (create_job: its first argument)"),
    Field("payload", "object", "{}", "a JSON object of at most MAX_PAYLOAD_BYTES",
          ALL | {ADMIN, NODE, UPDATE}, "passed to the handler (create_job: its second "
                                       "argument)"),
    Field("run_at", "datetime", "now", "aware, years 1970-9998", ALL | {ADMIN, UPDATE},
          "one-off: when it runs; in the past means now; its lag counts from when it was "
          "made"),
    Field("delay_s", "number", "0", f"0 to {MAX_DELAY_S} seconds", ALL,
          "one-off: seconds from now", low=0, high=MAX_DELAY_S),
    Field("cron", "text", "none (one-off)", "five-field cron or @hourly, @daily, "
          "@weekly, @monthly, @yearly", SCHEDULE, "recurring: the cron expression"),
    Field("timezone", "text", "UTC", "an IANA timezone", SCHEDULE,
          "the timezone the cron expression is read in"),
    Field("misfire_policy", "choice", "run_once", "run_once, run_all, skip", SCHEDULE,
          "what to do with occurrences missed while the scheduler was down"),
    Field("max_lag_s", "integer", "MAX_LAG_S (3600)", f"0 to {MAX_INT}",
          SCHEDULE, "missed occurrences older than this many seconds are dropped",
          low=0, high=MAX_INT),
    Field("jitter_s", "integer", "0", f"0 to {MAX_JITTER_S}, below the cron's shortest gap",
          SCHEDULE - {ADMIN},
          "spread each occurrence's run over this many seconds after it",
          low=0, high=MAX_JITTER_S),
    Field("queue", "text", "the owner's default queue, else default",
          "1-64 of letters, digits, _ . -", ALL | {ADMIN, NODE},
          "the queue its runs go to (@task: Django's queue_name)", max_length=64),
    Field("shard_key", "text", "the handler", "at most 200 characters", ALL,
          "runs go to shard crc32(shard_key) % SHARDS of the queue", max_length=200),
    Field("priority", "integer", "5", "0 (most urgent) to 9", ALL | {ADMIN, NODE, UPDATE},
          "@task: Django's priority, -100 to 100, mapped onto it", low=0, high=9),
    Field("timeout_s", "integer", "DEFAULT_TIMEOUT_S (300)", "1 to MAX_TIMEOUT_S",
          ALL | {ADMIN, TASK, NODE, UPDATE}, "seconds one attempt may run",
          low=1, high="MAX_TIMEOUT_S"),
    Field("max_attempts", "integer", "DEFAULT_MAX_ATTEMPTS (4)", "1 to MAX_RETRIES + 1",
          ALL | {ADMIN, TASK, NODE, UPDATE},
          "attempts before the run goes to the dead letter, the first try included",
          low=1, high="MAX_RETRIES"),
    Field("unique_key", "text", "none", "at most 200 characters", ALL,
          "while an earlier job of the owner holds it, that job is the answer",
          max_length=200),
    Field("unique_period_s", "integer", "no end", f"1 to {MAX_INT}", ALL,
          "seconds the key counts after the job's creation", low=1, high=MAX_INT),
    Field("unique_states", "list", "scheduled, queued, running, retrying", "run states",
          ALL, "the run states in which a one-off job holds its key"),
    Field("retry", "object", "null: exponential, base RETRY_BACKOFF_BASE_S (1), cap "
          "RETRY_BACKOFF_CAP_S (3600), no jitter, every exception",
          "kind (fixed, linear, exponential), base_s, cap_s, jitter_s, retry_on, "
          "never_retry_on", ALL | {ADMIN, TASK, NODE},
          "the retry strategy (docs/retries-and-expiry.md)"),
    Field("expires_at", "datetime", "none", "aware, after run_at; one-off jobs only",
          ALL | {ADMIN}, "a run not started by then ends expired, never runs"),
    Field("expires_in_s", "integer", "none", f"1 to {MAX_INT}", ALL | {ADMIN, TASK, NODE},
          "a run not started this many seconds after its scheduled_at ends expired",
          low=1, high=MAX_INT),
    Field("rate_key", "text", "none", "handler, name or payload.<field>[.<field>...]",
          ALL | {ADMIN, TASK, NODE}, "its runs share the rate limit of this key, one bucket per "
          "value (docs/isolation.md)"),
    Field("concurrency_key", "text", "none", "as rate_key", ALL | {ADMIN, TASK, NODE},
          "at most concurrency_limit runs of one value of this key run at once"),
    Field("concurrency_limit", "integer", "1", f"1 to {MAX_CONCURRENCY}",
          ALL | {ADMIN, TASK, NODE},
          "most runs of one concurrency_key value running at once", low=1,
          high=MAX_CONCURRENCY),
    Field("on_success", "text or object", "none", "a registered handler, or {handler, "
          "payload}", ALL | {ADMIN, TASK}, "runs once with each successful run's result "
          "(docs/callbacks.md)"),
    Field("on_failure", "text or object", "none", "as on_success", ALL | {ADMIN, TASK},
          "runs once with the error of each run that ends dead or expired"),
)
NAMES = tuple(f.name for f in FIELDS)


@functools.cache
def names_of(door: str) -> frozenset[str]:
    """The field names way in ``door`` (one of the constants above) takes."""
    return frozenset(f.name for f in FIELDS if door in f.doors)


@dataclass(frozen=True)
class Old:
    """A name a way in used before this table: accepted one more release, deprecated."""

    new: str
    doors: frozenset
    note: str = ""


# Old names, where they were public. max_retries counted retries (max_attempts - 1).
DEPRECATED = {
    "schedule": Old("cron", frozenset({REST})),
    "max_retries": Old("max_attempts", frozenset({REST}),
                       "max_attempts = max_retries + 1: it counts the first try"),
    "cron_expr": Old("cron", frozenset({CREATE_JOB})),
    "timezone_name": Old("timezone", frozenset({CREATE_JOB})),
    "cron_timezone": Old("timezone", frozenset({TASK})),
}
# What other schedulers call a field, for the suggestion of an unknown one.
OTHER_NAMES = {"tz": "timezone", "retries": "max_attempts", "delay": "delay_s",
               "delay_seconds": "delay_s", "timeout": "timeout_s", "countdown": "delay_s",
               "eta": "run_at", "crontab": "cron", "schedule": "cron",
               "max_retries": "max_attempts", "cron_expr": "cron",
               "timezone_name": "timezone", "cron_timezone": "timezone"}


def suggestion(name: str, known) -> str | None:
    """The known field ``name`` was probably meant as (another scheduler's or an old
    name, else the closest spelling by difflib), or None."""
    known = sorted(known)
    meant = OTHER_NAMES.get(name)
    if meant in known:
        return meant
    close = difflib.get_close_matches(str(name), known, n=1, cutoff=0.6)
    return close[0] if close else None


def unknown_message(name: str, known) -> str:
    """The reason an unknown field ``name`` is refused where ``known`` are the fields:
    "unknown field (did you mean 'cron'?)", with the conversion max_retries needs."""
    meant = suggestion(name, known)
    if meant is None:
        return "unknown field"
    note = DEPRECATED[name].note if name in DEPRECATED else ""
    return f"unknown field (did you mean {meant!r}?{' ' + note if note else ''})"


def renamed(name: str, door: str) -> str | None:
    """The new name of ``name`` if it is an old name way in ``door`` still takes."""
    old = DEPRECATED.get(name)
    return old.new if old is not None and door in old.doors else None


def deprecation(name: str, where: str) -> str:
    """The deprecation message of old name ``name`` used in ``where``."""
    old = DEPRECATED[name]
    note = f" ({old.note})" if old.note else ""
    return (f"{where}: {name!r} is deprecated and goes in the next release; use "
            f"{old.new!r}{note} (docs/api.md, \"Job fields\")")


def warn_renamed(name: str, where: str, stacklevel: int = 3) -> None:
    """A DeprecationWarning for old name ``name`` used in ``where`` (Python ways in)."""
    warnings.warn(deprecation(name, where), DeprecationWarning, stacklevel=stacklevel)


def translate(values: dict, door: str, where: str, stacklevel: int = 2) -> tuple[dict, dict]:
    """``values`` in this table's names for way in ``door``: old names it still takes
    renamed (with a DeprecationWarning pointing ``stacklevel`` frames up from the caller;
    max_retries becomes max_attempts + 1; ``where`` names the way in). Returns
    (the translated dict, {field: reason} for each unknown field or a field given under
    both names); the caller raises its own error."""
    known, out, errors = names_of(door), {}, {}
    for key, value in values.items():
        new = renamed(key, door) if isinstance(key, str) else None
        if new is not None:
            warn_renamed(key, where, stacklevel + 2)
            if new in values:
                errors[key] = f"give {new!r} only ({key!r} is its deprecated name)"
                continue
            if key == "max_retries" and type(value) is int:
                value += 1
            out[new] = value
        elif key in known:
            out[key] = value
        else:
            errors[str(key)] = unknown_message(key, known)
    return out, errors


def markdown_table() -> str:
    """docs/api.md's table of the fields, made from FIELDS and DEPRECATED."""
    doors = (REST, CREATE_JOB, CREATE_JOBS, ADMIN, TASK, NODE, WORKFLOW_SCHEDULE, UPDATE)
    lines = ["| field | what | type | default | bounds | " + " | ".join(doors) + " |",
             "|---|---|---|---|---|" + "---|" * len(doors)]
    for f in FIELDS:
        marks = " | ".join("✓" if d in f.doors else "" for d in doors)
        lines.append(f"| `{f.name}` | {f.doc} | {f.kind} | {f.default} | {f.bounds} | "
                     f"{marks} |")
    lines += ["", "| old name | way in | use instead |", "|---|---|---|"]
    for name, old in DEPRECATED.items():
        note = f" ({old.note})" if old.note else ""
        lines.append(f"| `{name}` | {', '.join(sorted(old.doors))} | `{old.new}`{note} |")
    return "\n".join(lines)
