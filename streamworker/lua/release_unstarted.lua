-- release_unstarted.lua: hand back entries a stopping consumer read but never started, so that
-- another consumer of the group takes them at once and their delivery does not count.
--
-- KEYS[1]  the stream
-- ARGV[1]  consumer group
-- ARGV[2]  consumer (the caller, the stopping one)
-- ARGV[3]  how: 'xnack' (the server has XNACK, Redis 8.8+) or 'xclaim' (the emulation)
-- ARGV[4]  'xclaim' only: the idle time (ms) to give each released entry; at least the
--          group's claim_idle_ms, so every other consumer's reclaimer may claim it at its next pass
-- ARGV[5…] the entry ids to release
--
-- Returns: the number of entries released.
-- Touches: XPENDING, then XNACK … SILENT or XCLAIM … IDLE RETRYCOUNT JUSTID, on KEYS[1] only
-- (runs on Redis Cluster).
--
-- Only entries still pending for the caller are released: one another consumer claimed
-- meanwhile is that consumer's now (XNACK names no consumer and would release it from under a
-- running handler). Ownership is read in the same script, where nothing can interleave.
--
-- The delivery counter ends as if the read had not happened: XNACK SILENT takes one off (the
-- XNACK page: "graceful shutdown where the delivery didn't count"); the emulation sets
-- RETRYCOUNT to the count minus one. The next claim (XAUTOCLAIM, XCLAIM) adds the one back.
-- JUSTID: the emulating XCLAIM must not count a delivery of its own.

local stream, group, consumer, how = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
local idle_ms = ARGV[4]

local released = 0
for i = 5, #ARGV do
  local id = ARGV[i]
  local p = redis.call('XPENDING', stream, group, id, id, 1, consumer)
  if #p == 1 then
    local count = tonumber(p[1][4])
    if how == 'xnack' then
      released = released + redis.call('XNACK', stream, group, 'SILENT', 'IDS', 1, id)
    else
      local retry = count - 1
      if retry < 0 then
        retry = 0
      end
      local kept = redis.call(
        'XCLAIM', stream, group, consumer, 0, id, 'IDLE', idle_ms, 'RETRYCOUNT', retry, 'JUSTID'
      )
      released = released + #kept
    end
  end
end
return released
