-- safe_trim.lua: trim a stream below the oldest entry anyone still needs, atomically.
--
-- KEYS[1]  the stream
-- KEYS[2]  its Spark cursor hash (field = cursor name, value = the last id that reader has
--          committed); same hash tag as KEYS[1]
-- ARGV[1…] cursor names that must exist (e.g. the archive's): without them nothing is trimmed
--
-- The floor is the smallest of:
--   * per consumer group: its oldest pending entry, or, with nothing pending, the first entry
--     after its last-delivered id (an entry not delivered yet must stay);
--   * per cursor: the first entry after the cursor's id.
-- A group or cursor that has consumed the whole stream sets no bound. Entries below the floor
-- are removed with an exact XTRIM MINID (never "~": approximate trimming may keep or remove
-- whole nodes). With no group and no cursor at all nothing is trimmed: nobody vouches for the
-- entries.
--
-- Returns: {trimmed, floor, groups, cursors}; floor is the MINID used ("" when nothing was
-- trimmed because nothing bounds the stream, "+" when everything was consumed by everyone).
-- Errors (nothing trimmed): a required cursor is missing.
-- Touches: EXISTS, XINFO GROUPS, XPENDING, XRANGE, XTRIM on KEYS[1]; HGETALL on KEYS[2].
--
-- Why one script: the floor read from XINFO/XPENDING and the XTRIM must see the same state. Done
-- in two steps, an XGROUP CREATE or SETID to an older id (or a new cursor) between them could
-- have its entries trimmed away.

local function pad(part)
  return string.rep('0', 20 - #part) .. part
end

-- ids compare as zero-padded strings (Lua numbers cannot hold every 64-bit part)
local function sortable(id)
  local dash = string.find(id, '-', 1, true)
  return pad(string.sub(id, 1, dash - 1)) .. '-' .. pad(string.sub(id, dash + 1))
end

local function first_after(id)
  local entry = redis.call('XRANGE', KEYS[1], '(' .. id, '+', 'COUNT', 1)
  if #entry == 0 then
    return nil
  end
  return entry[1][1]
end

local cursors = redis.call('HGETALL', KEYS[2])
local present = {}
for i = 1, #cursors, 2 do
  present[cursors[i]] = cursors[i + 1]
end
for i = 1, #ARGV do
  if present[ARGV[i]] == nil then
    return redis.error_reply('ERR safe_trim: cursor ' .. ARGV[i] .. ' of ' .. KEYS[1] ..
      ' is missing; nothing trimmed')
  end
end

if redis.call('EXISTS', KEYS[1]) == 0 then
  return {0, '', 0, #cursors / 2}
end

local floor = nil
local bounds = 0
local function consider(id)
  if id ~= nil and (floor == nil or sortable(id) < sortable(floor)) then
    floor = id
  end
end

local groups = redis.call('XINFO', 'GROUPS', KEYS[1])
for _, group in ipairs(groups) do
  local info = {}
  for i = 1, #group, 2 do
    info[group[i]] = group[i + 1]
  end
  bounds = bounds + 1
  if tonumber(info['pending']) > 0 then
    local summary = redis.call('XPENDING', KEYS[1], info['name'])
    consider(summary[2])
  else
    consider(first_after(info['last-delivered-id']))
  end
end
for i = 1, #cursors, 2 do
  bounds = bounds + 1
  consider(first_after(cursors[i + 1]))
end

if bounds == 0 then
  return {0, '', #groups, #cursors / 2}
end
local trimmed
if floor == nil then
  trimmed = redis.call('XTRIM', KEYS[1], 'MAXLEN', 0)
  floor = '+'
else
  trimmed = redis.call('XTRIM', KEYS[1], 'MINID', floor)
end
return {trimmed, floor, #groups, #cursors / 2}
