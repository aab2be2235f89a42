"""System checks of the web server's settings (docs/security.md, "System checks"): the
REST API's throttle rates and which proxies' X-Forwarded-For is read. Registered by
jobs/apps.py; tagged WEB_TAG, so only the web server refuses to start on them."""

from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured

from jobs.client_address import DEFAULT_PROXY_NETWORKS, networks
from jobs.throttling import parse_rate
from scheduler_core import conf
from scheduler_core.startup import WEB_TAG


@checks.register(WEB_TAG)
def check_rates(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """scheduler.E007: an API throttle rate that is not ``<count>/<period>``."""
    found = []
    for name in ("API_THROTTLE_RATE", "API_ANON_THROTTLE_RATE"):
        try:
            rate = conf.get(name)
        except ImproperlyConfigured:
            return []  # an unknown SCHEDULER setting: scheduler.E004 names it
        try:
            parse_rate(rate)
        except ImproperlyConfigured as exc:
            found.append(checks.Error(f"{name}: {exc}", id="scheduler.E007"))
    return found


@checks.register(WEB_TAG)
def check_proxy_networks(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """scheduler.E008: TRUSTED_PROXY_NETWORKS holds something that is not a network;
    scheduler.W009: with TRUSTED_PROXY_COUNT set, it trusts every address (any client
    could then name its own address to the lockout and the throttle)."""
    given = tuple(getattr(settings, "TRUSTED_PROXY_NETWORKS", DEFAULT_PROXY_NETWORKS))
    try:
        trusted = networks(given)
    except ValueError as exc:
        return [checks.Error(str(exc), hint="comma-separated networks, e.g. "
                             "10.0.0.0/8,fc00::/7", id="scheduler.E008")]
    if getattr(settings, "TRUSTED_PROXY_COUNT", 0) and any(
            network.prefixlen == 0 for network in trusted):
        return [checks.Warning(
            "TRUSTED_PROXY_NETWORKS holds every address: X-Forwarded-For is read from any "
            "client, which may then pick the address the login lockout and the anonymous "
            "throttle count it by.",
            hint="name the networks your proxies connect from", id="scheduler.W009")]
    return []
