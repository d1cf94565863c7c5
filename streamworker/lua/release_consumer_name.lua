-- release_consumer_name.lua: give up a consumer name's record if the caller owns it (a graceful
-- stop), so that the next start takes the name at once.
--
-- KEYS[1]  the name's record ({S}:consumer:G:NAME)
-- ARGV[1]  the caller's token
--
-- Returns: 1 if released, 0 if the caller did not own it.
-- Touches: HGET and DEL on KEYS[1].

if redis.call('HGET', KEYS[1], 'token') == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
