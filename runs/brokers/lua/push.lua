-- push: add runs to a queue shard's working set, idempotently.
-- KEYS[1]  delayed ZSET  member run id, score run_at_ms * 10 + priority
-- KEYS[2]  ready   ZSET  member run id, score priority * 2^42 + run_at_ms (FIFO by time within a priority)
-- KEYS[3]  leased  ZSET  member run id, score lease expiry ms
-- ARGV     triples: run id, run_at (ms since epoch), priority (0-9)
-- A run due now (Redis TIME) goes straight to ready, otherwise to delayed; it is removed
-- from the other two sets, so pushing twice never leaves two copies.
-- Returns {ready_count, delayed_count}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ready, delayed = 0, 0
for i = 1, #ARGV, 3 do
  local id, at, prio = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  redis.call('ZREM', KEYS[3], id)
  if at <= now then
    redis.call('ZREM', KEYS[1], id)
    redis.call('ZADD', KEYS[2], prio * 4398046511104 + at, id)
    ready = ready + 1
  else
    redis.call('ZREM', KEYS[2], id)
    redis.call('ZADD', KEYS[1], at * 10 + prio, id)
    delayed = delayed + 1
  end
end
return {ready, delayed}
