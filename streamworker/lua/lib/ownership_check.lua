-- lib/ownership_check.lua: whose an entry of a consumer group's PEL is (included by
-- apply_effects.lua and check_ownership.lua).
--
-- ownership_check(stream, group, consumer, owned) returns a function ownership(id) that tells,
-- for one entry id of the stream:
--   0  pending and owned by the consumer
--   1  not pending (acked already, e.g. by a consumer that had claimed it)
--   2  pending but owned by another consumer (claimed away)
-- owned: a set (id -> true) of ids known to be pending for the consumer, answered without a call;
-- the caller fills it from one XPENDING over the batch's range filtered by the consumer, and may
-- fill it after this call. Any other id costs an XPENDING of its own (it can still be the
-- consumer's: beyond a reply cut short by COUNT).
-- Touches: XPENDING on the stream.

local function ownership_check(stream, group, consumer, owned)
  return function(id)
    if owned[id] then
      return 0
    end
    local p = redis.call('XPENDING', stream, group, id, id, 1)
    if #p == 0 then
      return 1
    elseif p[1][2] ~= consumer then
      return 2
    end
    return 0 -- the caller's, beyond a reply cut short by COUNT
  end
end
