"""Validation of job definitions shared by the Python API and the REST API.

Every check names the field and the reason; ``validate_job`` collects them all and raises
one InvalidJob, so nothing half-valid is ever stored.
"""

import json
from datetime import UTC, datetime
from itertools import islice, pairwise

from jobs import callback_fields, flow_keys, retry_fields
from jobs.ingest import unique
from jobs.models import QUEUE_RE, MisfirePolicy
from jobs.schedules import cron, zones
from runs.tenancy.quotas import MAX_INT
from scheduler_core import conf
from scheduler_core.exceptions import InvalidJob
from scheduler_core.json_text import has_nul
from scheduler_core.registry import get_handler
from scheduler_core.text import line_problem

NAME_MAX = 200
EARLIEST_YEAR, LATEST_YEAR = 1970, 9998  # what every clock, score and driver here can hold
MAX_DELAY_S = 100 * 365 * 86_400  # a century: beyond it a delay is surely a unit mistake


def job_limits() -> dict[str, int]:
    """The tunable caps validate_job applies, MAX_TIMEOUT_S, MAX_RETRIES and
    MAX_PAYLOAD_BYTES, and the default MAX_LAG_S. Read them once per batch and pass them
    to validate_job."""
    return {name: conf.get(name) for name in ("MAX_TIMEOUT_S", "MAX_RETRIES",
                                              "MAX_PAYLOAD_BYTES", "MAX_LAG_S")}


