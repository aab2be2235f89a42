"""The scheduler's tunables, in one namespace (docs/architecture.md, "Configuration").

Each value is read lazily from Django settings (so ``override_settings`` works in tests),
where a ``SCHEDULER`` dict may override it, and then from the environment variable
``SCHEDULER_<NAME>``. Unknown keys in ``settings.SCHEDULER`` are rejected.
"""

import os
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.functional import empty


def flag(raw) -> bool:
    """A boolean tunable: True, or one of 1/true/yes/on (any case); False, 0/false/no/off
    or empty. Raises ValueError for anything else, so that a typo is not read as off."""
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in {"1", "true", "yes", "on"}:
        return True
    if text in {"", "0", "false", "no", "off"}:
        return False
    raise ValueError("give true or false")


def count(raw) -> int:
    """A tunable that counts (0 meaning "never"): an int of 0 or more. Raises ValueError
    for a negative one, which would read as a limit already passed."""
    value = int(raw)
    if value < 0:
        raise ValueError("give 0 or more (0: never)")
    return value


@dataclass(frozen=True)
class Tunable:
    default: object
    cast: Callable
    doc: str


DEFAULTS: dict[str, Tunable] = {
    "BROKER": Tunable("", str, '"redis" or "database"; empty: redis when REDIS_URL is set'),
    "LEASE_TTL_S": Tunable(60.0, float, "seconds a lease lasts without a heartbeat"),
    "HEARTBEAT_S": Tunable(0.0, float, "seconds between heartbeats; 0: a third of LEASE_TTL_S"),
    "LOOKAHEAD_S": Tunable(10.0, float, "seconds ahead of now the scheduler materialises runs"),
    "SCHEDULER_TICK_S": Tunable(1.0, float, "seconds between scheduler ticks"),
    "PARTITIONS": Tunable(16, int, "number of job-id partitions schedulers split by lease"),
    "PARTITION_TTL_S": Tunable(15.0, float, "seconds a scheduler's partition lease lasts"),
    "SHARDS": Tunable(
        1, int, "shards per queue: a run's shard is crc32(job shard_key or handler) % SHARDS"),
    "SPREAD_QUEUES": Tunable(
        "", str, 'Redis Cluster: queues whose shards each get a slot of their own, so one '
        'queue spreads over several masters, with its limits split per shard, "<queue>,..." '
        'or "*" for every queue; empty: none (docs/isolation.md, "One queue over several '
        'masters")'),
    "SHARD_LEASE_TTL_S": Tunable(
        10.0, float, "seconds a dispatcher's lease on a shard lasts without renewal"),
    "PRIORITY_CLASSES": Tunable(
        "0-2:70,3-6:25,7-9:5", str,
        'priority classes and their weighted share of leases, "<lo>-<hi>:<weight>,..."; '
        "empty: one class, strict priority order"),
    "TASK_PACKAGES": Tunable(
        "", str, "comma-separated packages, besides the installed apps' and the settings "
        "module's, whose modules a worker may import to run a django.tasks task "
        "(scheduler_tasks/results.py, load_task)"),
    "DEMO_HANDLERS": Tunable(
        False, flag, "register the demo handlers noop, echo, sleep, flaky, always_fails "
        "(scripts/demo, the tests and the benchmarks turn it on)"),
    # Per-owner bounds (docs/isolation.md, "Tenant bounds"): the defaults of every owner,
    # which staff override per owner in its OwnerPolicy. Jobs without an owner have none.
    "OWNER_CONCURRENCY": Tunable(
        2, int, "most runs of one owner running at once, cluster-wide; 0: no limit"),
    "OWNER_MAX_PENDING": Tunable(
        10_000, int, "most runs of one owner waiting to run (scheduled, queued, retrying); "
        "0: no limit"),
    "OWNER_MAX_JOBS": Tunable(
        10_000, int, "most jobs of one owner that are not cancelled; 0: no limit"),
    "OWNER_HIGHEST_PRIORITY": Tunable(
        3, int, "the most urgent priority an owner's job may ask for (0 most urgent; 0: any)"),
    "OWNER_MAX_TIMEOUT_S": Tunable(
        3600, int, "longest timeout_s an owner's job may ask for (seconds); 0: MAX_TIMEOUT_S"),
    "OWNER_MAX_ATTEMPTS": Tunable(
        10, int, "most attempts (first try included) an owner's job may ask for; "
        "0: MAX_RETRIES + 1"),
    "OWNER_MAX_MAP_ITEMS": Tunable(
        1000, int, "most items of the list a mapped workflow node of an owner runs for "
        "(docs/workflows.md, \"Mapped nodes\"); 0: no limit"),
    "QUEUE_CONCURRENCY": Tunable(
        "", str, 'most runs of a queue running at once, "<queue>=<n>,..."'),
    "QUEUE_RATE": Tunable(
        "", str,
        'runs a queue may start per second (token bucket), "<queue>=<rate>[:<burst>],..."'),
    "METRICS_TOKEN": Tunable(
        "", str, "bearer token a /metrics scrape must send; empty: /metrics is closed "
        "unless METRICS_OPEN"),
    "METRICS_OPEN": Tunable(
        False, flag, "serve /metrics to anyone when no METRICS_TOKEN is set (for an "
        "endpoint only an internal network reaches)"),
    "FAIR_SCAN": Tunable(
        2000, int, "most ready runs one lease call may set aside for owners at their limit"),
    "SCHEDULE_BATCH": Tunable(1000, int, "cron jobs claimed per scheduler transaction"),
    "PROMOTE_BATCH": Tunable(1000, int, "runs moved delayed -> ready per promote call"),
    "REAP_BATCH": Tunable(500, int, "expired leases handled per reap call"),
    "HISTORY_RETENTION_S": Tunable(
        7 * 86_400.0, float, "seconds a succeeded or cancelled run is kept after it finished, "
        "with its attempts and logs (dead runs stay until requeued or discarded); 0: for ever"),
    "HISTORY_PARTITION_S": Tunable(
        86_400, int, "PostgreSQL: width in seconds of one time partition of the runs, "
        "attempts and log tables (docs/retention.md, \"Partitioned history\"); 0 when migrating: "
        "plain tables"),
    "HISTORY_PARTITIONS_AHEAD": Tunable(
        3, int, "PostgreSQL: time partitions the dispatcher keeps created ahead of now"),
    "DISPATCH_INTERVAL_S": Tunable(0.1, float, "seconds between dispatcher rounds when idle"),
    "RECONCILE_INTERVAL_S": Tunable(10.0, float, "seconds between DB -> broker reconciles"),
    "WORKER_POLL_S": Tunable(0.05, float, "seconds a worker with free slots waits when idle"),
    "WORKER_GRACE_S": Tunable(30.0, float, "seconds a SIGTERMed worker waits for in-flight runs"),
    "TRACING": Tunable(
        True, flag, "OpenTelemetry spans of enqueue, lease, attempt and ack, when the API "
        "is installed and a tracer provider is set (docs/tracing.md); off: none"),
    "WORKER_CHILD_ACKS": Tunable(
        True, flag, "PostgreSQL: a worker's child acks a workflow node's success itself and "
        "starts the run that ack continued (docs/workflows.md, \"Latency\"); off: the "
        "worker acks every run"),
    # Recycling a worker's children (runs/worker/recycle.py, docs/deploy.md): overridden
    # per worker by runworker's --max-runs-per-child and --max-memory-per-child.
    "MAX_RUNS_PER_CHILD": Tunable(
        0, count, "runs a worker's child process executes before it is replaced by a new "
        "one (Celery's worker_max_tasks_per_child); 0: never"),
    "MAX_MEMORY_PER_CHILD_MB": Tunable(
        0, count, "MiB of current resident memory (RSS, read from /proc after its runs; "
        "Linux) at which a worker's child is replaced once its run in flight ends "
        "(Celery's worker_max_memory_per_child, in MiB not KiB); 0: never"),
    "ASYNC_CONCURRENCY_PER_CHILD": Tunable(
        100, int, "most runs of async def handlers one worker child runs at once on its "
        "event loop, at least 1 (docs/async-handlers.md)"),
    "CANCEL_CHECK_S": Tunable(
        1.0, float, "seconds between a worker's checks whether a run it has been running "
        "for that long was cancelled (docs/architecture.md, \"Cancelling a running run\")"),
    "CANCEL_GRACE_S": Tunable(
        10.0, float, "seconds a cancelled run's handler has to stop once signalled before "
        "its child process is killed"),
    "RETRY_BACKOFF_BASE_S": Tunable(1.0, float, "first retry delay; doubles each attempt"),
    "RETRY_BACKOFF_CAP_S": Tunable(3600.0, float, "longest retry delay"),
    "DEFAULT_TIMEOUT_S": Tunable(300, int, "a job's timeout_s when none is given"),
    "DEFAULT_MAX_ATTEMPTS": Tunable(4, int, "a job's max_attempts when none is given"),
    "MAX_LAG_S": Tunable(3600, int, "default catch-up window for missed cron occurrences"),
    "MISFIRE_GRACE_S": Tunable(60.0, float, "an occurrence older than this counts as missed"),
    "REDIS_PREFIX": Tunable("sched", str, "first part of every Redis key"),
    "MAX_PAYLOAD_BYTES": Tunable(
        262_144, int, "largest job payload, in bytes of compact UTF-8 JSON (256 KiB)"),
    "MAX_TIMEOUT_S": Tunable(86_400, int, "largest timeout_s a job may ask for (seconds)"),
    "MAX_LOG_LINES": Tunable(1000, int, "log lines kept per attempt; the rest are counted"),
    "MAX_RETRIES": Tunable(
        99, int, "largest max_retries (attempts after the first) a job may ask for"),
    "API_THROTTLE_RATE": Tunable(
        "100000/minute", str,
        'requests per owner the REST API accepts, "<count>/<second|minute|hour|day>"'),
    "API_ANON_THROTTLE_RATE": Tunable(
        "60/minute", str,
        "requests without a valid login the REST API accepts per client address, "
        '"<count>/<second|minute|hour|day>"'),
    "API_MAX_BODY_BYTES": Tunable(
        1_048_576, int, "largest REST request body, in bytes, except the bulk endpoint's"),
    "API_BULK_MAX_BODY_BYTES": Tunable(
        67_108_864, int, "largest request body of POST /api/jobs/bulk/, in bytes (64 MiB)"),
    "API_BULK_MAX_JOBS": Tunable(10_000, int, "most jobs one POST /api/jobs/bulk/ may create"),
    "BACKFILL_MAX_OCCURRENCES": Tunable(
        1000, int, "most occurrences one backfill may cover; a larger range is refused"),
    "IDEMPOTENCY_TTL_S": Tunable(
        86_400, int, "seconds an Idempotency-Key's first response is replayed"),
    "ALERT_DIGEST_WINDOW_S": Tunable(
        60.0, float, "seconds after an owner alert during which further alerts of the same "
        "channel wait for one digest (docs/alerts.md)"),
    "ALERT_DIGEST_RUNS": Tunable(20, int, "runs a digest lists by id; the rest are counted"),
    "ALERT_POLL_S": Tunable(1.0, float, "seconds between a dispatcher's alert deliveries"),
    "ALERT_WEBHOOK_ATTEMPTS": Tunable(5, int, "attempts of a webhook delivery run"),
    "ALERT_WEBHOOK_QUEUE": Tunable("default", str, "queue of the webhook delivery runs"),
    # Workflows: jobs that wait for other jobs (docs/workflows.md).
    "WORKFLOW_MAX_NODES": Tunable(
        1000, int, "most nodes one workflow may have, and most it may expand to through "
        "its sub-workflows (docs/workflows.md, \"Sub-workflows\")"),
    "WORKFLOW_MAX_EDGES": Tunable(5000, int, "most edges one workflow may have"),
    "WORKFLOW_MAX_DEPTH": Tunable(
        5, int, "most levels of sub-workflows below a workflow run (docs/workflows.md, "
        "\"Sub-workflows\")"),
    "WORKFLOW_MAX_RESULT_BYTES": Tunable(
        65_536, int, "largest result of a workflow node's run, in bytes of compact UTF-8 "
        "JSON (64 KiB): a larger one fails the attempt and sends the run to the dead letter"),
    "WORKFLOW_RECONCILE_S": Tunable(
        5.0, float, "seconds between a scheduler's reconciles of its partitions' workflow "
        "runs (nodes ready without a run, runs finished without their node knowing)"),
    # The built-in http handler and its SSRF guard (docs/http-handler.md).
    "HTTP_ALLOWLIST": Tunable(
        "", str, "comma-separated host names (exact, or .suffix for a domain and its "
        "subdomains), IP addresses and CIDR networks outbound requests may reach although "
        "they are not public (loopback, private, link-local...); empty: public addresses only"),
    "HTTP_MAX_TIMEOUT_S": Tunable(
        60.0, float, "longest timeout_s an http job's payload may ask for (seconds)"),
    "HTTP_BODY_EXCERPT_BYTES": Tunable(
        4096, int, "bytes of a response body the http handler reads and keeps in the run's "
        "result; it stops reading there"),
    "HTTP_MAX_REDIRECTS": Tunable(
        3, int, "redirects the http handler follows, each hop checked by the SSRF guard"),
    "HTTP_RETRY_AFTER_MAX_S": Tunable(
        600.0, float, "longest Retry-After (seconds) the http handler honours; longer "
        "ones are cut to it"),
}


