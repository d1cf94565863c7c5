"""Redis 7.0 Functions (FUNCTION LOAD/DELETE/LIST/FLUSH/STATS/KILL/DUMP/RESTORE, FCALL,
FCALL_RO) side by side with redis-server 7.0.15 in RESP2 and RESP3, with the edge cases of
Redis's ``unit/functions.tcl``: the ``#!lua name=`` line, what a library sees while it loads,
both forms of ``redis.register_function`` and their errors, flags, FCALL's numkeys and its
read-only variant; DUMP payloads byte-identical to redis-server's and restorable both ways;
libraries surviving an append-only file reload and rewrite.

Redis lists libraries and a library's functions in hash order (seeded at start-up), so the
scripts compare FUNCTION LIST only where one library with one function is listed."""

from __future__ import annotations

import random
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streamworker.engine import Engine
from streamworker.engine.aof import open_persistent
from streamworker.engine.crc64 import crc64_bytes
from streamworker.engine.errors import CommandError
from streamworker.engine.functions import Library, dump_payload
from streamworker.engine.rdb.lzf import compress, decompress
from streamworker.engine.rdb.primitives import save_string as rdb_string
from streamworker.engine.replies import OK
from tests.engine.aof_support import Session
from tests.engine.conftest import pack, read_raw_reply
from tests.engine.differential.backends import EngineBackend, RedisBackend
from tests.engine.differential.resp import RawConnection
from tests.engine.differential.scripts import mismatches
from tests.engine.test_hostile_clients import Raw
from tests.support.engine_server import EngineServerProcess
from tests.support.servers import RedisServer

LIB = (
    '"#!lua name=lib1\\n'
    "redis.register_function('f1', function(keys, args) return {keys, args} end)\\n"
    "redis.register_function{function_name='f2', callback=function(keys, args) "
    "return redis.call('set', keys[1], args[1]) end, flags={'no-writes'}, "
    "description='desc'}\\n"
    "redis.register_function{function_name='f3', callback=function(keys, args) "
    "return redis.call('set', keys[1], args[1]) end}\\n"
    "redis.register_function('f4', function(keys, args) return redis.call('get', keys[1]) end)\\n"
    "redis.register_function('fail', function(keys, args) return redis.error_reply('MY boom') end)\\n"
    "redis.register_function('raise', function(keys, args) error('raised') end)\\n"
    "redis.register_function('callerr', function(keys, args) return redis.call('incr', 'str') end)"
    '"'
)


def _one(name: str, body: str = "return 1", extra: str = "") -> str:
    return f"\"#!lua name={name}{extra}\\nredis.register_function('{name}_f', function(keys, args) {body} end)\""


def _escaped(data: bytes) -> str:
    return "".join(f"\\x{b:02x}" for b in data)


def _payload(*codes: bytes, version: int = 10, opcode: int = 245) -> bytes:
    body = b"".join(bytes([opcode]) + rdb_string(c) for c in codes)
    body += version.to_bytes(2, "little")
    return body + crc64_bytes(body)


def _raw_payload(records: bytes) -> bytes:
    body = records + (10).to_bytes(2, "little")
    return body + crc64_bytes(body)


_PRE_GA_CODE = b"\nredis.register_function('pre', function() return 'pre-ga' end)"
_PRE_GA = b"\xf6\x05prelb\x03LUA\x01\x04desc" + bytes([len(_PRE_GA_CODE)]) + _PRE_GA_CODE

_GOOD = b"#!lua name=plib\nredis.register_function('pf', function() return 'restored' end)"

