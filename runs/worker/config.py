"""What a worker was started with, read by each of its parts (runs/worker/main.py makes
it once; nothing changes it afterwards)."""

from dataclasses import dataclass

from runs.worker.recycle import Limits


@dataclass(frozen=True)
class WorkerConfig:
    """A worker's settings: ``queues`` in order, their ``weights`` (queue -> positive int,
    or None), ``concurrency`` child processes, ``max_runs`` and ``burst`` (when to stop),
    the seconds of its waits (``poll_s``, ``heartbeat_s``, ``cancel_check_s``,
    ``cancel_grace_s``, ``grace_s``), the children's ``recycle`` limits, the database
    alias ``using`` and the async runs each child runs at once (``async_per_child``)."""

    queues: list[str]
    weights: dict[str, int] | None
    worker_id: str
    concurrency: int
    max_runs: int | None
    burst: bool
    poll_s: float
    heartbeat_s: float
    cancel_check_s: float
    cancel_grace_s: float
    grace_s: float
    recycle: Limits
    using: str
    async_per_child: int = 100  # async runs at once per child (ASYNC_CONCURRENCY_PER_CHILD)
