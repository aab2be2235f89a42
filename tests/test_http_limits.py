"""The http handler's bounds against hostile servers (docs/http-handler.md, "Result" and
"Payload"): a decompression bomb is not inflated, and headers sent one line at a time
cannot stretch an attempt past the payload's timeout_s. Real servers on 127.0.0.1:
tests/http_server.py, and a raw socket server here for the trickle."""

import logging
import select
import socket
import threading
from datetime import UTC, datetime

import pytest
from asgiref.sync import async_to_sync

from runs.context import RunContext
from runs.outbound import client
from runs.outbound.handler import HttpError
from runs.outbound.handler import http as http_coroutine
from runs.outbound.payload import http_payload
from tests import http_server

# The handler is a coroutine (docs/async-handlers.md); its ORM reads run on this thread.
http = async_to_sync(http_coroutine)

LOOPBACK = http_server.LOOPBACK
server = pytest.fixture(http_server.serving)
HEADER_LINES = 12


def ctx() -> RunContext:
    now = datetime.now(UTC)
    return RunContext(run_id=1, job_id=1, attempt=1, scheduled_at=now, deadline=now,
                      handler="http", logger=logging.getLogger("tests.http"))


@LOOPBACK
def test_a_gzip_bomb_is_read_as_sent_not_inflated(server):
    answer = async_to_sync(client.send)("GET", f"{server.url}/bomb/64", headers={}, content=None,
                                        timeout_s=10, max_redirects=0, max_bytes=4096)

    assert len(server.bomb) < 4096  # 64 MiB of zeros, twice gzipped
    assert answer.body == server.bomb  # every byte pulled is a byte sent: none inflated
    assert answer.truncated is False and answer.encoding == "gzip, gzip"


@LOOPBACK
def test_the_result_of_a_compressed_answer_names_its_encoding(server):
    result = http(ctx(), http_payload(f"{server.url}/bomb/64"))

    assert result["body_encoding"] == "gzip, gzip"
    assert len(result["body"]) <= len(server.bomb)
    assert http(ctx(), http_payload(f"{server.url}/status/200"))["body_encoding"] == "identity"


class Trickle:
    """A raw HTTP server answering a status line, then one header line every
    ``interval_s`` (HEADER_LINES of them) before the end of the headers; ``sent`` counts
    the header lines sent and ``closed`` says the client hung up before the last."""

    def __init__(self, interval_s: float):
        self.interval_s, self.sent, self.closed = interval_s, 0, False
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/"
        self.done = threading.Event()
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        conn, _ = self.listener.accept()
        with conn:
            request = b""
            while b"\r\n\r\n" not in request:
                request += conn.recv(4096)
            conn.sendall(b"HTTP/1.1 200 OK\r\n")
            for line in range(HEADER_LINES):
                readable, _, _ = select.select([conn], [], [], self.interval_s)
                if readable and conn.recv(1) == b"":
                    self.closed = True
                    break
                conn.sendall(f"X-Line-{line}: {line}\r\n".encode())
                self.sent += 1
            else:
                conn.sendall(b"Content-Length: 2\r\n\r\nok")
        self.listener.close()
        self.done.set()


@pytest.mark.slow
@LOOPBACK
def test_headers_sent_one_line_at_a_time_end_at_the_payloads_timeout():
    trickle = Trickle(interval_s=0.5)  # each read well within the timeout: httpcore's own
    # timeout, which restarts on every read, never fires

    with pytest.raises(HttpError, match=r"TimedOut: .*within 2 s \(the payload's timeout_s\)"):
        http(ctx(), http_payload(trickle.url, timeout_s=2))

    assert trickle.done.wait(30)
    assert trickle.closed and trickle.sent < HEADER_LINES
