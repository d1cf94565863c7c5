-- check_ownership.lua: before the handlers run, which messages of a batch are still the caller's.
--
-- KEYS[1]  the consumed stream
-- KEYS[2]  the business-key record of (stream, group): a sorted set, member = business key,
--          score = when its message was applied (ms); same hash tag as KEYS[1]
-- ARGV[1]  consumer group
-- ARGV[2]  consumer (the caller)
-- ARGV[3]  the retention cut-off in ms (now - dedup_window_ms), or "" when the handler has no
--          dedup_field
-- ARGV[4]  the smallest entry id of the batch
-- ARGV[5]  the largest entry id of the batch
-- ARGV[6]  the number of entries N
-- ARGV[7]  the N entry ids, separated by single spaces
-- ARGV[8…] with a cut-off: the business key of each entry, in the same order
--
-- Returns: 0 when every entry is pending for the caller and there is no business key to look
-- up (the common case, answered without a per-entry reply); otherwise one status per entry:
--   0  pending and owned by the caller: run the handler
--   1  not pending (acked already, e.g. by a consumer that had claimed it): skip
--   2  pending but owned by another consumer (claimed away): skip
--   3  owned by the caller, but its business key was applied within the window: skip the
--      handler; apply_effects.lua acks it if that is still so
-- Touches: XPENDING on KEYS[1]; ZMSCORE on KEYS[2]. Writes nothing.
--
-- This is advice, not the decision: apply_effects.lua checks ownership and the business key
-- again, atomically with the writes. Checking here saves running handlers (and their side
-- effects outside Redis) for messages another consumer has already taken.
--
-- One XPENDING over [smallest, largest] filtered by the caller lists its entries; only ids not
-- among them (claimed away, acked, or beyond a reply cut short by COUNT) cost an XPENDING each.

--!include ownership_check

local stream, record = KEYS[1], KEYS[2]
local group, consumer, cutoff = ARGV[1], ARGV[2], ARGV[3]
local limit = cutoff ~= '' and tonumber(cutoff) or nil
local n = tonumber(ARGV[6])

local owned, listed = {}, {}
for i, row in ipairs(redis.call('XPENDING', stream, group, ARGV[4], ARGV[5], n + 64, consumer)) do
  owned[row[1]] = true
  listed[i] = row[1]
end
if not limit and table.concat(listed, ' ') == ARGV[7] then
  return 0
end

local ownership = ownership_check(stream, group, consumer, owned)

local scores = {}
if limit then
  for i = 1, n, 1000 do
    local chunk = redis.call('ZMSCORE', record, unpack(ARGV, 7 + i, 7 + math.min(i + 999, n)))
    for j, score in ipairs(chunk) do
      scores[i + j - 1] = score
    end
  end
end

local result = {}
local i = 0
for id in string.gmatch(ARGV[7], '[^ ]+') do
  i = i + 1
  local status = ownership(id)
  if status == 0 and limit then
    local score = scores[i]
    if score and tonumber(score) >= limit then
      status = 3
    end
  end
  result[i] = status
end
return result
