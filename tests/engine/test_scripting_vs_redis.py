"""Lua scripting against redis-server 7.0.15: the same EVAL/SCRIPT commands on both, reply bytes
compared, in RESP2 and RESP3.

Each case is one script (with the commands that prepare its data) and runs on a fresh
connection pair after FLUSHALL. Scripts that touch state the server keeps between scripts
(``math.random``'s generator, ``cjson``'s configuration) set it first or restore it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.engine.conftest import Differ

pytestmark = pytest.mark.redis

Case = tuple[str, ...]

# Data most cases can read: one key of each type.
_SETUP: list[tuple[str, ...]] = [
    ("SET", "str", "v"),
    ("SET", "num", "10"),
    ("HSET", "h", "a", "1", "b", "2"),
    ("SADD", "st", "x"),
    ("ZADD", "z", "1.5", "m", "2", "n"),
    ("RPUSH", "l", "a", "b", "c"),
    ("XADD", "s", "1-1", "f", "v"),
    ("XADD", "s", "2-1", "f", "w"),
    ("XGROUP", "CREATE", "s", "g", "0"),
]


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def d(request: pytest.FixtureRequest, redis_port: int) -> Iterator[Differ]:
    """A Differ in RESP2 or RESP3, with the shared data set on both sides."""
    differ = Differ(redis_port)
    if request.param == 3:
        differ.both("HELLO", 3)
    for cmd in _SETUP:
        differ.check(*cmd)
    yield differ
    differ.close()


def _eval(d: Differ, body: str, *rest: str | int) -> bytes:
    args: tuple[str | int, ...] = rest if rest else (0,)
    return d.check("EVAL", body, *args)


def _ids(cases: list[Case]) -> list[str]:
    return [c[0][:60] for c in cases]


# --- Lua value -> reply ------------------------------------------------------------------------

LUA_TO_REPLY: list[Case] = [
    ("return 1",),
    ("return -1",),
    ("return 3.99",),
    ("return -3.99",),
    ("return -0.5",),
    ("return 2^53+1",),
    ("return 2^62",),
    ("return 2^63",),
    ("return -(2^63)",),
    ("return 1e30",),
    ("return 0/0",),
    ("return 1/0",),
    ("return -1/0",),
    ("return 'a\\0b'",),
    ("return ''",),
    ("return true",),
    ("return false",),
    ("return nil",),
    ("return",),
    ("",),
    ("return 1, 2",),
    ("return {}",),
    ("return {1, 2, 3, nil, 4}",),
    ("return {1, 'two', 3.5, true, false, {ok='s'}}",),
    ("return {1, 2, {3, {4, nil, 5}}}",),
    ("local t = {1, 2, 3} t[2] = nil return t",),
    ("local t = {} for i = 1, 10 do t[i] = i end return t",),
    ("return {ok='fine'}",),
    ("return {ok='x\\r\\ny'}",),
    ("return {ok=5}",),
    ("return {err='My Error'}",),
    ("return {err='myerror'}",),
    ("return {err=''}",),
    ("return {err='x\\r\\ny'}",),
    ("return {err=5}",),
    ("return {ok='a', err='b'}",),
    ("return {1, {ok='x'}, {err='e'}, {2, 3}}",),
    ("return redis.status_reply('fine')",),
    ("return redis.status_reply('x\\r\\ny')",),
    ("return redis.error_reply('My Error')",),
    ("return redis.error_reply('myerror')",),
    ("return redis.error_reply('-myerror')",),
    ("return redis.error_reply('-CODE some text')",),
    ("return redis.error_reply('')",),
    ("return redis.error_reply('a\\r\\nb')",),
    ("return redis.error_reply()",),
    ("return redis.error_reply(1)",),
    ("return redis.status_reply()",),
    ("return redis.status_reply(1)",),
    ("return {double=1.5}",),
    ("return {double=0.1}",),
    ("return {double=3}",),
    ("return {double=1e300}",),
    ("return {double=1/0}",),
    ("return {double=-1/0}",),
    ("return {double='1.5'}",),
    ("return {map={a=1}}",),
    ("return {map={}}",),
    ("return {map={a=1, b=2, c=3, d=4, e=5}}",),
    ("return {map={[1]=2, [3]=4}}",),
    ("return {map={a={map={b=1}}}}",),
    ("return {set={a=true}}",),
    ("return {set={a=false, b=1}}",),
    ("return {set={}}",),
    ("return {verbatim_string={format='txt', string='hi'}}",),
    ("return function() end",),
    ("return {function() end, 1}",),
    ("return coroutine.create(function() end)",),
    ("local t = setmetatable({}, {__index=function(t, k) return 'x' end}) return t",),
    ("local t = setmetatable({}, {__index=function(t, k) return 'x' end}) return {err=t}",),
    ("redis.setresp(3) return true",),
    ("redis.setresp(3) return false",),
    ("redis.setresp(3) return nil",),
    ("redis.setresp(3) return {true, false, 1}",),
    ("redis.setresp(3) redis.setresp(2) return {true, false}",),
]


@pytest.mark.parametrize("case", LUA_TO_REPLY, ids=_ids(LUA_TO_REPLY))
def test_lua_value_becomes_the_reply_redis_sends(d: Differ, case: Case) -> None:
    """Redis's luaReplyToRedisReply: numbers truncated to integers, false/nil, err/ok/double/
    map/set tables, arrays cut at the first nil, per the caller's protocol."""
    _eval(d, *case)


# --- reply -> Lua value ------------------------------------------------------------------------

