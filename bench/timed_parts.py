"""Functions of the code under test wrapped to add up the time spent inside them, by
label: bench/djtasks_enqueue.py's ``--profile`` (CPU) and bench/ingest_phases.py's phases
(CPU and wall). A part includes the parts called inside it."""

import collections
import functools
import importlib
import time


def wrap(parts: list[tuple[str, str, str]], cpu: collections.Counter,
         wall: collections.Counter | None = None) -> None:
    """Wrap each of ``parts``, (label, module, attribute path such as "Class.method"), so
    that every call adds its process CPU seconds to ``cpu[label]`` and, given ``wall``,
    its wall seconds to ``wall[label]``. A part the code lacks (an older commit's) is
    left out."""
    for label, module, path in parts:
        owner = importlib.import_module(module)
        *outer, name = path.split(".")
        for part in outer:
            owner = getattr(owner, part)
        if hasattr(owner, name):
            setattr(owner, name, _timed(getattr(owner, name), label, cpu, wall))


def _timed(function, label: str, cpu: collections.Counter, wall: collections.Counter | None):
    @functools.wraps(function)
    def timed(*args, **kwargs):
        began, began_cpu = time.perf_counter(), time.process_time()
        try:
            return function(*args, **kwargs)
        finally:
            cpu[label] += time.process_time() - began_cpu
            if wall is not None:
                wall[label] += time.perf_counter() - began

    return timed
