"""The console handler of every daemon (scheduler_project/logging_config.py) and the way a
thread holds its lines to write them at once.

A worker logs one line per run outcome (runs/execution/outcomes.py). Written one by one,
each line was its own write() to the console and its own flush: at 10,000 runs a second
that was about a third of the worker supervisor's CPU for the line (docs/performance.md,
"The outcome line"). Inside ``held_lines()`` a thread's lines are formatted as they come
and written together when the block ends, in the same order; other threads' lines are
written at once, as outside the block. A line another handler writes (a signal
receiver's, say) may so come out before held lines logged earlier. A daemon that exits at
once (its stop watchdog) first writes every thread's held lines (write_held).
"""

import logging
import os
import threading
from contextlib import contextmanager

# Thread ident -> that thread's held lines (write_held reads them from another thread).
_holding: dict[int, list] = {}
# A forked child's new threads may get its parent's threads' idents: none holds lines.
os.register_at_fork(after_in_child=_holding.clear)


class ConsoleHandler(logging.StreamHandler):
    """logging.StreamHandler (stderr by default) whose lines a thread can hold with
    ``held_lines()``."""

    def emit(self, record: logging.LogRecord) -> None:
        lines = _holding.get(threading.get_ident())
        if lines is None:
            super().emit(record)
            return
        try:
            lines.append((self, self.format(record) + self.terminator))
        except Exception:  # noqa: BLE001 - logging's own rule: never raise from a handler
            self.handleError(record)

    def write_all(self, text: str) -> None:
        """Write ``text`` (whole lines) to the stream and flush, under the handler's lock."""
        with self.lock:
            self.stream.write(text)
            self.flush()


@contextmanager
def held_lines():
    """Hold this thread's console lines until the block ends, then write them, one write
    per handler, also when the block raises. Nested blocks write at the outermost's end."""
    ident = threading.get_ident()
    if ident in _holding:
        yield
        return
    _holding[ident] = []
    try:
        yield
    finally:
        _write(_holding.pop(ident, None) or [])


def write_held() -> None:
    """Write the lines every thread holds now, for a process about to exit at once
    (os._exit, which runs no ``finally``); they are not written again. Each list is
    taken out before it is written, so its thread writes its later lines itself."""
    for ident in list(_holding):
        lines = _holding.pop(ident, None)
        if lines:
            _write(list(lines))


def _write(lines: list[tuple[ConsoleHandler, str]]) -> None:
    by_handler: dict[ConsoleHandler, list[str]] = {}
    for handler, text in lines:
        by_handler.setdefault(handler, []).append(text)
    for handler, texts in by_handler.items():
        try:
            handler.write_all("".join(texts))
        except Exception:  # noqa: BLE001 - as StreamHandler.emit: report, never raise
            handler.handleError(None)
