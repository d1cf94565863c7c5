"""Lua scripting on the engine alone: the sandbox, atomicity, blocking commands in scripts, the
script cache, SCRIPT KILL, large arguments and replies, and redis-py (sync, asyncio,
pipelines, register_script) through ``engine://memory``.

Byte-for-byte comparisons with redis-server are in ``test_scripting_vs_redis.py``.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio
from redis.exceptions import NoScriptError, ResponseError

from streamworker.engine import Engine
from streamworker.engine.context import Blocked
from streamworker.engine.errors import CommandError
from streamworker.engine.inproc import async_client, forget_engine, sync_client
from streamworker.engine.replies import NULL_BULK, OK, Status
from streamworker.engine.scripting import runtime_for, sha1hex
from tests.engine.conftest import Exec

_names = itertools.count()


def _eval(ex: Exec, body: str, *args: str | int) -> Any:
    return ex("EVAL", body, *(args or (0,)))


# --- the sandbox ---------------------------------------------------------------------------------


def test_globals_are_redis_70_allow_list(ex: Exec) -> None:
    """Exactly the 35 globals Redis 7.0.15 leaves to scripts."""
    names = _eval(ex, "local t = {} for k in pairs(_G) do t[#t + 1] = k end table.sort(t) return t")
    expected = (
        "ARGV KEYS _G _VERSION __redis__err__handler assert bit cjson cmsgpack collectgarbage "
        "coroutine error gcinfo getmetatable ipairs load loadstring math next pairs pcall "
        "rawequal rawget rawset redis select setmetatable string struct table tonumber tostring "
        "type unpack xpcall"
    )
    assert names == sorted(n.encode() for n in expected.split(" "))


@pytest.mark.parametrize(
    "name", ["os", "io", "debug", "require", "loadfile", "dofile", "python", "getfenv", "package"]
)
def test_escape_hatches_are_not_reachable(ex: Exec, name: str) -> None:
    """No OS, file, debug or Python access: those globals do not exist."""
    reply = _eval(ex, f"return {name}")
    assert isinstance(reply, CommandError)
    assert f"nonexistent global variable '{name}'" in reply.text


def test_python_functions_expose_no_attributes(ex: Exec) -> None:
    """The API functions are Python functions to lupa; their attributes stay out of reach."""
    for body in ("return redis.call.__globals__", "return cjson.null.__class__"):
        assert isinstance(_eval(ex, body), CommandError)
    assert _eval(ex, "return getmetatable(redis.call) == nil") == 1


def test_library_tables_cannot_be_changed_for_later_scripts(ex: Exec) -> None:
    """Assignments to library tables fail, and even rawset or the string metatable cannot
    replace what the next script uses."""
    for body in (
        "redis.call = nil",
        "rawset(redis, 'call', nil)",
        "string.upper = nil",
        "getmetatable('').__index = {}",
        "setmetatable(_G, nil)",
        "table.insert = nil",
    ):
        reply = _eval(ex, body)
        assert isinstance(reply, CommandError), body
        assert "Attempt to modify a readonly table" in reply.text
    assert _eval(ex, "return ('abc'):upper() .. redis.call('ping').ok") == b"ABCPONG"


def test_loaded_chunks_and_coroutines_share_the_sandbox(ex: Exec) -> None:
    """loadstring'd code and coroutines see the same read-only globals as the script."""
    reply = _eval(ex, "return loadstring('x = 1')()")
    assert isinstance(reply, CommandError)
    assert "readonly table" in reply.text
    reply = _eval(ex, "return loadstring('return os')()")
    assert isinstance(reply, CommandError)
    assert "nonexistent global variable 'os'" in reply.text
    co = _eval(ex, "local co = coroutine.wrap(function() return type(redis) end) return co()")
    assert co == b"table"


def test_string_library_works_through_the_proxies(ex: Exec) -> None:
    """Method calls on strings, pairs over libraries and rawget see the real tables."""
    assert _eval(ex, "return ('a,b'):find(',')") == 2
    assert _eval(ex, "local n = 0 for _ in pairs(string) do n = n + 1 end return n") == 15
    assert _eval(ex, "return type(rawget(math, 'floor'))") == b"function"


# --- execution -----------------------------------------------------------------------------------