CASES = {
    "load": [
        f"FUNCTION LOAD {LIB}",
        f"FUNCTION LOAD {LIB}",
        "FUNCTION LOAD \"#!lua name=lib2\\nredis.call('ping')\"",
        "FUNCTION LOAD \"#!lua name=lib2\\nlocal x = string.len('a')\"",
        '"FUNCTION" LOAD "#!lua name=lib2\\nreturn KEYS"',
        'FUNCTION LOAD "#!lua name=lib2\\nx = 1"',
        "FUNCTION LOAD \"#!lua name=lib2\\nerror('x')\"",
        'FUNCTION LOAD "#!lua name=lib2\\nlocal x = = 1"',
        'FUNCTION LOAD "#!lua name=lib2\\n"',
        'FUNCTION LOAD "#!lua name=lib2 x=y\\n"',
        'FUNCTION LOAD "#!lua\\n"',
        'FUNCTION LOAD "#!lua name=a-b\\n"',
        'FUNCTION LOAD "#!lua name=a name=b\\n"',
        'FUNCTION LOAD "#!python name=p\\n"',
        'FUNCTION LOAD "#!lua name=p"',
        'FUNCTION LOAD "lua name=p\\n"',
        'FUNCTION LOAD ""',
        "FUNCTION LOAD REPLACE " + _one("r1"),
        "FUNCTION LOAD replace " + _one("r1", "return 2"),
        "FCALL r1_f 0",
        "FUNCTION LOAD FOO " + _one("r2"),
        "FUNCTION LOAD REPLACE",
        "FUNCTION LOAD",
        "FUNCTION LOAD REPLACE REPLACE " + _one("r3"),
        _one("NAME_CASE", extra="").replace('"#!lua name=', 'FUNCTION LOAD "#!LUA NAME='),
        "FUNCTION LOAD \"#!lua name=dup\\nredis.register_function('f1', function() end)\"",
        "FUNCTION LOAD \"#!lua name=dup\\nredis.register_function('F1', function() end)\"",
        "FUNCTION LOAD REPLACE \"#!lua name=r1\\nredis.register_function('f1', function() end)\"",
        "FCALL r1_f 0",
    ],
    "register": [
        "FUNCTION LOAD \"#!lua name=a\\nredis.register_function('a', function() end)\\nredis.register_function('a', function() end)\"",
        "FUNCTION LOAD \"#!lua name=a\\nredis.register_function('a-b', function() end)\"",
        "FUNCTION LOAD \"#!lua name=a\\nredis.register_function('', function() end)\"",
        'FUNCTION LOAD "#!lua name=a\\nredis.register_function()"',
        "FUNCTION LOAD \"#!lua name=a\\nredis.register_function('a', function() end, 1)\"",
        "FUNCTION LOAD \"#!lua name=a\\nredis.register_function('a')\"",
        "FUNCTION LOAD \"#!lua name=a\\nredis.register_function('a', 'b')\"",
        'FUNCTION LOAD "#!lua name=a\\nredis.register_function({}, function() end)"',
        'FUNCTION LOAD "#!lua name=a\\nredis.register_function(5)"',
        'FUNCTION LOAD "#!lua name=a\\nredis.register_function{}"',
        "FUNCTION LOAD \"#!lua name=a\\nredis.register_function{function_name='x'}\"",
        'FUNCTION LOAD "#!lua name=a\\nredis.register_function{callback=function() end}"',
        'FUNCTION LOAD "#!lua name=a\\nredis.register_function{function_name={}, callback=function() end}"',
        "FUNCTION LOAD \"#!lua name=a\\nredis.register_function{function_name='x', callback='y'}\"",
        "FUNCTION LOAD \"#!lua name=a\\nredis.register_function{function_name='x', callback=function() end, flags='no-writes'}\"",
        "FUNCTION LOAD \"#!lua name=a\\nredis.register_function{function_name='x', callback=function() end, flags={'bad'}}\"",
        "FUNCTION LOAD \"#!lua name=a\\nredis.register_function{function_name='x', callback=function() end, flags={{}}}\"",
        "FUNCTION LOAD \"#!lua name=a\\nredis.register_function{function_name='x', callback=function() end, description={}}\"",
        "FUNCTION LOAD \"#!lua name=a\\nredis.register_function{function_name='x', callback=function() end, other=1}\"",
        "FUNCTION LOAD \"#!lua name=a\\nredis.register_function{function_name='x', callback=function() end, [1]=2}\"",
        "FUNCTION LOAD \"#!lua name=a\\nredis.register_function{FUNCTION_NAME='x', CallBack=function() return 'up' end, FLAGS={'NO-WRITES', 'allow-oom', 'allow-stale', 'no-cluster', 'allow-cross-slot-keys'}, Description='d'}\"",
        "FUNCTION LIST",
        "FCALL_RO x 0",
        "FUNCTION LOAD \"#!lua name=b\\nredis.register_function(12, function() return 'twelve' end)\"",
        "FCALL 12 0",
        "FUNCTION LOAD \"#!lua name=c\\nlocal reg = redis.register_function\\nreg('c1', function() return reg('c2', function() end) end)\"",
        "FCALL c1 0",
        "FUNCTION LOAD \"#!lua name=d\\nredis.register_function('d1', function() return redis.register_function end)\"",
        "FCALL d1 0",
        "EVAL \"return redis.register_function('x', function() end)\" 0",
        "FUNCTION LOAD \"#!lua name=e\\nredis.log(redis.LOG_NOTICE, 'loading')\\nredis.register_function('e1', function() return {redis.REDIS_VERSION_NUM > 0} end)\"",
        "FCALL e1 0",
        'FUNCTION LOAD "#!lua name=g\\nlocal v = redis.setresp"',
        'FUNCTION LOAD "#!lua name=g\\nlocal v = redis.pcall"',
        'FUNCTION LOAD "#!lua name=g\\nredis.log(redis.LOG_NOTICE)"',
        'FUNCTION LOAD "#!lua name=g\\nredis.math = 1"',
    ],
    "errorstats": [
        "CONFIG RESETSTAT",
        "FUNCTION LOAD \"#!lua name=t\\nredis.register_function('fail', function(k, a) return redis.error_reply('MY boom') end)\\nredis.register_function('raise', function(k, a) error('raised') end)\\nredis.register_function('callerr', function(k, a) return redis.call('incr', 'str') end)\\nredis.register_function('pc', function(k, a) return redis.pcall('incr', 'str') end)\\nredis.register_function('w', function(k, a) return redis.call('set', 'x', 'y') end)\"",
        "SET str abc",
        "FCALL fail 0",
        "FCALL raise 0",
        "FCALL callerr 0",
        "FCALL pc 0",
        "FCALL nosuch 0",
        "FCALL fail x",
        "FCALL_RO w 0",
        'FUNCTION LOAD "#!lua name=t\\n"',
        "FUNCTION DELETE nope",
        "INFO errorstats",
    ],
    "fcall": [
        f"FUNCTION LOAD {LIB}",
        "FCALL f1 2 a b c d",
        "FCALL f1 0",
        "FCALL f1 0 x y",
        "FCALL F1 1 k",
        "FCALL f1 3 a b",
        "FCALL f1 -1 a",
        "FCALL f1 x a",
        "FCALL f1 1.5 a",
        "FCALL f1 9223372036854775808",
        "FCALL nosuch 0",
        "FCALL nosuch x",
        "FCALL f2 1 k v",
        "FCALL f3 1 k v",
        "FCALL f4 1 k",
        "FCALL_RO f4 1 k",
        "FCALL_RO f3 1 k v",
        "FCALL_RO f2 1 k v",
        "FCALL_RO f1 0",
        "FCALL_RO nosuch 0",
        "FCALL fail 0",
        "FCALL raise 0",
        "SET str abc",
        "FCALL callerr 0",
        "MULTI",
        "FCALL f1 1 a",
        "FCALL f3 1 m 1",
        "EXEC",
        "EVAL \"return redis.call('fcall', 'f1', 0)\" 0",
        "FCALL",
        "FCALL f1",
    ],
    "list": [
        "FUNCTION LIST",
        "FUNCTION LOAD \"#!lua name=only\\nredis.register_function{function_name='one', callback=function() return 1 end, flags={'no-writes', 'no-cluster'}, description='the only one'}\"",
        "FUNCTION LIST",
        "FUNCTION LIST WITHCODE",
        "FUNCTION LIST withcode LIBRARYNAME on*",
        "FUNCTION LIST LIBRARYNAME ON*",
        "FUNCTION LIST LIBRARYNAME x*",
        "FUNCTION LIST LIBRARYNAME",
        "FUNCTION LIST WITHCODE WITHCODE",
        "FUNCTION LIST LIBRARYNAME a LIBRARYNAME b",
        "FUNCTION LIST FOO",
        "FUNCTION LOAD " + _one("second"),
        "FUNCTION LIST LIBRARYNAME sec*",
        "FUNCTION STATS",
        "FUNCTION DELETE only",
        "FUNCTION DELETE only",
        "FUNCTION DELETE",
        "FUNCTION DELETE a b",
        "FUNCTION LIST",
        "FUNCTION STATS",
        "FUNCTION STATS x",
        "FUNCTION FLUSH",
        "FUNCTION LIST",
        "FUNCTION FLUSH ASYNC",
        "FUNCTION FLUSH sync",
        "FUNCTION FLUSH foo",
        "FUNCTION FLUSH SYNC ASYNC",
        "FUNCTION STATS",
        "FUNCTION KILL",
        "FUNCTION KILL x",
        "FUNCTION HELP",
        "FUNCTION FOO",
        "FUNCTION",
    ],
    "getkeys": [
        "COMMAND GETKEYS FCALL f 1 a b",
        "COMMAND GETKEYS FCALL_RO f 2 a b c",
        "COMMAND GETKEYS FCALL f 0",
        "COMMAND GETKEYS FCALL f 5 a",
        "COMMAND GETKEYS FCALL f -1 a",
        "COMMAND GETKEYS FCALL f x a",
        "COMMAND GETKEYS FCALL f 9223372036854775807 a",
        "COMMAND GETKEYS EVAL s 2 a b c",
        "COMMAND GETKEYS EVALSHA s 1 a",
        "COMMAND GETKEYS EVAL_RO s 0 a",
        "COMMAND GETKEYS FUNCTION LOAD x",
    ],
    "runtime": [
        "FUNCTION LOAD \"#!lua name=t\\nredis.register_function('r3', function(k, a) redis.setresp(3) return redis.call('hgetall', k[1]) end)\\nredis.register_function('pc', function(k, a) return redis.pcall('incr', k[1]) end)\\nredis.register_function('st', function(k, a) return redis.status_reply('FINE') end)\\nredis.register_function('tb', function(k, a) return {1, 'two', {3}, false, true, 3.7} end)\\nredis.register_function('errt', function(k, a) return {err='CUSTOM thing'} end)\\nredis.register_function('nilret', function(k, a) return nil end)\\nredis.register_function('fc', function(k, a) return redis.call('fcall', 'st', 0) end)\\nredis.register_function('glob', function(k, a) x = 5 end)\\nredis.register_function('argsn', function(k, a) return #a end)\\nredis.register_function('dbl', function(k, a) redis.setresp(3) return {double=3.5} end)\\nredis.register_function('sha', function(k, a) return redis.sha1hex('x') end)\\nredis.register_function('rnd', function(k, a) return math.random(100) end)\\nredis.register_function('keysarg', function(k, a) return {k[1], a[1], KEYS} end)\"",
        "HSET h a 1 b 2",
        "FCALL r3 1 h",
        "SET s abc",
        "FCALL pc 1 s",
        "FCALL st 0",
        "FCALL tb 0",
        "FCALL errt 0",
        "FCALL nilret 0",
        "FCALL fc 0",
        "FCALL glob 0",
        "FCALL argsn 0 a b c",
        "FCALL dbl 0",
        "FCALL sha 0",
        "FCALL keysarg 1 k a",
        "FUNCTION LOAD REPLACE \"#!lua name=t\\nredis.register_function('x', function() end)\\nerror\"",
        "FCALL st 0",
        "FUNCTION LOAD \"#!lua name=u\\nredis.register_function('st', function() end)\"",
        "FUNCTION LOAD REPLACE \"#!lua name=t\\nredis.register_function('nt', function() return 'new' end)\"",
        "FCALL st 0",
        "FCALL nt 0",
        "FUNCTION LOAD REPLACE \"#!lua name=t\\nredis.register_function('nt', function() return 'new' end)\\nlocal t = {} for i = 1, 10 do t[i] = i end\"",
        "FUNCTION LOAD \"#!lua name=v\\nlocal a = redis.LOG_WARNING\\nlocal b = redis.REDIS_VERSION\\nredis.register_function('ver', function() return {a, b} end)\"",
        "FCALL ver 0",
        "FUNCTION LOAD \"#!lua name=w\\nredis.register_function('w', function() return 1 end)\\nreturn 5\"",
        'FUNCTION LOAD "#!lua name=w2\\nlocal r = redis\\nredis = nil"',
        "FUNCTION LOAD \"#!lua name=w3\\nredis.register_function('w3', function() return getmetatable('').__index == string end)\"",
        "FCALL w3 0",
        "FUNCTION LOAD \"#!lua name=w4\\nlocal f = function() return 1 end\\nredis.register_function('w4', f)\\nredis.register_function('w5', f)\"",
        "FCALL w5 0",
        "FUNCTION LOAD \"#!lua name=w6 \\nredis.register_function('w6', function() return 1 end)\"",
        "FUNCTION LOAD \"#!lua  name=w7\\r\\nredis.register_function('w7', function() return 1 end)\"",
        "FUNCTION LOAD \"#!lua name=w8\\n#\\nredis.register_function('w8', function() return 1 end)\"",
        'FUNCTION LOAD "#!lua name=\\"w 9\\"\\nredis.register_function(\'w9\', function() return 1 end)"',
        'FUNCTION LOAD "#!lua name=\\"w9\\nredis.register_function(\'w9\', function() return 1 end)"',
        'FUNCTION LOAD "#!lua name=w10\\n\\x1bLua"',
        "FUNCTION LOAD \"#!lua name=w11\\nredis.register_function('w11', function() return redis.setresp(3) end)\"",
        "FCALL w11 0",
        "FCALL_RO w11 0",
    ],
    "multi": [
        "MULTI",
        "FUNCTION LOAD " + _one("inmulti", "return redis.call('incr', keys[1])"),
        "FCALL inmulti_f 1 counter",
        "FCALL_RO inmulti_f 1 counter",
        "FUNCTION DELETE inmulti",
        "FCALL inmulti_f 1 counter",
        "EXEC",
        "GET counter",
    ],
    "script_flush": [
        "FUNCTION LOAD " + _one("kept", "return 'still here'"),
        "SCRIPT FLUSH",
        "FCALL kept_f 0",
        "FLUSHALL",
        "FCALL kept_f 0",
        'EVAL "return 1" 0',
    ],
    "c_callbacks": [
        "FUNCTION LOAD \"#!lua name=c\\nredis.register_function('logger', redis.log)\"",
        "FCALL logger 0",
        "FUNCTION LOAD \"#!lua name=d\\nredis.register_function{function_name='reg', callback=redis.register_function}\"",
        "FCALL reg 0",
    ],
    "dump_restore": [
        "FUNCTION DUMP",
        "FUNCTION RESTORE " + _escaped(_payload(_GOOD)),
        "FCALL pf 0",
        "FUNCTION RESTORE " + _escaped(_payload(_GOOD)),
        "FUNCTION RESTORE " + _escaped(_payload(_GOOD)) + " APPEND",
        "FUNCTION RESTORE " + _escaped(_payload(_GOOD)) + " replace",
        "FUNCTION RESTORE " + _escaped(_payload(_GOOD)) + " FLUSH",
        "FUNCTION RESTORE " + _escaped(_payload(_GOOD)) + " foo",
        "FUNCTION RESTORE " + _escaped(_payload(_GOOD)) + " FLUSH x",
        "FUNCTION RESTORE",
        "FUNCTION RESTORE x",
        "FUNCTION RESTORE 0123456789",
        "FUNCTION RESTORE " + _escaped(_payload(_GOOD)[:-1] + b"\x00"),
        "FUNCTION RESTORE " + _escaped(_payload(_GOOD, version=11)),
        "FUNCTION RESTORE " + _escaped(_payload(_GOOD, opcode=0)),
        "FUNCTION RESTORE " + _escaped(_payload(_GOOD, opcode=246)),
        "FUNCTION RESTORE " + _escaped(_payload(b"#!lua name=bad\\nreturn 1")),
        "FUNCTION RESTORE " + _escaped(_payload(b"no shebang")),
        "FUNCTION RESTORE " + _escaped(_payload(_GOOD, _GOOD)) + " FLUSH",
        "FUNCTION RESTORE " + _escaped(_payload(_GOOD.replace(b"plib", b"other"))) + " APPEND",
        "FUNCTION RESTORE "
        + _escaped(_payload(_GOOD.replace(b"plib", b"other").replace(b"'pf'", b"'pg'")))
        + " APPEND",
        "FCALL pg 0",
        "FUNCTION RESTORE " + _escaped(_raw_payload(b"\xf5\xc3\x05\x40\x90\x1f\x00\x00\x00\x00")),
        "FUNCTION RESTORE " + _escaped(_raw_payload(b"\xf5\x85")),
        "FUNCTION RESTORE " + _escaped(_raw_payload(b"\xf5\xc0\x05")),
        "FUNCTION RESTORE " + _escaped(_raw_payload(b"\xf5\x3f")),
        "FUNCTION RESTORE " + _escaped(_raw_payload(b"\xf6\x01a\x03LUA\x00\x05hello")),
        "FUNCTION RESTORE " + _escaped(_raw_payload(b"\xf6\x01a\x03LUA\x01")),
        "FUNCTION RESTORE " + _escaped(_raw_payload(b"\xf6\x01a")),
        "FUNCTION RESTORE " + _escaped(_raw_payload(_PRE_GA)),
        "FCALL pre 0",
        "FUNCTION LIST LIBRARYNAME prelb WITHCODE",
        "FUNCTION RESTORE " + _escaped(_payload()) + " FLUSH",
        "FUNCTION LIST",
        "FUNCTION DUMP",
        "FUNCTION LOAD " + _one("dumped"),
        "FUNCTION DUMP",
    ],
}


