"""Books owed while an earlier books call is in flight (runs/worker/child_acks.py,
BookKeeper) wake the worker when that call ends, so they reach the broker then rather
than at the loop's next wake-up for something else (up to WORKER_POLL_S): until they do,
the runs the children acked still count against their concurrency limits."""

import time
from multiprocessing.connection import wait

import pytest
import redis

from runs.brokers import get_broker
from runs.types import Books
from runs.worker.child_acks import BookKeeper
from runs.worker.lanes import Lanes
from tests.conftest import redis_at
from tests.test_worker_lease_pause import own_redis  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db(transaction=True)

PAUSE_MS = 800  # how long the server holds the first books call's writes


def test_books_owed_behind_a_call_in_flight_wake_the_worker_when_it_ends(settings,
                                                                         own_redis):  # noqa: F811
    _, url = own_redis
    settings.SCHEDULER = {**settings.SCHEDULER, "BROKER": "redis"}
    with redis_at(settings, url):
        broker = get_broker()
        lanes = Lanes()
        try:
            books = BookKeeper(broker, lanes)
            # Load the broker's scripts before the pause: only the books call is held.
            books.owe(Books([(1, "default", 0)], [], 0.0, []))
            books.settle()
            redis.Redis.from_url(url).execute_command("CLIENT", "PAUSE", PAUSE_MS, "WRITE")
            books.owe(Books([(2, "default", 0)], [], 0.0, []))
            books.keep()  # in flight, held by the pause
            books.owe(Books([(3, "default", 0)], [], 0.0, []))
            books.keep()  # owed: the call in flight has not ended
            assert books.owed and not books.call.done()

            began = time.monotonic()
            woken = wait([lanes.wake_fd], 10)
            waited = time.monotonic() - began
            assert woken, "nothing woke the worker when the books call ended"
            assert books.call.done()
            assert waited < 5, waited
            books.keep()
            assert not books.owed
            books.settle()
        finally:
            lanes.close()