REPLY_TO_LUA: list[Case] = [
    ("return redis.call('get', 'str')",),
    ("return redis.call('get', 'missing')",),
    ("return type(redis.call('get', 'missing'))",),
    ("return {redis.call('get', 'missing')}",),
    ("return redis.call('ping')",),
    ("return type(redis.call('ping'))",),
    ("return redis.call('ping').ok",),
    ("return redis.call('incr', 'num')",),
    ("return redis.call('hgetall', 'h')",),
    ("return redis.call('smembers', 'st')",),
    ("return redis.call('zscore', 'z', 'm')",),
    ("return redis.call('zrange', 'z', 0, -1, 'withscores')",),
    ("return redis.call('lrange', 'l', 0, -1)",),
    ("return redis.call('xrange', 's', '-', '+')",),
    ("return redis.call('xpending', 's', 'g')",),
    ("return redis.call('xreadgroup', 'group', 'g', 'c', 'streams', 's', '>')",),
    ("return redis.call('xread', 'count', '1', 'streams', 's', '0')",),
    ("return redis.call('xread', 'streams', 's', '$')",),
    ("return redis.call('type', 's')",),
    ("return redis.call('type', 's').ok",),
    ("return redis.call('exists', 'str', 'h', 'nope')",),
    ("return redis.call('set', 'a', 1.5)",),
    ("redis.call('set', 'a', 0.1) return redis.call('get', 'a')",),
    ("redis.call('set', 'a', 1e20) return redis.call('get', 'a')",),
    ("redis.call('set', 'a', 3) return redis.call('get', 'a')",),
    ("redis.call('set', 'a', 2^60) return redis.call('get', 'a')",),
    ("redis.call('set', 'a', 123456789012345678) return redis.call('get', 'a')",),
    ("return redis.call('select', '1')",),
    ("redis.call('select', '1') redis.call('set', 'indb1', 'x') return redis.call('get', 'str')",),
    ("redis.setresp(3) return redis.call('hgetall', 'h')",),
    ("redis.setresp(3) return type(redis.call('hgetall', 'h').map)",),
    ("redis.setresp(3) return redis.call('hgetall', 'h').map.a",),
    ("redis.setresp(3) return redis.call('smembers', 'st')",),
    ("redis.setresp(3) return type(redis.call('smembers', 'st').set)",),
    ("redis.setresp(3) return redis.call('smembers', 'st').set.x",),
    ("redis.setresp(3) return redis.call('zscore', 'z', 'm')",),
    ("redis.setresp(3) return tostring(redis.call('zscore', 'z', 'm').double)",),
    ("redis.setresp(3) return redis.call('get', 'missing')",),
    ("redis.setresp(3) return type(redis.call('get', 'missing'))",),
    ("redis.setresp(3) return {1, redis.call('get', 'missing'), 2}",),
    ("redis.setresp(3) return redis.call('zrange', 'z', 0, -1, 'withscores')",),
    ("redis.setresp(3) return redis.call('xread', 'streams', 's', '$')",),
    ("redis.setresp(3) return redis.call('ping')",),
    ("redis.setresp(3) return redis.call('exists', 'str')",),
    ("redis.setresp(2) return redis.call('zscore', 'z', 'm')",),
]


@pytest.mark.parametrize("case", REPLY_TO_LUA, ids=_ids(REPLY_TO_LUA))
def test_command_reply_becomes_the_lua_value_redis_gives(d: Differ, case: Case) -> None:
    """redis.call's results: nil bulk/array -> false (RESP2) or nil (RESP3), status -> {ok=},
    RESP3 maps/sets/doubles as {map=}/{set=}/{double=}."""
    _eval(d, *case)


def test_select_in_a_script_does_not_change_the_callers_db(d: Differ) -> None:
    """SELECT inside a script moves only the script's client."""
    _eval(d, "redis.call('select', '1') return redis.call('set', 'k', 'v')")
    d.check("GET", "k")
    d.check("SELECT", "1")
    d.check("GET", "k")


# --- KEYS, ARGV, numkeys -----------------------------------------------------------------------


def test_keys_and_argv_split_at_numkeys(d: Differ) -> None:
    """KEYS gets numkeys arguments, ARGV the rest; both are plain, writable tables."""
    d.check("EVAL", "return KEYS", 2, "a", "b", "c")
    d.check("EVAL", "return ARGV", 2, "a", "b", "c")
    d.check("EVAL", "return #KEYS", 0)
    d.check("EVAL", "KEYS[1] = 'z'; return KEYS", 1, "a")
    d.check("EVAL", "table.insert(ARGV, 'z'); return ARGV", 0, "a")


@pytest.mark.parametrize(
    "args",
    [
        ("return 1", -1),
        ("return 1", 2, "a"),
        ("return 1", "x"),
        ("return 1", "1.5"),
        ("return +", -1),
        ("return +", 1),
        ("return 1",),
    ],
    ids=[
        "negative",
        "too-many",
        "not-int",
        "float",
        "negative-before-compile",
        "too-many-first",
        "missing",
    ],
)
def test_numkeys_errors_match(d: Differ, args: tuple[str | int, ...]) -> None:
    """EVAL checks numkeys before compiling: not an integer, negative, more than the args."""
    d.check("EVAL", *args)


# --- errors ------------------------------------------------------------------------------------

