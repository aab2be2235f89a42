-- lease: take up to n ready runs of one queue shard for a worker, atomically, so racing
-- workers never receive the same run. Applies the isolation policy (runs/tenancy/policy.py):
--   * priority classes share leases by stride scheduling (weights; an empty class's share
--     goes to the others, and it banks no credit while empty); strict order inside a class;
--   * per-owner limits (over every queue on a single Redis, per queue on a Redis Cluster:
--     docs/isolation.md): a run whose owner is at its limit is parked (KEYS[10]) instead
--     of blocking the runs behind it; unpark.lua puts it back when the owner has room;
--   * per-queue concurrency limit and token-bucket rate limit (over all its shards);
--   * per-run gates (runs/flow/control.py, docs/isolation.md "Rate limits", "Concurrency keys"):
--     a run whose handler's or rate key's bucket is empty is deferred to the delayed set
--     until its token is due; a run whose concurrency key is at its limit, or has parked
--     runs ahead of it, is parked under the key (unpark.lua returns them in order).
-- Every key comes in KEYS, all in one slot on a Redis Cluster (runs/brokers/redis/keys.py).
-- KEYS[1]  ready    ZSET  score priority * 2^42 + run_at_ms
-- KEYS[2]  leased   ZSET  score lease expiry ms (Redis TIME + ttl)
-- KEYS[3]  owners   HASH  run id -> owner id (set by push.lua)
-- KEYS[4]  fair     HASH  p<i> -> pass of class i, vt -> virtual time of the last lease
-- KEYS[5]  parkedby SET   owners with runs parked in this shard
-- KEYS[6]  running  HASH  o:<owner> / q:<queue> -> runs leased now (keys.py)
-- KEYS[7]  limits   HASH  o:<owner> -> that owner's limit (synced from the database)
-- KEYS[8]  bucket   HASH  tokens, ts: the queue's rate-limit bucket
-- KEYS[9]  delayed  ZSET  score run_at_ms * 10 + priority (promote.lua's)
-- KEYS[10] parked   ZSET  score 0, member <owner>|<ready score, 16 digits>|<padded id>
-- KEYS[11] parkedrun HASH run id -> its member in parked
-- KEYS[12] gates    HASH  run id -> handler\trate key\tconcurrency key\tlimit (push.lua;
--                     each key "<owner>:<template>=<value>", runs/flow/control.py scoped)
-- KEYS[13] buckets  HASH  h:<handler> / k:<rate key> -> "<tokens> <ms>" (rate limits;
--                     KEYS[7] holds their rh:<handler> / rk:<template> -> "<rate> <burst>")
-- ARGV[1] n  ARGV[2] ttl ms  ARGV[3] queue  ARGV[4] default owner limit (0: none)
-- ARGV[5] queue limit (0: none)  ARGV[6] rate per s (0: none)  ARGV[7] burst
-- ARGV[8] most runs to park in this call
-- ARGV[9..] class triples: lowest priority, highest priority, weight
-- Runs of this shard that fell due since the dispatcher's last round are promoted first
-- (at most PROMOTE_CAP), so a run starts within one worker poll of its time rather than
-- one dispatcher round plus one poll; the dispatcher still promotes shards no worker polls.
-- Returns the leased run ids, most urgent first (priority, run_at ms, then id: FIFO).
-- ready, delayed and parked hold zero-padded ids (push.lua); leased and owners plain ids.
local function plain(m) return (string.gsub(m, '^0+', '')) end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n = tonumber(ARGV[1])
local queue = ARGV[3]
local owner_default = tonumber(ARGV[4])
local queue_max = tonumber(ARGV[5])
local rate, burst = tonumber(ARGV[6]), tonumber(ARGV[7])
local park_budget = tonumber(ARGV[8])
local SPAN = 4398046511104
local PROMOTE_CAP = 1000

local due = redis.call('ZRANGEBYSCORE', KEYS[9], '-inf', now * 10 + 9, 'WITHSCORES',
  'LIMIT', 0, PROMOTE_CAP)
if #due > 0 then
  local moved = {}
  for i = 1, #due, 2 do
    local score = tonumber(due[i + 1])
    local prio = score % 10
    redis.call('ZADD', KEYS[1], prio * SPAN + (score - prio) / 10, due[i])
    moved[#moved + 1] = due[i]
  end
  redis.call('ZREM', KEYS[9], unpack(moved))
end

if queue_max > 0 then
  n = math.min(n, queue_max - tonumber(redis.call('HGET', KEYS[6], 'q:' .. queue) or '0'))
end
local tokens
if rate > 0 then
  local bucket = redis.call('HMGET', KEYS[8], 'tokens', 'ts')
  tokens = tonumber(bucket[1] or burst)
  local since = now - tonumber(bucket[2] or now)
  tokens = math.min(burst, tokens + math.max(since, 0) * rate / 1000)
  n = math.min(n, math.floor(tokens))
end
if n <= 0 then
  return {}
end

local classes = {}
local fair = {}
local ready = 0
for i = 9, #ARGV, 3 do
  local lo = tonumber(ARGV[i]) * SPAN
  local hi = string.format('(%.0f', (tonumber(ARGV[i + 1]) + 1) * SPAN)
  local c = {lo = lo, hi = hi, stride = 1 / tonumber(ARGV[i + 2])}
  c.count = redis.call('ZCOUNT', KEYS[1], lo, hi)
  ready = ready + c.count
  classes[#classes + 1] = c
  fair[#fair + 1] = 'p' .. #classes
end
if ready == 0 then
  return {}
end
fair[#fair + 1] = 'vt'
local state = redis.call('HMGET', KEYS[4], unpack(fair))
local vt = tonumber(state[#state] or '0')
for i, c in ipairs(classes) do
  c.pass = tonumber(state[i] or c.stride)
  if c.count == 0 and c.pass < vt then
    c.pass = vt
  end
end

local room = {}
local function owner_room(owner)
  local left = room[owner]
  if left == nil then
    local limit = tonumber(redis.call('HGET', KEYS[7], 'o:' .. owner) or owner_default)
    if limit > 0 then
      left = limit - tonumber(redis.call('HGET', KEYS[6], 'o:' .. owner) or '0')
    else
      left = false
    end
    room[owner] = left
  end
  return left
end

local function split(entry)
  local f = {}
  for part in string.gmatch(entry .. '\t', '([^\t]*)\t') do f[#f + 1] = part end
  return f
end
local rates = {}
local function rate_of(field)
  local v = rates[field]
  if v == nil then
    v = false
    local raw = redis.call('HGET', KEYS[7], field)
    if raw then
      local r, b = string.match(raw, '^(%S+) (%S+)$')
      v = {tonumber(r), tonumber(b)}
    end
    rates[field] = v
  end
  return v
end
local buckets = {}
local function bucket(name, spec)
  local b = buckets[name]
  if b == nil then
    local tokens, ts = spec[2], now
    local raw = redis.call('HGET', KEYS[13], name)
    if raw then
      local t, s = string.match(raw, '^(%S+) (%S+)$')
      tokens, ts = tonumber(t), tonumber(s)
    end
    b = {tokens = math.min(spec[2], tokens + math.max(now - ts, 0) * spec[1] / 1000),
         rate = spec[1], deferred = 0, touched = false}
    buckets[name] = b
  end
  return b
end
local function buckets_of(f)
  local list = {}
  local h = rate_of('rh:' .. f[1])
  if h then list[#list + 1] = bucket('h:' .. f[1], h) end
  if f[2] ~= '' then
    -- f[2] is "<owner>:<template>=<value>" (runs/flow/control.py, scoped)
    local k = rate_of('rk:' .. string.match(f[2], '^[^:]*:([^=]*)'))
    if k then list[#list + 1] = bucket('k:' .. f[2], k) end
  end
  return list
end
local cused, cfirst = {}, {}
local function key_blocked(ckey, limit, position)
  local used = cused[ckey]
  if used == nil then
    used = tonumber(redis.call('HGET', KEYS[6], 'c:' .. ckey) or '0')
    cused[ckey] = used
  end
  if used >= limit then
    return true
  end
  local first = cfirst[ckey]
  if first == nil then
    first = false
    if redis.call('SISMEMBER', KEYS[5], 'c:' .. ckey) == 1 then
      local tag = 'c' .. redis.sha1hex(ckey)
      local head = redis.call('ZRANGEBYLEX', KEYS[10], '[' .. tag .. '|', '(' .. tag .. '}',
        'LIMIT', 0, 1)
      if #head > 0 then
        first = string.sub(head[1], #tag + 2)
      end
    end
    cfirst[ckey] = first
  end
  return first and first < position
end

local picked = {}
local parked = 0
-- No gate entry in this shard (no flow control in use): no gate read per run.
local gated = redis.call('EXISTS', KEYS[12]) == 1
local expiry = now + tonumber(ARGV[2])
local CHUNK = 500
local stop = false
while #picked < n and not stop do
  local best
  local nonempty = 0
  for i, c in ipairs(classes) do
    if c.count > 0 then
      nonempty = nonempty + 1
      if best == nil or c.pass < best.pass then
        best = c
      end
    end
  end
  if best == nil then
    break
  end
  -- One run at a time while classes compete (stride order); while a single class has
  -- ready runs, its head in chunks: the same picks, a few calls per chunk, not per run.
  local k = 1
  if nonempty == 1 then
    k = math.min(n - #picked, best.count, CHUNK)
  end
  local head = redis.call('ZRANGEBYSCORE', KEYS[1], best.lo, best.hi, 'WITHSCORES', 'LIMIT', 0, k)
  if #head == 0 then
    best.count = 0
  else
    local ids, members = {}, {}
    for i = 1, #head, 2 do
      members[#members + 1] = head[i]
      ids[#ids + 1] = plain(head[i])
    end
    local owners = redis.call('HMGET', KEYS[3], unpack(ids))
    local gates = gated and redis.call('HMGET', KEYS[12], unpack(ids)) or {}
    local taken, leased, counts = {}, {}, {}
    for j, id in ipairs(ids) do
      local score = head[2 * j]
      local owner = owners[j]
      local left = false
      if owner then
        left = owner_room(owner)
      end
      local f = gates[j] and split(gates[j])
      local position  -- where the run would wait: only a run that may wait needs it
      if f or (left and left <= 0) then
        position = string.format('%016.0f', tonumber(score)) .. '|' .. members[j]
      end
      local verdict, rb = nil, nil
      if left and left <= 0 then
        verdict = 'owner'
      elseif f and f[3] ~= '' and key_blocked(f[3], tonumber(f[4]), position) then
        verdict = 'key'
      elseif f then
        rb = buckets_of(f)
        for _, b in ipairs(rb) do
          if b.tokens < 1 then verdict = 'rate' end
        end
      end
      if verdict then
        if parked >= park_budget then
          -- Enough set aside for one call: leave it where it is and stop here. Its class
          -- counts it as taken, as a run looked at: a class whose last ready run waits on
          -- its owner looks empty, so its pass catches up and the other classes are not
          -- held behind it on the next call.
          best.count = best.count - 1
          stop = true
          break
        end
        if verdict == 'rate' then
          -- Deferred: back to the delayed set, due when its emptiest bucket has a token
          -- for it (runs deferred before it in this call queue up behind).
          local wait = 0
          for _, b in ipairs(rb) do
            if b.tokens < 1 then
              b.deferred = b.deferred + 1
              wait = math.max(wait, (b.deferred - b.tokens) / b.rate * 1000)
            end
          end
          local prio = math.floor(tonumber(score) / SPAN)
          redis.call('ZADD', KEYS[9], (now + math.ceil(wait)) * 10 + prio, members[j])
        else
          local who, by = owner, owner
          if verdict == 'key' then
            who, by = 'c' .. redis.sha1hex(f[3]), 'c:' .. f[3]
            if not cfirst[f[3]] or position < cfirst[f[3]] then cfirst[f[3]] = position end
          end
          local entry = who .. '|' .. position
          redis.call('ZADD', KEYS[10], 0, entry)
          redis.call('HSET', KEYS[11], id, entry)
          redis.call('SADD', KEYS[5], by)
        end
        parked = parked + 1
      else
        if owner then
          if left then
            room[owner] = left - 1
          end
          counts[owner] = (counts[owner] or 0) + 1
        end
        if f and f[3] ~= '' then
          cused[f[3]] = cused[f[3]] + 1
          counts['c:' .. f[3]] = (counts['c:' .. f[3]] or 0) + 1
        end
        for _, b in ipairs(rb or {}) do
          b.tokens = b.tokens - 1
          b.touched = true
        end
        leased[#leased + 1] = expiry
        leased[#leased + 1] = id
        picked[#picked + 1] = {id, tonumber(score), members[j]}
        vt = best.pass
        best.pass = best.pass + best.stride
      end
      taken[#taken + 1] = members[j]
    end
    if #taken > 0 then
      redis.call('ZREM', KEYS[1], unpack(taken))
      best.count = best.count - #taken
    end
    if #leased > 0 then
      redis.call('ZADD', KEYS[2], unpack(leased))
    end
    for owner, count in pairs(counts) do
      if string.sub(owner, 1, 2) == 'c:' then
        redis.call('HINCRBY', KEYS[6], owner, count)
      else
        redis.call('HINCRBY', KEYS[6], 'o:' .. owner, count)
      end
    end
  end
end

local save = {}
for i, c in ipairs(classes) do
  if c.count == 0 and c.pass < vt then
    c.pass = vt
  end
  save[#save + 1] = 'p' .. i
  save[#save + 1] = c.pass
end
save[#save + 1] = 'vt'
save[#save + 1] = vt
redis.call('HSET', KEYS[4], unpack(save))
if #picked > 0 then
  redis.call('HINCRBY', KEYS[6], 'q:' .. queue, #picked)
end
if rate > 0 then
  redis.call('HSET', KEYS[8], 'tokens', tokens - #picked, 'ts', now)
end
for name, b in pairs(buckets) do
  if b.touched then
    redis.call('HSET', KEYS[13], name, string.format('%.6f %d', b.tokens, now))
  end
end

-- Score, then the padded member: table.sort is not stable, and equal scores are the FIFO case.
-- Picks of one class come in that order already (ZRANGEBYSCORE): sort only when classes mixed.
local function before(a, b)
  if a[2] ~= b[2] then
    return a[2] < b[2]
  end
  return a[3] < b[3]
end
for i = 2, #picked do
  if before(picked[i], picked[i - 1]) then
    table.sort(picked, before)
    break
  end
end
local ids = {}
for i, p in ipairs(picked) do
  ids[i] = p[1]
end
return ids
