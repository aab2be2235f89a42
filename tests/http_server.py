"""A real HTTP server on 127.0.0.1 for the http handler's tests (http.server in a thread).

Routes: /status/<code> answers that status (body "status <code>"); /flaky/<n> answers 503
to its first n requests, then 200; /retry-after/<value> answers 503 with that
Retry-After; /big/<bytes> answers that many bytes of "x"; /redirect?to=<url> answers 302
to it (/redirect303: 303); /echo answers 200 with the request's method, headers and body
as JSON; /slow/<seconds> answers 200 after that long; /bomb/<MiB> answers that many MiB
of zeros as gzip(gzip(...)) with ``Content-Encoding: gzip, gzip`` (a decompression bomb:
``server.bomb`` holds the bytes sent). Every request is recorded in
``server.requests`` as (method, path, headers dict, body bytes).
"""

import gzip
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from django.test import override_settings


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # quiet: pytest would show it as stderr noise
        pass

    def answer(self, status: int, body: bytes = b"", headers: dict | None = None):
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def handle_any(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        server = self.server
        with server.lock:
            server.requests.append((self.command, self.path, dict(self.headers), body))
            count = sum(1 for r in server.requests if r[1] == self.path)
        parts = urlsplit(self.path)
        route = parts.path.strip("/").split("/")
        if route[0] == "status":
            code = int(route[1])
            self.answer(code, f"status {code}".encode(), {"Content-Type": "text/plain",
                                                           "X-Trace": "t-1",
                                                           "Set-Cookie": "session=s3cret"})
        elif route[0] == "flaky":
            if count <= int(route[1]):
                self.answer(503, b"busy")
            else:
                self.answer(200, b"done", {"Content-Type": "text/plain"})
        elif route[0] == "retry-after":
            self.answer(503, b"later", {"Retry-After": route[1].replace("%20", " ")})
        elif route[0] == "slow":  # headers only after that many seconds
            with server.lock:  # how many wait at once (server.peak)
                server.live += 1
                server.peak = max(server.peak, server.live)
            time.sleep(float(route[1]))
            with server.lock:
                server.live -= 1
            self.answer(200, b"late")
        elif route[0] == "bomb":
            with server.lock:
                if getattr(server, "bomb", None) is None:
                    server.bomb = gzip.compress(gzip.compress(bytes(int(route[1]) << 20)))
            self.answer(200, server.bomb, {"Content-Type": "text/plain",
                                           "Content-Encoding": "gzip, gzip"})
        elif route[0] == "big":
            self.answer(200, b"x" * int(route[1]), {"Content-Type": "text/plain"})
        elif route[0] in ("redirect", "redirect303"):
            status = 303 if route[0] == "redirect303" else 302
            self.answer(status, b"", {"Location": parse_qs(parts.query)["to"][0]})
        elif route[0] == "echo":
            self.answer(200, json.dumps({"method": self.command, "headers": dict(self.headers),
                                         "body": body.decode()}).encode(),
                        {"Content-Type": "application/json"})
        else:
            self.answer(404, b"no such route")

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = handle_any


class Server(ThreadingHTTPServer):
    """socketserver's listen backlog is 5: more clients at once waited for a SYN retry."""

    request_queue_size = 64


def start() -> ThreadingHTTPServer:
    """A server on 127.0.0.1 and a free port, serving in a daemon thread; ``server.url``
    is its base URL. Call ``stop(server)`` at the end."""
    server = Server(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.requests, server.lock, server.bomb = [], threading.Lock(), None
    server.live = server.peak = 0  # /slow requests waiting now, and at most
    server.url = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    return server


def stop(server: ThreadingHTTPServer) -> None:
    """Stop serving and close the listening socket."""
    server.shutdown()
    server.server_close()


def serving():
    """A started server for one test, stopped after it: ``server =
    pytest.fixture(http_server.serving)`` in a test module makes it the ``server``
    fixture."""
    server = start()
    yield server
    stop(server)


# The tests' server listens on loopback, which the SSRF guard refuses unless allowlisted.
LOOPBACK = override_settings(SCHEDULER={"HTTP_ALLOWLIST": "127.0.0.1"})
