-- claim_consumer_name.lua: take, renew or take over the record that says which live process owns
-- a consumer name in one (stream, group).
--
-- KEYS[1]  the name's record ({S}:consumer:G:NAME, a hash in the stream's slot)
-- ARGV[1]  the caller's token (unique per process start)
-- ARGV[2]  time to live in ms
-- ARGV[3]  a token the caller may replace (a dead previous owner's), or '' for none
-- ARGV[4…] field/value pairs to write (host, pid, started_at_ms, …; 'token' is added here)
--
-- Returns: {1, 0} the name was free (or held by the ARGV[3] token) and is now the caller's;
-- {2, 0} the caller held it and it is renewed; {0, pttl, token, host, pid} another process holds
-- it for pttl more ms.
-- Touches: HGET, HMGET, DEL, HSET, PEXPIRE, PTTL on KEYS[1].
--
-- The check and the write are one script: two processes starting at once cannot both see the
-- name free, and a renewal never overwrites a record that another process took meanwhile.

local holder = redis.call('HGET', KEYS[1], 'token')
local state = 2
if holder ~= ARGV[1] then
  if holder and holder ~= ARGV[3] then
    local who = redis.call('HMGET', KEYS[1], 'host', 'pid')
    return {0, redis.call('PTTL', KEYS[1]), holder, who[1] or '', who[2] or ''}
  end
  redis.call('DEL', KEYS[1])
  state = 1
end
redis.call('HSET', KEYS[1], 'token', ARGV[1], unpack(ARGV, 4))
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {state, 0}
