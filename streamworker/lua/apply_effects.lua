-- apply_effects.lua: for every message of a batch, atomically: check that the caller still owns
-- it, validate its effects, apply them, record its business key and XACK it.
--
-- KEYS[1]   the consumed stream
-- KEYS[2]   the business-key record of (stream, group): a sorted set, member = business key,
--           score = when its message was applied (ms); same hash tag as KEYS[1]
-- KEYS[3…]  every key the batch's effects write (on Redis Cluster: the slot of KEYS[1])
-- ARGV[1]   consumer group
-- ARGV[2]   consumer (the caller)
-- ARGV[3]   now in ms (the caller's clock): the score of newly applied business keys
-- ARGV[4]   the retention cut-off in ms (now - dedup_window_ms): keys applied before it are
--           forgotten; "" when the handler has no dedup_field
-- ARGV[5]   dedup_window_ms: the record expires this long after its last insert
-- ARGV[6]   the smallest entry id of the batch
-- ARGV[7]   the largest entry id of the batch
-- ARGV[8]   the layout, ASCII tokens separated by single spaces: the number of messages M, then
--           per message one token, "<id>" (no effects, no business key) or "<id>,<b>,<E>" (b:
--           the ARGV index of its business key, 0 for none; E: its effect count), followed by
--           its E effect tokens "<command>,<KEYS index of the key>,<ARGV index of the first
--           argument>,<argument count>" (command in lower case).
--           E = -1: the handler did not run because check_ownership.lua saw the business key
--           applied already; ack the message if that is still so.
-- ARGV[9…]  the business keys and the effects' arguments, as the layout points to them
--
-- Returns: 0 when every message was pending for the caller and had neither effects nor a
-- business key (the common case of handlers with effects outside Redis: answered with one
-- XPENDING and one XACK); otherwise one element per message, in order:
--   0  applied and acked
--   1  not pending (acked earlier, e.g. by a consumer that had claimed it): nothing done
--   2  pending but owned by another consumer (claimed away): nothing done
--   3  its business key was applied within the window: acked, its effects not applied
--   4  (E = -1 only) the business key's record expired since the check: nothing done
--   a string: an effect cannot apply (wrong type, not a number, overflow): nothing of that
--      message was written and it is not acked; the batch goes on
-- Touches: XPENDING and XACK on KEYS[1]; ZREMRANGEBYSCORE, ZSCORE, ZADD and PEXPIRE on KEYS[2];
-- TYPE, GET, HGET and the effect commands (SET DEL EXPIRE PEXPIRE INCRBY INCRBYFLOAT HSET HDEL
-- HINCRBY HINCRBYFLOAT SADD SREM ZADD ZINCRBY ZREM XADD RPUSH LPUSH) on KEYS[3…].
--
-- Why the PEL is the whole record: a message's effects and its XACK happen in this one script,
-- so "still pending for the caller" means "effects not applied yet". Once acked, an entry enters
-- the PEL again only by a deliberate rewind (XGROUP SETID, group re-creation, XCLAIM FORCE).
--
-- No partial effects: Redis does not roll back a script that fails half-way, so every effect of
-- a message is checked against the data (and against the message's own earlier effects, which
-- are simulated) before its first write. XACKs are sent in bulk, but always before the next
-- message's first write: even a script aborted by an unforeseen error leaves every message
-- before the failing one applied *and* acked.
--
-- Ownership: one XPENDING over [smallest, largest] filtered by the caller finds its entries; only
-- ids not among them (claimed away, acked, or beyond a reply cut short by COUNT) cost an
-- XPENDING each.

--!include ownership_check

local stream, record = KEYS[1], KEYS[2]
local group, consumer = ARGV[1], ARGV[2]
local now, cutoff, window = ARGV[3], ARGV[4], ARGV[5]
local dedup = cutoff ~= ''

local layout = {}

-- Lua numbers are doubles (exact to 2^53). Integer results are checked against 2^63 - 8192,
-- a bound that rounding cannot carry past the real int64 limit: a sum within 8192 of the limit
-- is refused even where Redis would take it, never the other way round.
local INT_LIMIT = 9223372036854767616

local function as_int(v)
  if type(v) == 'number' then
    if v == math.floor(v) and v > -INT_LIMIT and v < INT_LIMIT then
      return v
    end
    return nil
  end
  if v == '0' then
    return 0
  end
  -- Redis's string2ll: an optional '-', no leading zeros, no '+', no spaces, within int64.
  if not string.find(v, '^%-?[1-9]%d*$') then
    return nil
  end
  local neg = string.sub(v, 1, 1) == '-'
  local digits = neg and string.sub(v, 2) or v
  if #digits > 19 then
    return nil
  end
  if #digits == 19 and digits > (neg and '9223372036854775808' or '9223372036854775807') then
    return nil
  end
  return tonumber(v)
end

local function as_float(v)
  if type(v) == 'number' then
    return v
  end
  -- Redis's string2ld: no leading or trailing space; NaN is refused, and so is an infinite
  -- value (any increment of it gives an infinite result, which INCRBYFLOAT refuses).
  if v == '' or string.find(v, '^%s') or string.find(v, '%s$') then
    return nil
  end
  local n = tonumber(v)
  if n == nil or n ~= n or n == math.huge or n == -math.huge then
    return nil
  end
  return n
end

local function finite(n)
  return n == n and n ~= math.huge and n ~= -math.huge
end

-- The simulated state of one key while a message's effects are checked:
-- t: its type; known: its whole content is known here (it was absent, deleted or overwritten),
-- so a value not in v/f is absent; v: string value (nil: not read yet); f: hash fields read or
-- written (false: absent).
local function string_value(s, key)
  if s.v == nil then
    if s.t == 'string' and not s.known then
      s.v = redis.call('GET', key)
    else
      s.v = false
    end
  end
  return s.v
end

local function field_value(s, key, field)
  local v = s.f[field]
  if v == nil then
    if s.t == 'hash' and not s.known then
      v = redis.call('HGET', key, field)
    else
      v = false
    end
    s.f[field] = v
  end
  return v
end

local function type_error(s, want)
  if s.t ~= 'none' and s.t ~= want then
    return 'WRONGTYPE the key holds a ' .. s.t .. ' value, not a ' .. want
  end
  return nil
end

-- The rule ``rule``, run only when the key holds a ``want`` (or nothing yet): what every command
-- but SET and DEL checks first.
local function of_type(want, rule)
  return function(s, key, a, n)
    local err = type_error(s, want)
    if err then
      return err
    end
    return rule(s, key, a, n)
  end
end

local function overwrite(s, t, v)
  s.t, s.known, s.v, s.f = t, true, v, {}
end

-- One rule per command: check the effect against the simulated state, then update the state as
-- the command would. Returns an error text, or nil.
local rules = {}

rules['set'] = function(s, key, a, n)
  local nx, xx = false, false
  for j = a + 1, a + n - 1 do
    local opt = string.upper(ARGV[j])
    if opt == 'NX' then
      nx = true
    elseif opt == 'XX' then
      xx = true
    end
  end
  if not ((nx and s.t ~= 'none') or (xx and s.t == 'none')) then
    overwrite(s, 'string', ARGV[a])
  end
  return nil
end

rules['del'] = function(s)
  overwrite(s, 'none', false)
  return nil
end

rules['expire'] = function()
  return nil
end
rules['pexpire'] = rules['expire']

-- INCRBY, INCRBYFLOAT and their hash-field forms: the same steps, differing in where the value
-- lives (the string, or field ARGV[a] of the hash), how it must parse, what Redis answers when it
-- does not, and which results it refuses.
local function overflows(n)
  if n >= INT_LIMIT or n <= -INT_LIMIT then
    return 'ERR increment or decrement would overflow'
  end
  return nil
end

local function not_finite(n)
  if not finite(n) then
    return 'ERR increment would produce NaN or Infinity'
  end
  return nil
end

local function increment(want, parse, unparsable, refused)
  return of_type(want, function(s, key, a)
    local field, by, current = nil, ARGV[a], nil
    if want == 'hash' then
      field, by = ARGV[a], ARGV[a + 1]
      current = field_value(s, key, field)
    else
      current = string_value(s, key)
    end
    local value = 0
    if current then
      value = parse(current)
      if value == nil then
        return unparsable
      end
    end
    local result = value + tonumber(by)
    local err = refused(result)
    if err then
      return err
    end
    if field then
      s.t, s.f[field] = 'hash', result
    else
      s.t, s.v = 'string', result
    end
    return nil
  end)
end

rules['incrby'] =
  increment('string', as_int, 'ERR value is not an integer or out of range', overflows)
rules['incrbyfloat'] = increment('string', as_float, 'ERR value is not a valid float', not_finite)

rules['hset'] = of_type('hash', function(s, key, a, n)
  for j = a, a + n - 1, 2 do
    s.f[ARGV[j]] = ARGV[j + 1]
  end
  s.t = 'hash'
  return nil
end)

rules['hdel'] = of_type('hash', function(s, key, a, n)
  for j = a, a + n - 1 do
    s.f[ARGV[j]] = false
  end
  return nil
end)

rules['hincrby'] = increment('hash', as_int, 'ERR hash value is not an integer', overflows)
rules['hincrbyfloat'] = increment('hash', as_float, 'ERR hash value is not a float', not_finite)

-- Commands that can only fail on the key's type. Removing members may empty (delete) the key;
-- the simulation keeps its type, which can only make a later effect of the same message be
-- refused where Redis would take it, never the reverse.
local function typed(want, creates)
  return of_type(want, function(s)
    if creates then
      s.t = want
    end
    return nil
  end)
end

rules['sadd'] = typed('set', true)
rules['srem'] = typed('set', false)
rules['zincrby'] = typed('zset', true)
rules['zrem'] = typed('zset', false)
rules['xadd'] = typed('stream', true)
rules['rpush'] = typed('list', true)
rules['lpush'] = typed('list', true)

rules['zadd'] = of_type('zset', function(s, key, a, n)
  -- The flags come first, then score/member pairs (a score is never a flag).
  for j = a, a + n - 1 do
    local flag = string.upper(ARGV[j])
    if flag == 'XX' then
      return nil -- ZADD XX never creates the key
    elseif flag ~= 'NX' and flag ~= 'GT' and flag ~= 'LT' then
      break
    end
  end
  s.t = 'zset'
  return nil
end)

-- The E effects of one message, from the layout tokens layout[first…]: {command, key, a, n}.
local function effects_at(first, count)
  local list = {}
  for i = 1, count do
    local command, index, a, n = string.match(layout[first + i - 1], '^([a-z]+),(%d+),(%d+),(%d+)$')
    list[i] = {command, KEYS[tonumber(index or 0)], tonumber(a), tonumber(n), tonumber(index)}
  end
  return list
end

-- Check every effect of one message before any is applied. Returns nil or an error text.
local function validate(list)
  local sim = {}
  for i, e in ipairs(list) do
    local command, key, a, n, index = e[1], e[2], e[3], e[4], e[5]
    local rule = rules[command]
    if rule == nil or key == nil or index < 3 then
      return 'effect ' .. i .. ': unknown command or key (' .. tostring(command) .. ')'
    end
    local s = sim[key]
    if s == nil then
      local t = redis.call('TYPE', key)
      if type(t) == 'table' then
        t = t['ok']
      end
      s = {t = t, known = (t == 'none'), f = {}}
      sim[key] = s
    end
    local err = rule(s, key, a, n)
    if err then
      return 'effect ' .. i .. ' (' .. command .. " '" .. key .. "'): " .. err
    end
  end
  return nil
end

local function apply(list)
  for _, e in ipairs(list) do
    redis.call(e[1], e[2], unpack(ARGV, e[3], e[3] + e[4] - 1))
  end
end

local space = string.find(ARGV[8], ' ', 1, true)
local messages = tonumber(string.sub(ARGV[8], 1, space - 1))
local pending = redis.call('XPENDING', stream, group, ARGV[6], ARGV[7], messages + 64, consumer)
local listed = {}
for i = 1, #pending do
  listed[i] = pending[i][1]
end
if table.concat(listed, ' ') == string.sub(ARGV[8], space + 1) then
  -- The layout is the caller's pending entries, plain ids: nothing to apply or record.
  for i = 1, #listed, 1000 do
    redis.call('XACK', stream, group, unpack(listed, i, math.min(i + 999, #listed)))
  end
  return 0
end
-- Otherwise: the caller's entries as a set, for ownership(). Built only here: in the common
-- case above the script's cost to the server is the XPENDING and the XACK, and this set added
-- a tenth to it.
local owned = {}
for i = 1, #listed do
  owned[listed[i]] = true
end
for token in string.gmatch(ARGV[8], '[^ ]+') do
  layout[#layout + 1] = token
end

local ownership = ownership_check(stream, group, consumer, owned)

local acks = {}
local function flush_acks()
  for i = 1, #acks, 1000 do
    redis.call('XACK', stream, group, unpack(acks, i, math.min(i + 999, #acks)))
  end
  acks = {}
end

if dedup then
  redis.call('ZREMRANGEBYSCORE', record, '-inf', '(' .. cutoff)
end

local results = {}
local recorded = false
local pos = 2
for m = 1, messages do
  local id, b, count = layout[pos], 0, 0
  if string.find(id, ',', 1, true) then
    local i, bs, cs = string.match(id, '^([^,]+),(%d+),(%-?%d+)$')
    id, b, count = i, tonumber(bs), tonumber(cs)
  end
  local first = pos + 1
  pos = first + math.max(count, 0)
  local bkey = b > 0 and ARGV[b] or nil

  local status = ownership(id)
  if status ~= 0 then
    results[m] = status
  elseif dedup and bkey and redis.call('ZSCORE', record, bkey) then
    acks[#acks + 1] = id
    results[m] = 3
  elseif count < 0 then
    results[m] = 4
  else
    local list = count > 0 and effects_at(first, count) or nil
    local err = list and validate(list) or nil
    if err then
      results[m] = err
    else
      if list then
        flush_acks() -- every earlier message is acked before this one writes
        apply(list)
      end
      if dedup and bkey then
        redis.call('ZADD', record, now, bkey)
        recorded = true
      end
      acks[#acks + 1] = id
      results[m] = 0
    end
  end
end
flush_acks()

if recorded then
  redis.call('PEXPIRE', record, window)
end
return results
