-- commit_sink_batch.lua: append one Spark batch's staged rows to a stream, exactly once.
--
-- KEYS[1]  the target stream
-- KEYS[2]  the sink marker hash of the target (field = query name, value = last committed
--          batch id); same hash tag as KEYS[1]
-- KEYS[3…] the batch's staging lists for this target (one per Spark task), same hash tag
-- ARGV[1]  query name ("" for a batch write without a batch id: no marker)
-- ARGV[2]  batch id (a decimal integer; "" with ARGV[1] = "")
-- ARGV[3]  "auto" (XADD *) or "explicit" (XADD with each row's own id)
--
-- A staged row is a sequence of netstrings "<length>:<bytes>": its sort key (a zero-padded id,
-- or "" to keep staging order), its explicit id ("" in auto mode), then field, value, field,
-- value, …
--
-- Returns: {added, staged, replayed}: replayed = 1 when the marker shows this batch committed
-- already (nothing added, staging deleted).
-- Errors (nothing written): a row without fields; in explicit mode an id that is not above the
-- stream's last id or not above the previous row's.
-- Touches: HGET/HSET on KEYS[2] (HSET of the value found on a replay); LRANGE/DEL on KEYS[3…]; XINFO STREAM/XADD on KEYS[1].
--
-- Why one script: the marker check, the XADDs and the marker update are one atomic step, so a
-- replayed batch (the driver died after this script, before Spark logged the commit) finds the
-- marker and adds nothing. Why all staged lists at once: one writer per target in id order. Two
-- Spark tasks each XADDing explicit ids into one stream would interleave, and every id below
-- the other task's top would be refused.

local query, batch, mode = ARGV[1], ARGV[2], ARGV[3]

local function drop_staging()
  for i = 3, #KEYS do
    redis.call('DEL', KEYS[i])
  end
end

if query ~= '' then
  local last = redis.call('HGET', KEYS[2], query)
  if last and tonumber(last) >= tonumber(batch) then
    local staged = 0
    for i = 3, #KEYS do
      staged = staged + redis.call('LLEN', KEYS[i])
    end
    drop_staging()
    -- Re-set the marker as it is: a write, so that a WAIT after this call (waitReplicas) waits
    -- for the replicas to reach it and, replication being in order, the batch it records.
    redis.call('HSET', KEYS[2], query, last)
    return {0, staged, 1}
  end
end

local function parse(raw)
  local tokens = {}
  local pos = 1
  while pos <= #raw do
    local colon = string.find(raw, ':', pos, true)
    local len = tonumber(string.sub(raw, pos, colon - 1))
    tokens[#tokens + 1] = string.sub(raw, colon + 1, colon + len)
    pos = colon + len + 1
  end
  return tokens
end

local rows = {}
local ordered = false
for i = 3, #KEYS do
  local staged = redis.call('LRANGE', KEYS[i], 0, -1)
  for j = 1, #staged do
    local tokens = parse(staged[j])
    if #tokens < 4 then
      return redis.error_reply('ERR commit_sink_batch: a row has no fields; nothing written')
    end
    if tokens[1] ~= '' then
      ordered = true
    end
    rows[#rows + 1] = {key = tokens[1], ord = #rows + 1, tokens = tokens}
  end
end
if ordered then
  table.sort(rows, function(a, b)
    if a.key ~= b.key then
      return a.key < b.key
    end
    return a.ord < b.ord
  end)
end

if mode == 'explicit' then
  local top = '0-0'
  if redis.call('EXISTS', KEYS[1]) == 1 then
    local info = redis.call('XINFO', 'STREAM', KEYS[1])
    for i = 1, #info, 2 do
      if info[i] == 'last-generated-id' then
        top = info[i + 1]
      end
    end
  end
  local function pad(part)
    return string.rep('0', 20 - #part) .. part
  end
  local dash = string.find(top, '-', 1, true)
  local previous = pad(string.sub(top, 1, dash - 1)) .. '-' .. pad(string.sub(top, dash + 1))
  for _, row in ipairs(rows) do
    if row.key <= previous then
      return redis.error_reply('ERR commit_sink_batch: id ' .. row.tokens[2] ..
        ' is not above the stream top or the previous row; nothing written')
    end
    previous = row.key
  end
end

for _, row in ipairs(rows) do
  local args = {'XADD', KEYS[1], '*'}
  if mode == 'explicit' then
    args[3] = row.tokens[2]
  end
  for k = 3, #row.tokens do
    args[#args + 1] = row.tokens[k]
  end
  redis.call(unpack(args))
end
if query ~= '' then
  redis.call('HSET', KEYS[2], query, batch)
end
drop_staging()
return {#rows, #rows, 0}
