-- promote: move due runs from delayed to ready in one atomic step (no run is ever only in
-- a client's memory; performance.md L3), at most ARGV[1] per call (L2: keep calls short).
-- KEYS[1]  delayed ZSET  score run_at_ms * 10 + priority
-- KEYS[2]  ready   ZSET  score priority * 2^42 + run_at_ms
-- ARGV[1]  limit: most runs to move in this call
-- ARGV[2]  (optional) ms ahead: also runs due within this many ms, for a worker whose
--          children wait for each run's run_at (runs/worker/lease_ahead.py, lease_at)
-- Returns the ids moved (zero-padded members, as push.lua stores them).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ahead = tonumber(ARGV[2] or '0')
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', (now + ahead) * 10 + 9, 'WITHSCORES',
  'LIMIT', 0, tonumber(ARGV[1]))
local ids = {}
for i = 1, #due, 2 do
  local score = tonumber(due[i + 1])
  local prio = score % 10
  local at = (score - prio) / 10
  redis.call('ZADD', KEYS[2], prio * 4398046511104 + at, due[i])
  ids[#ids + 1] = due[i]
end
if #ids > 0 then
  redis.call('ZREM', KEYS[1], unpack(ids))
end
return ids
