-- push: add runs to a queue shard's working set, idempotently.
-- KEYS[1]  delayed ZSET  member padded run id (below), score run_at_ms * 10 + priority
-- KEYS[2]  ready   ZSET  member padded run id, score priority * 2^42 + run_at_ms (FIFO:
--                     by time within a priority, then by id)
-- KEYS[3]  leased  ZSET  member run id, score lease expiry ms
-- KEYS[4]  owners  HASH  run id -> owner id (for per-owner limits, lease.lua)
-- KEYS[5]  running HASH  o:<owner> / q:<queue> -> runs leased now (keys.py)
-- KEYS[6]  parked  ZSET  runs held back by their owner's limit (lease.lua)
-- KEYS[7]  parkedrun HASH  run id -> its member in parked
-- KEYS[8]  gates   HASH  run id -> its gate entry (runs/flow/control.py; lease.lua)
-- ARGV[1]  queue
-- ARGV[2..] quintuples: run id, run_at (ms since epoch), priority (0-9), owner id ('' none),
--           gate entry ('' none)
-- A run due now (Redis TIME) goes straight to ready, otherwise to delayed; it is removed
-- from the other sets (and from the parked set), so pushing twice never leaves
-- two copies; a lease it still had is forgotten and uncounted.
-- A run id given twice in one call is pushed as its last quintuple says (as two calls
-- one after the other would leave it).
-- Returns {ready_count, delayed_count}, each run counted once.
-- Each step is one variadic command over the whole call's runs, not one per run: seven
-- commands per run cost Redis about 6 us of CPU per run at ingest (BENCHMARKS.md,
-- "Ingest (W1)"); the commands on one run's entries keep their order.
-- Waiting sets (delayed, ready, parked) hold each run id zero-padded to 19 digits, so
-- runs of equal score (one priority, one run_at millisecond) come out in id order, the
-- order they were created, and not the lexicographic order of their ids (100 before 95).
local function member(id) return string.rep('0', 19 - #id) .. id end
-- redis.call(cmd, key, args...) in slices small enough for Lua's unpack (its C stack
-- takes about 8,000 values); the slices are even, so pairs (score member, field value)
-- are never split.
local function many(cmd, key, args)
  for s = 1, #args, 4000 do
    redis.call(cmd, key, unpack(args, s, math.min(s + 3999, #args)))
  end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local last = {}
for i = 2, #ARGV, 5 do last[ARGV[i]] = i end
local ids = {}
for i = 2, #ARGV, 5 do
  if last[ARGV[i]] == i then ids[#ids + 1] = ARGV[i] end
end
if #ids == 0 then return {0, 0} end
-- Runs still leased: forget the lease and uncount it (the owner read before it is
-- rewritten below).
local unleased = 0
local leased = {}
for s = 1, #ids, 4000 do
  local scores = redis.call('ZMSCORE', KEYS[3], unpack(ids, s, math.min(s + 3999, #ids)))
  for k = 1, #scores do
    if scores[k] then leased[#leased + 1] = ids[s + k - 1] end
  end
end
if #leased > 0 then
  many('ZREM', KEYS[3], leased)
  for _, id in ipairs(leased) do
    unleased = unleased + 1
    local was = redis.call('HGET', KEYS[4], id)
    if was and redis.call('HINCRBY', KEYS[5], 'o:' .. was, -1) <= 0 then
      redis.call('HDEL', KEYS[5], 'o:' .. was)
    end
    local gate = redis.call('HGET', KEYS[8], id)
    local ckey = gate and string.match(gate, '^[^\t]*\t[^\t]*\t([^\t]+)\t')
    if ckey and redis.call('HINCRBY', KEYS[5], 'c:' .. ckey, -1) <= 0 then
      redis.call('HDEL', KEYS[5], 'c:' .. ckey)
    end
  end
end
-- Runs parked by their owner's limit: out of the parked set.
local parked_members, parked_ids = {}, {}
for s = 1, #ids, 4000 do
  local found = redis.call('HMGET', KEYS[7], unpack(ids, s, math.min(s + 3999, #ids)))
  for k = 1, #found do
    if found[k] then
      parked_members[#parked_members + 1] = found[k]
      parked_ids[#parked_ids + 1] = ids[s + k - 1]
    end
  end
end
if #parked_ids > 0 then
  many('ZREM', KEYS[6], parked_members)
  many('HDEL', KEYS[7], parked_ids)
end
local owned, unowned, gated, ungated = {}, {}, {}, {}
-- Plain ids (left by a version before padding; reconcile pushes those runs again) leave
-- both sets; each run's padded member leaves the set it is not going to.
local from_delayed, from_ready, to_ready, to_delayed = {}, {}, {}, {}
local ready, delayed = 0, 0
for _, id in ipairs(ids) do
  local i = last[id]
  local at, prio, owner = tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]), ARGV[i + 3]
  if ARGV[i + 4] ~= '' then
    gated[#gated + 1] = id
    gated[#gated + 1] = ARGV[i + 4]
  else
    ungated[#ungated + 1] = id
  end
  if owner ~= '' then
    owned[#owned + 1] = id
    owned[#owned + 1] = owner
  else
    unowned[#unowned + 1] = id
  end
  local m = member(id)
  from_delayed[#from_delayed + 1] = id
  from_ready[#from_ready + 1] = id
  if at <= now then
    from_delayed[#from_delayed + 1] = m
    to_ready[#to_ready + 1] = prio * 4398046511104 + at
    to_ready[#to_ready + 1] = m
    ready = ready + 1
  else
    from_ready[#from_ready + 1] = m
    to_delayed[#to_delayed + 1] = at * 10 + prio
    to_delayed[#to_delayed + 1] = m
    delayed = delayed + 1
  end
end
if #owned > 0 then many('HSET', KEYS[4], owned) end
if #unowned > 0 then many('HDEL', KEYS[4], unowned) end
if #gated > 0 then many('HSET', KEYS[8], gated) end
if #ungated > 0 and redis.call('EXISTS', KEYS[8]) == 1 then many('HDEL', KEYS[8], ungated) end
many('ZREM', KEYS[1], from_delayed)
many('ZREM', KEYS[2], from_ready)
if #to_ready > 0 then many('ZADD', KEYS[2], to_ready) end
if #to_delayed > 0 then many('ZADD', KEYS[1], to_delayed) end
if unleased > 0 and redis.call('HINCRBY', KEYS[5], 'q:' .. ARGV[1], -unleased) <= 0 then
  redis.call('HDEL', KEYS[5], 'q:' .. ARGV[1])
end
return {ready, delayed}
