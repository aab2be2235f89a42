"""A transport that connects to the address the SSRF guard checked, and to nothing else
(docs/http-handler.md, "SSRF guard").

The URL keeps its host name, so the Host header, TLS's SNI and the certificate check are
all made against the name; only the TCP connection goes to the pinned address. Connecting
this way instead of rewriting the URL to the IP keeps certificate verification on the
name without turning it off or faking it.
"""

import functools
import socket
import ssl
import threading

import certifi
import httpcore
import httpx


class PinnedBackend(httpcore.NetworkBackend):
    """httpcore's network backend for one (host, port): ``connect_tcp`` to that host
    connects to the checked ``addresses`` instead of resolving the name again, trying
    each in turn as socket.create_connection tries a name's addresses (an IPv6 answer
    first on a host without IPv6 must not fail the request); any other host or port
    raises httpcore.ConnectError (nothing the guard did not check is reached).

    ``cut()`` (from another thread) shuts down every connection made, and any made
    after: a blocked read then ends at once (the client's deadline watchdog)."""

    def __init__(self, host: str, port: int, addresses: list[str]):
        self.host, self.port, self.addresses = host.lower(), port, addresses
        self.backend = httpcore.SyncBackend()
        self.streams, self.lock, self.is_cut = [], threading.Lock(), False

    def cut(self) -> None:
        """Shut down every connection of this backend (read and write)."""
        with self.lock:
            self.is_cut = True
            streams = list(self.streams)
        for stream in streams:
            _shut(stream)

    def _kept(self, stream):
        with self.lock:
            self.streams.append(stream)
            cut = self.is_cut
        if cut:
            _shut(stream)
        return stream

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        if (host.lower(), port) != (self.host, self.port):
            raise httpcore.ConnectError(
                f"{host}:{port} was not checked by the SSRF guard (pinned: {self.host})")
        failure = httpcore.ConnectError(f"{host} has no address to connect to")
        for address in self.addresses:
            try:
                return self._kept(self.backend.connect_tcp(
                    address, port, timeout=timeout, local_address=local_address,
                    socket_options=socket_options))
            except httpcore.ConnectError as exc:  # a timeout is not retried elsewhere
                failure = exc
        raise failure

    def connect_unix_socket(self, path, timeout=None, socket_options=None):
        raise httpcore.ConnectError("unix sockets are not reachable through the http handler")

    def sleep(self, seconds: float) -> None:
        self.backend.sleep(seconds)


def _shut(stream) -> None:
    sock = stream.get_extra_info("socket")
    try:
        # socket.socket's shutdown, not SSLSocket's: that one drops the TLS state under a
        # read another thread may be blocked in; this only ends the TCP stream beneath.
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:  # already closed
        pass


@functools.cache
def ssl_context() -> ssl.SSLContext:
    """The TLS context of every outbound request: certifi's CA bundle (httpx's default),
    hostname checking on. Built once per process (loading the bundle costs ~20 ms)."""
    return ssl.create_default_context(cafile=certifi.where())


class PinnedTransport(httpx.HTTPTransport):
    """httpx's transport with its connection pool on a PinnedBackend: every connection
    goes to one of ``addresses`` for ``host``:``port``. No proxy from the environment (a
    proxy would do its own resolution) and no retries of its own."""

    def __init__(self, host: str, port: int, addresses: list[str]):
        super().__init__(verify=ssl_context(), trust_env=False)
        # HTTPTransport cannot be given a network backend; the httpcore pool it wraps can.
        self.backend = PinnedBackend(host, port, addresses)
        self._pool = httpcore.ConnectionPool(
            ssl_context=ssl_context(), max_connections=1, retries=0,
            network_backend=self.backend)

    def cut(self) -> None:
        """Shut down this transport's connections (PinnedBackend.cut)."""
        self.backend.cut()
