-- The engine's Lua 5.1 sandbox (scripting.py runs it once per state as chunk '=streamworker'): receives a table of Python functions (py.*), builds Redis 7.0's globals and returns run, compile, callsite, clear_hook (a functions state, py.functions: run, compile, callsite, clear_hook, load_library, register_or_error). Keep this header one line: the chunk's line numbers are those of the code.
local py = ...
local type, tostring, error, select, next, ipairs, unpack = type, tostring, error, select, next, ipairs, unpack
local rawget, rawset, setmetatable, getmetatable = rawget, rawset, setmetatable, getmetatable
local pcall, xpcall, loadstring, load, setfenv = pcall, xpcall, loadstring, load, setfenv
local getinfo, sethook, raw_getmetatable = debug.getinfo, debug.sethook, debug.getmetatable
local concat = table.concat
local byte, format = string.byte, string.format
local co_resume = coroutine.resume
local INTERNAL = '=streamworker'
-- A state for Redis Functions (FUNCTION LOAD / FCALL) rather than EVAL.
local FUNCTIONS = py.functions
local py_unwrap, py_tick = py.unwrap, py.tick

-- Read-only tables are empty proxies; REAL maps a proxy to its table, VIEW to what
-- getmetatable shows for it (false: nothing), HIDDEN lists metatables never shown.
local REAL = setmetatable({}, {__mode = 'k'})
local VIEW = setmetatable({}, {__mode = 'k'})
local HIDDEN = setmetatable({}, {__mode = 'k'})

local function ro_newindex()
  error('Attempt to modify a readonly table', 2)
end

local function readonly(real, view)
  local proxy = setmetatable({}, {__index = real, __newindex = ro_newindex})
  REAL[proxy] = real
  VIEW[proxy] = view or false
  return proxy
end

local function unwrap(e)
  if type(e) == 'userdata' then
    local v = py_unwrap(e)
    if v ~= nil then
      return v
    end
  end
  return e
end

-- luaL_argerror as the C functions raise it: the name the caller used, the caller's position.
local function argerror(n, extra)
  local info = getinfo(2, 'n')
  local name = info and info.name or '?'
  error(format("bad argument #%d to '%s' (%s)", n, name, extra), 3)
end

local function typename_at(n, ...)
  if select('#', ...) < n then
    return 'no value'
  end
  return type((select(n, ...)))
end

local function check_table(n, ...)
  local t = typename_at(n, ...)
  if t ~= 'table' then
    local info = getinfo(2, 'n')
    local name = info and info.name or '?'
    error(format("bad argument #%d to '%s' (table expected, got %s)", n, name, t), 3)
  end
end

local function check_any(n, ...)
  if select('#', ...) < n then
    local info = getinfo(2, 'n')
    local name = info and info.name or '?'
    error(format("bad argument #%d to '%s' (value expected)", n, name), 3)
  end
end

local function sb_rawget(...)
  check_table(1, ...)
  check_any(2, ...)
  local t, k = ...
  return rawget(REAL[t] or t, k)
end

local function sb_rawset(...)
  check_table(1, ...)
  check_any(2, ...)
  check_any(3, ...)
  local t, k, v = ...
  if REAL[t] then
    error('Attempt to modify a readonly table', 0)
  end
  return rawset(t, k, v)
end

local function sb_setmetatable(...)
  check_table(1, ...)
  local t, mt = ...
  local tm = type(mt)
  if select('#', ...) < 2 or (tm ~= 'nil' and tm ~= 'table') then
    argerror(2, 'nil or table expected')
  end
  if REAL[t] then
    error('Attempt to modify a readonly table', 0)
  end
  local old = raw_getmetatable(t)
  if old ~= nil and rawget(old, '__metatable') ~= nil then
    error('cannot change a protected metatable', 2)
  end
  return setmetatable(t, mt)
end

local STRING_VIEW
local G

local function sb_getmetatable(...)
  check_any(1, ...)
  local o = ...
  local view = VIEW[o]
  if view ~= nil then
    return view or nil
  end
  if type(o) == 'string' then
    return STRING_VIEW
  end
  local mt = getmetatable(o)
  if mt ~= nil and HIDDEN[mt] then
    return nil
  end
  return mt
end

