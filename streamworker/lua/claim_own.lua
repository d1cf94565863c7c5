-- claim_own.lua: deliver again, to the caller, entries it failed and still owns (a retry).
--
-- KEYS[1]  the stream
-- ARGV[1]  consumer group
-- ARGV[2]  consumer (the caller)
-- ARGV[3…] entry ids due for a retry
--
-- Returns: {claimed, deleted} where claimed is a list of {id, fields, delivery_count} (the counter
-- after this delivery) and deleted lists ids that were deleted from the stream while pending (XCLAIM
-- drops those from the PEL). Ids another consumer owns now are skipped: that consumer handles them.
-- Touches: XPENDING and XCLAIM on KEYS[1].

local claimed = {}
local deleted = {}
for i = 3, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
  if #p == 1 and p[1][2] == ARGV[2] then
    local e = redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i])
    if #e == 0 then
      deleted[#deleted + 1] = ARGV[i]
    else
      claimed[#claimed + 1] = {e[1][1], e[1][2], p[1][4] + 1}
    end
  end
end
return {claimed, deleted}
