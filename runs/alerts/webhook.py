"""Signed alert webhooks (docs/alerts.md, "Webhooks"): the body, its signature, and the
run of the ``http`` handler that delivers it (so a delivery retries with the run's backoff
and is visible in the API and admin like any run).

Signature: ``X-Scheduler-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256>`` where the HMAC
is keyed with the owner's webhook secret over ``"<t>." + body`` (the raw bytes as sent),
as Stripe and Svix sign; ``X-Scheduler-Timestamp`` repeats ``t``. The body's
``delivery`` names the delivery, under the signature (receivers drop an id seen before);
``X-Scheduler-Delivery`` repeats it for logs, unsigned, so it is no ground for
de-duplication. A receiver refuses a ``t`` older than its tolerance (``TOLERANCE_S``): a
copied request cannot be replayed later, nor within it under a new delivery id.
"""

import hashlib
import hmac
import json
import time

from jobs.models import Job
from runs.alerts.policy import WEBHOOK_HANDLER, WEBHOOK_JOB_PREFIX
from runs.brokers import get_broker
from runs.brokers.shards import shard_of
from runs.models import Run
from runs.outbound.payload import http_payload
from runs.types import RunRef
from scheduler_core import conf

SIGNATURE_HEADER = "X-Scheduler-Signature"
TIMESTAMP_HEADER = "X-Scheduler-Timestamp"
DELIVERY_HEADER = "X-Scheduler-Delivery"
TOLERANCE_S = 600  # the age of ``t`` receivers accept: well over a delivery's retries
TIMEOUT_S = 10.0  # seconds a receiver has to answer one attempt


def sign(secret: str, body: bytes, timestamp: int) -> str:
    """The ``X-Scheduler-Signature`` value of ``body`` signed at ``timestamp`` (Unix
    seconds) with ``secret``: ``t=<timestamp>,v1=<hex HMAC-SHA256 of "<t>." + body>``."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def verify(secret: str, body: bytes, header: str, now: float | None = None,
           tolerance_s: float = TOLERANCE_S) -> bool:
    """What a receiver does (docs/alerts.md has it as a snippet without this project):
    True when ``header`` (the X-Scheduler-Signature value) signs ``body`` with
    ``secret`` and its timestamp is within ``tolerance_s`` seconds of ``now``."""
    parts = dict(item.split("=", 1) for item in header.split(",") if "=" in item)
    try:
        timestamp = int(parts["t"])
    except (KeyError, ValueError):
        return False
    if abs((time.time() if now is None else now) - timestamp) > tolerance_s:
        return False
    expected = sign(secret, body, timestamp).split("v1=", 1)[1]
    return hmac.compare_digest(expected, parts.get("v1", ""))


def delivery_payload(url: str, secret: str, message: dict, delivery: str) -> dict:
    """The ``http`` handler's payload that POSTs ``message`` (a JSON-able dict) to
    ``url``, signed now with ``secret``; ``delivery`` names it: the body's ``delivery``
    key, signed, and the X-Scheduler-Delivery header. The body is sent as the raw text
    signed (``body``, not ``json``: a re-serialisation could change the bytes). Raises
    InvalidJob when ``url`` breaks the handler's URL rule."""
    body = json.dumps({**message, "delivery": delivery}, sort_keys=True, separators=(",", ":"))
    timestamp = int(time.time())
    return http_payload(url, method="POST", body=body, timeout_s=TIMEOUT_S, headers={
        "Content-Type": "application/json", "User-Agent": "job-scheduler-webhook",
        SIGNATURE_HEADER: sign(secret, body.encode(), timestamp),
        TIMESTAMP_HEADER: str(timestamp), DELIVERY_HEADER: delivery})


def enqueue(owner_id: int, url: str, secret: str, message: dict, delivery: str,
            now, using: str) -> Run:
    """Create the one-off job and run of the ``http`` handler that delivers ``message``,
    owned by ``owner_id`` (so the owner sees it with their runs), pushed to the broker
    after the caller's transaction commits. Returns the run."""
    queue = conf.get("ALERT_WEBHOOK_QUEUE")
    job = Job.objects.using(using).create(
        name=f"{WEBHOOK_JOB_PREFIX}{delivery}", owner_id=owner_id, handler=WEBHOOK_HANDLER,
        payload=delivery_payload(url, secret, message, delivery), queue=queue,
        run_at=now, max_attempts=conf.get("ALERT_WEBHOOK_ATTEMPTS"),
        timeout_s=int(TIMEOUT_S) * 3)
    run = Run.objects.using(using).create(
        job=job, scheduled_at=now, run_at=now, queue=queue,
        shard=shard_of(job.shard_source, conf.get("SHARDS")), priority=job.priority,
        max_attempts=job.max_attempts)
    get_broker(using).push_after_commit(
        [RunRef(run.pk, run.queue, run.shard, run.priority, now, owner_id)])
    return run
