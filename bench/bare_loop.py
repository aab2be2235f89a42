"""The bare loop of bench/ceiling.py: W2's writes with no framework, importing only
psycopg and redis-py, so it can also run as a fresh process (the cold ceiling, timed from
launch as W2 times our worker from launch).

    python bench/bare_loop.py --db URL --redis URL --ready KEY --leased KEY --batch B

prints the runs it finished. bench/ceiling.py's docstring lists the writes.
"""

import argparse
from datetime import UTC, datetime

WORKER_ID = "ceiling"

# The essential writes of a lease (runs/brokers/redis/lua/lease.lua as it was before the
# speed work of BENCHMARKS.md, "W2 against the ceiling"):
# pop the most urgent ready runs and record them as leased, atomically. The isolation
# policy that script grew since (priority classes, owner and queue limits) is left out.
LEASE_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local popped = redis.call('ZPOPMIN', KEYS[1], tonumber(ARGV[1]))
local ids = {}
for i = 1, #popped, 2 do
  redis.call('ZADD', KEYS[2], now + tonumber(ARGV[2]), popped[i])
  ids[#ids + 1] = popped[i]
end
return ids
"""

def drain(db_url: str, redis_url: str, ready: str, leased: str, batch: int) -> int:
    """Lease, start and ack batches of ``batch`` runs until ``ready`` is empty; returns
    how many runs this process finished."""
    import psycopg
    import redis

    client = redis.Redis.from_url(redis_url)
    lease = client.register_script(LEASE_LUA)
    with psycopg.connect(db_url) as conn:
        return _loop(client, lease, conn, ready, leased, batch)


def _loop(client, lease, conn, ready: str, leased_key: str, batch: int) -> int:
    done = 0
    while True:
        ids = [int(i) for i in lease(keys=[ready, leased_key], args=[batch, 60_000])]
        if not ids:
            break
        with conn.transaction(), conn.cursor() as cur:
            cur.execute(
                "UPDATE runs_run SET state = 'running', attempt = attempt + 1, "
                "worker_id = %s, lease_expires_at = now() + interval '60 s', "
                "started_at = now() WHERE id = ANY(%s) "
                "AND state IN ('scheduled', 'queued', 'retrying') "
                "RETURNING id, attempt, scheduled_at",
                [WORKER_ID, ids])
            leased = cur.fetchall()
            now = datetime.now(UTC)
            with cur.copy("COPY runs_attempt (run_id, number, worker_id, started_at, "
                          "outcome, error, run_scheduled_at) FROM STDIN") as copy:
                for run_id, attempt, scheduled_at in leased:
                    copy.write_row((run_id, attempt, WORKER_ID, now, "running", "",
                                    scheduled_at))
        run_ids = [r[0] for r in leased]
        attempts = [r[1] for r in leased]
        with conn.transaction(), conn.cursor() as cur:
            cur.execute(
                "UPDATE runs_run r SET state = 'succeeded', finished_at = now(), "
                "lease_expires_at = NULL, error = '' "
                "FROM unnest(%s::bigint[], %s::int[]) AS a(id, attempt) "
                "WHERE r.id = a.id AND r.attempt = a.attempt AND r.state = 'running'",
                [run_ids, attempts])
            cur.execute(
                "UPDATE runs_attempt t SET finished_at = now(), outcome = 'succeeded' "
                "FROM unnest(%s::bigint[], %s::int[]) AS a(id, attempt) "
                "WHERE t.run_id = a.id AND t.number = a.attempt",
                [run_ids, attempts])
        pipe = client.pipeline(transaction=False)
        pipe.zrem(leased_key, *ids)
        pipe.execute()
        done += len(run_ids)
    return done



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name in ("--db", "--redis", "--ready", "--leased"):
        parser.add_argument(name, required=True)
    parser.add_argument("--batch", type=int, required=True)
    args = parser.parse_args()
    print(drain(args.db, args.redis, args.ready, args.leased, args.batch), flush=True)


if __name__ == "__main__":
    main()