ERRORS: list[Case] = [
    ("return redis.call('nosuch')",),
    ("return redis.pcall('cluster', 'reset')",),
    ("return redis.pcall('cluster', 'reset', 'hard')",),
    ("return redis.pcall('cluster', 'info')",),
    ("return redis.pcall('nosuch')",),
    ("return redis.call('get')",),
    ("return redis.pcall('get')",),
    ("return redis.call()",),
    ("return redis.pcall()",),
    ("return redis.call('lpush', 'str', 'v')",),
    ("return redis.pcall('lpush', 'str', 'v')",),
    ("\n\nreturn redis.call('lpush', 'str', 'v')",),
    ("local x = redis.call('lpush', 'str', 'v') return x",),
    ("return redis.call('xgroup', 'createconsumer', 'nokey', 'g', 'c')",),
    ("return redis.call('xpending', 's', 'nogroup')",),
    ("return redis.call('xreadgroup', 'group', 'nog', 'c', 'streams', 's', '>')",),
    ("return redis.call('xgroup', 'foo')",),
    ("return redis.call('xgroup')",),
    ("return redis.call('xgroup', 'create')",),
    ("return redis.call('set', 'a', {})",),
    ("return redis.call('set', 'a', nil)",),
    ("return redis.call('set', 'a', true)",),
    ("return redis.pcall('set', 'a', true)",),
    ("return redis.call('xread', 'block', '0', 'streams', 's', '$')",),
    ("return redis.call('XREAD', 'BLOCK', '0', 'streams', 's', '$')",),
    ("return redis.call('xreadgroup', 'group', 'g', 'c', 'block', '10', 'streams', 's', '>')",),
    ("return redis.call('multi')",),
    ("return redis.call('exec')",),
    ("return redis.call('eval', 'return 1', '0')",),
    ("return redis.call('script', 'load', 'return 1')",),
    ("return redis.call('watch', 'x')",),
    ("return redis.call('config', 'get', 'maxmemory')",),
    ("return redis.call('client', 'id')",),
    ("return redis.call('hello', '3')",),
    ("return redis.call('auth', 'x')",),
    ("error('boom')",),
    ("error({err='X boom'})",),
    ("error({err=5})",),
    ("error(5)",),
    ("error()",),
    ("error('no position', 0)",),
    ("error(setmetatable({}, {__index=function(t, k) return 'meta' end}))",),
    ("local function f() error('deep') end\nlocal function g() f() end\ng()",),
    ("local function f() redis.call('nosuch') end\nlocal function g()\n f()\nend\ng()",),
    ("local x = nil\nreturn x.y",),
    ("return ('x'):bad()",),
    ("return tonumber('x') + 1",),
    ("return 1 +",),
    ("return 1 end",),
    ("return 1 end function foo() return 2",),
    ("local t = {} t[1] = t",),
    ("return {pcall(function() redis.call('nosuch') end)}",),
    ("local ok, e = pcall(function() redis.call('nosuch') end) return type(e)",),
    ("local ok, e = pcall(function() error('x') end) return e",),
    ("local ok, e = pcall(function() error({a=1}) end) return type(e)",),
    ("return {pcall(function() error({err=5}) end)}",),
    ("return {pcall(function() error({err={}}) end)}",),
    ("return {pcall(function() return 1, 2 end)}",),
    ("local ok, e = pcall(error) return {tostring(ok), tostring(e)}",),
    ("local ok, e = pcall(redis.call, 'nosuch') return e",),
    (
        "local ok, e = xpcall(function() redis.call('nosuch') end, function(e) return e end) return type(e)",
    ),
    (
        "local ok, e = xpcall(function() redis.call('nosuch') end, function(e) return e.err end) return e",
    ),
    (
        "local co = coroutine.create(function() redis.call('nosuch') end) local ok, e = coroutine.resume(co) return {tostring(ok), type(e)}",
    ),
    ("local f = coroutine.wrap(function() redis.call('nosuch') end) f()",),
    ("local f = coroutine.wrap(function() error('x') end) f()",),
    ("return redis.pcall('nosuch').err",),
    (
        "local t = redis.pcall('nosuch') local o = {} for k, v in pairs(t) do o[#o+1] = k .. '=' .. tostring(v) end table.sort(o) return o",
    ),
    (
        "local t = redis.error_reply('x') local o = {} for k, v in pairs(t) do o[#o+1] = k .. '=' .. tostring(v) end return o",
    ),
    ("return redis.setresp(4)",),
    ("return redis.setresp()",),
    ("return redis.setresp('3')",),
    ("return redis.log(redis.LOG_WARNING, 'hello from a test')",),
    ("return redis.log(99, 'hello')",),
    ("return redis.log('x', 'hello')",),
    ("return redis.log(1)",),
    ("return redis.sha1hex()",),
    ("return redis.sha1hex('')",),
    ("return redis.sha1hex(1)",),
    ("return redis.sha1hex({})",),
    ("return redis.set_repl(redis.REPL_ALL)",),
    ("return redis.set_repl(99)",),
    ("return redis.set_repl()",),
    ("return redis.replicate_commands()",),
    ("return redis.breakpoint()",),
    ("return redis.debug('x')",),
    ("return redis.acl_check_cmd('get', 'x')",),
    ("return redis.acl_check_cmd('nosuch')",),
    ("return redis.acl_check_cmd()",),
    ("return redis.acl_check_cmd('xgroup', 'nosuch')",),
    ("return {redis.REDIS_VERSION, redis.REDIS_VERSION_NUM}",),
    (
        "return {redis.REPL_NONE, redis.REPL_AOF, redis.REPL_REPLICA, redis.REPL_SLAVE, redis.REPL_ALL, redis.LOG_DEBUG, redis.LOG_VERBOSE, redis.LOG_NOTICE, redis.LOG_WARNING}",
    ),
]


@pytest.mark.parametrize("case", ERRORS, ids=_ids(ERRORS))
def test_errors_match(d: Differ, case: Case) -> None:
    """redis.call errors abort with ``script: <sha1>, on @user_script:<line>.`` and keep their
    code; redis.pcall returns {err=...}; script-level refusals use Redis's texts."""
    _eval(d, *case)


# --- the sandbox ---------------------------------------------------------------------------------

