-- purge_dead_letters.lua: delete dead letters for good, and nothing that is not one.
--
-- KEYS[1]  the dead-letter stream
-- ARGV     the ids of the dead letters to delete (one or more)
--
-- Returns: {deleted, refused, gone}: how many entries were deleted; how many were left alone
-- because they carry no 'dlq_stream' field (not a streamworker dead letter: a live entry of a
-- stream named by mistake); how many were not there (already replayed or purged).
-- Touches: XRANGE and XDEL on KEYS[1].
--
-- The check and the delete are one script, so whatever the form or the page said, an entry
-- without the dead-letter provenance is never deleted by a purge.

local deleted, refused, gone = 0, 0, 0
for _, id in ipairs(ARGV) do
  local e = redis.call('XRANGE', KEYS[1], id, id)
  if #e == 0 then
    gone = gone + 1
  else
    local f = e[1][2]
    local dead = false
    for i = 1, #f - 1, 2 do
      if f[i] == 'dlq_stream' then
        dead = true
        break
      end
    end
    if dead then
      deleted = deleted + redis.call('XDEL', KEYS[1], id)
    else
      refused = refused + 1
    end
  end
end
return {deleted, refused, gone}
