-- limits: replace the owner limits a queue's (or the whole Redis's) lease script reads, in
-- one step, so no lease sees the hash empty between the old limits and the new.
-- KEYS[1]  limits HASH  o:<owner> -> most runs running at once
-- ARGV[1..] pairs: field, limit
-- Returns how many owners have a limit now.
redis.call('DEL', KEYS[1])
if #ARGV > 0 then
  redis.call('HSET', KEYS[1], unpack(ARGV))
end
return #ARGV / 2
