"""The ``ctx`` a handler receives (docs/architecture.md, "Handlers")."""

import logging
from dataclasses import dataclass, field
from datetime import datetime


@dataclass
class RunContext:
    """What a handler knows about the attempt it runs in.

    ``run_id`` is the deduplication key for idempotent handlers. ``scheduled_at`` and
    ``deadline`` (when the attempt is cut off, ``timeout_s`` after it started) are aware
    UTC datetimes. ``logger`` lines, and any other logging in the handler's process while
    it runs, are stored on the attempt. ``heartbeat()`` tells the worker the handler is
    making progress; the worker extends the lease at once.
    """

    run_id: int
    job_id: int
    attempt: int
    scheduled_at: datetime
    deadline: datetime
    handler: str
    logger: logging.Logger
    _beat: object = field(default=None, repr=False)

    def heartbeat(self) -> None:
        """Extend this attempt's lease now (cheap; the worker rate-limits it)."""
        if self._beat is not None:
            self._beat()