local function sb_next(...)
  check_table(1, ...)
  local t, k = ...
  return next(REAL[t] or t, k)
end

local function sb_pairs(...)
  check_table(1, ...)
  local t = ...
  return next, REAL[t] or t, nil
end

local function sb_ipairs(...)
  check_table(1, ...)
  local t = ...
  return ipairs(REAL[t] or t)
end

-- Redis's pcall: an error table's err text is returned instead of the table (7.0 compat).
local function pcall_result(ok, ...)
  if ok then
    return ok, ...
  end
  local e = unwrap((...))
  if type(e) == 'table' then
    local m = e.err
    local tm = type(m)
    if tm == 'string' or tm == 'number' then
      return false, m
    end
    return false, e, m
  end
  return false, e
end

local function sb_pcall(...)
  if select('#', ...) == 0 then
    -- Redis's pcall then calls its own result placeholder, a boolean.
    return false, 'attempt to call a boolean value'
  end
  return pcall_result(pcall(...))
end

local function sb_xpcall(...)
  check_any(2, ...)
  local f, h = ...
  return xpcall(f, function(e) return h(unwrap(e)) end)
end

local function resume_result(ok, ...)
  if ok then
    return ok, ...
  end
  return false, unwrap((...))
end

local function sb_resume(...)
  if type((...)) ~= 'thread' then
    argerror(1, 'coroutine expected')
  end
  return resume_result(co_resume(...))
end

-- Redis's Lua never loads bytecode: it lexes it as text (and fails on char(27)).
local function sb_loadstring(...)
  local s, chunkname = ...
  local ts = type(s)
  if ts ~= 'string' and ts ~= 'number' then
    argerror(1, 'string expected, got ' .. typename_at(1, ...))
  end
  s = tostring(s)
  local fn, err
  if byte(s, 1) == 27 then
    fn, err = loadstring(' ' .. s, chunkname or s)
  else
    fn, err = loadstring(s, chunkname)
  end
  if fn then
    setfenv(fn, G)
  end
  return fn, err
end

local function sb_load(...)
  local f, chunkname = ...
  if type(f) ~= 'function' then
    argerror(1, 'function expected, got ' .. typename_at(1, ...))
  end
  local first = true
  local fn, err = load(function()
    local piece = f()
    if first then
      first = false
      if type(piece) == 'string' and byte(piece, 1) == 27 then
        return ' ' .. piece
      end
    end
    return piece
  end, chunkname)
  if fn then
    setfenv(fn, G)
  end
  return fn, err
end

