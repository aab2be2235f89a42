"""A failed lease pauses leasing for a second (runs/worker/lease_ahead.py, harvest): the
worker's loop waits out the pause instead of spinning through it."""

import socket
import subprocess
import threading
import time

import pytest

from runs.worker import Worker
from tests.conftest import redis_at

pytestmark = pytest.mark.django_db(transaction=True)

OUTAGE_S = 3.0
POLL_S = 0.05  # the default: an idle worker with a free child polls this often


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def own_redis(tmp_path):
    """A redis-server of this test's own (it is killed mid-test), on a free port."""
    port = free_port()
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert time.monotonic() < deadline, "the test's redis-server did not start"
            time.sleep(0.05)
    yield server, f"redis://127.0.0.1:{port}/0"
    server.kill()
    server.wait()


def test_an_idle_worker_waits_out_each_lease_pause_of_a_redis_outage(settings, own_redis):
    """An idle worker's next lease was due at once (its wait in the broker had just
    ended), so after a failed lease the loop's wait was 0 until the pause ended: it spun,
    at a core's full use, for every second of an outage. Counted in rounds of the loop,
    not time: one per poll now (about 60 in the outage), over 150,000 before."""
    server, url = own_redis
    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": "redis", "WORKER_POLL_S": POLL_S}
    counted = {}
    with redis_at(settings, url):
        worker = Worker(["default"], concurrency=1)

        def outage():
            time.sleep(1.5)  # idle by then: its lease waits in the broker
            server.kill()
            server.wait()
            counted["before"] = worker.rounds
            time.sleep(OUTAGE_S)
            counted["after"] = worker.rounds
            worker.request_stop()

        thread = threading.Thread(target=outage)
        thread.start()
        worker.serve()
        thread.join()

    rounds = counted["after"] - counted["before"]
    assert 0 < rounds <= 2 * OUTAGE_S / POLL_S, f"{rounds} rounds in a {OUTAGE_S} s outage"
