"""Request throttling for the REST API: 429 with ``Retry-After``, per owner and, for
requests without a valid login, per client address (docs/api.md, "Throttling").

DRF's ``UserRateThrottle`` keeps a list of every request's timestamp in the cache and
rewrites it on each request, which grows with the rate; at the high default rate we want
(so ingest and normal use are never throttled) that list would hold 100,000 floats. This
throttle counts requests in fixed windows instead: one atomic ``incr`` per request on a
key per (owner, window), shared by every process through the Django cache (Redis when
``REDIS_URL`` is set; a per-process memory cache otherwise). If the cache cannot be
reached the throttle lets requests through and logs a warning.
"""

import logging
import math
import time

from django.core.cache import cache
from django.core.exceptions import ImproperlyConfigured
from rest_framework.exceptions import Throttled
from rest_framework.permissions import IsAuthenticated
from rest_framework.throttling import AnonRateThrottle, BaseThrottle

from scheduler_core import conf
from scheduler_core.rest.client_address import client_ip

log = logging.getLogger("scheduler.api")
PERIODS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_rate(rate: str) -> tuple[int, int]:
    """``"<count>/<period>"`` -> (count, period in seconds); the period is ``second``,
    ``minute``, ``hour`` or ``day`` (only the first letter counts, as in DRF).
    Raises ImproperlyConfigured for anything else."""
    count, _, period = rate.partition("/")
    try:
        return int(count), PERIODS[period.strip()[:1].lower()]
    except (ValueError, KeyError):
        raise ImproperlyConfigured(
            f"SCHEDULER API_THROTTLE_RATE {rate!r}: expected '<count>/<second|minute|hour|day>'"
        ) from None


class OwnerRateThrottle(BaseThrottle):
    """At most API_THROTTLE_RATE requests per authenticated owner (user id) per window;
    anonymous requests are not counted here (every throttled endpoint needs a login, and
    authentication runs first). The rate is read on every request, so
    ``override_settings(SCHEDULER={"API_THROTTLE_RATE": ...})`` takes effect at once."""

    scope = "owner"

    def allow_request(self, request, view) -> bool:
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated:
            return True
        count, period = parse_rate(conf.get("API_THROTTLE_RATE"))
        now = time.time()
        window = int(now // period)
        key = f"throttle:{self.scope}:{user.pk}:{period}:{window}"
        try:
            used = _count(key, period)
        except Exception as exc:  # noqa: BLE001 - any cache backend's connection error
            # Fail open: a cache (Redis) outage must not take the whole API down with it.
            log.warning("throttle: cache unavailable, request let through: %s", exc)
            return True
        self._wait = (window + 1) * period - now
        return used <= count

    def wait(self) -> float:
        """Whole seconds until the current window ends (at least 1): the Retry-After."""
        return max(1, math.ceil(getattr(self, "_wait", 1)))


def _count(key: str, period: int) -> int:
    """Count one request in the window ``key``; returns the window's count so far."""
    # add() is a no-op when the key exists, so the window's counter starts once.
    cache.add(key, 0, timeout=period + 1)
    try:
        return cache.incr(key)
    except ValueError:  # the key expired between add() and incr()
        cache.add(key, 1, timeout=period + 1)
        return 1


class AnonymousRateThrottle(AnonRateThrottle):
    """DRF's AnonRateThrottle at API_ANON_THROTTLE_RATE per client address (REMOTE_ADDR,
    or X-Forwarded-For behind TRUSTED_PROXY_COUNT proxies, read only from a peer in
    TRUSTED_PROXY_NETWORKS: scheduler_core/rest/client_address.py); authenticated requests pass. The
    rate is read per request, like the owner throttle's, and a cache outage lets requests
    through (logged)."""

    def get_rate(self) -> str:
        return conf.get("API_ANON_THROTTLE_RATE")

    def get_ident(self, request) -> str | None:
        return client_ip(request)

    def allow_request(self, request, view) -> bool:
        try:
            return super().allow_request(request, view)
        except Exception as exc:  # noqa: BLE001 - any cache backend's connection error
            log.warning("throttle: cache unavailable, request let through: %s", exc)
            return True


class IsAuthenticatedOrThrottled(IsAuthenticated):
    """DRF's IsAuthenticated, except that a request without a login over
    API_ANON_THROTTLE_RATE is answered 429 (Throttled, with Retry-After) instead of 401.
    DRF checks permissions before throttles, so on an API where every endpoint needs a
    login no throttle would ever see an anonymous request otherwise."""

    def has_permission(self, request, view) -> bool:
        if super().has_permission(request, view):
            return True
        throttle_anonymous(request, view)
        return False


def throttle_anonymous(request, view) -> None:
    """Count one request without a (valid) login against its client address; raises
    rest_framework.exceptions.Throttled when the address is over API_ANON_THROTTLE_RATE."""
    throttle = AnonymousRateThrottle()
    if not throttle.allow_request(request, view):
        raise Throttled(throttle.wait())