def utf8(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8 (no lone surrogates)."""
    if text.isascii():  # the common case, without building the bytes
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def validate_job(spec: dict, limits: dict[str, int] | None = None, *,
                 owner_id: int | None = None, stored_payload: dict | None = None) -> dict:
    """Check and normalise one job spec; returns the cleaned dict.

    Keys: name (str), handler (registered name), payload (JSON object), queue (None: the
    owner's default queue), shard_key (text; default: the handler), priority
    (0-9), timeout_s (>= 1), max_attempts (>= 1), and at most one of ``run_at`` (aware
    datetime), ``delay_s`` (seconds from now, int or float) or ``cron`` (with optional
    timezone, misfire_policy, max_lag_s, jitter_s); none of them means now, which
    services.create_jobs fills in from the database's clock (docs/api.md); optional
    unique_key, unique_period_s, unique_states (jobs/ingest/unique.py); on_success and
    on_failure (jobs/callback_fields.py).
    ``limits`` are the caps of job_limits(), read afresh when omitted. An http job's
    secret headers are sealed for ``owner_id`` (the job's owner) and the job;
    ``stored_payload`` is the payload of the job being changed, whose secrets the
    redaction marker keeps (runs/outbound/payload.py, normalize).
    Raises InvalidJob mapping each bad field to its reason.
    """
    errors: dict[str, str] = {}
    clean = dict(spec)
    name = spec.get("name")
    if name is None or name == "":
        name = spec.get("handler") if isinstance(spec.get("handler"), str) else ""
    if not isinstance(name, str) or len(name) > NAME_MAX or "\x00" in name:
        errors["name"] = f"must be text of at most {NAME_MAX} characters"
    elif not utf8(name):
        errors["name"] = "must be valid Unicode text (it holds a lone UTF-16 surrogate)"
    elif problem := line_problem(name):
        errors["name"] = problem
    clean["name"] = str(name)[:NAME_MAX]
    try:
        get_handler(spec.get("handler") or "")
    except InvalidJob as exc:
        errors.update(exc.errors)
    limits = limits or job_limits()
    clean["payload_json"], payload_error = payload_json(spec.get("payload", {}),
                                                        limits["MAX_PAYLOAD_BYTES"])
    if payload_error:
        errors["payload"] = payload_error
    elif spec.get("handler") == "http":
        # Here, not at the top: it imports httpx and cryptography, which a process that
        # never validates an http job (a worker) should not pay for at its start.
        from runs.outbound import payload as http_payload

        clean["payload"], problems = http_payload.normalize(
            spec.get("payload", {}), _timeout_s(spec.get("timeout_s")), owner_id=owner_id,
            stored=stored_payload)
        errors.update(problems)
        if not problems:  # normalize rewrote it (sealed headers): its own text
            clean["payload_json"] = compact_json(clean["payload"])
    queue = spec.get("queue")
    if queue is not None and (not isinstance(queue, str) or not QUEUE_RE.match(queue)):
        errors["queue"] = "1-64 characters of letters, digits, '_', '.', '-'"
    shard_key = spec.get("shard_key")
    shard_key = "" if shard_key is None else shard_key  # 0 is a wrong type, not "none"
    if (not isinstance(shard_key, str) or len(shard_key) > 200 or "\x00" in shard_key
            or not utf8(shard_key)):
        errors["shard_key"] = "must be text of at most 200 characters"
    elif problem := line_problem(shard_key):
        errors["shard_key"] = problem
    for field, low, high in (("priority", 0, 9), ("timeout_s", 1, limits["MAX_TIMEOUT_S"]),
                             ("max_attempts", 1, limits["MAX_RETRIES"] + 1)):
        value = spec.get(field)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            errors[field] = "must be an integer"
        elif value < low or (high is not None and value > high):
            errors[field] = f"must be between {low} and {high}" if high else f"must be >= {low}"
    has_run_at, has_cron = spec.get("run_at") is not None, bool(spec.get("cron"))
    errors.update(_when_problems(spec))
    if has_run_at:
        run_at = spec["run_at"]
        if not isinstance(run_at, datetime):
            errors["run_at"] = "must be a datetime"
        elif run_at.utcoffset() is None:  # django.utils.timezone.is_naive, inline
            errors["run_at"] = "must carry a UTC offset (naive datetimes are ambiguous)"
        elif problem := moment_problem(run_at):
            errors["run_at"] = problem
    if plain(spec):
        # Most specs give none of them: their groups' cleaned values for an absent field,
        # without running the groups (half of a bulk create's validation).
        clean.update(absent_fields())
        if errors:
            raise InvalidJob(errors)
        return clean
    # A one-off job's schedule fields mean nothing, but a wrong one is refused at every
    # door (REST's types refused a wrongly typed one; the Python API ignored it).
    tz, policy, max_lag = schedule_fields(spec, errors, limits.get("MAX_LAG_S"))
    if has_cron:
        try:
            if not isinstance(spec["cron"], str):
                raise ValueError("must be a cron expression (text)")
            clean["cron"] = cron.normalize(spec["cron"])
        except ValueError as exc:
            errors["cron"] = str(exc)
        if "timezone" not in errors:
            clean["timezone"] = tz
        clean["misfire_policy"] = policy
        clean["max_lag_s"] = max_lag
        jitter = spec.get("jitter_s") or 0
        if isinstance(jitter, bool) or not isinstance(jitter, int) \
                or not 0 <= jitter <= cron.MAX_JITTER_S:
            errors["jitter_s"] = f"must be an integer from 0 to {cron.MAX_JITTER_S} (seconds)"
        elif not {"cron", "timezone"} & set(errors) \
                and (problem := jitter_problem(clean["cron"], tz, jitter)):
            errors["jitter_s"] = problem
        clean["jitter_s"] = jitter
    elif spec.get("jitter_s"):
        errors["jitter_s"] = "applies to cron schedules only; a one-off job runs at its run_at"
    errors.update(unique.problems(spec))
    errors.update(retry_fields.problems(spec, clean, moment_problem))
    errors.update(flow_keys.problems(spec, clean))
    errors.update(callback_fields.problems(
        spec, clean, lambda p: payload_problem(p, limits["MAX_PAYLOAD_BYTES"])))
    if errors:
        raise InvalidJob(errors)
    return clean


# The fields of validate_job's optional groups: a schedule's own fields, the unique key,
# retry and expiry, the flow keys and the callbacks.
OPTIONAL_FIELDS = frozenset({
    "cron", "timezone", "misfire_policy", "max_lag_s", "jitter_s",
    "unique_key", "unique_period_s", "unique_states", "retry", "expires_at", "expires_in_s",
    "rate_key", "concurrency_key", "concurrency_limit", *callback_fields.CALLBACK_FIELDS})
_ABSENT: dict = {}


def plain(spec: dict) -> bool:
    """Whether ``spec`` gives none of OPTIONAL_FIELDS: each is left out or None (a REST
    create names them all), the timezone may also be "UTC" or "" (its default), and
    ``max_lag_s`` must be left out, since None is refused for it."""
    if spec.keys().isdisjoint(OPTIONAL_FIELDS):  # no set built: the bulk create's case
        return True
    for key in spec.keys() & OPTIONAL_FIELDS:
        value = spec[key]
        if value is None and key != "max_lag_s" or key == "timezone" and value in ("UTC", ""):
            continue
        return False
    return True


def absent_fields() -> dict:
    """The cleaned values validate_job's optional groups give a spec that has none of
    OPTIONAL_FIELDS: made once, by those groups' own checks of an empty spec, so the
    short way can never disagree with the long one."""
    if not _ABSENT:
        clean: dict = {}
        retry_fields.problems({}, clean, moment_problem)
        flow_keys.problems({}, clean)
        callback_fields.problems({}, clean, payload_problem)
        _ABSENT.update(clean)
    return _ABSENT


# (key, the name a message gives it): every way in names them alike (jobs/spec.py).
WHEN_FIELDS = (("run_at", "run_at"), ("delay_s", "delay_s"), ("cron", "cron"))


def _when_problems(spec: dict) -> dict[str, str]:
    """At most one of ``run_at``, ``delay_s`` and ``cron``; none means now (docs/api.md,
    "Create"). ``delay_s`` is a number of seconds from 0 to MAX_DELAY_S. Each
    field given alongside another is named."""
    given = [(key, name) for key, name in WHEN_FIELDS
             if (bool(spec.get(key)) if key == "cron" else spec.get(key) is not None)]
    if len(given) > 1:
        names = " and ".join(name for _, name in given)
        return {key: f"give at most one of run_at, delay_s or cron, not {names} "
                     "(none means now)" for key, _ in given}
    delay = spec.get("delay_s")
    if delay is not None and (isinstance(delay, bool) or not isinstance(delay, int | float)
                              or not 0 <= delay <= MAX_DELAY_S):
        # A negative delay backdates the run, which then reads as years of lag to every
        # tenant's figures (docs/api.md, "Job fields"); run_at says a past time.
        return {"delay_s": f"must be a number of seconds from 0 to {MAX_DELAY_S} (now or "
                           "later; for a time in the past, give run_at)"}
    return {}


# Django's enum builds its list of values anew at each read: once here, for every job.
MISFIRE_POLICIES = frozenset(MisfirePolicy.values)
GAP_OCCURRENCES = 100  # the occurrences whose gaps bound jitter: a DST change shows up


def schedule_fields(spec: dict, errors: dict, default_max_lag_s: int | None = None) -> tuple:
    """(timezone, misfire_policy, max_lag_s) of ``spec`` with their defaults (UTC,
    run_once, ``default_max_lag_s`` seconds, read from MAX_LAG_S when None); a wrong one
    is put in ``errors`` by its field's name."""
    tz = spec.get("timezone")
    tz = "UTC" if tz is None or tz == "" else tz
    if problem := zones.zone_problem(tz):
        errors["timezone"] = problem
    policy = spec.get("misfire_policy") or MisfirePolicy.RUN_ONCE
    # A list or dict is refused by name, not hashed (a TypeError) against the set.
    if not isinstance(policy, str) or policy not in MISFIRE_POLICIES:
        errors["misfire_policy"] = f"must be one of {', '.join(MisfirePolicy.values)}"
    max_lag = spec["max_lag_s"] if "max_lag_s" in spec else (
        conf.get("MAX_LAG_S") if default_max_lag_s is None else default_max_lag_s)
    if isinstance(max_lag, bool) or not isinstance(max_lag, int) \
            or not 0 <= max_lag <= MAX_INT:  # the column's range: no DataError later
        errors["max_lag_s"] = f"must be an integer from 0 to {MAX_INT} (seconds)"
    return tz, policy, max_lag


def jitter_problem(expression: str, tz: str, jitter_s: int,
                   now: datetime | None = None) -> str | None:
    """Why ``jitter_s`` (seconds) cannot spread the runs of cron ``expression`` in IANA
    zone ``tz`` (both already valid), or None: it must be less than the shortest gap
    between the next GAP_OCCURRENCES occurrences after ``now`` (aware; default now).
    A jitter as long as the gap delays each run past the next occurrence, so the runs of
    ``* * * * *`` with a day's jitter pile up, one more pending per minute, past the
    job's max_pending (docs/cron.md, "Jitter")."""
    if not jitter_s:
        return None
    times = list(islice(cron.iter_after(expression, tz, now or datetime.now(UTC)),
                        GAP_OCCURRENCES))
    gaps = [(later - earlier).total_seconds() for earlier, later in pairwise(times)]
    if not gaps or jitter_s < min(gaps):
        return None
    return (f"must be less than the schedule's shortest gap between occurrences, "
            f"{min(gaps):g} s (the next {len(times)} occurrences of {expression!r} in "
            f"{tz}); a longer jitter lets runs pile up")


def _timeout_s(value) -> int | None:
    """The job's timeout (seconds) an http payload's own timeout must fit in; None when
    the given one is not a number (validate_job reports it)."""
    if value is None:
        return conf.get("DEFAULT_TIMEOUT_S")
    return value if type(value) is int and value > 0 else None


def moment_problem(moment: datetime) -> str | None:
    """Why an aware datetime cannot be scheduled, or None: it must fall between the years
    1970 and 9998 in UTC (PostgreSQL stores more, but its drivers cannot read it back)."""
    try:
        year = moment.astimezone(UTC).year
    except OverflowError:
        year = 10_000
    if not EARLIEST_YEAR <= year <= LATEST_YEAR:
        return f"must fall between the years {EARLIEST_YEAR} and {LATEST_YEAR} (UTC)"
    return None


def compact_json(payload) -> str:
    """``payload`` as compact UTF-8 JSON text: the form validation measures and the
    database is sent (jsonb reads it exactly as Django's own serialisation). Raises
    TypeError (a value JSON cannot hold), ValueError (NaN, infinity) or RecursionError;
    lone surrogates pass here, payload_json refuses them."""
    return _COMPACT.encode(payload)


# json.dumps with options builds an encoder per call: one, made once, is a third cheaper.
_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def payload_json(payload, cap: int | None = None) -> tuple[str | None, str | None]:
    """(the payload's compact JSON text, None), or (None, why ``payload`` cannot be
    stored): it must be a JSON object of at most ``cap`` bytes (default MAX_PAYLOAD_BYTES)
    of compact UTF-8 JSON that PostgreSQL's jsonb accepts: no NUL character and no lone
    UTF-16 surrogate in any key or string. The text is what the bulk create stores, so
    each payload is serialised once (BENCHMARKS.md, "Ingest (W1)")."""
    if not isinstance(payload, dict):
        return None, "must be a JSON object"
    try:
        text = compact_json(payload)
        size = len(text) if text.isascii() else len(text.encode())
    except (TypeError, ValueError, RecursionError) as exc:  # UnicodeEncodeError: ValueError
        return None, f"must be JSON text in valid Unicode: {exc}"
    cap = conf.get("MAX_PAYLOAD_BYTES") if cap is None else cap
    if size > cap:
        return None, f"is {size} bytes of JSON, more than the cap of {cap}"
    # On the text: a walk of a payload nested some 600 deep hit Python's recursion limit.
    if has_nul(text):
        return None, "must not contain NUL characters (\\u0000)"
    return text, None


def payload_problem(payload, cap: int | None = None) -> str | None:
    """Why ``payload`` cannot be stored, or None (the rules of ``payload_json``)."""
    return payload_json(payload, cap)[1]