SANDBOX: list[Case] = [
    ("x = 5",),
    ("KEYS = 1",),
    ("return y",),
    ("return os",),
    ("return io",),
    ("return require",),
    ("return loadfile",),
    ("return dofile",),
    ("return print",),
    ("return debug",),
    ("return getfenv",),
    ("return setfenv",),
    ("return newproxy",),
    ("return module",),
    ("return package",),
    ("return type(gcinfo)",),
    ("return _VERSION",),
    ("return type(_G)",),
    ("return _G._G == _G",),
    ("return type(__redis__err__handler)",),
    ("local n = 0 for k, v in pairs(_G) do n = n + 1 end return n",),
    ("local t = {} for k, v in pairs(_G) do table.insert(t, k) end table.sort(t) return t",),
    ("local t = {} for k, v in pairs(redis) do table.insert(t, k) end table.sort(t) return t",),
    ("local t = {} for k, v in pairs(string) do table.insert(t, k) end table.sort(t) return t",),
    ("local t = {} for k, v in pairs(math) do table.insert(t, k) end table.sort(t) return t",),
    ("local t = {} for k, v in pairs(table) do table.insert(t, k) end table.sort(t) return t",),
    ("local t = {} for k, v in pairs(coroutine) do table.insert(t, k) end table.sort(t) return t",),
    ("local t = {} for k, v in pairs(cjson) do table.insert(t, k) end table.sort(t) return t",),
    ("local t = {} for k, v in pairs(bit) do table.insert(t, k) end table.sort(t) return t",),
    ("local t = {} for k, v in pairs(struct) do table.insert(t, k) end table.sort(t) return t",),
    ("local t = {} for k, v in pairs(cmsgpack) do table.insert(t, k) end table.sort(t) return t",),
    ("redis.call = nil",),
    ("redis.foo = 1",),
    ("string.x = 1",),
    ("math.pi = 3",),
    ("cjson.encode = nil",),
    ("rawset(_G, 'x', 1)",),
    ("rawset(redis, 'call', 1)",),
    ("setmetatable(_G, nil)",),
    ("setmetatable(string, {})",),
    ("getmetatable('').__index.upper = nil",),
    ("local mt = getmetatable(_G) mt.__index = nil return 1",),
    ("return type(getmetatable(''))",),
    ("return type(getmetatable(_G))",),
    ("return _G == getmetatable(_G)",),
    ("return getmetatable('').__index == string",),
    ("return rawget(_G, 'redis') ~= nil",),
    ("return rawget(_G, 'nope') == nil",),
    ("return rawequal(_G, _G)",),
    ("return next(_G) ~= nil",),
    ("return #string",),
    ("local n = 0 for k in pairs(redis) do n = n + 1 end return n",),
    ("return ('abc'):upper()",),
    ("return tostring(KEYS):sub(1, 6)",),
    ("return loadstring('return 1')()",),
    ("return loadstring('x = 1')()",),
    ("return loadstring('error(\"in loaded\")')()",),
    ("return type(loadstring('return +'))",),
    ("return select(2, loadstring('return +'))",),
    ("return loadstring(string.dump(function() return 42 end))",),
    ("local co = coroutine.create(function() x = 1 end) return {coroutine.resume(co)}",),
    ("local co = coroutine.create(function(a) return a + 1 end) return {coroutine.resume(co, 1)}",),
    ("return collectgarbage('count') > 0",),
    ("return gcinfo() > 0",),
    ("return type(string.dump(function() end))",),
    ("local t = {} setmetatable(t, {__newindex=function() end}) t.x = 1 return 'ok'",),
    ("local t = setmetatable({}, {__metatable='locked'}) return getmetatable(t)",),
    ("local t = setmetatable({}, {__metatable='locked'}) setmetatable(t, {}) return 1",),
    ("setmetatable(1, {}) return 1",),
    ("setmetatable({}) return 1",),
    ("rawget(1) return 1",),
    ("rawset({}, 1) return 1",),
    ("getmetatable() return 1",),
    ("pairs() return 1",),
    ("next(1) return 1",),
    ("ipairs() return 1",),
    ("pcall() return 1",),
    ("coroutine.resume(1) return 1",),
    ("loadstring({}) return 1",),
    ("load(1) return 1",),
]


@pytest.mark.parametrize("case", SANDBOX, ids=_ids(SANDBOX))
def test_sandbox_matches(d: Differ, case: Case) -> None:
    """Redis 7.0's globals: its allow list only, read-only global and library tables, with its
    error texts; loadstring'd code and coroutines live in the same sandbox."""
    _eval(d, *case)


def test_globals_do_not_leak_between_scripts(d: Differ) -> None:
    """A script cannot leave anything behind for the next one (the globals are read-only)."""
    _eval(d, "pcall(function() leak = 1 end) return 1")
    _eval(d, "return leak")


def test_binary_chunks_are_refused(d: Differ) -> None:
    """Precompiled bytecode does not load: Redis lexes it as text."""
    raw = d.real.call("EVAL", "return string.dump(function() return 42 end)", 0)
    body = raw.split(b"\r\n", 1)[1][:-2]
    d.check("EVAL", body, 0)


# --- shebang, EVAL_RO --------------------------------------------------------------------------

SHEBANG: list[Case] = [
    ("#!lua\nreturn redis.call('set', 'a', 'b')",),
    ("#!lua flags=no-writes\nreturn redis.call('set', 'a', 'b')",),
    ("#!lua flags=no-writes\nreturn redis.call('get', 'str')",),
    ("#!lua flags=foo\nreturn 1",),
    ("#!lua foo=bar\nreturn 1",),
    ("#!lua name=x\nreturn 1",),
    ("#!python\nreturn 1",),
    ("#!lua",),
    ("#!\nreturn 1",),
    ("#! lua\nreturn 1",),
    ("#!luax\nreturn 1",),
    ("#!lua\r\nreturn 1",),
    ("#!lua\nreturn 1 +",),
    ("#!lua\n\nerror('x')",),
    ("#!lua flags=no-writes,allow-oom\nreturn 1",),
    ("#!lua flags=allow-cross-slot-keys\nreturn 1",),
    ("#!lua flags=no-cluster,allow-stale\nreturn 1",),
    ("#!lua flags=\nreturn 1",),
    ("#!lua flags=no-writes,\nreturn 1",),
    ("#!lua  flags=no-writes\nreturn 1",),
    ("#!lua flags=no-writes flags=allow-oom\nreturn redis.call('set', 'x', 'y')",),
    ("#comment\nreturn 1",),
]


@pytest.mark.parametrize("case", SHEBANG, ids=_ids(SHEBANG))
def test_shebang_matches(d: Differ, case: Case) -> None:
    """``#!lua flags=...``: engine and flag checks, no-writes, line numbers kept."""
    _eval(d, *case)


@pytest.mark.parametrize(
    "body",
    [
        "return redis.call('set', 'a', 'b')",
        "return redis.pcall('set', 'a', 'b')",
        "return redis.call('get', 'str')",
        "#!lua\nreturn 1",
        "#!lua flags=no-writes\nreturn redis.call('get', 'str')",
        "#!lua flags=no-writes\nreturn redis.call('del', 'str')",
    ],
)
def test_eval_ro_matches(d: Differ, body: str) -> None:
    """EVAL_RO refuses writes, and shebang scripts without no-writes altogether."""
    d.check("EVAL_RO", body, 0)
    d.check("GET", "a")


