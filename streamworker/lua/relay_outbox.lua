-- relay_outbox.lua: add a batch of outbox rows to one stream, in order, each unless its
-- publish key was recorded within the window (the same marker as publish_once.lua).
--
-- KEYS[1]     the stream
-- KEYS[2…N+1] the markers of the N rows' publish keys, in row order: strings holding the id of
--             the entry each added, with a time to live of the window; same hash tag as KEYS[1]
-- ARGV[1]     the window in ms (the markers' time to live), >= 1
-- ARGV[2…]    per row, in order: trim ("" | "MAXLEN" | "MINID"), "~" or "=", the threshold, the
--             field count F, then F field, value pairs
--
-- Returns one {added, id} per row, in order: {1, id} added now as entry id, {0, id} its key was
-- recorded already (nothing added). One call is all or nothing for the script cache (NOSCRIPT runs
-- none of it), so a resend keeps the rows' order; an XADD error (a stream key of another type)
-- raises before anything of the row is written, after the rows before it.
-- Touches: GET and SET PX on KEYS[2…] (SET KEEPTTL on a marker found, so that a WAIT after the
-- call covers the earlier add it records); XADD (with its trimming) on KEYS[1].

--!include xadd_args

local out = {}
local a = 2
for k = 2, #KEYS do
  local trim, approx, threshold, nfields = ARGV[a], ARGV[a + 1], ARGV[a + 2], tonumber(ARGV[a + 3])
  local first = a + 4
  a = first + 2 * nfields
  local seen = redis.call('GET', KEYS[k])
  if seen then
    redis.call('SET', KEYS[k], seen, 'KEEPTTL')
    out[#out + 1] = {0, seen}
  else
    local args = xadd_args(KEYS[1], trim, approx, threshold, '*', ARGV, first, a - 1)
    local id = redis.call(unpack(args))
    redis.call('SET', KEYS[k], id, 'PX', ARGV[1])
    out[#out + 1] = {1, id}
  end
end
return out
