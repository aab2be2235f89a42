-- lease: pop the most urgent ready runs and record them as leased, atomically, so racing
-- workers never receive the same run.
-- KEYS[1]  ready  ZSET  score priority * 2^42 + run_at_ms
-- KEYS[2]  leased ZSET  score lease expiry ms (Redis TIME + ARGV[2])
-- ARGV[1]  n: most runs to lease
-- ARGV[2]  lease ttl in ms
-- Returns the leased run ids, most urgent first.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local popped = redis.call('ZPOPMIN', KEYS[1], tonumber(ARGV[1]))
local expiry = now + tonumber(ARGV[2])
local ids = {}
for i = 1, #popped, 2 do
  redis.call('ZADD', KEYS[2], expiry, popped[i])
  ids[#ids + 1] = popped[i]
end
return ids
