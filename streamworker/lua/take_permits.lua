-- take_permits.lua: the shared rate limit of one handler (rate_limit=): a GCRA (generic cell
-- rate algorithm) over every worker of the group, and the group's pause after a RateLimited.
--
-- KEYS[1]  the limit's state ({S}:rate:G): the theoretical arrival time (TAT), in µs
-- KEYS[2]  the pause ({S}:rate:G:pause, same hash tag): exists while the handler is paused,
--          its time to live is what is left of the pause
-- ARGV[1]  'take' (grant up to ARGV[4] permits now), 'give' (hand back ARGV[4] permits granted
--          but not used) or 'pause' (pause the handler for ARGV[4] ms, unless already paused longer)
-- ARGV[2]  the emission interval in µs: one permit per interval (an integer >= 1)
-- ARGV[3]  the burst: permits that may be taken at once after an idle time (an integer >= 1)
-- ARGV[4]  take: permits wanted (>= 1); give: permits handed back; pause: milliseconds
-- ARGV[5]  now in µs, or '' for the server's clock (TIME): the workers' clocks play no part, so
--          clock skew between their hosts cannot loosen the limit. Tests pass a fixed now.
--
-- Returns {granted, wait_us, allowance}: permits granted by this call (take only, else 0); µs
-- until the next permit can be granted (0 while some are left; the pause's remainder while
-- paused); permits left for the group right now after this call.
-- Touches: GET, SET PX on KEYS[1]; PTTL, SET PX on KEYS[2]. Both keys expire by themselves once
-- the limit is back at a full burst, or the pause is over.
--
-- GCRA: each permit moves TAT one interval later; a permit conforms at `now` while
-- TAT - now <= (burst - 1) * interval. So at most `burst` go at once, then one per interval:
-- in any window of w µs at most burst - 1 + ceil(w / interval) permits are granted.
-- A permit handed back moves TAT one interval earlier again (a worker asked for COUNT permits
-- and its read brought fewer entries); permits are handed back only when unused.
-- Numbers are kept below 2^53 µs (year 2255), exact in Lua 5.1's doubles; string.format('%d')
-- writes them in full (tostring would write 1.7e+15).

local op = ARGV[1]
local interval = tonumber(ARGV[2])
local burst = tonumber(ARGV[3])
local n = tonumber(ARGV[4])
local now
if ARGV[5] ~= nil and ARGV[5] ~= '' then
  now = tonumber(ARGV[5])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local tau = (burst - 1) * interval

local stored = tonumber(redis.call('GET', KEYS[1]))
local tat = stored or now
if tat < now then
  tat = now
end

local function left(at)
  -- permits that conform now when TAT is `at`
  local room = math.floor((now + tau - at) / interval) + 1
  if room < 0 then
    return 0
  end
  return room
end

local function keep(at)
  -- store TAT until it is back at now (a full burst) and a second more (harmless: a TAT in the
  -- past is a full burst; it covers a caller's `now` that runs behind the server's clock), so
  -- no key is left behind by an idle limit
  local ttl_ms = math.ceil((at - now) / 1000)
  if ttl_ms > 0 then
    redis.call('SET', KEYS[1], string.format('%d', at), 'PX', ttl_ms + 1000)
  else
    redis.call('DEL', KEYS[1])
  end
end

if op == 'pause' then
  local ms = math.floor(n)
  if ms > 0 and redis.call('PTTL', KEYS[2]) < ms then
    redis.call('SET', KEYS[2], '1', 'PX', ms)
  end
  return {0, ms * 1000, 0}
end

if op == 'give' then
  if stored then
    keep(stored - n * interval)
    tat = math.max(stored - n * interval, now)
  end
  return {0, 0, math.min(left(tat), burst)}
end

if op ~= 'take' then
  return redis.error_reply('ERR take_permits.lua: unknown operation ' .. tostring(op))
end

local paused = redis.call('PTTL', KEYS[2])
if paused > 0 then
  return {0, paused * 1000, 0}
end
local room = left(tat)
local granted = math.min(n, room)
if granted > 0 then
  tat = tat + granted * interval
  keep(tat)
end
local wait = 0
if room - granted <= 0 then
  wait = tat - tau - now
  if wait < 0 then
    wait = 0
  end
end
return {granted, wait, room - granted}
