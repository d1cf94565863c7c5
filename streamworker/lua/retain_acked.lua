-- retain_acked.lua: retention="acked": delete entries that nobody needs any more.
--
-- KEYS[1]   the stream
-- KEYS[2]   its Spark cursor hash (field = cursor name, value = the last id that reader has
--           committed, e.g. the archive's); same hash tag as KEYS[1]
-- ARGV[1…]  entry ids a handler has just acked or dead-lettered
--
-- An id above the lowest Spark cursor is kept: the archive has not read it yet (safe_trim
-- removes it later, once archived). The others go through XDELEX … ACKED, which deletes an
-- entry only when no consumer group has it pending and every group has read past it
-- (https://redis.io/docs/latest/commands/xdelex/): an entry another group has not acked yet
-- stays, whatever this handler did.
--
-- Returns the number of entries deleted.
-- Touches: HGETALL on KEYS[2]; XDELEX on KEYS[1].
--
-- Why one script: a cursor published between the check and the delete could not keep an entry
-- it had not read yet.

local function pad(part)
  return string.rep('0', 20 - #part) .. part
end

-- ids compare as zero-padded strings (Lua numbers cannot hold every 64-bit part)
local function sortable(id)
  local dash = string.find(id, '-', 1, true)
  if dash == nil then
    return pad(id) .. '-' .. pad('0')
  end
  return pad(string.sub(id, 1, dash - 1)) .. '-' .. pad(string.sub(id, dash + 1))
end

local lowest = nil
local cursors = redis.call('HGETALL', KEYS[2])
for i = 2, #cursors, 2 do
  local at = sortable(cursors[i])
  if lowest == nil or at < lowest then
    lowest = at
  end
end

local ids = {}
for i = 1, #ARGV do
  if lowest == nil or sortable(ARGV[i]) <= lowest then
    table.insert(ids, ARGV[i])
  end
end
if #ids == 0 then
  return 0
end

local deleted = 0
local args = {'XDELEX', KEYS[1], 'ACKED', 'IDS', #ids}
for _, id in ipairs(ids) do
  table.insert(args, id)
end
for _, result in ipairs(redis.call(unpack(args))) do
  if result == 1 then
    deleted = deleted + 1
  end
end
return deleted
