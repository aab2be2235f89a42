"""Handlers of the django-q2 benchmark. W3/W4 handlers append "key start_time" lines to the
file named by BENCH_STARTS_FILE (one short O_APPEND write: atomic between the workers)."""

import os
import time


def _record(key, started):
    with open(os.environ["BENCH_STARTS_FILE"], "a") as f:
        f.write(f"{key} {started!r}\n")


def noop():
    """The no-op job of W1, W2 and W6."""
    return None


def stamp(key):
    """W3: record time.time() (seconds) at start under key."""
    _record(key, time.time())


def tick(i, intended=None):
    """W4: record the start time (seconds) under the schedule's intended instant and i."""
    _record(f"{intended}|{i}", time.time())
