-- replay_dead_letter.lua: move one dead letter back to its original stream, with a fresh id.
--
-- KEYS[1]  the dead-letter stream
-- KEYS[2]  the original stream (must equal the entry's dlq_stream field)
-- ARGV[1]  the dead letter's id
--
-- Returns: the new entry id in KEYS[2]; 0 when the dead letter no longer exists (already replayed
-- or purged: a retried call is a no-op). Errors when the entry is not a streamworker dead letter,
-- names another stream, or kept no original fields.
-- Touches: XRANGE and XDEL on KEYS[1], XADD on KEYS[2].
--
-- The entry's own fields come first and the provenance fields (dlq_stream … dlq_at_ms and maybe
-- dlq_body_missing) after them, so everything from the last 'dlq_stream' name on is provenance.

local e = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])
if #e == 0 then
  return 0
end
local f = e[1][2]
local cut = 0
for i = #f - 1, 1, -2 do
  if f[i] == 'dlq_stream' then
    cut = i
    break
  end
end
if cut == 0 then
  return redis.error_reply('ERR entry ' .. ARGV[1] .. ' is not a streamworker dead letter')
end
if f[cut + 1] ~= KEYS[2] then
  return redis.error_reply('ERR dead letter ' .. ARGV[1] .. ' belongs to stream ' .. f[cut + 1])
end
if cut == 1 then
  return redis.error_reply('ERR dead letter ' .. ARGV[1] .. ' kept no original fields')
end
local args = {KEYS[2], '*'}
for i = 1, cut - 1 do
  args[#args + 1] = f[i]
end
local id = redis.call('XADD', unpack(args))
redis.call('XDEL', KEYS[1], ARGV[1])
return id
