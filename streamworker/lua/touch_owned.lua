-- touch_owned.lua: restart the lease clock of a batch whose read or claim reply came late.
--
-- KEYS[1]  the stream
-- ARGV[1]  consumer group
-- ARGV[2]  consumer (the caller)
-- ARGV[3]  the smallest entry id of the batch
-- ARGV[4]  the largest entry id of the batch
-- ARGV[5…] the batch's entry ids
--
-- Returns: one status per id of ARGV[5…], in the same order:
--   0  pending for the caller: its idle time is now 0 (no delivery counted)
--   1  not pending any more (acked, e.g. by a consumer that claimed it meanwhile)
--   2  pending, but owned by another consumer (claimed away)
--   3  owned by the caller but deleted from the stream while pending (XCLAIM dropped it)
-- Touches: XPENDING and XCLAIM … JUSTID on KEYS[1] (the only key: runs on Redis Cluster).
--
-- Why: XREADGROUP and XAUTOCLAIM start an entry's idle time when the server runs them, not when
-- the reply arrives. A reply that took longer than a part of claim_idle_ms may hand the caller
-- entries another consumer has claimed (and processed) meanwhile. XCLAIM with min-idle 0 and
-- JUSTID resets the idle time without counting a delivery, but it would also take an entry
-- another consumer owns; so ownership is read first, in the same script, where nothing can
-- interleave.
--
-- One XPENDING over [smallest, largest] filtered by the caller lists its entries; only ids not
-- among them (claimed away, acked, or beyond a reply cut short by COUNT) cost an XPENDING each.

local stream, group, consumer = KEYS[1], ARGV[1], ARGV[2]
local n = #ARGV - 4

local mine = {}
for _, row in ipairs(redis.call('XPENDING', stream, group, ARGV[3], ARGV[4], n + 64, consumer)) do
  mine[row[1]] = true
end

local status, owned = {}, {}
for i = 5, #ARGV do
  local id = ARGV[i]
  if mine[id] then
    owned[#owned + 1] = id
    status[i - 4] = 0
  else
    local p = redis.call('XPENDING', stream, group, id, id, 1)
    if #p == 0 then
      status[i - 4] = 1
    elseif p[1][2] ~= consumer then
      status[i - 4] = 2
    else
      owned[#owned + 1] = id
      status[i - 4] = 0
    end
  end
end

-- XCLAIM returns the ids it kept; an owned id it does not return was deleted from the stream
-- (Redis 7 removes such an entry from the PEL). Chunks keep unpack() within Lua's stack limit.
local kept = {}
for i = 1, #owned, 1000 do
  local args = {'XCLAIM', stream, group, consumer, 0}
  for j = i, math.min(i + 999, #owned) do
    args[#args + 1] = owned[j]
  end
  args[#args + 1] = 'JUSTID'
  for _, id in ipairs(redis.call(unpack(args))) do
    kept[id] = true
  end
end
for i = 5, #ARGV do
  if status[i - 4] == 0 and not kept[ARGV[i]] then
    status[i - 4] = 3
  end
end
return status
