-- move_delayed.lua: move the delayed entries that are due into their stream, each exactly once
-- (delayed delivery; run by every worker that consumes the stream, any number at once).
--
-- KEYS[1]   the stream's delayed set ({S}:delayed; see schedule_delayed.lua)
-- KEYS[2]   the stream, same hash tag
-- ARGV[1]   now, in epoch ms (the caller's clock: this script reads none, so that its effects
--           replicate as they ran)
-- ARGV[2]   the most entries to move in this call (a bound on how long the script runs)
--
-- Each envelope is length-prefixed items "<len>:<bytes>": version "1", nonce, trimming (""
-- | "MAXLEN" | "MINID"), "~" | "=", threshold, then field, value, field, value, …
-- Every XADD is followed by the ZREM of its envelope in this one script: a script runs whole,
-- so however many movers run, an envelope is added once and removed once.
--
-- Returns {moved, left}: entries added to KEYS[2], and entries still in KEYS[1] afterwards.
-- An envelope that is not version 1 raises an error before anything of it is written.
-- Touches: ZRANGEBYSCORE, ZREM, ZCARD on KEYS[1]; XADD (with its trimming) on KEYS[2].

--!include xadd_args

local function items(s)
  local out, pos = {}, 1
  while pos <= #s do
    local colon = string.find(s, ':', pos, true)
    local size = tonumber(string.sub(s, pos, colon - 1))
    table.insert(out, string.sub(s, colon + 1, colon + size))
    pos = colon + size + 1
  end
  return out
end

local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
for _, member in ipairs(due) do
  local e = items(member)
  if e[1] ~= '1' then
    return redis.error_reply('ERR delayed entry in ' .. KEYS[1] .. ' is not a version-1 envelope')
  end
  redis.call(unpack(xadd_args(KEYS[2], e[3], e[4], e[5], '*', e, 6)))
  redis.call('ZREM', KEYS[1], member)
end
return {#due, redis.call('ZCARD', KEYS[1])}
