-- unpark: move runs parked by lease.lua back to ready, with their original score, so they
-- keep their place by priority and run_at: runs parked by their owner's limit, as many per
-- owner as the owner now has room for; runs parked by their concurrency key, as many as
-- the key has free slots (its limit read from the first parked run's gate), oldest first.
-- At most ARGV[2] per owner or key.
-- KEYS[1]  ready ZSET  KEYS[2] parkedby SET (owner ids, and c:<concurrency key>)
-- KEYS[3]  running HASH  KEYS[4] limits HASH
-- KEYS[5]  parked ZSET (member <owner or c+sha1(key)>|score|padded id, all of score 0)
-- KEYS[6]  parkedrun HASH run id -> its member in parked
-- KEYS[7]  gates HASH run id -> handler\trate key\tconcurrency key\tlimit (lease.lua)
-- ARGV[1]  default owner limit (0: none)  ARGV[2] most per owner or key
-- Returns how many runs were moved.
local function plain(m) return (string.gsub(m, '^0+', '')) end
local moved = 0
local cap = tonumber(ARGV[2])
for _, by in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  local who, room = by, cap
  if string.sub(by, 1, 2) == 'c:' then
    local ckey = string.sub(by, 3)
    who = 'c' .. redis.sha1hex(ckey)
    local head = redis.call('ZRANGEBYLEX', KEYS[5], '[' .. who .. '|', '(' .. who .. '}',
      'LIMIT', 0, 1)
    if #head > 0 then
      local entry = redis.call('HGET', KEYS[7], plain(string.match(head[1], '|(%d+)$')))
      local limit = tonumber(entry and string.match(entry, '\t(%d+)$') or '1')
      room = math.min(cap, limit - tonumber(redis.call('HGET', KEYS[3], by) or '0'))
    end
  else
    local limit = tonumber(redis.call('HGET', KEYS[4], 'o:' .. by) or ARGV[1])
    if limit > 0 then
      room = math.min(cap, limit - tonumber(redis.call('HGET', KEYS[3], 'o:' .. by) or '0'))
    end
  end
  local first, last = '[' .. who .. '|', '(' .. who .. '}'
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
    redis.call('SREM', KEYS[2], by)
  end
end
return moved
