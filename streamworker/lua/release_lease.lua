-- release_lease.lua: give up the ordering lease if the caller holds it (a graceful stop).
--
-- KEYS[1]  the lease key
-- ARGV[1]  consumer (the caller)
--
-- Returns: 1 if released, 0 if the caller did not hold it.
-- Touches: GET and DEL on KEYS[1].

if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
