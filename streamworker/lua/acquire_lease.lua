-- acquire_lease.lua: take or renew the ordering lease of (stream, group) for the caller.
--
-- KEYS[1]  the lease key ({S}:lease:G, in the stream's slot)
-- KEYS[2]  the stream
-- ARGV[1]  consumer group
-- ARGV[2]  consumer (the caller)
-- ARGV[3]  time to live of the lease in ms
--
-- Returns: {1, n} the lease was free and is now the caller's, and the n entries pending for
-- other consumers of the group were claimed to the caller (XAUTOCLAIM … JUSTID: no delivery is
-- counted); {2, 0} the caller held it and it is renewed; {0, pttl} another consumer holds it
-- for pttl more ms.
-- Touches: GET, SET PX, PEXPIRE, PTTL on KEYS[1]; XAUTOCLAIM on KEYS[2].
--
-- Why the claim is here: only the lease holder reads (read_owned.lua checks the lease in the
-- same script as its XREADGROUP), so the entries pending for others when the lease changes hands
-- are all that the previous holder read and did not finish. Claiming them in the script that
-- takes the lease means no read of the new holder can come before them, so the new holder
-- replays them first, in id order. The claim runs before the SET: if the group is missing the
-- script fails with NOGROUP having written nothing.

local holder = redis.call('GET', KEYS[1])
if holder == ARGV[2] then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {2, 0}
end
if holder then
  return {0, redis.call('PTTL', KEYS[1])}
end

local claimed = 0
local cursor = '0-0'
repeat
  local reply = redis.call('XAUTOCLAIM', KEYS[2], ARGV[1], ARGV[2], 0, cursor, 'COUNT', 1000, 'JUSTID')
  cursor = reply[1]
  claimed = claimed + #reply[2]
until cursor == '0-0'

redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return {1, claimed}
