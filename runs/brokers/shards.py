"""Which shard of its queue a run goes to, the same for every broker (docs/architecture.md,
"Brokers"; workflows/sql/crc32.sql computes it the same way in SQL)."""

import zlib


def shard_of(shard_key: str, shards: int) -> int:
    """The shard (0 .. shards-1) of a run whose job has ``shard_key`` (the job's explicit
    ``shard_key``, else its handler name): CRC-32 of the UTF-8 key modulo ``shards``."""
    return zlib.crc32(shard_key.encode()) % max(shards, 1)
