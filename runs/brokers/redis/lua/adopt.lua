-- adopt: record runs as leased that the database leased without this broker (a run an
-- ack continued on its worker, runs/execution/continuation.py), counted as lease.lua counts a
-- lease, so forget.lua uncounts them at their ack and reap.lua takes back a lapsed one.
-- KEYS[1]  leased  ZSET  KEYS[2] owners HASH  KEYS[3] running HASH (see lease.lua)
-- ARGV[1]  queue   ARGV[2] lease ttl ms   ARGV[3..] pairs: run id, owner id ('' none)
-- A run already recorded is left as it is. Returns how many were recorded.
local t = redis.call('TIME')
local expiry = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[2])
local added = 0
for i = 3, #ARGV, 2 do
  local id, owner = ARGV[i], ARGV[i + 1]
  if redis.call('ZADD', KEYS[1], 'NX', expiry, id) == 1 then
    added = added + 1
    if owner ~= '' then
      redis.call('HSET', KEYS[2], id, owner)
      redis.call('HINCRBY', KEYS[3], 'o:' .. owner, 1)
    end
  end
end
if added > 0 then
  redis.call('HINCRBY', KEYS[3], 'q:' .. ARGV[1], added)
end
return added
