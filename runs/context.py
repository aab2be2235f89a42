"""The ``ctx`` a handler receives (docs/architecture.md, "Handlers")."""

import logging
from dataclasses import dataclass, field
from datetime import datetime

from runs.execution import hooks


@dataclass
class RunContext:
    """What a handler knows about the attempt it runs in.

    ``run_id`` is the deduplication key for idempotent handlers. ``scheduled_at`` and
    ``deadline`` (when the attempt is cut off, ``timeout_s`` after it started) are aware
    UTC datetimes. ``logger`` lines, and any other logging in the handler's process while
    it runs, are stored on the attempt. ``heartbeat()`` tells the worker the handler is
    making progress; the worker extends the lease at once. ``upstream`` is, for the run
    of a workflow's node, its upstream nodes' results by node name (read on first use;
    docs/workflows.md, "Results"), and an empty mapping for any other run; ``map_item``
    a mapped node's run's item and index.
    """

    run_id: int
    job_id: int
    attempt: int
    scheduled_at: datetime
    deadline: datetime
    handler: str
    logger: logging.Logger
    _beat: object = field(default=None, repr=False)
    using: str = "default"  # the database alias of the worker running the handler
    _upstream: object = field(default=None, repr=False)
    _map_item: object = field(default=False, repr=False)  # False: not read yet

    def heartbeat(self) -> None:
        """Extend this attempt's lease now (cheap; the worker rate-limits it)."""
        if self._beat is not None:
            self._beat()

    @property
    def upstream(self):
        """The results of this run's upstream workflow nodes, by node name (a read-only
        mapping, read from the database once, on first use); empty outside a workflow."""
        if self._upstream is None:
            self._upstream = hooks.context_value("upstream", self, {})
        return self._upstream

    @property
    def map_item(self):
        """For a run of a mapped workflow node, ``{"index": i, "item": value}``: its item
        of the upstream's list (a read-only mapping, read once, on first use); None for
        any other run (docs/workflows.md, "Mapped nodes")."""
        if self._map_item is False:
            self._map_item = hooks.context_value("map_item", self, None)
        return self._map_item