@pytest.mark.redis
@pytest.mark.parametrize("conn", [0, 1], ids=["resp2", "resp3"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_functions_reply_as_redis_does(
    both: tuple[RedisBackend, EngineBackend], case: str, conn: int
) -> None:
    """Every reply of the case equals redis-server 7.0.15's, byte for byte."""
    failures = mismatches(*both, CASES[case], conn)
    assert not failures, "engine differs from redis-server 7.0:\n" + "\n".join(failures)


# --- DUMP / RESTORE across servers -----------------------------------------------------------

_CROSS_CODES = [
    b"#!lua name=small\nredis.register_function('s', function() return 's' end)",
    b"#!lua name=lib1\n"
    + b"\n".join(
        b"redis.register_function('f%d', function(keys, args) return {%d, keys, args} end)" % (i, i)
        for i in range(200)
    ),
    b"#!lua name=text\n-- "
    + b"lorem ipsum dolor sit amet " * 40
    + b"\nredis.register_function('t', function() return 't' end)",
]


def _engine_call(engine: Engine, *argv: bytes) -> object:
    return engine.execute(engine.connect(), list(argv))


@pytest.mark.redis
@pytest.mark.parametrize("code", _CROSS_CODES, ids=["small", "many-functions", "text"])
def test_function_dump_is_byte_identical_to_redis_servers(
    redis_server: object, code: bytes
) -> None:
    """The same library dumps to the same bytes on both (LZF included)."""
    real = RawConnection(redis_server.port)  # type: ignore[attr-defined]
    try:
        real.call([b"FUNCTION", b"FLUSH"])
        real.call([b"FUNCTION", b"LOAD", code])
        expected = real.call([b"FUNCTION", b"DUMP"])
        real.call([b"FUNCTION", b"FLUSH"])
    finally:
        real.close()
    engine = Engine()
    assert (
        _engine_call(engine, b"FUNCTION", b"LOAD", code) == code.split(b"=", 1)[1].split(b"\n")[0]
    )
    dumped = _engine_call(engine, b"FUNCTION", b"DUMP")
    assert isinstance(dumped, bytes)
    assert b"$%d\r\n%b\r\n" % (len(dumped), dumped) == expected


def _random_library(rng: random.Random, n: int) -> bytes:
    words = [b"a", b"b", b"ab", b"aaaa", b" ", b"xyz", b"--", b"\xff\x00", b"redis", b"0123"]
    comment = b"".join(rng.choice(words) for _ in range(rng.randrange(1, 2500)))
    return b"#!lua name=r%d\n--%b\nredis.register_function('rf%d', function() return 1 end)" % (
        n,
        comment,
        n,
    )


@pytest.mark.redis
def test_function_dump_matches_redis_server_on_random_libraries(redis_server: object) -> None:
    """LZF's matches, runs and literal limits land where liblzf puts them (seeded)."""
    rng = random.Random(20261126)
    real = RawConnection(redis_server.port)  # type: ignore[attr-defined]
    differ = []
    try:
        for n in range(25):
            code = _random_library(rng, n)
            real.call([b"FUNCTION", b"FLUSH"])
            assert real.call([b"FUNCTION", b"LOAD", code]) == b"$%d\r\nr%d\r\n" % (
                len(b"r%d" % n),
                n,
            )
            expected = real.call([b"FUNCTION", b"DUMP"])
            engine = Engine()
            assert _engine_call(engine, b"FUNCTION", b"LOAD", code) == b"r%d" % n
            dumped = _engine_call(engine, b"FUNCTION", b"DUMP")
            assert isinstance(dumped, bytes)
            if b"$%d\r\n%b\r\n" % (len(dumped), dumped) != expected:
                differ.append(n)
    finally:
        real.call([b"FUNCTION", b"FLUSH"])
        real.close()
    assert differ == []


@pytest.mark.redis
def test_the_engine_restores_what_redis_server_dumped_and_vice_versa(redis_server: object) -> None:
    port = redis_server.port  # type: ignore[attr-defined]
    real = RawConnection(port)
    try:
        real.call([b"FUNCTION", b"FLUSH"])
        for code in _CROSS_CODES:
            real.call([b"FUNCTION", b"LOAD", code])
        raw = real.call([b"FUNCTION", b"DUMP"])
        payload = raw.split(b"\r\n", 1)[1][:-2]
        engine = Engine()
        assert _engine_call(engine, b"FUNCTION", b"RESTORE", payload) == OK
        assert _engine_call(engine, b"FCALL", b"f199", b"1", b"k", b"a") == [199, [b"k"], [b"a"]]
        assert _engine_call(engine, b"FCALL", b"t", b"0") == b"t"
        # And back: the engine's dump of the restored libraries loads on redis-server.
        back = _engine_call(engine, b"FUNCTION", b"DUMP")
        assert isinstance(back, bytes)
        assert real.call([b"FUNCTION", b"RESTORE", back, b"FLUSH"]) == b"+OK\r\n"
        assert real.call([b"FCALL", b"s", b"0"]) == b"$1\r\ns\r\n"
        listed = real.call([b"FUNCTION", b"LIST", b"LIBRARYNAME", b"lib1", b"WITHCODE"])
        assert _CROSS_CODES[1] in listed
    finally:
        real.call([b"FUNCTION", b"FLUSH"])
        real.close()


# --- LZF ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [b"a" * 1000, b"abcdefgh" * 300, bytes(range(256)) * 4, b"x" * 21 + b"yz" * 50],
    ids=["run", "period-8", "incompressible", "mixed"],
)
def test_lzf_round_trips(data: bytes) -> None:
    packed = compress(data, len(data) + 64)
    assert packed is not None
    assert decompress(packed, len(data)) == data


def test_lzf_gives_up_when_the_output_would_not_be_smaller() -> None:
    data = bytes(range(64))
    assert compress(data, len(data) - 4) is None


def test_a_payload_whose_lzf_string_is_damaged_is_refused() -> None:
    body = bytes([245]) + b"\xc3\x05\x40\x90" + b"\x1f\x00\x00\x00\x00" + (10).to_bytes(2, "little")
    payload = body + crc64_bytes(body)
    engine = Engine()
    reply = _engine_call(engine, b"FUNCTION", b"RESTORE", payload)
    assert isinstance(reply, CommandError)
    assert reply.text == "ERR Failed loading library payload"


def test_dump_of_no_libraries_is_the_footer_alone() -> None:
    payload = dump_payload([])
    assert payload[:2] == b"\x0a\x00"
    assert len(payload) == 10
    assert payload[2:] == crc64_bytes(payload[:2])
    assert dump_payload([Library(b"x", b"")])[:2] == b"\xf5\x00"


# --- persistence ---------------------------------------------------------------------------------

_AOF_LIB = b"#!lua name=keep\nredis.register_function('kept', function(keys, args) return 'kept ' .. args[1] end)"
_AOF_LIB2 = b"#!lua name=gone\nredis.register_function('gone', function() return 1 end)"


def _reopened(tmp_path: Path, steps: list[list[bytes]], rewrite: bool = False) -> Session:
    aof = open_persistent(tmp_path / "data", appendfsync="always")
    s = Session(aof.engine)
    for argv in steps:
        assert not isinstance(s(*argv), CommandError), argv
    if rewrite:
        aof.rewrite()
    aof.close()
    again = open_persistent(tmp_path / "data", appendfsync="always")
    return Session(again.engine)


def test_a_loaded_library_survives_an_aof_reload(tmp_path: Path) -> None:
    s = _reopened(tmp_path, [[b"FUNCTION", b"LOAD", _AOF_LIB]])
    assert s("FCALL", "kept", "0", "x") == b"kept x"


def test_function_delete_flush_and_restore_survive_an_aof_reload(tmp_path: Path) -> None:
    payload = _payload(_GOOD)
    s = _reopened(
        tmp_path,
        [
            [b"FUNCTION", b"LOAD", _AOF_LIB2],
            [b"FUNCTION", b"DELETE", b"gone"],
            [b"FUNCTION", b"LOAD", _AOF_LIB2],
            [b"FUNCTION", b"FLUSH"],
            [b"FUNCTION", b"RESTORE", payload],
            [b"FUNCTION", b"LOAD", _AOF_LIB],
        ],
    )
    assert s("FCALL", "pf", "0") == b"restored"
    assert s("FCALL", "kept", "0", "y") == b"kept y"
    assert s("FCALL", "gone", "0") == CommandError("ERR Function not found")


def test_a_functions_writes_survive_an_aof_reload(tmp_path: Path) -> None:
    lib = b"#!lua name=w\nredis.register_function('w', function(keys, args) return redis.call('set', keys[1], args[1]) end)"
    s = _reopened(tmp_path, [[b"FUNCTION", b"LOAD", lib], [b"FCALL", b"w", b"1", b"k", b"v"]])
    assert s("GET", "k") == b"v"


def test_an_aof_rewrite_keeps_the_libraries(tmp_path: Path) -> None:
    s = _reopened(
        tmp_path,
        [[b"FUNCTION", b"LOAD", _AOF_LIB], [b"FUNCTION", b"LOAD", _AOF_LIB2], [b"SET", b"a", b"1"]],
        rewrite=True,
    )
    assert s("FCALL", "kept", "0", "z") == b"kept z"
    assert s("FCALL", "gone", "0") == 1
    assert s("GET", "a") == b"1"


# --- the engine alone ------------------------------------------------------------------------------


def test_a_library_that_runs_too_long_at_load_is_refused() -> None:
    engine = Engine()
    code = b"#!lua name=slow\nlocal i = 0\nwhile true do i = i + 1 end"
    reply = _engine_call(engine, b"FUNCTION", b"LOAD", code)
    assert reply == CommandError("ERR Error registering functions: ERR FUNCTION LOAD timeout")
    assert _engine_call(engine, b"FUNCTION", b"LIST") == []


def test_info_memory_counts_the_functions() -> None:
    engine = Engine()
    _engine_call(engine, b"FUNCTION", b"LOAD", _AOF_LIB)
    info = _engine_call(engine, b"INFO", b"memory")
    text = info.text if hasattr(info, "text") else info  # type: ignore[union-attr]
    assert b"number_of_functions:1\r\n" in text
    assert b"used_memory_functions:" in text


def test_script_flush_keeps_the_functions_lua_state() -> None:
    engine = Engine()
    _engine_call(engine, b"FUNCTION", b"LOAD", _AOF_LIB)
    assert _engine_call(engine, b"SCRIPT", b"FLUSH") == OK
    assert _engine_call(engine, b"FCALL", b"kept", b"0", b"a") == b"kept a"


# --- a busy function -------------------------------------------------------------------------------

_RUNAWAY_LIB = (
    b"#!lua name=busy\n"
    b"redis.register_function('spin', function(keys, args) while true do end end)\n"
    b"redis.register_function('spin_writer', function(keys, args)"
    b" redis.call('SET', 'w', '1') while true do end end)"
)


@pytest.fixture
def busy_servers(tmp_path: Path) -> Iterator[list[tuple[str, int]]]:
    """A redis-server and an engine server of the test's own, lua-time-limit 500 ms, with the
    runaway library loaded."""
    real = RedisServer(tmp_path / "redis").start()
    fake = EngineServerProcess().start()
    servers = [("redis", real.port), ("engine", fake.port)]
    for _, port in servers:
        conn = Raw(port)
        assert conn.call("CONFIG", "SET", "lua-time-limit", "500") == b"+OK\r\n"
        assert conn.call("FUNCTION", "LOAD", _RUNAWAY_LIB) == b"$4\r\nbusy\r\n"
        conn.close()
    yield servers
    fake.stop()
    real.stop()


def _start_fcall(port: int, name: str) -> Raw:
    conn = Raw(port, timeout_s=30)
    conn.sock.sendall(pack(("FCALL", name, "1", "key", "arg")))
    return conn


def _masked_duration(reply: bytes) -> bytes:
    # FUNCTION STATS's duration_ms is the clock's.
    return re.sub(rb"duration_ms\r\n:\d+", b"duration_ms\r\n:N", reply)


@pytest.mark.redis
@pytest.mark.slow
def test_function_kill_stops_a_busy_function_as_on_redis(
    busy_servers: list[tuple[str, int]],
) -> None:
    replies: dict[str, list[bytes]] = {}
    for name, port in busy_servers:
        connected = Raw(port)
        runner = _start_fcall(port, "spin")
        time.sleep(0.8)  # past lua-time-limit
        got = [
            connected.call("GET", "k"),
            _masked_duration(connected.call("FUNCTION", "STATS")),
            connected.call("SCRIPT", "KILL"),
            connected.call("FUNCTION", "KILL"),
            read_raw_reply(runner.sock, runner.buf),
            connected.call("FUNCTION", "KILL"),
            connected.call("PING"),
        ]
        replies[name] = got
        connected.close()
        runner.close()
    assert replies["engine"] == replies["redis"]
    assert replies["engine"][0].startswith(
        b"-BUSY Redis is busy running a script. You can only call FUNCTION KILL"
    )
    assert replies["engine"][3] == b"+OK\r\n"


@pytest.mark.redis
@pytest.mark.slow
def test_a_function_that_wrote_is_unkillable(busy_servers: list[tuple[str, int]]) -> None:
    replies: dict[str, list[bytes]] = {}
    for name, port in busy_servers:
        connected = Raw(port)
        runner = _start_fcall(port, "spin_writer")
        time.sleep(0.8)  # past lua-time-limit
        got = [connected.call("FUNCTION", "KILL"), connected.call("SCRIPT", "KILL")]
        connected.sock.sendall(pack(("SHUTDOWN", "NOSAVE")))
        assert connected.sock.recv(100) == b""
        assert runner.sock.recv(100) == b""
        replies[name] = got
    assert replies["engine"] == replies["redis"]
    assert replies["engine"][0].startswith(b"-UNKILLABLE Sorry the script already executed")


def test_eval_and_functions_draw_from_one_random_generator() -> None:
    """Redis's math.random state is the process's: a function continues EVAL's sequence."""
    lib = b"#!lua name=r\nredis.register_function('r', function() return math.random(1000000) end)"
    mixed = Engine()
    _engine_call(mixed, b"FUNCTION", b"LOAD", lib)
    first = _engine_call(mixed, b"EVAL", b"return math.random(1000000)", b"0")
    second = _engine_call(mixed, b"FCALL", b"r", b"0")
    evals = Engine()
    script = b"return math.random(1000000)"
    assert [_engine_call(evals, b"EVAL", script, b"0") for _ in range(2)] == [first, second]


def test_load_replace_and_restore_policies_survive_an_aof_reload(tmp_path: Path) -> None:
    newer = _AOF_LIB.replace(b"'kept ' ..", b"'newer ' ..")
    other = _GOOD.replace(b"plib", b"olib").replace(b"'pf'", b"'of'")
    s = _reopened(
        tmp_path,
        [
            [b"FUNCTION", b"LOAD", _AOF_LIB],
            [b"FUNCTION", b"LOAD", b"REPLACE", newer],
            [b"FUNCTION", b"RESTORE", _payload(other), b"FLUSH"],
            [b"FUNCTION", b"RESTORE", _payload(_GOOD), b"APPEND"],
            [b"FUNCTION", b"RESTORE", _payload(_GOOD), b"REPLACE"],
        ],
    )
    assert s("FCALL", "kept", "0", "x") == CommandError("ERR Function not found")
    assert s("FCALL", "of", "0") == b"restored"
    assert s("FCALL", "pf", "0") == b"restored"


def test_load_replace_is_what_an_aof_reload_runs(tmp_path: Path) -> None:
    newer = _AOF_LIB.replace(b"'kept ' ..", b"'newer ' ..")
    s = _reopened(
        tmp_path, [[b"FUNCTION", b"LOAD", _AOF_LIB], [b"FUNCTION", b"LOAD", b"REPLACE", newer]]
    )
    assert s("FCALL", "kept", "0", "x") == b"newer x"


def test_redis_pys_function_api_works_on_an_in_process_engine() -> None:
    from streamworker.engine.inproc import forget_engine, sync_client

    url = "engine://memory"
    forget_engine(url)
    r = sync_client(url)
    try:
        lib = "#!lua name=m\nredis.register_function{function_name='echo', callback=function(k, a) return {k[1], a[1]} end, flags={'no-writes'}}"
        assert r.function_load(lib) == b"m"
        assert r.fcall_ro("echo", 1, "k", "v") == [b"k", b"v"]
        listed = r.function_list(withcode=True)
        assert listed[0][1] == b"m"
        assert listed[0][-1] == lib.encode()
        assert r.function_restore(r.function_dump(), "REPLACE") is True
        stats = _as_map(r.function_stats())  # a dict from redis-py before 8.2, a list since
        assert _as_map(_as_map(stats[b"engines"])[b"LUA"])[b"functions_count"] == 1
    finally:
        r.close()
        forget_engine(url)


def _as_map(reply: Any) -> dict[Any, Any]:
    """A RESP2 map reply as redis-py gives it: already a dict, or a flat [key, value, …] list."""
    if isinstance(reply, dict):
        return reply
    return dict(zip(reply[::2], reply[1::2], strict=True))