# --- EVALSHA and SCRIPT ------------------------------------------------------------------------


def test_script_commands_match(d: Differ) -> None:
    """SCRIPT LOAD/EXISTS/FLUSH/KILL/HELP/DEBUG and EVALSHA/EVALSHA_RO with their errors."""
    d.check("SCRIPT", "FLUSH")
    d.check("SCRIPT", "LOAD", "return 1")
    d.check("SCRIPT", "LOAD", "return +")
    d.check("SCRIPT", "LOAD", "#!lua flags=foo\nreturn 1")
    d.check("SCRIPT", "LOAD", "#!lua flags=no-writes\nreturn 1")
    d.check("SCRIPT", "EXISTS", "e0e1f9fabfc9d4800c877a703b823ac0578ff8db", "abc")
    d.check("SCRIPT", "EXISTS", "E0E1F9FABFC9D4800C877A703B823AC0578FF8DB")
    d.check("EVALSHA", "e0e1f9fabfc9d4800c877a703b823ac0578ff8db", 0)
    d.check("EVALSHA", "E0E1F9FABFC9D4800C877A703B823AC0578FF8DB", 0)
    d.check("EVALSHA_RO", "e0e1f9fabfc9d4800c877a703b823ac0578ff8db", 0)
    d.check("EVALSHA", "ffffffffffffffffffffffffffffffffffffffff", 0)
    d.check("EVALSHA", "ffffffffffffffffffffffffffffffffffffffff", -1)
    d.check("EVALSHA", "fff", -1)
    d.check("EVALSHA", "fff", "x")
    d.check("EVAL", "return redis.call('get', KEYS[1])", 1, "str")
    d.check("EVALSHA", "8c923d3ca6c4c2be8ba3d48bcea94e1cc7c5b5d0", 1, "str")
    d.check("SCRIPT", "FLUSH", "ASYNC")
    d.check("SCRIPT", "EXISTS", "e0e1f9fabfc9d4800c877a703b823ac0578ff8db")
    d.check("EVALSHA", "e0e1f9fabfc9d4800c877a703b823ac0578ff8db", 0)
    d.check("SCRIPT", "FLUSH", "sync")
    d.check("SCRIPT", "FLUSH", "FOO")
    d.check("SCRIPT", "FLUSH", "SYNC", "x")
    d.check("SCRIPT", "KILL")
    d.check("SCRIPT", "KILL", "x")
    d.check("SCRIPT", "HELP")
    d.check("SCRIPT", "HELP", "x")
    d.check("SCRIPT", "DEBUG", "no")
    d.check("SCRIPT", "DEBUG", "foo")
    d.check("SCRIPT", "EXISTS")
    d.check("SCRIPT", "LOAD")
    d.check("SCRIPT", "LOAD", "a", "b")
    d.check("SCRIPT", "FOO")
    d.check("SCRIPT")
    d.check("EVAL")
    d.check("EVAL", "return 1")
    d.check("EVALSHA", "x")


def test_scripts_inside_multi_match(d: Differ) -> None:
    """EVAL queues in MULTI and runs at EXEC; a failing script does not abort the others."""
    d.check("MULTI")
    d.check("EVAL", "return redis.call('incr', 'num')", 0)
    d.check("EVAL", "return redis.call('nosuch')", 0)
    d.check("EVAL", "return redis.call('xread', 'block', '0', 'streams', 's', '$')", 0)
    d.check("EVALSHA", "ffffffffffffffffffffffffffffffffffffffff", 0)
    d.check("EXEC")


def test_writes_of_a_failed_script_stay(d: Differ) -> None:
    """Redis does not roll a script back: writes before the error are kept."""
    _eval(d, "redis.call('set', 'a', '1') redis.call('nosuch')")
    d.check("GET", "a")


# --- libraries -----------------------------------------------------------------------------------

