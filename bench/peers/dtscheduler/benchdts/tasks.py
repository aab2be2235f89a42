"""The job of the django-tasks-scheduler benchmark (W4): appends its start (time.time(),
seconds) to the file BENCH_STARTS_FILE names, one O_APPEND write, atomic between the two
workers."""

import os
import time


def tick():
    """Record this execution's start."""
    with open(os.environ["BENCH_STARTS_FILE"], "a") as f:
        f.write(f"{time.time()!r}\n")
