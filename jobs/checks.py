"""System checks of the web server's settings (docs/security.md, "System checks"): the
REST API's throttle rates and which proxies' X-Forwarded-For is read. Registered by
jobs/apps.py; tagged WEB_TAG, so only the web server refuses to start on them."""

import ipaddress

from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured

from scheduler_core import conf
from scheduler_core.rest.client_address import DEFAULT_PROXY_NETWORKS, networks
from scheduler_core.rest.throttling import parse_rate
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


# The broadest network a trusted proxy's may be without a warning, per IP version: the
# broadest of the defaults (10.0.0.0/8, fc00::/7). A broader one holds public addresses,
# and a client connecting from any of them names its own address.
BROADEST_PREFIX = {4: 8, 6: 7}


def too_broad(trusted) -> list:
    """The networks of the union of ``trusted`` (ip_network objects) broader than
    BROADEST_PREFIX, after merging adjacent ones (0.0.0.0/1 and 128.0.0.0/1 are
    0.0.0.0/0)."""
    found = []
    for version in (4, 6):
        same = [network for network in trusted if network.version == version]
        found += [network for network in ipaddress.collapse_addresses(same)
                  if network.prefixlen < BROADEST_PREFIX[version]]
    return found


@checks.register(WEB_TAG)
def check_proxy_networks(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """scheduler.E008: TRUSTED_PROXY_NETWORKS holds something that is not a network;
    scheduler.W009: with TRUSTED_PROXY_COUNT set, their union holds a network broader
    than /8 (IPv4) or /7 (IPv6), public addresses among it (any client there could name
    its own address to the lockout and the throttle); scheduler.E010:
    TRUSTED_PROXY_COUNT below 0 (it picked an X-Forwarded-For entry a client wrote)."""
    count = getattr(settings, "TRUSTED_PROXY_COUNT", 0)
    if not isinstance(count, int) or count < 0:
        return [checks.Error(
            f"TRUSTED_PROXY_COUNT is {count!r}: it must be the number of proxies in front "
            "of the web server, 0 or more", hint="0 without a proxy, 1 on Heroku-style "
            "hosts", id="scheduler.E010")]
    given = tuple(getattr(settings, "TRUSTED_PROXY_NETWORKS", DEFAULT_PROXY_NETWORKS))
    try:
        trusted = networks(given)
    except ValueError as exc:
        return [checks.Error(str(exc), hint="comma-separated networks, e.g. "
                             "10.0.0.0/8,fc00::/7", id="scheduler.E008")]
    if count and (broad := too_broad(trusted)):
        return [checks.Warning(
            f"TRUSTED_PROXY_NETWORKS trusts {', '.join(map(str, broad))}, public addresses "
            "among them: X-Forwarded-For is read from clients there, which may then pick "
            "the address the login lockout and the anonymous throttle count them by.",
            hint="name the networks your proxies connect from (at most /8 for IPv4, /7 "
                 "for IPv6)", id="scheduler.W009")]
    return []