CJSON: list[Case] = [
    ("return cjson.encode({1, 2, 3})",),
    ("return cjson.encode({a=1})",),
    ("return cjson.encode({})",),
    ("return cjson.encode({a={}, b={1, 'x', true, false}})",),
    ("return cjson.encode('a\"b\\\\c/d\\n\\t\\1\\127\\128')",),
    ("return cjson.encode(1.5)",),
    ("return cjson.encode(0.1)",),
    ("return cjson.encode(1/3)",),
    ("return cjson.encode(1e100)",),
    ("return cjson.encode(123456789012345)",),
    ("return cjson.encode(2^53)",),
    ("return cjson.encode(-1e-300)",),
    ("return cjson.encode(nil)",),
    ("return cjson.encode(cjson.null)",),
    ("return cjson.encode(true)",),
    ("return cjson.encode(1/0)",),
    ("return cjson.encode(0/0)",),
    ("return cjson.encode({[1]=1, [2]=2, [4]=4})",),
    ("return cjson.encode({[1]=1, [3]=3})",),
    ("return cjson.encode({[1]=1, [20]=3})",),
    ("return cjson.encode({[1]=1, a=3})",),
    ("return cjson.encode({[1.5]=1})",),
    ("return cjson.encode({[true]=1})",),
    ("return cjson.encode({[{}]=1})",),
    ("return cjson.encode(function() end)",),
    ("local t = {} t[1] = t return cjson.encode(t)",),
    ("return cjson.encode({a=1, b=2, c=3, d=4})",),
    ("return cjson.encode({[0]=1})",),
    ("return cjson.encode({[-1]=1})",),
    ("return cjson.encode({[2]=1})",),
    ("return cjson.encode({1, 2, 3, nil, 5})",),
    (
        "return cjson.encode({[10]=1, [9]=2, [8]=3, [7]=4, [6]=5, [5]=6, [4]=7, [3]=8, [2]=9, [1]=10})",
    ),
    ("return cjson.encode({['a\\0b']=1})",),
    ("return cjson.encode({cjson.null, 1})",),
    ("return cjson.encode()",),
    ("return cjson.encode(1, 2)",),
    ("return cjson.encode('\\0')",),
    ("return cjson.decode('[1,2,3]')",),
    ('return cjson.decode(\'{"a":[1,2,{"b":null}]}\').a[3].b == cjson.null',),
    ("return type(cjson.null)",),
    ("return tostring(cjson.null)",),
    ("return cjson.decode('\"\\\\u00e9\\\\ud83d\\\\ude00\"')",),
    ("return cjson.decode('1.5e3')",),
    ("return tostring(cjson.decode('0.1'))",),
    ("return cjson.decode('{')",),
    ("return cjson.decode('[1,]')",),
    ("return cjson.decode('')",),
    ("return cjson.decode(' ')",),
    ("return cjson.decode('nul')",),
    ("return cjson.decode('[1] x')",),
    ("return cjson.decode('\"abc')",),
    ("return cjson.decode('{\"a\" 1}')",),
    ("return cjson.decode('{1:2}')",),
    ("return cjson.decode('[\"\\\\x\"]')",),
    ("return cjson.decode('NaN')",),
    ("return cjson.decode('0x10')",),
    ("return cjson.decode('[1,2')",),
    ("return cjson.decode(1)",),
    ("return cjson.decode()",),
    ("return cjson.decode({})",),
    ("return cjson.decode('true')",),
    ("return cjson.decode('-0')",),
    ("return cjson.decode(' [ 1 , 2 ] ')",),
    ('return cjson.encode(cjson.decode(\'{"a":{"b":[]}}\'))',),
    ("return cjson.decode('\"\\\\ud83d\"')",),
    ("return cjson.decode(string.rep('[', 1001) .. string.rep(']', 1001))",),
    ("return cjson.decode(string.rep('[', 1000) .. string.rep(']', 1000)) ~= nil",),
    ("return cjson.decode(string.rep('{\"a\":', 1001) .. '1' .. string.rep('}', 1001))",),
    ("return cjson.decode('\\0a')",),
    ("return cjson.decode('[1]\\0')",),
    ("return cjson.decode('\"\\\\u0000\"')",),
    ("return cjson.decode('[\"a\\tb\"]')",),
    ("return cjson.decode('1e400')",),
    ("return tostring(cjson.decode('-1e400'))",),
    ("return cjson.decode('Infinity')",),
    ("return cjson.decode('+1')",),
    ("return cjson.decode('01')",),
    ("return cjson.decode('.5')",),
    ("return cjson.decode('1.')",),
    ("return cjson.decode('-')",),
    ("return cjson.decode('tru')",),
    ("return cjson.decode('[true false]')",),
    ("return cjson.decode('{\"a\":1,}')",),
    ('return cjson.decode(\'{"a":1 "b"}\')',),
    ("return cjson.decode('\\'a\\'')",),
    ("return cjson.decode('\"\\\\/\\\\b\\\\f\\\\n\\\\r\\\\t\"')",),
    ("return cjson.decode('\"\\\\u12\"')",),
    ("return cjson.decode('\"\\\\udc00\\\\ud800\"')",),
    ("return cjson.decode('[1,2,3]', 1)",),
    (
        "return {cjson.encode_max_depth(), cjson.decode_max_depth(), cjson.encode_number_precision()}",
    ),
    ("return {cjson.encode_sparse_array()}",),
    ("return {cjson.encode_keep_buffer()}",),
    ("return {cjson.encode_invalid_numbers()}",),
    ("return {cjson.decode_invalid_numbers()}",),
    ("return cjson.encode_number_precision(20)",),
    ("return cjson.encode_max_depth(0)",),
    ("return cjson.encode_max_depth('x')",),
    ("return {cjson.encode_sparse_array('x')}",),
    ("return cjson.encode_invalid_numbers('bogus')",),
    (
        "cjson.encode_number_precision(3) local r = cjson.encode(1/3) cjson.encode_number_precision(14) return r",
    ),
    (
        "cjson.encode_sparse_array(true) local r = cjson.encode({[1]=1, [20]=3}) cjson.encode_sparse_array(false) return r",
    ),
    (
        "local r = {cjson.encode_sparse_array('on', 3, 5)} cjson.encode_sparse_array(false, 2, 10) return r",
    ),
    (
        "cjson.encode_invalid_numbers(true) local r = cjson.encode({1/0, -1/0, 0/0}) cjson.encode_invalid_numbers(false) return r",
    ),
    (
        "cjson.encode_invalid_numbers('null') local r = cjson.encode({1/0}) cjson.encode_invalid_numbers(false) return r",
    ),
    (
        "cjson.decode_invalid_numbers(false) local ok, e = pcall(cjson.decode, 'NaN') cjson.decode_invalid_numbers(true) return e",
    ),
    ("return cjson.new().encode({1})",),
    ("return cjson._NAME .. ' ' .. cjson._VERSION",),
    ("local ok, e = pcall(cjson.decode, '{') return e",),
]


@pytest.mark.parametrize("case", CJSON, ids=_ids(CJSON))
def test_cjson_matches(d: Differ, case: Case) -> None:
    """lua-cjson 2.1.0 as Redis bundles it: output bytes, number formats, sparse arrays, the
    parser's error texts and positions, the configuration functions."""
    _eval(d, *case)


BIT: list[Case] = [
    ("return bit.tobit(0xffffffff)",),
    ("return bit.tobit(2^32+5)",),
    ("return bit.tobit(1.5)",),
    ("return bit.tobit(2.5)",),
    ("return bit.tobit(-1.5)",),
    ("return bit.tobit(1/0)",),
    ("return bit.tobit(0/0)",),
    ("return bit.tohex(255)",),
    ("return bit.tohex(-1)",),
    ("return bit.tohex(255, -4)",),
    ("return bit.tohex(255, 12)",),
    ("return bit.tohex(255, 0)",),
    ("return bit.tohex()",),
    ("return bit.bnot(0)",),
    ("return bit.band(0xff, 0x0f, 0x3)",),
    ("return bit.bor(1, 2, 4)",),
    ("return bit.bxor(5, 1)",),
    ("return bit.lshift(1, 31)",),
    ("return bit.lshift(1, 32)",),
    ("return bit.rshift(-1, 28)",),
    ("return bit.arshift(-256, 4)",),
    ("return bit.rol(0x12345678, 8)",),
    ("return bit.ror(0x12345678, 8)",),
    ("return bit.rol(0x12345678, 0)",),
    ("return bit.bswap(0x12345678)",),
    ("return bit.band()",),
    ("return bit.band('x')",),
    ("return bit.band('12')",),
    ("return bit.band(1, {})",),
    ("return bit.band(1, {}, {})",),
]


