"""Leasing from a spread queue while one of its masters is out of reach (docs/isolation.md,
"One queue over several masters"). A spread queue's shards sit on several masters, and a
lease across them (RedisBroker._claim_across) reads every shard and the queue's class
state in one pipeline, so one master lost failed the lease of the whole queue until the
cluster's failover. Here the lease falls back to one call per shard, passing over the
shards it cannot reach."""

from runs.brokers.redis.wire import UNAVAILABLE
from runs.tenancy import policy
from runs.types import Slot


def claim_spread(broker, queue: str, shards: list[int], n: int) -> list[Slot]:
    """Up to ``n`` runs of spread queue ``queue`` from ``shards`` of ``broker`` (a
    RedisBroker): its lease across the shards, or, when that meets an unreachable master,
    a lease per shard in ``shards``' order, each with the class shares of its own shard,
    passing over shards that cannot be reached. Raises that failure (an UNAVAILABLE
    error: wire.py) only when no shard can be reached."""
    try:
        return broker._claim_across(queue, shards, n)
    except UNAVAILABLE as exc:
        failure: Exception | None = exc
    claimed: list[Slot] = []
    for shard in shards:
        if len(claimed) >= n:
            break
        try:
            [ids] = broker._lease_calls(queue, [(shard, n - len(claimed), policy.classes())])
        except UNAVAILABLE:
            continue
        claimed += [(run_id, queue, shard) for run_id in ids]
        failure = None
    if failure is not None:
        raise failure
    return claimed
