"""The client address the login lockout and the anonymous throttle count by
(docs/security.md, "Client address behind a proxy").

Behind ``TRUSTED_PROXY_COUNT`` proxies the address is the entry that many places from the
right end of X-Forwarded-For (DRF's NUM_PROXIES rule): the one the outermost trusted
proxy wrote, never one a client wrote itself. That holds only for requests that came
through the proxies, so the header is read only when the peer (REMOTE_ADDR) is in
``TRUSTED_PROXY_NETWORKS``: a client reaching the web server directly from a public
address sent a new X-Forwarded-For with each try and was a new client to the lockout and
the throttle each time.
"""

import ipaddress
from functools import lru_cache

from django.conf import settings

# Where platforms' routers and reverse proxies connect from: loopback, the private
# ranges and the carrier-grade NAT range (RFC 6598) some platforms use inside.
DEFAULT_PROXY_NETWORKS = ("127.0.0.0/8", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16",
                          "100.64.0.0/10", "::1/128", "fc00::/7")


@lru_cache(maxsize=8)
def networks(spec: tuple[str, ...]) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """``spec`` (CIDR texts) parsed. Raises ValueError naming a bad entry."""
    parsed = []
    for text in spec:
        try:
            parsed.append(ipaddress.ip_network(text.strip(), strict=False))
        except ValueError as exc:
            raise ValueError(f"TRUSTED_PROXY_NETWORKS: {text!r} is not a network: {exc}") \
                from None
    return tuple(parsed)


def _address(text: str | None):
    """``text`` as an address without an IPv6 scope id ("fe80::1%eth0": a client may write
    any text after the "%"; the address columns of the lockout hold none), or None."""
    try:
        address = ipaddress.ip_address((text or "").strip())
    except ValueError:
        return None
    if getattr(address, "scope_id", None) is not None:
        address = ipaddress.IPv6Address(address.packed)
    return address


def client_ip(request) -> str | None:
    """The client address of ``request`` (a Django or DRF request), as a valid IP address
    without an IPv6 scope id, or None when REMOTE_ADDR is none (a Unix socket): REMOTE_ADDR,
    or, when settings.TRUSTED_PROXY_COUNT > 0 and REMOTE_ADDR is in
    TRUSTED_PROXY_NETWORKS, the X-Forwarded-For entry TRUSTED_PROXY_COUNT from its right
    end (its leftmost when it has fewer). An entry that is no IP address is ignored for
    REMOTE_ADDR; a count below 1 reads no X-Forwarded-For (scheduler.E010 refuses it)."""
    peer = _address(request.META.get("REMOTE_ADDR"))
    remote = str(peer) if peer is not None else None
    count = getattr(settings, "TRUSTED_PROXY_COUNT", 0)
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR")
    if count < 1 or not forwarded or peer is None:
        return remote
    trusted = networks(tuple(getattr(settings, "TRUSTED_PROXY_NETWORKS",
                                     DEFAULT_PROXY_NETWORKS)))
    if not any(peer in network for network in trusted):
        return remote
    hops = forwarded.split(",")
    client = _address(hops[-min(count, len(hops))])
    return str(client) if client is not None else remote
