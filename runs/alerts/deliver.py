"""Delivering owner alerts, by email and webhook, with a bounded digest (docs/alerts.md,
"Bursts"). Called by every dispatcher each ALERT_POLL_S; several dispatchers share the
work through row locks (SKIP LOCKED on the channel state).

Per owner and channel: when the channel sent nothing in the last ALERT_DIGEST_WINDOW_S,
what is pending goes at once, as one alert (one pending) or one digest (several: counts
by kind and the first ALERT_DIGEST_RUNS runs); otherwise it waits for the window's end.
So an owner gets at most one message per channel per window, however many runs die.
Delivery is at least once: a crash after sending and before the commit sends again.
Delivered alerts are kept as long as the history (``prune_delivered``).
"""

import logging
from collections import Counter

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import send_mail
from django.db import transaction

from runs.alerts import webhook
from runs.alerts.models import AlertChannelState, AlertEvent, Channel
from runs.alerts.policy import effective
from runs.clock import db_now, seconds
from runs.daemons.isolation import Faults, count
from scheduler_core import conf
from scheduler_core.exceptions import InvalidJob
from scheduler_core.text import one_line

log = logging.getLogger("scheduler.alerts")

MAX_OWNERS = 100  # owners served per channel per call; the rest at the next call
PRUNE_BATCH = 1000  # delivered alerts deleted per call of prune_delivered
_failing: set[int] = set()  # owners whose last e-mail failed (its traceback logged)


def deliver(using: str = "default", faults: Faults | None = None) -> int:
    """Send what is due on every channel; returns the messages sent (emails, and webhook
    runs created). With ``faults`` (the dispatcher's, runs/daemons/isolation.py), an exception
    from one owner's channel is that channel's failure, backed off while the others are
    served; without, it is raised."""
    sent = 0
    for channel in Channel:
        flag = f"{channel}_pending"
        owners = AlertEvent.objects.using(using).filter(**{flag: True})
        if faults is not None and (held := faults.held_back(f"{channel}_alert")):
            owners = owners.exclude(owner_id__in=held)
        owners = owners.values_list("owner_id", flat=True).distinct()[:MAX_OWNERS]
        for owner_id in list(owners):
            if faults is None:
                sent += deliver_owner(owner_id, channel, using)
            else:
                sent += faults.run(f"{channel}_alert", lambda o=owner_id, c=channel:
                                   deliver_owner(o, c, using), key=owner_id, default=0)
    return sent


def deliver_owner(owner_id: int, channel: str, using: str) -> int:
    """Send ``owner_id``'s pending alerts of ``channel`` if its window allows; returns
    1 if a message went, else 0."""
    flag = f"{channel}_pending"
    window_s = conf.get("ALERT_DIGEST_WINDOW_S")
    with transaction.atomic(using=using):
        now = db_now(using)
        states = AlertChannelState.objects.using(using)
        state = states.select_for_update(skip_locked=True).filter(
            owner_id=owner_id, channel=channel).first()
        if state is None:
            if states.filter(owner_id=owner_id, channel=channel).exists():
                return 0  # another dispatcher holds it
            state = AlertChannelState(owner_id=owner_id, channel=channel,
                                      last_sent_at=now - seconds(window_s))
        elif now < state.last_sent_at + seconds(window_s):
            return 0
        pending = AlertEvent.objects.using(using).filter(owner_id=owner_id, **{flag: True})
        ids = list(pending.order_by("id").values_list("id", flat=True))
        if not ids:
            return 0
        first = list(AlertEvent.objects.using(using).filter(pk__in=ids[:conf.get(
            "ALERT_DIGEST_RUNS")]).order_by("id"))
        kinds = Counter(AlertEvent.objects.using(using).filter(pk__in=ids)
                        .values_list("kind", flat=True))
        message = compose(first, kinds, len(ids))
        if send(channel, owner_id, message, f"{channel}-{owner_id}-{ids[0]}", now, using):
            AlertEvent.objects.using(using).filter(pk__in=ids).update(**{flag: False})
        state.last_sent_at = now
        state.messages += 1
        state.save(using=using)
    return 1


