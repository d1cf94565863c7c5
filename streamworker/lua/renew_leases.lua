-- renew_leases.lua: keep the entries this consumer is working on from being reclaimed.
--
-- KEYS[1]  the stream
-- ARGV[1]  consumer group
-- ARGV[2]  consumer (the caller)
-- ARGV[3…] entry ids the caller holds (in flight, or waiting for a retry)
--
-- Returns: the ids that are no longer the caller's (acked, claimed by another consumer, or deleted).
-- Touches: XPENDING and XCLAIM … JUSTID on KEYS[1].
--
-- XCLAIM with min-idle 0 and JUSTID resets an entry's idle time without counting a delivery. It
-- would also take an entry that another consumer has meanwhile claimed, so ownership is checked
-- first, in the same script, where nothing can interleave.

local lost = {}
for i = 3, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
  if #p == 1 and p[1][2] == ARGV[2] then
    local kept = redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'JUSTID')
    if #kept == 0 then
      lost[#lost + 1] = ARGV[i]  -- deleted from the stream: XCLAIM dropped it from the PEL
    end
  else
    lost[#lost + 1] = ARGV[i]
  end
end
return lost
