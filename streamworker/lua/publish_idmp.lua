-- publish_idmp.lua: a keyed publish by the server's own idempotency (XADD … IDMP, Redis 8.6+),
-- telling a new entry from a retry. A duplicate XADD IDMP answers the original entry's id just
-- as a new add answers its own, so the script reads the stream's last generated id first: an id
-- above it is a new entry, any other is the one an earlier publish of the key added.
--
-- KEYS[1]   the stream
-- KEYS[2]   the key's marker as publish_once.lua names it ({S}:published:<key>, in KEYS[1]'s
--           slot): read only, never written here. A marker left by the marker script (before
--           the server had IDMP, a producer with use_idmp=False, a delayed publish) still
--           makes this publish a duplicate, so a retry across the switch adds nothing.
-- ARGV[1]   the producer id (pid)
-- ARGV[2]   the idempotent id (iid): the publish's idempotency key
-- ARGV[3]   IDMP-DURATION wanted, seconds (1..86400)
-- ARGV[4]   IDMP-MAXSIZE wanted (1..10000)
-- ARGV[5]   n, the number of trimming words that follow: 0, or 3 ("MAXLEN"|"MINID", "~"|"=",
--           the threshold)
-- ARGV[6…]  the n trimming words, then field, value, field, value, …
--
-- Returns {1, id}: added as entry id; {0, id}: the key was published already, as entry id, and
-- nothing was added (publish_once.lua's reply). XADD errors are raised as they are.
-- Touches: GET on KEYS[2] (and SET KEEPTTL when found, as publish_once.lua); on KEYS[1]:
-- XINFO STREAM; when the stream is missing, XGROUP CREATE … MKSTREAM
-- and XGROUP DESTROY (an empty stream, for XCFGSET); XCFGSET when the stream's settings are
-- below the wanted ones; XADD … IDMP; on a duplicate, XSETID to the unchanged last id.

-- a > b for two entry ids "<ms>-<seq>" (decimal strings without leading zeros: compared as
-- strings, since 64-bit values do not fit Lua's numbers)
local function above(a, b)
  local ams, aseq = string.match(a, '^(%d+)-(%d+)$')
  local bms, bseq = string.match(b, '^(%d+)-(%d+)$')
  if ams ~= bms then
    if #ams ~= #bms then return #ams > #bms end
    return ams > bms
  end
  if #aseq ~= #bseq then return #aseq > #bseq end
  return aseq > bseq
end

local seen = redis.call('GET', KEYS[2])
if seen then
  -- Re-set as it is: a write, so that a WAIT after this call covers the earlier add.
  redis.call('SET', KEYS[2], seen, 'KEEPTTL')
  return {0, seen}
end

local want_duration = tonumber(ARGV[3])
local want_maxsize = tonumber(ARGV[4])
local last = '0-0'
local duration, maxsize = 0, 0

-- XINFO STREAM has both the last generated id (exact, deleted entries included, unlike
-- XREVRANGE's last entry) and, on a stream with IDMP settings, the settings. An error reply
-- (no such key; or another type, which the XGROUP below refuses with WRONGTYPE) is no stream.
local info = redis.pcall('XINFO', 'STREAM', KEYS[1])
if not info.err then
  for i = 1, #info, 2 do
    local name = info[i]
    if name == 'last-generated-id' then
      last = info[i + 1]
    elseif name == 'idmp-duration' then
      duration = tonumber(info[i + 1])
    elseif name == 'idmp-maxsize' then
      maxsize = tonumber(info[i + 1])
    end
  end
else
  -- XCFGSET needs the stream, and an XADD IDMP before it would be forgotten by it: make the
  -- stream empty first. A group made and dropped at once leaves no trace (no entry, no id).
  redis.call('XGROUP', 'CREATE', KEYS[1], 'streamworker-idmp', '$', 'MKSTREAM')
  redis.call('XGROUP', 'DESTROY', KEYS[1], 'streamworker-idmp')
end

if duration < want_duration or maxsize < want_maxsize then
  -- Only ever raised, never lowered: producers asking for different windows settle on the
  -- longest instead of resetting each other. XCFGSET forgets every iid the stream holds, so
  -- this runs once per stream and setting, not per publish.
  redis.call('XCFGSET', KEYS[1],
    'IDMP-DURATION', math.max(duration, want_duration),
    'IDMP-MAXSIZE', math.max(maxsize, want_maxsize))
end

local args = {'XADD', KEYS[1], 'IDMP', ARGV[1], ARGV[2]}
local fields_from = 6 + tonumber(ARGV[5])
for i = 6, #ARGV do
  if i == fields_from then
    table.insert(args, '*')  -- the id goes between the trimming words and the fields
  end
  table.insert(args, ARGV[i])
end
local id = redis.call(unpack(args))
if above(id, last) then
  return {1, id}
end
-- A duplicate writes nothing, so a WAIT after it would not wait for the earlier add to reach
-- the replicas. XSETID to the id it already has is a write that changes nothing and is
-- replicated behind that add (publish_once.lua re-sets its marker for the same reason).
redis.call('XSETID', KEYS[1], last)
return {0, id}