def test_script_runs_atomically_against_other_threads(engine: Engine) -> None:
    """No command of another client runs while a script does: the script's reads see only its
    own writes, even with a thread hammering the same key."""
    ex_client = engine.connect()
    other = engine.connect()
    engine.execute(ex_client, [b"SET", b"k", b"0"])
    stop = threading.Event()

    def hammer() -> None:
        while not stop.is_set():
            engine.execute(other, [b"INCR", b"k"])

    thread = threading.Thread(target=hammer)
    thread.start()
    try:
        body = (
            b"local before = tonumber(redis.call('GET', KEYS[1])) "
            b"for i = 1, 2000 do redis.call('INCR', KEYS[1]) end "
            b"return tonumber(redis.call('GET', KEYS[1])) - before"
        )
        for _ in range(20):
            assert engine.execute(ex_client, [b"EVAL", body, b"1", b"k"]) == 2000
    finally:
        stop.set()
        thread.join()


def test_blocked_reader_is_served_after_the_whole_script(engine: Engine) -> None:
    """A reader blocked on the stream wakes only once the script is over: it gets both
    entries the script added, never a state between them."""
    reader = engine.connect()
    writer = engine.connect()
    engine.execute(writer, [b"XADD", b"s", b"1-1", b"f", b"v"])
    blocked = engine.execute(reader, [b"XREAD", b"BLOCK", b"0", b"STREAMS", b"s", b"$"])
    assert isinstance(blocked, Blocked)
    body = b"redis.call('XADD', 's', '2-1', 'a', '1') redis.call('XADD', 's', '3-1', 'b', '2')"
    engine.execute(writer, [b"EVAL", body, b"0"])
    reply = engine.wait(blocked, 5)
    assert reply == [[b"s", [[b"2-1", [b"a", b"1"]], [b"3-1", [b"b", b"2"]]]]]


def test_blocking_commands_do_not_block_in_scripts(ex: Exec) -> None:
    """XREAD/XREADGROUP BLOCK are refused as Redis 7.0 refuses them; without BLOCK they answer
    at once; BLPOP is not allowed in scripts at all."""
    ex("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    reply = _eval(
        ex, "return redis.call('XREADGROUP', 'GROUP', 'g', 'c', 'BLOCK', '0', 'STREAMS', 's', '>')"
    )
    assert isinstance(reply, CommandError)
    assert reply.text.startswith(
        "ERR XREADGROUP command is not allowed with BLOCK option from scripts"
    )
    assert _eval(ex, "return redis.call('XREAD', 'STREAMS', 's', '$')") is NULL_BULK
    reply = _eval(ex, "return redis.call('BLPOP', 'l', '0')")
    assert isinstance(reply, CommandError)
    assert reply.text.startswith("ERR This Redis command is not allowed from script")


def test_script_commands_are_counted_and_flagged_in_script(engine: Engine, ex: Exec) -> None:
    """Every redis.call goes through Engine.call_from_script with the script client's ctx."""
    seen: list[tuple[bool, list[bytes]]] = []
    original = engine.call_from_script

    def spy(ctx: Any, argv: list[bytes], *a: Any) -> Any:
        seen.append((ctx.in_script, list(argv)))
        return original(ctx, argv, *a)

    engine.call_from_script = spy  # type: ignore[method-assign]
    runtime_for(engine).flush()  # rebuild redis.call around the spy
    _eval(ex, "redis.call('SET', 'a', 1) return redis.pcall('GET', 'a')")
    assert seen == [(True, [b"SET", b"a", b"1"]), (True, [b"GET", b"a"])]


def test_evalsha_after_eval_and_script_flush(ex: Exec) -> None:
    """EVAL caches the script under its sha1; SCRIPT FLUSH forgets it (NOSCRIPT after)."""
    body = "return 'cached'"
    sha = sha1hex(body.encode())
    assert _eval(ex, body) == b"cached"
    assert ex("EVALSHA", sha, 0) == b"cached"
    assert ex("SCRIPT", "EXISTS", sha, sha.upper()) == [1, 1]
    assert ex("SCRIPT", "FLUSH") == OK
    reply = ex("EVALSHA", sha, 0)
    assert reply == CommandError("NOSCRIPT No matching script. Please use EVAL.")


def test_script_flush_resets_lua_state_but_not_random(ex: Exec) -> None:
    """SCRIPT FLUSH gives a fresh Lua state (cjson settings back to defaults), while
    math.random's generator carries on, as Redis's does."""
    _eval(ex, "cjson.encode_number_precision(3) return 1")
    ex("SCRIPT", "FLUSH")
    assert _eval(ex, "return cjson.encode_number_precision()") == 14
    _eval(ex, "math.randomseed(1) return 1")
    first = _eval(ex, "return tostring(math.random())")
    _eval(ex, "math.randomseed(1) return 1")
    ex("SCRIPT", "FLUSH")
    assert _eval(ex, "return tostring(math.random())") == first