def compose(first: list[AlertEvent], kinds: Counter, total: int) -> dict:
    """The message of ``total`` alerts (``first``: the first few, ``kinds``: how many of
    each kind): a dict with ``subject``, ``text`` and the fields the webhook sends."""
    if total == 1:
        event = first[0]
        subject = f"[scheduler] {event.kind}: run {event.run_id} of job {event.job_id}"
        if event.job_id is None and event.run_id is None:
            # Of no job (a workflow's misfire): the detail names what, before its colon.
            # It holds a tenant's name: one line, whatever the row holds (a linefeed in a
            # header raised in send_mail and stopped the dispatcher).
            subject = f"[scheduler] {event.kind}: {one_line(event.detail.split(': ', 1)[0], 120)}"
    else:
        counted = ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
        subject = f"[scheduler] digest: {total} alerts ({counted})"
    lines = [event.detail or f"{event.kind} alert of run {event.run_id}" for event in first]
    if total > len(first):
        lines.append(f"... and {total - len(first)} more")
    return {
        "type": "alert" if total == 1 else "digest", "subject": one_line(subject),
        "total": total, "counts": dict(kinds), "text": "\n".join(lines),
        "alerts": [{"kind": e.kind, "run_id": e.run_id, "job_id": e.job_id,
                    "detail": e.detail, "created_at": e.created_at.isoformat()}
                   for e in first],
    }


def send(channel: str, owner_id: int, message: dict, delivery: str, now,
         using: str) -> bool:
    """Send ``message`` to ``owner_id`` by ``channel``; True when it went (or cannot ever
    go: an owner without an email address, or no webhook URL any more)."""
    if channel == Channel.EMAIL:
        address = (get_user_model().objects.using(using).filter(pk=owner_id)
                   .values_list("email", flat=True).first())
        if not address:
            log.warning("alerts: owner %s has no email address; %d alerts dropped",
                        owner_id, message["total"])
            return True
        try:
            send_mail(one_line(message["subject"]), message["text"],
                      settings.DEFAULT_FROM_EMAIL, [address])
        except Exception as exc:  # noqa: BLE001 - one alert's failure, not the dispatcher's
            # SMTP refused or unreachable (OSError), or a message the mail library refuses
            # (a stored address holding a linefeed: ValueError): the next window tries
            # again. The traceback of an unexpected one is logged once per streak.
            told = owner_id in _failing
            _failing.add(owner_id)
            log.warning("alerts: email to owner %s failed (%s: %s); trying again in %s s",
                        owner_id, type(exc).__name__, one_line(str(exc), 200),
                        conf.get("ALERT_DIGEST_WINDOW_S"),
                        exc_info=not (told or isinstance(exc, OSError)))
            count("dispatcher", "email_alert")
            return False
        _failing.discard(owner_id)
        return True
    policy = effective({(owner_id, None)}, using)[(owner_id, None)]
    if not policy.webhook_url:
        return True
    message = {key: value for key, value in message.items() if key != "text"}
    try:
        webhook.enqueue(owner_id, policy.webhook_url, policy.webhook_secret, message,
                        delivery, now, using)
    except InvalidJob as exc:  # a URL stored before the API checked it: it never will go
        log.warning("alerts: webhook of owner %s cannot be sent (%s); %d alerts dropped",
                    owner_id, exc, message["total"])
    return True


def prune_delivered(using: str = "default") -> int:
    """Delete up to PRUNE_BATCH alerts delivered on every channel and raised more than
    HISTORY_RETENTION_S ago (kept for ever when it is 0, like the history:
    docs/retention.md); returns how many."""
    keep_s = conf.get("HISTORY_RETENTION_S")
    if not keep_s:
        return 0
    old = AlertEvent.objects.using(using).filter(
        email_pending=False, webhook_pending=False,
        created_at__lt=db_now(using) - seconds(keep_s))
    ids = list(old.order_by("id").values_list("id", flat=True)[:PRUNE_BATCH])
    return AlertEvent.objects.using(using).filter(pk__in=ids).delete()[0] if ids else 0
