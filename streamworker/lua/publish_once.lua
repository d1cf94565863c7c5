-- publish_once.lua: XADD one entry unless its idempotency key was recorded within the window;
-- the XADD and the record are one atomic step, so a retried publish adds nothing.
--
-- KEYS[1]   the stream
-- KEYS[2]   the idempotency key's marker: a string holding the id of the entry it added, with a
--           time to live of the window; same hash tag as KEYS[1] ({S}:published:<key>)
-- ARGV[1]   the window in ms (the marker's time to live), >= 1
-- ARGV[2]   the entry id: "*" (generated) or an explicit "<ms>-<seq>"
-- ARGV[3]   trimming: "" (none), "MAXLEN" or "MINID"
-- ARGV[4]   "~" (approximate) or "=" (exact); ignored without trimming
-- ARGV[5]   the trimming threshold; ignored without trimming
-- ARGV[6…]  field, value, field, value, …
--
-- Returns {1, id}: added as entry id; {0, id}: the key was recorded already, for entry id, and
-- nothing was added. An XADD error (an explicit id not above the stream's last) is raised as is,
-- and nothing is recorded.
-- Touches: GET and SET PX on KEYS[2] (SET KEEPTTL when found); XADD (with its trimming) on KEYS[1].

--!include xadd_args

local seen = redis.call('GET', KEYS[2])
if seen then
  -- Re-set the marker as it is: a write, so that a WAIT after this call (wait_replicas) waits for
  -- the replicas to reach it, and with it (replication is in order) the earlier add it records.
  redis.call('SET', KEYS[2], seen, 'KEEPTTL')
  return {0, seen}
end

local id = redis.call(unpack(xadd_args(KEYS[1], ARGV[3], ARGV[4], ARGV[5], ARGV[2], ARGV, 6)))
redis.call('SET', KEYS[2], id, 'PX', ARGV[1])
return {1, id}
