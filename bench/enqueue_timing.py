"""How one django.tasks ``.enqueue()`` is timed, the same for ours (bench/djtasks_enqueue.py)
and for the peers' backends (bench/djtasks_peer.py, in their own virtualenvs): after
WARM calls (imports, the connection, a backend's scripts), ``n`` calls outside a
transaction, then ``n`` each in its own ``transaction.atomic()`` (its commit included),
as a Django view enqueues with and without ATOMIC_REQUESTS.

Imports only Django (every side has it) and the standard library.
"""

import time

WARM = 20


def time_enqueues(enqueue, n: int) -> dict:
    """Wall and CPU milliseconds per call (floats, two decimals) of ``enqueue(i)`` for
    ``i`` in range(n), outside and inside a transaction: keys ``outside_wall_ms``,
    ``outside_cpu_ms``, ``inside_wall_ms``, ``inside_cpu_ms``. CPU is this process's
    (time.process_time): the caller's side of the call, not the servers'."""
    from django.db import transaction

    for i in range(WARM):
        enqueue(i)
    out = {}
    for label, inside in (("outside", False), ("inside", True)):
        wall, cpu = time.perf_counter(), time.process_time()
        for i in range(n):
            if inside:
                with transaction.atomic():
                    enqueue(i)
            else:
                enqueue(i)
        out[f"{label}_wall_ms"] = round((time.perf_counter() - wall) / n * 1000, 3)
        out[f"{label}_cpu_ms"] = round((time.process_time() - cpu) / n * 1000, 3)
    return out


def per_call(call, n: int) -> dict:
    """Wall and CPU milliseconds per call of ``call()`` over ``n`` calls, after WARM:
    keys ``wall_ms``, ``cpu_ms``."""
    for _ in range(WARM):
        call()
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(n):
        call()
    return {"wall_ms": round((time.perf_counter() - wall) / n * 1000, 3),
            "cpu_ms": round((time.process_time() - cpu) / n * 1000, 3)}
