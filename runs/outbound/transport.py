"""A transport that connects to the address the SSRF guard checked, and to nothing else
(docs/http-handler.md, "SSRF guard").

The URL keeps its host name, so the Host header, TLS's SNI and the certificate check are
all made against the name; only the TCP connection goes to the pinned address. Connecting
this way instead of rewriting the URL to the IP keeps certificate verification on the
name without turning it off or faking it.
"""

import functools
import ssl

import certifi
import httpcore
import httpx


class PinnedBackend(httpcore.AsyncNetworkBackend):
    """httpcore's async network backend for one (host, port): ``connect_tcp`` to that host
    connects to the checked ``addresses`` instead of resolving the name again, trying
    each in turn as socket.create_connection tries a name's addresses (an IPv6 answer
    first on a host without IPv6 must not fail the request); any other host or port
    raises httpcore.ConnectError (nothing the guard did not check is reached). The
    request's deadline is the caller's (asyncio.timeout, client.send), which cancels a
    blocked read at once."""

    def __init__(self, host: str, port: int, addresses: list[str]):
        self.host, self.port, self.addresses = host.lower(), port, addresses
        self.backend = httpcore.AnyIOBackend()

    async def connect_tcp(self, host, port, timeout=None, local_address=None,
                          socket_options=None):
        if (host.lower(), port) != (self.host, self.port):
            raise httpcore.ConnectError(
                f"{host}:{port} was not checked by the SSRF guard (pinned: {self.host})")
        failure = httpcore.ConnectError(f"{host} has no address to connect to")
        for address in self.addresses:
            try:
                return await self.backend.connect_tcp(
                    address, port, timeout=timeout, local_address=local_address,
                    socket_options=socket_options)
            except httpcore.ConnectError as exc:  # a timeout is not retried elsewhere
                failure = exc
        raise failure

    async def connect_unix_socket(self, path, timeout=None, socket_options=None):
        raise httpcore.ConnectError("unix sockets are not reachable through the http handler")

    async def sleep(self, seconds: float) -> None:
        await self.backend.sleep(seconds)


@functools.cache
def ssl_context() -> ssl.SSLContext:
    """The TLS context of every outbound request: certifi's CA bundle (httpx's default),
    hostname checking on. Built once per process (loading the bundle costs ~20 ms)."""
    return ssl.create_default_context(cafile=certifi.where())


class PinnedTransport(httpx.AsyncHTTPTransport):
    """httpx's async transport with its connection pool on a PinnedBackend: every
    connection goes to one of ``addresses`` for ``host``:``port``. No proxy from the
    environment (a proxy would do its own resolution) and no retries of its own."""

    def __init__(self, host: str, port: int, addresses: list[str]):
        super().__init__(verify=ssl_context(), trust_env=False)
        # HTTPTransport cannot be given a network backend; the httpcore pool it wraps can.
        self.backend = PinnedBackend(host, port, addresses)
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context(), max_connections=1, retries=0,
            network_backend=self.backend)
