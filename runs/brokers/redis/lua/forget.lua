-- forget: drop finished or refused runs from a queue shard's leased set and uncount them
-- from the cluster-wide running counters (only leases still recorded are uncounted, so a
-- second forget of the same run changes nothing); their gate entries go too.
-- KEYS[1]  leased  ZSET  KEYS[2] owners HASH  KEYS[3] running HASH (see lease.lua)
-- KEYS[4]  gates   HASH  run id -> handler\trate key\tconcurrency key\tlimit
-- ARGV[1]  queue   ARGV[2..] run ids
-- Returns how many leases were dropped.
local function uncount(field)
  if redis.call('HINCRBY', KEYS[3], field, -1) <= 0 then
    redis.call('HDEL', KEYS[3], field)
  end
end
local dropped = 0
-- No gate entry in this shard (no flow control in use): no read or delete per run.
local gated = redis.call('EXISTS', KEYS[4]) == 1
for i = 2, #ARGV do
  local id = ARGV[i]
  if redis.call('ZREM', KEYS[1], id) == 1 then
    dropped = dropped + 1
    local owner = redis.call('HGET', KEYS[2], id)
    if owner then
      uncount('o:' .. owner)
      redis.call('HDEL', KEYS[2], id)
    end
    local gate = gated and redis.call('HGET', KEYS[4], id)
    local ckey = gate and string.match(gate, '^[^\t]*\t[^\t]*\t([^\t]+)\t')
    if ckey then
      uncount('c:' .. ckey)
    end
  end
  if gated then
    redis.call('HDEL', KEYS[4], id)
  end
end
if dropped > 0 and redis.call('HINCRBY', KEYS[3], 'q:' .. ARGV[1], -dropped) <= 0 then
  redis.call('HDEL', KEYS[3], 'q:' .. ARGV[1])
end
return dropped