# settings.SCHEDULER as last checked, and its keys: a dict read again is checked again
# only when it is another object or has other keys. One tuple, replaced whole, so threads
# never see half of it.
_checked: tuple = (None, frozenset())
_NONE: dict = {}


def _configured() -> dict:
    global _checked
    # Read from the settings object behind django.conf.settings: for a project without
    # SCHEDULER (the default), LazySettings' own path raises and catches an AttributeError
    # on every read, 4 of the 6 µs a get() took. Every change (override_settings, an
    # assignment, pytest's settings fixture) is seen: nothing but the check is kept.
    wrapped = settings._wrapped
    overrides = (getattr(settings, "SCHEDULER", None) if wrapped is empty
                 else getattr(wrapped, "SCHEDULER", None)) or _NONE
    last = _checked
    if last[0] is overrides and overrides.keys() == last[1]:
        return overrides
    # The few keys given, not a set of every default: get() is called on every ack.
    unknown = [key for key in overrides if key not in DEFAULTS]
    if unknown:
        raise ImproperlyConfigured(
            f"Unknown SCHEDULER settings: {', '.join(sorted(map(str, unknown)))}")
    _checked = (overrides, frozenset(overrides))
    return overrides


def get(name: str):
    """Return the tunable ``name`` (a key of DEFAULTS), cast to its type.

    Order: ``settings.SCHEDULER[name]``, then env ``SCHEDULER_<name>``, then the default.
    Raises ImproperlyConfigured for an unknown name or a value that does not cast.
    """
    if name not in DEFAULTS:
        raise ImproperlyConfigured(f"Unknown scheduler setting {name!r}")
    tunable = DEFAULTS[name]
    overrides = _configured()
    if name in overrides:
        raw = overrides[name]
    else:
        raw = os.environ.get(f"SCHEDULER_{name}", tunable.default)
    try:
        return tunable.cast(raw)
    except (TypeError, ValueError) as exc:
        raise ImproperlyConfigured(f"SCHEDULER {name}={raw!r}: {exc}") from exc


def broker_name() -> str:
    """The configured broker: "redis" or "database" (docs/architecture.md, "Configuration")."""
    name = get("BROKER") or ("redis" if getattr(settings, "REDIS_URL", None) else "database")
    if name not in {"redis", "database"}:
        raise ImproperlyConfigured(f"SCHEDULER_BROKER must be redis or database, not {name!r}")
    return name


def heartbeat_interval() -> float:
    """Seconds between heartbeats: HEARTBEAT_S, or a third of the lease TTL."""
    return get("HEARTBEAT_S") or get("LEASE_TTL_S") / 3
