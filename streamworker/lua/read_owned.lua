-- read_owned.lua: XREADGROUP for the holder of the ordering lease, and for nobody else.
--
-- KEYS[1]  the lease key
-- KEYS[2]  the stream
-- ARGV[1]  consumer group
-- ARGV[2]  consumer (the caller)
-- ARGV[3]  COUNT
-- ARGV[4]  the id to read from: '>' (new entries) or an id (the caller's own pending entries)
--
-- Returns: -1 when the caller does not hold the lease (nothing read); otherwise {entries, last}
-- where entries is XREADGROUP's list for KEYS[2] (empty when there is nothing) and last is, for
-- a '>' read that found nothing, the group's last-delivered id ('' otherwise): the caller then
-- waits with a plain XREAD BLOCK from it, which has no effect on the group.
-- Touches: GET on KEYS[1]; XREADGROUP and XINFO GROUPS on KEYS[2].
--
-- Why a script: an entry enters a consumer's PEL only by a read. Checking the lease in the same
-- script means a consumer that lost its lease (stalled past the TTL) can never take new entries,
-- so the entries the next holder claims when it takes the lease are all there is to replay.

if redis.call('GET', KEYS[1]) ~= ARGV[2] then
  return -1
end
local reply = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', ARGV[3], 'STREAMS',
  KEYS[2], ARGV[4])
local entries = {}
if reply and reply[1] then
  entries = reply[1][2]
end
local last = ''
if ARGV[4] == '>' and #entries == 0 then
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[2])) do
    local info = {}
    for j = 1, #g, 2 do
      info[g[j]] = g[j + 1]
    end
    if info['name'] == ARGV[1] then
      last = info['last-delivered-id']
    end
  end
end
return {entries, last}
