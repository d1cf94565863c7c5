-- schedule_delayed.lua: keep one delayed entry until it is due (delayed delivery); with an
-- idempotency key, the schedule and the key's marker are one atomic step, so a retried publish
-- schedules nothing twice.
--
-- KEYS[1]   the stream's delayed set ({S}:delayed): score = due time in epoch ms, member = the
--           entry's envelope (streamworker.delayed.encode_envelope; unique by its nonce)
-- KEYS[2]   optional: the idempotency key's marker ({S}:published:<key>), same hash tag
-- ARGV[1]   the due time in epoch ms (decided by the caller: this script reads no clock)
-- ARGV[2]   the envelope
-- ARGV[3]   the marker's time to live in ms (the idempotency window counted from the due time);
--           ignored without KEYS[2]
--
-- Returns {1, due}: scheduled for due; {0, recorded}: the key was recorded already (recorded
-- is "delayed:<due>" for an earlier delayed publish, or the entry id of an immediate one) and
-- nothing was scheduled.
-- Touches: GET and SET PX on KEYS[2] (SET KEEPTTL when found); ZADD on KEYS[1].

if KEYS[2] then
  local seen = redis.call('GET', KEYS[2])
  if seen then
    -- Re-set as it is: a write, so that a WAIT after this call (wait_replicas) waits for the
    -- replicas to reach it, and with it the earlier schedule it records.
    redis.call('SET', KEYS[2], seen, 'KEEPTTL')
    return {0, seen}
  end
end

redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])
if KEYS[2] then
  redis.call('SET', KEYS[2], 'delayed:' .. ARGV[1], 'PX', ARGV[3])
end
return {1, ARGV[1]}
