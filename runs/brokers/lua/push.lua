-- push: add runs to a queue shard's working set, idempotently.
-- KEYS[1]  delayed ZSET  member padded run id (below), score run_at_ms * 10 + priority
-- KEYS[2]  ready   ZSET  member padded run id, score priority * 2^42 + run_at_ms (FIFO:
--                     by time within a priority, then by id)
-- KEYS[3]  leased  ZSET  member run id, score lease expiry ms
-- KEYS[4]  owners  HASH  run id -> owner id (for per-owner limits, lease.lua)
-- KEYS[5]  running HASH  o:<owner> / q:<queue> -> runs leased now (keys.py)
-- KEYS[6]  parked  ZSET  runs held back by their owner's limit (lease.lua)
-- KEYS[7]  parkedrun HASH  run id -> its member in parked
-- ARGV[1]  queue
-- ARGV[2..] quadruples: run id, run_at (ms since epoch), priority (0-9), owner id ('' none)
-- A run due now (Redis TIME) goes straight to ready, otherwise to delayed; it is removed
-- from the other sets (and from the parked set), so pushing twice never leaves
-- two copies; a lease it still had is forgotten and uncounted.
-- Returns {ready_count, delayed_count}.
-- Waiting sets (delayed, ready, parked) hold each run id zero-padded to 19 digits, so
-- runs of equal score (one priority, one run_at millisecond) come out in id order, the
-- order they were created, and not the lexicographic order of their ids (100 before 95).
local function member(id) return string.rep('0', 19 - #id) .. id end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ready, delayed = 0, 0
local unleased = 0
for i = 2, #ARGV, 4 do
  local id, at, prio, owner = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]), ARGV[i + 3]
  if redis.call('ZREM', KEYS[3], id) == 1 then
    unleased = unleased + 1
    local was = redis.call('HGET', KEYS[4], id)
    if was and redis.call('HINCRBY', KEYS[5], 'o:' .. was, -1) <= 0 then
      redis.call('HDEL', KEYS[5], 'o:' .. was)
    end
  end
  local m = member(id)
  local parked = redis.call('HGET', KEYS[7], id)
  if parked then
    redis.call('ZREM', KEYS[6], parked)
    redis.call('HDEL', KEYS[7], id)
  end
  if owner ~= '' then
    redis.call('HSET', KEYS[4], id, owner)
  else
    redis.call('HDEL', KEYS[4], id)
  end
  -- A plain id left by a version before padding (reconcile pushes those runs again).
  redis.call('ZREM', KEYS[1], id)
  redis.call('ZREM', KEYS[2], id)
  if at <= now then
    redis.call('ZREM', KEYS[1], m)
    redis.call('ZADD', KEYS[2], prio * 4398046511104 + at, m)
    ready = ready + 1
  else
    redis.call('ZREM', KEYS[2], m)
    redis.call('ZADD', KEYS[1], at * 10 + prio, m)
    delayed = delayed + 1
  end
end
if unleased > 0 and redis.call('HINCRBY', KEYS[5], 'q:' .. ARGV[1], -unleased) <= 0 then
  redis.call('HDEL', KEYS[5], 'q:' .. ARGV[1])
end
return {ready, delayed}