@pytest.mark.parametrize("case", BIT, ids=_ids(BIT))
def test_bit_matches(d: Differ, case: Case) -> None:
    """LuaBitOp: 32-bit results, rounding of fractional arguments, its argument errors."""
    _eval(d, *case)


STRUCT: list[Case] = [
    ("return struct.pack('>I', 1)",),
    ("return struct.pack('<h', -2)",),
    ("return struct.pack('bBhHlLTiI', 1, 2, 3, 4, 5, 6, 7, 8, 9)",),
    ("return struct.pack('i3', 65536 + 256 + 1)",),
    ("return struct.pack('!4 b i', 1, 2)",),
    ("return struct.pack('s', 'ab')",),
    ("return struct.pack('c3', 'abcd')",),
    ("return struct.pack('c5', 'ab')",),
    ("return struct.pack('c0', 'abc')",),
    ("return struct.pack('fd', 1.5, 2.25)",),
    ("return struct.pack('x')",),
    ("return struct.pack('y', 1)",),
    ("return struct.pack('i40', 1)",),
    ("return struct.pack('!3', 1)",),
    ("return struct.pack('i')",),
    ("return struct.pack('ii', 1)",),
    ("return struct.pack('I8', -1)",),
    ("return struct.pack('i16', -1)",),
    ("return struct.pack('b', 300)",),
    ("return struct.pack('B', -1)",),
    ("return struct.pack()",),
    ("return {struct.unpack('>I', '\\0\\0\\0\\1')}",),
    ("return {struct.unpack('<h', '\\254\\255')}",),
    ("return {struct.unpack('s', 'ab\\0cd')}",),
    ("return {struct.unpack('s', 'ab')}",),
    ("return {struct.unpack('I', 'ab')}",),
    ("return {struct.unpack('b c0', '\\3abcd')}",),
    ("return {struct.unpack('c0', 'abcd')}",),
    ("return {struct.unpack('I', '\\1\\0\\0\\0\\2\\0\\0\\0', 5)}",),
    ("return {struct.unpack('I', '\\1\\0\\0\\0', 0)}",),
    ("return {struct.unpack('d', struct.pack('d', 0.1))}",),
    ("return tostring(struct.unpack('f', struct.pack('f', 0.1)))",),
    ("return {struct.unpack('i16', struct.pack('i16', -1))}",),
    ("return {struct.unpack('l', struct.pack('l', -5))}",),
    ("return struct.unpack('b')",),
    ("return struct.size('i4 d !8 b d')",),
    ("return struct.size('s')",),
    ("return struct.size('c0')",),
    ("return struct.size('c3')",),
]


@pytest.mark.parametrize("case", STRUCT, ids=_ids(STRUCT))
def test_struct_matches(d: Differ, case: Case) -> None:
    """The struct library: formats, alignment, sizes and its error texts."""
    _eval(d, *case)


CMSGPACK: list[Case] = [
    (
        "return cmsgpack.pack(1, -1, 200, -200, 70000, 2^32, -2^40, 1.5, 0.1, 'abc', string.rep('x', 40), true, false, nil)",
    ),
    ("return cmsgpack.pack({1, 2, 3})",),
    ("return cmsgpack.pack({a=1})",),
    ("return cmsgpack.pack({})",),
    ("return cmsgpack.pack({1, nil, 3})",),
    ("return cmsgpack.pack({[1]=1, [3]=3})",),
    ("return cmsgpack.pack(cjson.null)",),
    ("return cmsgpack.pack(2^64)",),
    ("return cmsgpack.pack(2^63)",),
    ("return cmsgpack.pack(0/0)",),
    ("return cmsgpack.pack(1/0)",),
    ("return cmsgpack.pack(-0.0)",),
    ("return cmsgpack.pack(string.rep('x', 300))",),
    ("local t = {} t[1] = t return cmsgpack.pack(t)",),
    ("return cmsgpack.pack()",),
    ("return {cmsgpack.unpack(cmsgpack.pack(1, 'a', {1, 2}, {x=1}))}",),
    ("return cmsgpack.unpack(cmsgpack.pack({x={y=1}})).x.y",),
    ("return {cmsgpack.unpack('\\147\\1\\2')}",),
    ("return {cmsgpack.unpack('\\193')}",),
    ("return {cmsgpack.unpack('')}",),
    ("return {cmsgpack.unpack_one(cmsgpack.pack(1, 2, 3))}",),
    ("return {cmsgpack.unpack_one(cmsgpack.pack(1, 2, 3), 1)}",),
    ("return {cmsgpack.unpack_one(cmsgpack.pack(1, 2, 3), 2)}",),
    ("return {cmsgpack.unpack_one(cmsgpack.pack(1, 2, 3), 3)}",),
    ("return {cmsgpack.unpack_limit(cmsgpack.pack(1, 2, 3), 2)}",),
    ("return {cmsgpack.unpack_limit(cmsgpack.pack(1, 2, 3), 0, 1)}",),
    ("return {cmsgpack._NAME, cmsgpack._VERSION, cmsgpack._COPYRIGHT, cmsgpack._DESCRIPTION}",),
    ("return cmsgpack.unpack(1)",),
    ("return cmsgpack.unpack({})",),
    ("return cmsgpack.unpack()",),
    ("return {cmsgpack.unpack(cmsgpack.pack(-0.0, 3.0, 2^53))}",),
    ("return tostring(cmsgpack.unpack(cmsgpack.pack(0.1)))",),
    ("return {cmsgpack.unpack('\\217\\3abc\\196\\2xy')}",),
]


