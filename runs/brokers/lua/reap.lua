-- reap: remove and return leases whose expiry (Redis TIME) has passed, uncounting them
-- from the running counters and dropping their owner entry (the caller pushes back the
-- runs the database still calls pending, which records their owner again).
-- KEYS[1]  leased  ZSET  score lease expiry ms
-- KEYS[2]  owners  HASH  KEYS[3] running HASH (see lease.lua)
-- ARGV[1]  limit: most leases to reap in this call   ARGV[2] queue
-- Returns the reaped run ids; the caller asks the database what each run's state is.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
if #ids > 0 then
  redis.call('ZREM', KEYS[1], unpack(ids))
  for _, id in ipairs(ids) do
    local owner = redis.call('HGET', KEYS[2], id)
    if owner then
      if redis.call('HINCRBY', KEYS[3], 'o:' .. owner, -1) <= 0 then
        redis.call('HDEL', KEYS[3], 'o:' .. owner)
      end
      redis.call('HDEL', KEYS[2], id)
    end
  end
  if redis.call('HINCRBY', KEYS[3], 'q:' .. ARGV[2], -#ids) <= 0 then
    redis.call('HDEL', KEYS[3], 'q:' .. ARGV[2])
  end
end
return ids
