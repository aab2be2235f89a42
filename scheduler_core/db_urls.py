"""Database URLs with libpq's host lists (docs/scaling.md, "Failover"):
``postgres://user@host1:5432,host2:5432/db?target_session_attrs=read-write`` names every
server a client may reach, and libpq connects to the first one that accepts writes, so
that after a failover the daemons find the promoted primary by themselves.
dj-database-url refuses such a URL, so the host list is taken out before it parses the
rest and given back as HOST "host1,host2" and PORT "5432,5432", which Django passes to
psycopg as they are.
"""

import dj_database_url


def parse_database_url(url: str, **options) -> dict:
    """``dj_database_url.parse(url, **options)``, also for a PostgreSQL URL naming several
    ``host:port`` pairs, comma-separated (a missing port is 5432; an IPv6 address in
    brackets). Raises dj_database_url.ParseError (a ValueError) for a malformed URL."""
    scheme, sep, rest = url.partition("://")
    netloc, slash, tail = rest.partition("/")
    userinfo, at, hostlist = netloc.rpartition("@")
    if not sep or "," not in hostlist or not scheme.startswith("postgres"):
        return dj_database_url.parse(url, **options)
    hosts, ports = [], []
    for item in hostlist.split(","):
        if item.startswith("["):
            host, _, port = item[1:].partition("]")
            port = port.removeprefix(":")
        else:
            host, _, port = item.partition(":")
        if not host or (port and not port.isdigit()):
            raise dj_database_url.ParseError(f"bad host {item!r} in the database URL's host list")
        hosts.append(host)
        ports.append(port or "5432")
    config = dj_database_url.parse(f"{scheme}://{userinfo}{at}localhost{slash}{tail}", **options)
    config["HOST"] = ",".join(hosts)
    config["PORT"] = ",".join(ports)
    return config
