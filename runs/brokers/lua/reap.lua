-- reap: remove and return leases whose expiry (Redis TIME) has passed.
-- KEYS[1]  leased ZSET  score lease expiry ms
-- ARGV[1]  limit: most leases to reap in this call
-- Returns the reaped run ids; the caller asks the database what each run's state is.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
if #ids > 0 then
  redis.call('ZREM', KEYS[1], unpack(ids))
end
return ids
