-- heartbeat: extend leases that are still recorded (ZADD XX never re-creates a reaped one).
-- KEYS[1]  leased ZSET  score lease expiry ms
-- ARGV[1]  lease ttl in ms
-- ARGV[2..] run ids
-- Returns how many leases were extended.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expiry = now + tonumber(ARGV[1])
local extended = 0
for i = 2, #ARGV do
  extended = extended + redis.call('ZADD', KEYS[1], 'XX', 'CH', expiry, ARGV[i])
end
return extended
