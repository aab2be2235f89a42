"""The SSRF guard (docs/http-handler.md, "SSRF guard"): a host is resolved once, and
refused when any of its addresses is not public, unless the operator's allowlist
(HTTP_ALLOWLIST) names the host or the address.

``check(host, port)`` returns the addresses to connect to; transport.py then connects to
those addresses and no other, so the DNS answer that was checked is the one used (no
rebinding window between the check and the connection).
"""

import ipaddress
import socket
from collections.abc import Callable

from scheduler_core import conf
from scheduler_core.exceptions import PermanentFailure

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class Refused(PermanentFailure):
    """The SSRF guard refused an outbound request's address."""


class Unresolvable(Exception):
    """A host name did not resolve (retried like a connection error)."""


def system_resolver(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to for a TCP connection on ``port``, in the order
    getaddrinfo gives them (strings). Raises Unresolvable."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise Unresolvable(f"{host} does not resolve: {exc}") from exc
    return list(dict.fromkeys(info[4][0] for info in infos))


# The resolver check() uses: the tests replace it to count resolutions or to answer
# differently on a second call.
resolver: Callable[[str, int], list[str]] = system_resolver


def why_not_public(address: Address) -> str | None:
    """Why ``address`` is not a public unicast address, or None. IPv4-mapped, 6to4 and
    Teredo IPv6 addresses are judged by the IPv4 address they carry, since that is where
    a packet to them ends up."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is None and address.teredo:
            embedded = address.teredo[1]
        if embedded is not None:
            return why_not_public(embedded)
    # The specific reasons first: is_private covers most of the others too.
    for reason in ("loopback", "link_local", "multicast", "unspecified", "reserved",
                   "site_local", "private"):
        if getattr(address, f"is_{reason}", False):
            return reason.replace("_", "-")
    if not address.is_global:
        return "not global"
    return None


def allowlist(raw: str | None = None) -> tuple[set[str], set[str], list[Network]]:
    """The operator's allowlist (HTTP_ALLOWLIST unless ``raw`` is given), parsed:
    (exact host names, domain suffixes starting with a dot, networks). Host names are
    lowercased; an address is a /32 or /128 network. Raises ValueError naming a bad
    entry."""
    raw = conf.get("HTTP_ALLOWLIST") if raw is None else raw
    names, suffixes, networks = set(), set(), []
    for entry in (e.strip() for e in raw.split(",")):
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
            continue
        except ValueError:
            pass
        if "/" in entry or " " in entry:
            raise ValueError(f"HTTP_ALLOWLIST entry {entry!r} is neither a host nor a network")
        (suffixes if entry.startswith(".") else names).add(entry.lower().rstrip("."))
    return names, suffixes, networks


def host_allowed(host: str, names: set[str], suffixes: set[str]) -> bool:
    """Whether the allowlist names ``host`` (exactly, or by a ``.suffix`` entry, which
    covers the domain and its subdomains)."""
    host = host.lower().rstrip(".")
    return host in names or any(host == s[1:] or host.endswith(s) for s in suffixes)


def literal(host: str) -> Address | None:
    """``host`` as an IP address when it is one (brackets of an IPv6 URL host allowed)."""
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def check(host: str, port: int) -> list[str]:
    """Resolve ``host`` (once, through ``resolver``; an IP literal is not resolved) and
    return its addresses, to be tried in that order. Raises Refused when any address is
    not public and neither the host nor that address is on the allowlist (a name that
    resolves to one public and one private address is refused: the next lookup could
    pick either), Unresolvable when the name does not resolve."""
    names, suffixes, networks = allowlist()
    found = literal(host)
    addresses = [found] if found else [ipaddress.ip_address(a.split("%")[0])
                                       for a in resolver(host, port)]
    if not addresses:
        raise Unresolvable(f"{host} resolves to no address")
    if host_allowed(host, names, suffixes):
        return [str(a) for a in addresses]
    for address in addresses:
        reason = why_not_public(address)
        if reason and not any(address in network for network in networks
                              if network.version == address.version):
            raise Refused(f"refused: {host} resolves to {address}, which is {reason} "
                          "(not on SCHEDULER_HTTP_ALLOWLIST; docs/http-handler.md)")
    return [str(a) for a in addresses]