@pytest.mark.parametrize("case", CMSGPACK, ids=_ids(CMSGPACK))
def test_cmsgpack_matches(d: Differ, case: Case) -> None:
    """lua-cmsgpack 0.4.0: encodings chosen per value, nesting limit, the unpack variants."""
    _eval(d, *case)


def test_math_random_follows_redis_generator(d: Differ) -> None:
    """math.random is Redis's redisLrand48: the same sequence for the same seed."""
    _eval(
        d,
        "math.randomseed(42) return {tostring(math.random()), math.random(100), math.random(5, 10)}",
    )
    _eval(d, "return {tostring(math.random()), math.random(3)}")
    _eval(d, "math.randomseed(-7) return tostring(math.random())")
    _eval(d, "return math.random(0)")
    _eval(d, "return math.random(3, 1)")
    _eval(d, "return math.random(1, 2, 3)")
    _eval(d, "return math.random('x')")
    _eval(d, "return math.randomseed()")


# --- known differences -----------------------------------------------------------------------------

_KNOWN = [
    pytest.param(
        "return {big_number='123'}",
        3,
        id="resp3-big-number",
        marks=pytest.mark.xfail(
            strict=True, reason="the engine's encoder has no RESP3 big number: a bulk string"
        ),
    ),
    pytest.param(
        "return {verbatim_string={format='md', string='hi'}}",
        3,
        id="resp3-verbatim-format",
        marks=pytest.mark.xfail(strict=True, reason="Verbatim replies always say txt"),
    ),
    pytest.param(
        "return {double=0/0}",
        2,
        id="negative-nan",
        marks=pytest.mark.xfail(strict=True, reason="format_double prints nan, glibc -nan"),
    ),
    pytest.param(
        "return cjson.encode(-0)",
        2,
        id="negative-zero",
        marks=pytest.mark.xfail(strict=True, reason="lupa hands -0.0 to Python as the int 0"),
    ),
]


@pytest.mark.parametrize(("body", "resp"), _KNOWN)
def test_known_differences(redis_port: int, body: str, resp: int) -> None:
    """What the engine knowingly does differently (each xfail says why); strict, so a fix shows."""
    differ = Differ(redis_port)
    try:
        if resp == 3:
            differ.both("HELLO", 3)
        differ.check("EVAL", body, 0)
    finally:
        differ.close()


# --- redis.call with as many arguments as unpack() passes ----------------------------------------

# Lua 5.1's C stack lets unpack() pass up to 7999 values; the engine's call into Python takes
# fewer, so the sandbox packs long argument lists into one table.
_MANY = "local a = {} for i = 1, %d do a[i] = %s end "

MANY_ARGS: list[Case] = [
    (_MANY % (7999, "1") + "return redis.call('lpush', 'many', unpack(a))",),
    (_MANY % (7997, "i") + "return redis.call('rpush', 'many', unpack(a))",),
    (_MANY % (7999, "'x'") + "return redis.pcall('lpush', 'many', unpack(a))",),
    (_MANY % (5000, "i") + "return redis.call('sadd', 'many', unpack(a))",),
    (
        _MANY % (3000, "1")
        + "a[2000] = nil return redis.pcall('lpush', 'many', unpack(a, 1, 3000))",
    ),
    (_MANY % (3000, "1") + "a[5] = {} return redis.pcall('lpush', 'many', unpack(a))",),
    (_MANY % (3000, "1") + "\nreturn redis.call('nosuch', unpack(a))",),
    (_MANY % (3000, "1") + "\nreturn redis.call('lpush', unpack(a), {})",),
    (_MANY % (3000, "1") + "local c = redis.call\nreturn c('nosuch', unpack(a))",),
    (_MANY % (3000, "1") + "return redis.pcall('get', unpack(a))",),
    (_MANY % (3000, "1") + "return {pcall(redis.call, 'incr', unpack(a))}",),
]


@pytest.mark.parametrize("case", MANY_ARGS, ids=[f"many-{i}" for i in range(len(MANY_ARGS))])
def test_calls_with_thousands_of_arguments_match(d: Differ, case: Case) -> None:
    """redis.call/pcall take the 7999 arguments unpack() can pass, with Redis's errors."""
    _eval(d, case[0])
    d.check("LRANGE", "many", 0, 2)


def test_function_calls_with_thousands_of_arguments_match(d: Differ) -> None:
    """A library function's redis.call takes thousands of arguments too (FCALL)."""
    d.check("FUNCTION", "FLUSH")
    body = (
        "#!lua name=manylib\n"
        "redis.register_function('many', function(keys, args)\n"
        + _MANY % (7999, "i")
        + "return redis.call('rpush', keys[1], unpack(a)) end)"
    )
    d.check("FUNCTION", "LOAD", body)
    d.check("FCALL", "many", 1, "fl")
    d.check("LLEN", "fl")
    d.check("FUNCTION", "FLUSH")


# redis.call/pcall are Lua functions in the sandbox, and scripts load without tail calls, so
# what sees a C function on Redis sees a function here, and a tail call keeps its line.
TAIL_AND_TYPE: list[Case] = [
    ("return type(redis.call)",),
    ("return type(redis.pcall)",),
    ("table.foreach({1}, redis.call)",),
    ("return rawset(_G, 'x', 1)",),
    ("return redis.call('nosuch')",),
    ("\n\nreturn redis.call('incr', 'str')",),
    ("local function f() return redis.call('nosuch') end\nreturn f()",),
    ("local function f(n) if n == 0 then return 0 end return f(n - 1) end return f(100)",),
    ("return select('#', redis.pcall('set', 'k', 'v'))",),
]


@pytest.mark.parametrize("case", TAIL_AND_TYPE, ids=_ids(TAIL_AND_TYPE))
def test_tail_calls_and_api_types_match(d: Differ, case: Case) -> None:
    """Error lines of tail calls to the API, and type() of its functions, are Redis's."""
    _eval(d, case[0])