def test_script_kill_stops_a_busy_script(engine: Engine) -> None:
    """request_kill (SCRIPT KILL from a transport) stops a runaway read-only script with
    Redis's error; a script that wrote is UNKILLABLE; nothing running is NOTBUSY."""
    runtime = runtime_for(engine)
    assert runtime.request_kill() == CommandError("NOTBUSY No scripts in execution right now.")
    client = engine.connect()
    result: dict[str, Any] = {}

    def run(body: bytes) -> None:
        result["reply"] = engine.execute(client, [b"EVAL", body, b"0"])

    def wait_running() -> None:
        deadline = time.monotonic() + 5
        while not runtime.running and time.monotonic() < deadline:
            time.sleep(0.01)

    loop = b"while true do pcall(function() local i = 0 while true do i = i + 1 end end) end"
    thread = threading.Thread(target=run, args=(loop,))
    thread.start()
    wait_running()
    assert runtime.request_kill() == OK
    thread.join(10)
    reply = result["reply"]
    assert isinstance(reply, CommandError)
    assert reply.text.startswith("ERR Script killed by user with SCRIPT KILL... script: ")

    wrote = b"redis.call('SET', 'x', 'y') local i = 0 while i < 2e7 do i = i + 1 end return 1"
    thread = threading.Thread(target=run, args=(wrote,))
    thread.start()
    deadline = time.monotonic() + 5
    while not runtime.written and time.monotonic() < deadline:
        time.sleep(0.001)
    unkillable = runtime.request_kill()
    thread.join(30)
    assert isinstance(unkillable, CommandError)
    assert unkillable.text.startswith("UNKILLABLE ")
    assert result["reply"] == 1


def test_a_kill_and_the_first_write_are_ordered(engine: Engine) -> None:
    """SCRIPT KILL racing a script's first write: either the kill is accepted and nothing was
    written, or it is refused as UNKILLABLE and the script ran to its end; never a script
    stopped half-way after writing."""
    runtime = runtime_for(engine)
    client = engine.connect()
    body = b"local i = 0 while i < %d do i = i + 1 end redis.call('INCR', 'n') return 1"
    applied = 0
    outcomes: set[str] = set()
    for spin in (0, 10, 100, 1_000, 10_000, 50_000, 99_000, 200_000) * 3:
        result: dict[str, Any] = {}

        def run(script: bytes = body % spin, out: dict[str, Any] = result) -> None:
            out["reply"] = engine.execute(client, [b"EVAL", script, b"0"])

        thread = threading.Thread(target=run)
        thread.start()
        while not runtime.running and thread.is_alive():
            pass
        answer = runtime.request_kill()
        thread.join(30)
        reply = result["reply"]
        if answer == OK:
            outcomes.add("killed")
            assert isinstance(reply, CommandError)
            assert reply.text.startswith("ERR Script killed by user")
        elif isinstance(answer, CommandError) and answer.text.startswith("UNKILLABLE"):
            outcomes.add("unkillable")
            assert reply == 1
            applied += 1
        else:  # the script ended before the kill arrived
            assert answer == CommandError("NOTBUSY No scripts in execution right now.")
            assert reply == 1
            applied += 1
        stored = engine.execute(client, [b"GET", b"n"])
        assert stored == (str(applied).encode() if applied else NULL_BULK)
    assert "killed" in outcomes


def test_many_keys_args_and_a_large_reply(ex: Exec) -> None:
    """Past Lua's stack limits: 10,000 arguments in, 10,000 elements out."""
    args = [str(i) for i in range(10_000)]
    assert ex("EVAL", "return #ARGV", 0, *args) == 10_000
    assert ex("EVAL", "return KEYS[10000]", 10_000, *args) == b"9999"
    reply = ex("EVAL", "local t = {} for i = 1, 10000 do t[i] = {i, 'x'} end return t", 0)
    assert len(reply) == 10_000
    assert reply[-1] == [10_000, b"x"]
    assert ex("EVAL", "return ARGV", 0, *args) == [a.encode() for a in args]


