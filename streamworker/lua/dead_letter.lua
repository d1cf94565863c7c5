-- dead_letter.lua: move one pending entry to the dead-letter stream, atomically.
--
-- KEYS[1]  the source stream
-- KEYS[2]  the dead-letter stream (same hash tag as KEYS[1])
-- ARGV[1]  consumer group
-- ARGV[2]  entry id
-- ARGV[3]  consumer that must own the entry (the caller)
-- ARGV[4]  delivery count
-- ARGV[5]  error text ("<type>: <message>")
-- ARGV[6]  handler name
-- ARGV[7]  time in ms (the caller's clock; scripts must not read the clock for replication)
-- ARGV[8]  optional: the handler's traceback, already bounded by the caller; kept as
--          'dlq_traceback' when given and not empty (an additive field: readers that do not know
--          it see the same provenance as before)
--
-- Returns: the new dead-letter entry id; 0 when the entry is no longer pending (already acked or
-- dead-lettered: a retried call is a no-op); -1 when another consumer owns it now (claimed away:
-- that consumer decides).
-- Touches: XPENDING/XRANGE/XACK on KEYS[1], XADD on KEYS[2].
--
-- The XADD and the XACK happen in one script, so a crash leaves either both or neither: the entry
-- is never acked without its dead letter, and never dead-lettered twice.

--!include dead_letter_args

local pending = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if #pending == 0 then
  return 0
end
if pending[1][2] ~= ARGV[3] then
  return -1
end

local entry = redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[2])
local fields = {}
if #entry > 0 then
  fields = entry[1][2]
end

local args = dead_letter_args(KEYS[2], fields, 1, KEYS[1], ARGV[2], ARGV[1], ARGV[3], ARGV[4],
                              ARGV[5], ARGV[6], ARGV[7])
if ARGV[8] and ARGV[8] ~= '' then
  args[#args + 1] = 'dlq_traceback'
  args[#args + 1] = ARGV[8]
end
if #entry == 0 then
  args[#args + 1] = 'dlq_body_missing'
  args[#args + 1] = '1'
end

local dlq_id = redis.call('XADD', unpack(args))
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
return dlq_id
