-- unpark: move runs parked by lease.lua (their owner was at its limit) back to ready, as
-- many per owner as the owner now has room for (or ARGV[3], whichever is smaller), with
-- their original score, so they keep their place by priority and run_at.
-- KEYS[1]  ready ZSET  KEYS[2] parkedby SET  KEYS[3] running HASH  KEYS[4] limits HASH
-- ARGV[1]  default owner limit (0: none)  ARGV[2] parked key prefix  ARGV[3] most per owner
-- Returns how many runs were moved.
local moved = 0
local cap = tonumber(ARGV[3])
for _, owner in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  local key = ARGV[2] .. owner
  local limit = tonumber(redis.call('HGET', KEYS[4], 'o:' .. owner) or ARGV[1])
  local room = cap
  if limit > 0 then
    room = math.min(cap, limit - tonumber(redis.call('HGET', KEYS[3], 'o:' .. owner) or '0'))
  end
  if room > 0 then
    local items = redis.call('ZRANGE', key, 0, room - 1, 'WITHSCORES')
    for i = 1, #items, 2 do
      redis.call('ZADD', KEYS[1], items[i + 1], items[i])
    end
    if #items > 0 then
      redis.call('ZREMRANGEBYRANK', key, 0, #items / 2 - 1)
      moved = moved + #items / 2
    end
  end
  if redis.call('EXISTS', key) == 0 then
    redis.call('SREM', KEYS[2], owner)
  end
end
return moved