def test_table_containing_itself_is_cut_with_an_error(ex: Exec) -> None:
    """A self-referencing reply ends in Redis's "reached lua stack limit" error element."""
    reply = _eval(ex, "local t = {} t[1] = t return t")
    depth = 0
    while isinstance(reply, list):
        reply = reply[0]
        depth += 1
    assert reply == CommandError("ERR reached lua stack limit")
    assert depth == 200


def test_eval_inside_multi_runs_at_exec(ex: Exec) -> None:
    """EVAL queues in MULTI; at EXEC the script runs with the transaction's other commands."""
    assert ex("MULTI") == OK
    assert ex("EVAL", "return redis.call('INCR', KEYS[1])", 1, "n") == Status("QUEUED")
    assert ex("INCR", "n") == Status("QUEUED")
    assert ex("EXEC") == [1, 2]


def test_resp3_caller_gets_resp3_types(engine: Engine) -> None:
    """A RESP3 caller receives booleans, maps and doubles a RESP3 script returns."""
    client = engine.connect()
    client.resp = 3
    body = b"redis.setresp(3) return {true, {map={a=1}}, {double=1.5}}"
    reply = engine.execute(client, [b"EVAL", body, b"0"])
    assert reply[0] is True
    assert reply[2].value == 1.5


# --- redis-py through engine://memory --------------------------------------------------------------


@pytest.fixture
def url() -> Iterator[str]:
    """A fresh named in-process engine."""
    name = f"engine://memory/scripting-{next(_names)}"
    yield name
    forget_engine(name)


def test_redis_py_eval_and_evalsha(url: str) -> None:
    """client.eval / evalsha / script_load / script_exists work as on a server."""
    r = sync_client(url)
    try:
        assert r.eval("return redis.call('SET', KEYS[1], ARGV[1])", 1, "k", "v") == b"OK"
        assert r.eval("return {KEYS[1], ARGV[1], 3}", 1, "k", "v") == [b"k", b"v", 3]
        sha = r.script_load("return ARGV[1] .. '!'")
        assert r.script_exists(sha, "0" * 40) == [True, False]
        assert r.evalsha(sha, 0, "hi") == b"hi!"
        with pytest.raises(NoScriptError):
            r.evalsha("0" * 40, 0)
        with pytest.raises(ResponseError, match="Unknown Redis command called from script"):
            r.eval("return redis.call('nosuch')", 0)
    finally:
        r.close()


def test_register_script_falls_back_to_eval_after_flush(url: str) -> None:
    """redis-py's Script retries with SCRIPT LOAD on NOSCRIPT, also in a pipeline."""
    r = sync_client(url, decode_responses=True)
    try:
        incr = r.register_script("return redis.call('INCRBY', KEYS[1], ARGV[1])")
        assert incr(keys=["n"], args=[2]) == 2
        r.script_flush()
        assert incr(keys=["n"], args=[3]) == 5
        r.script_flush()
        with r.pipeline() as pipe:
            incr(keys=["n"], args=[1], client=pipe)
            pipe.get("n")
            assert pipe.execute() == [6, "6"]
        with r.pipeline(transaction=False) as pipe:
            incr(keys=["n"], args=[1], client=pipe)
            incr(keys=["n"], args=[1], client=pipe)
            assert pipe.execute() == [7, 8]
    finally:
        r.close()


def test_redis_py_resp2_client(url: str) -> None:
    """A protocol=2 client gets RESP2 conversions (nil for false, flat arrays)."""
    r = sync_client(url, protocol=2)
    try:
        assert r.eval("return false", 0) is None
        assert r.eval("return {map={a=1}}", 0) == [b"a", 1]
    finally:
        r.close()


async def test_redis_py_asyncio(url: str) -> None:
    """redis.asyncio: eval, evalsha, register_script and pipelines."""
    r: redis.asyncio.Redis = async_client(url, decode_responses=True)
    try:
        assert await r.eval("return 'async'", 0) == "async"
        script = r.register_script("return redis.call('LPUSH', KEYS[1], ARGV[1])")
        assert await script(keys=["l"], args=["a"]) == 1
        await r.script_flush()
        assert await script(keys=["l"], args=["b"]) == 2
        async with r.pipeline() as pipe:
            await script(keys=["l"], args=["c"], client=pipe)
            pipe.lrange("l", 0, -1)
            assert await pipe.execute() == [3, ["c", "b", "a"]]
        results = await asyncio.gather(
            *(r.eval("return redis.call('INCR', 'n')", 0) for _ in range(20))
        )
        assert sorted(results) == list(range(1, 21))
    finally:
        await r.aclose()
