-- delete_consumer.lua: delete a consumer that is idle and holds nothing, and only then.
--
-- KEYS[1]  the stream
-- ARGV[1]  consumer group
-- ARGV[2]  consumer to delete
-- ARGV[3]  minimum idle time in ms
--
-- Returns: 1 if deleted, 0 if it holds pending entries, is not idle long enough, or is unknown.
-- Touches: XINFO CONSUMERS and XGROUP DELCONSUMER on KEYS[1].
--
-- DELCONSUMER drops the consumer's pending entries unacknowledged, which loses them. Checking
-- "pending = 0" and deleting in one script closes the gap in which the consumer could read again.

local consumers = redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])
for _, c in ipairs(consumers) do
  local info = {}
  for j = 1, #c, 2 do
    info[c[j]] = c[j + 1]
  end
  if info['name'] == ARGV[2] then
    if info['pending'] == 0 and info['idle'] >= tonumber(ARGV[3]) then
      redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
      return 1
    end
    return 0
  end
end
return 0