local function missing_global(t, k)
  error("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 2)
end

-- The frames of this chunk stand for C functions (Redis's are): with the C functions they
-- call, they count as one C frame, and Redis reports the frame above the first C frame.
local function error_position()
  -- Level 1 is this function, 2 the handler: 3 raised the error.
  local level, skipped = 3, false
  local i = getinfo(level, 'Sl')
  while i do
    if i.source == INTERNAL then
      skipped = true
    elseif i.what == 'C' then
      local up = getinfo(level + 1, 'S')
      if not (up and up.source == INTERNAL) then
        break
      end
    else
      break
    end
    level = level + 1
    i = getinfo(level, 'Sl')
  end
  if not skipped and i and i.what == 'C' then
    i = getinfo(level + 1, 'Sl')
  end
  return i
end

local function err_handler(err)
  local i = error_position()
  err = unwrap(err)
  if type(err) ~= 'table' then
    err = {err = 'ERR ' .. tostring(err)}
  end
  if i then
    err['source'] = i.source
    err['line'] = i.currentline
  end
  return err
end

-- luaPushErrorBuff for redis.error_reply.
local function error_buff(buf)
  buf = buf:match('^[^%z]*')
  local code, msg
  if byte(buf, 1) == 45 then
    local sp = buf:find(' ', 1, true)
    if sp then
      code, msg = buf:sub(2, sp - 1), buf:sub(sp + 1)
    else
      code, msg = 'ERR', buf:sub(2)
    end
  else
    code, msg = 'ERR', buf
  end
  msg = msg:gsub('^[\r\n]+', ''):gsub('[\r\n]+$', '')
  return code .. ' ' .. msg
end

local function error_reply(...)
  local e = ...
  if select('#', ...) ~= 1 or type(e) ~= 'string' then
    return {err = 'ERR wrong number or type of arguments'}
  end
  if byte(e, 1) ~= 45 then
    e = '-' .. e
  end
  return {err = error_buff(e)}
end

local function status_reply(...)
  local s = ...
  if select('#', ...) ~= 1 or type(s) ~= 'string' then
    return {err = 'ERR wrong number or type of arguments'}
  end
  return {ok = s}
end

-- The globals: a fresh table with Redis's names only, seen through a read-only proxy.
local RG = {}
-- GMT.__index is RG, or LIBG while a function library loads (FUNCTION LOAD).
local GMT = {__index = RG, __newindex = ro_newindex}
G = setmetatable({}, GMT)
REAL[G] = RG
VIEW[G] = readonly({__index = missing_global, __newindex = ro_newindex})
setmetatable(RG, {__index = missing_global})

local function copy(t)
  local c = {}
  for k, v in next, t do
    c[k] = v
  end
  return c
end

-- redis.call/pcall: lupa's call into Python takes fewer arguments than Lua 5.1's C stack
-- (8000 slots) lets unpack() pass; past MANY arguments they cross into Python as one table.
local py_call, py_pcall, py_call_packed, py_pcall_packed = py.call, py.pcall, py.call_packed, py.pcall_packed
local MANY = 1000
local function redis_call(...)
  local n = select('#', ...)
  if n < MANY then
    return py_call(...)
  end
  return py_call_packed({...}, n)
end
local function redis_pcall(...)
  local n = select('#', ...)
  if n < MANY then
    return py_pcall(...)
  end
  return py_pcall_packed({...}, n)
end

local redis = {
  call = redis_call, pcall = redis_pcall, setresp = py.setresp, log = py.log,
  sha1hex = py.sha1hex, set_repl = py.set_repl, acl_check_cmd = py.acl_check_cmd,
  error_reply = error_reply, status_reply = status_reply,
  breakpoint = function() return false end,
  debug = function() end,
  replicate_commands = function() return true end,
  LOG_DEBUG = 0, LOG_VERBOSE = 1, LOG_NOTICE = 2, LOG_WARNING = 3,
  REPL_NONE = 0, REPL_AOF = 1, REPL_SLAVE = 2, REPL_REPLICA = 2, REPL_ALL = 3,
  REDIS_VERSION = py.version, REDIS_VERSION_NUM = py.version_num,
}
HIDDEN[getmetatable(py.call)] = true

local math_lib = copy(math)
math_lib.random, math_lib.randomseed = py.random, py.randomseed
local co_lib = copy(coroutine)
co_lib.resume = sb_resume

local STRING = readonly(string)
STRING_VIEW = readonly({__index = STRING})

RG.string = STRING
RG.math = readonly(math_lib)
RG.table = readonly(table)
RG.coroutine = readonly(co_lib)
RG.redis = readonly(redis)
RG.cjson = readonly(copy(py.cjson))
RG.bit = readonly(copy(py.bit))
RG.struct = readonly(copy(py.struct))
RG.cmsgpack = readonly(copy(py.cmsgpack))
RG._G = G
RG._VERSION = _VERSION
RG.assert, RG.collectgarbage, RG.error, RG.gcinfo = assert, collectgarbage, error, gcinfo
RG.select, RG.tonumber, RG.tostring, RG.type, RG.unpack = select, tonumber, tostring, type, unpack
RG.rawequal = rawequal
RG.getmetatable, RG.setmetatable = sb_getmetatable, sb_setmetatable
RG.rawget, RG.rawset, RG.next, RG.pairs, RG.ipairs = sb_rawget, sb_rawset, sb_next, sb_pairs, sb_ipairs
RG.pcall, RG.xpcall = sb_pcall, sb_xpcall
RG.loadstring, RG.load = sb_loadstring, sb_load
RG.__redis__err__handler = err_handler
RG.KEYS, RG.ARGV = {}, {}


-- Script reply -> tags (one letter per value) + values, rebuilt by Python.
local T, V, nt, nv
-- Redis answers "reached lua stack limit" in place of values nested ~8000 deep (a table that
-- contains itself); the engine's reply encoders recurse, so it stops at 200 levels.
local MAX_DEPTH = 200
local function walk(v, depth)
  if depth > MAX_DEPTH then
    nt = nt + 1; T[nt] = 'e'; nv = nv + 1; V[nv] = 'ERR reached lua stack limit'
    return
  end
  local t = type(v)
  if t == 'string' then
    nt = nt + 1; T[nt] = 's'; nv = nv + 1; V[nv] = v
  elseif t == 'number' then
    nt = nt + 1; T[nt] = 'n'; nv = nv + 1; V[nv] = v
  elseif t == 'boolean' then
    nt = nt + 1; T[nt] = v and 'T' or 'F'
  elseif t == 'table' then
    local x = rawget(v, 'err')
    if type(x) == 'string' then
      nt = nt + 1; T[nt] = 'e'; nv = nv + 1; V[nv] = x
      return
    end
    x = rawget(v, 'ok')
    if type(x) == 'string' then
      nt = nt + 1; T[nt] = 'o'; nv = nv + 1; V[nv] = x
      return
    end
    x = rawget(v, 'double')
    if type(x) == 'number' then
      nt = nt + 1; T[nt] = 'd'; nv = nv + 1; V[nv] = x
      return
    end
    x = rawget(v, 'big_number')
    if type(x) == 'string' then
      nt = nt + 1; T[nt] = 'b'; nv = nv + 1; V[nv] = x
      return
    end
    x = rawget(v, 'verbatim_string')
    if type(x) == 'table' then
      local f, s = rawget(x, 'format'), rawget(x, 'string')
      if type(f) == 'string' and type(s) == 'string' then
        nt = nt + 1; T[nt] = 'v'; nv = nv + 2; V[nv - 1] = f; V[nv] = s
        return
      end
    end
    x = rawget(v, 'map')
    if type(x) == 'table' then
      nt = nt + 1; T[nt] = 'm'; nv = nv + 1
      local slot, n = nv, 0
      for k, y in next, x do
        walk(k, depth + 1)
        walk(y, depth + 1)
        n = n + 1
      end
      V[slot] = n
      return
    end
    x = rawget(v, 'set')
    if type(x) == 'table' then
      nt = nt + 1; T[nt] = 'S'; nv = nv + 1
      local slot, n = nv, 0
      for k in next, x do
        walk(k, depth + 1)
        n = n + 1
      end
      V[slot] = n
      return
    end
    nt = nt + 1; T[nt] = 'a'; nv = nv + 1
    local slot, j = nv, 1
    while true do
      x = rawget(v, j)
      if x == nil then
        break
      end
      walk(x, depth + 1)
      j = j + 1
    end
    V[slot] = j - 1
  else
    nt = nt + 1; T[nt] = 'N'
  end
end

local function as_text(x)
  local t = type(x)
  if t == 'string' then
    return x
  elseif t == 'number' then
    return tostring(x)
  end
  return false
end

-- The count hook: after SCRIPT KILL, fail the script, and again at every instruction of the
-- script's own code (a pcall in it cannot swallow the kill); never inside this chunk.
local function tick()
  if py_tick() then
    local info = getinfo(2, 'S')
    if info and info.source ~= INTERNAL then
      sethook(tick, '', 1)
      error({err = 'ERR Script killed by user with SCRIPT KILL...'})
    end
  end
end

local function run(fn, keys, argv, hook)
  if not FUNCTIONS then
    RG.KEYS, RG.ARGV = keys, argv
  end
  if hook then
    sethook(tick, '', hook)
  end
  if FUNCTIONS then
    -- FCALL: the function gets KEYS and ARGV as its two arguments.
    local f = fn
    fn = function() return (f(keys, argv)) end
  end
  local ok, res = xpcall(fn, err_handler)
  if hook then
    sethook()
  end
  if not ok then
    if type(res) ~= 'table' then
      return 'X', 1, tostring(res)
    end
    local msg = as_text(res.err)
    if not msg then
      msg = 'ERR ' .. tostring(res.err)
    end
    return 'E', 3, msg, as_text(res.source), as_text(res.line)
  end
  if type(res) == 'table' and rawget(res, 'err') == nil and rawget(res, 'ok') == nil
      and rawget(res, 'double') == nil and rawget(res, 'big_number') == nil
      and rawget(res, 'verbatim_string') == nil and rawget(res, 'map') == nil
      and rawget(res, 'set') == nil then
    -- The usual reply, an array of strings/numbers/booleans: Python reads the types itself.
    local j = 1
    while true do
      local t = type(rawget(res, j))
      if t ~= 'string' and t ~= 'number' and t ~= 'boolean' then
        break
      end
      j = j + 1
    end
    if rawget(res, j) == nil and j <= 4001 then
      return 'A', j - 1, unpack(res, 1, j - 1)
    end
  end
  T, V, nt, nv = {}, {}, 0, 0
  local walked, werr = pcall(walk, res, 1)
  if not walked then
    return 'X', 1, tostring(werr)
  end
  local tags = concat(T, '', 1, nt)
  if nv > 4000 then
    return tags, nv, V
  end
  return tags, nv, unpack(V, 1, nv)
end

-- A script's code with its tail calls made calls (py.untail): redis.call is a Lua function
-- here, and a tail call to it would drop the frame whose line Redis reports on its errors.
local dump = string.dump
local function load_untailed(code, chunkname)
  local fn, err = loadstring(code, chunkname)
  if not fn then
    return fn, err
  end
  return loadstring(py.untail(dump(fn)), chunkname)
end

local function compile(code)
  local fn, err = load_untailed(code, '@user_script')
  if not fn then
    return false, err
  end
  setfenv(fn, G)
  return fn
end

-- For Python functions raising luaL_error-style errors: their caller's position and the
-- name they were called by (level 2 is the Python function, a C function to Lua).
local function callsite()
  -- Frames of this chunk between the Python function and the script (redis.call's wrapper)
  -- are part of the C function to Lua: the name is the one the script called.
  local level = 2
  local i = getinfo(3, 'Sl')
  while i and i.source == INTERNAL do
    level = level + 1
    i = getinfo(level + 1, 'Sl')
  end
  local n = getinfo(level, 'n')
  local where = ''
  if i and i.currentline > 0 then
    where = i.short_src .. ':' .. i.currentline .. ': '
  end
  return where, n and n.name or '?', n and n.namewhat or ''
end

local function clear_hook()
  sethook()
end

if not FUNCTIONS then
  return run, compile, callsite, clear_hook
end

-- Redis Functions. A function state has no KEYS/ARGV globals (a function gets keys and args as
-- its arguments) and no EVAL error-handler global. A library's code runs once, at FUNCTION
-- LOAD, seeing only LIBG: a `redis` table with register_function, log and the constants; any
-- other name fails as a nonexistent global, as in Redis 7.0.
RG.KEYS, RG.ARGV, RG.__redis__err__handler = nil, nil, nil

local lower, find = string.lower, string.find
-- Redis's scripts_flags_def, in its order (FUNCTION LIST reports flags in this order).
local FLAGS = {'no-writes', 'allow-oom', 'allow-stale', 'no-cluster', 'allow-cross-slot-keys'}
local LOADING -- while a library loads: its registered functions, in order, and their names

local function reg_error(msg)
  error({err = 'ERR ' .. msg}, 0)
end

local function is_text(v)
  local t = type(v)
  return t == 'string' or t == 'number'
end

-- lua_isfunction: Lua functions and the API's Python functions (C functions in Redis).
local function is_function(v)
  local t = type(v)
  return t == 'function' or (t == 'userdata' and HIDDEN[raw_getmetatable(v)] == true)
end

-- Flags as a comma-separated list of canonical names, or nil for an unknown flag.
local function read_flags(t)
  local seen, j = {}, 1
  while true do
    local v = t[j]
    if v == nil then
      break
    end
    if not is_text(v) then
      return nil
    end
    local l, found = lower(tostring(v)), false
    for _, name in ipairs(FLAGS) do
      if l == name then
        seen[name], found = true, true
        break
      end
    end
    if not found then
      return nil
    end
    j = j + 1
  end
  local out = {}
  for _, name in ipairs(FLAGS) do
    if seen[name] then
      out[#out + 1] = name
    end
  end
  return concat(out, ',')
end

local function register_function(...)
  if not LOADING then
    reg_error('redis.register_function can only be called on FUNCTION LOAD command')
  end
  local n = select('#', ...)
  if n < 1 or n > 2 then
    reg_error('wrong number of arguments to redis.register_function')
  end
  local name, fn, flags, desc = nil, nil, '', false
  if n == 1 then
    local t = ...
    if type(t) ~= 'table' then
      reg_error('calling redis.register_function with a single argument is only applicable to Lua table (representing named arguments).')
    end
    for k, v in next, REAL[t] or t do
      if not is_text(k) then
        reg_error('named argument key given to redis.register_function is not a string')
      end
      local key = lower(tostring(k))
      if key == 'function_name' then
        if not is_text(v) then
          reg_error('function_name argument given to redis.register_function must be a string')
        end
        name = tostring(v)
      elseif key == 'description' then
        if not is_text(v) then
          reg_error('description argument given to redis.register_function must be a string')
        end
        desc = tostring(v)
      elseif key == 'callback' then
        if not is_function(v) then
          reg_error('callback argument given to redis.register_function must be a function')
        end
        fn = v
      elseif key == 'flags' then
        if type(v) ~= 'table' then
          reg_error('flags argument to redis.register_function must be a table representing function flags')
        end
        flags = read_flags(v)
        if not flags then
          reg_error('unknown flag given')
        end
      else
        reg_error('unknown argument given to redis.register_function')
      end
    end
    if not name then
      reg_error('redis.register_function must get a function name argument')
    end
    if not fn then
      reg_error('redis.register_function must get a callback argument')
    end
  else
    local a, b = ...
    if not is_text(a) then
      reg_error('first argument to redis.register_function must be a string')
    end
    if not is_function(b) then
      reg_error('second argument to redis.register_function must be a function')
    end
    name, fn = tostring(a), b
  end
  if not find(name, '^[a-zA-Z0-9_]+$') then
    reg_error('Library names can only contain letters, numbers, or underscores(_) and must be at least one character long')
  end
  if LOADING.names[name] then
    reg_error('Function already exists in the library')
  end
  LOADING.names[name] = true
  LOADING[#LOADING + 1] = {name, fn, flags, desc}
end

-- What the Python redis.register_function calls: it raises the error itself, so that to Lua
-- the error comes from a C function (Redis's is one), reported at the caller's line.
local function register_or_error(...)
  local ok, e = pcall(register_function, ...)
  if ok then
    return false
  end
  if type(e) == 'table' then
    return e.err
  end
  return 'ERR ' .. tostring(e)
end

local lib_redis = setmetatable({
  register_function = py.register_function, log = py.log,
  LOG_DEBUG = 0, LOG_VERBOSE = 1, LOG_NOTICE = 2, LOG_WARNING = 3,
  REDIS_VERSION = py.version, REDIS_VERSION_NUM = py.version_num,
}, {__index = missing_global})
local LIBG = setmetatable({redis = readonly(lib_redis)}, {__index = missing_global})

-- Past the time limit, fail the library's code at every instruction (never this chunk's).
local function load_tick()
  if py.load_expired() then
    local info = getinfo(2, 'S')
    if info and info.source ~= INTERNAL then
      sethook(load_tick, '', 1)
      error({err = 'ERR FUNCTION LOAD timeout'}, 0)
    end
  end
end

-- FUNCTION LOAD's engine part: compile the library's code and run it with LIBG as globals.
-- Returns true and the registered functions ({name, fn, flags, description or false} each),
-- or false and Redis's error text.
local function load_library(code)
  local fn, err = load_untailed(code, '@user_function')
  if not fn then
    return false, 'Error compiling function: ' .. err
  end
  setfenv(fn, G)
  LOADING = {names = {}}
  GMT.__index = LIBG
  sethook(load_tick, '', 100000)
  local ok, e = pcall(fn)
  sethook()
  GMT.__index = RG
  local registered = LOADING
  LOADING = nil
  if not ok then
    e = unwrap(e)
    local msg
    if type(e) == 'table' then
      msg = as_text(e.err) or tostring(e.err)
    else
      msg = 'ERR ' .. tostring(e)
    end
    return false, 'Error registering functions: ' .. msg
  end
  registered.names = nil
  return true, registered
end

return run, compile, callsite, clear_hook, load_library, register_or_error
