-- reap: leases whose expiry (Redis TIME) has passed.
-- ARGV[3] "list": return up to ARGV[1] of them, changing nothing (the caller asks the
-- database which still hold a live lease: Redis stamps a claim's expiry before the
-- database starts the run, so Redis' can lapse first).
-- ARGV[3] "take": remove those of ARGV[4..] still expired, uncounting them from the
-- running counters (owner, concurrency key, queue) and dropping their owner and gate
-- entries (the caller pushes back the runs the database still calls pending, which
-- records them again). A killed worker's concurrency slots come back here.
-- KEYS[1]  leased  ZSET  score lease expiry ms
-- KEYS[2]  owners  HASH  KEYS[3] running HASH (see lease.lua)
-- KEYS[4]  gates   HASH  run id -> handler\trate key\tconcurrency key\tlimit
-- ARGV[1]  limit: most leases to list   ARGV[2] queue
-- Returns the listed or reaped run ids.
local function uncount(field, by)
  if redis.call('HINCRBY', KEYS[3], field, -by) <= 0 then
    redis.call('HDEL', KEYS[3], field)
  end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if ARGV[3] == 'list' then
  return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
end
local ids = {}
for i = 4, #ARGV do
  local score = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if score and tonumber(score) <= now then  -- a heartbeat since the list keeps it
    ids[#ids + 1] = ARGV[i]
  end
end
if #ids > 0 then
  redis.call('ZREM', KEYS[1], unpack(ids))
  for _, id in ipairs(ids) do
    local owner = redis.call('HGET', KEYS[2], id)
    if owner then
      uncount('o:' .. owner, 1)
      redis.call('HDEL', KEYS[2], id)
    end
    local gate = redis.call('HGET', KEYS[4], id)
    local ckey = gate and string.match(gate, '^[^\t]*\t[^\t]*\t([^\t]+)\t')
    if ckey then
      uncount('c:' .. ckey, 1)
    end
    redis.call('HDEL', KEYS[4], id)
  end
  uncount('q:' .. ARGV[2], #ids)
end
return ids
