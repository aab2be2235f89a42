-- unpark: move runs parked by lease.lua (their owner was at its limit) back to ready, as
-- many per owner as the owner now has room for (or ARGV[2], whichever is smaller), with
-- their original score, so they keep their place by priority and run_at.
-- KEYS[1]  ready ZSET  KEYS[2] parkedby SET  KEYS[3] running HASH  KEYS[4] limits HASH
-- KEYS[5]  parked ZSET (member owner|score|padded id, all of score 0)
-- KEYS[6]  parkedrun HASH run id -> its member in parked
-- ARGV[1]  default owner limit (0: none)  ARGV[2] most per owner
-- Returns how many runs were moved.
local function plain(m) return (string.gsub(m, '^0+', '')) end
local moved = 0
local cap = tonumber(ARGV[2])
for _, owner in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  local limit = tonumber(redis.call('HGET', KEYS[4], 'o:' .. owner) or ARGV[1])
  local room = cap
  if limit > 0 then
    room = math.min(cap, limit - tonumber(redis.call('HGET', KEYS[3], 'o:' .. owner) or '0'))
  end
  local first, last = '[' .. owner .. '|', '(' .. owner .. '}'
  if room > 0 then
    local items = redis.call('ZRANGEBYLEX', KEYS[5], first, last, 'LIMIT', 0, room)
    for _, item in ipairs(items) do
      local _, _, score, m = string.find(item, '|(%d+)|(%d+)$')
      redis.call('ZADD', KEYS[1], score, m)
      redis.call('HDEL', KEYS[6], plain(m))
    end
    if #items > 0 then
      redis.call('ZREM', KEYS[5], unpack(items))
      moved = moved + #items
    end
  end
  if #redis.call('ZRANGEBYLEX', KEYS[5], first, last, 'LIMIT', 0, 1) == 0 then
    redis.call('SREM', KEYS[2], owner)
  end
end
return moved
