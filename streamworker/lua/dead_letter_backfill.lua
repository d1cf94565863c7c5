-- dead_letter_backfill.lua: dead-letter one entry that a Spark backfill failed to handle, once.
--
-- KEYS[1]  the dead-letter stream
-- KEYS[2]  the backfill's dead-letter record (hash: entry id -> dead-letter id); same hash tag
-- ARGV[1]  the source stream
-- ARGV[2]  entry id
-- ARGV[3]  consumer group (of the handler)
-- ARGV[4]  consumer (the backfill's name)
-- ARGV[5]  error text ("<type>: <message>")
-- ARGV[6]  handler name
-- ARGV[7]  time in ms (the caller's clock)
-- ARGV[8]  how long the record is kept, in ms
-- ARGV[9…] the entry's fields and values
--
-- Returns: the dead-letter entry id (the earlier one when this entry was dead-lettered before:
-- a retried Spark task adds no second dead letter).
-- Touches: HGET/HSET/PEXPIRE on KEYS[2], XADD on KEYS[1].
--
-- The entry carries the same provenance fields as dead_letter.lua writes for live workers, so
-- `streamworker dlq` tools read both alike. Unlike a live worker's, the entry is not in the
-- group's PEL (a backfill reads the stream, not the group): there is nothing to XACK.

--!include dead_letter_args

local done = redis.call('HGET', KEYS[2], ARGV[2])
if done then
  return done
end
local args = dead_letter_args(KEYS[1], ARGV, 9, ARGV[1], ARGV[2], ARGV[3], ARGV[4], '1', ARGV[5],
                              ARGV[6], ARGV[7])
local dlq_id = redis.call('XADD', unpack(args))
redis.call('HSET', KEYS[2], ARGV[2], dlq_id)
redis.call('PEXPIRE', KEYS[2], ARGV[8])
return dlq_id
