-- lib/xadd_args.lua: the words of an XADD with optional trimming (included by move_delayed.lua,
-- publish_once.lua and relay_outbox.lua).
--
-- xadd_args(stream, trim, approx, threshold, id, items, first, last) returns the arguments of
-- redis.call(unpack(args)): 'XADD', stream, then, when trim is not "", the trimming trim
-- ("MAXLEN" | "MINID"), approx ("~" | "=") and threshold, then the entry id ("*" or an explicit
-- "<ms>-<seq>"), then the fields and values items[first…last] (last: #items when nil).

local function xadd_args(stream, trim, approx, threshold, id, items, first, last)
  local args = {'XADD', stream}
  if trim ~= '' then
    args[#args + 1] = trim
    args[#args + 1] = approx
    args[#args + 1] = threshold
  end
  args[#args + 1] = id
  for i = first, last or #items do
    args[#args + 1] = items[i]
  end
  return args
end
