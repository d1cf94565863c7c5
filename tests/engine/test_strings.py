"""String commands, on the engine and against redis-server 7.0 byte for byte."""

from __future__ import annotations

import pytest

from streamworker.engine.errors import CommandError
from streamworker.engine.replies import NULL_BULK, OK
from tests.engine.conftest import Differ, Exec, FakeClock, cmds, run_script


def test_set_then_get_returns_the_value(ex: Exec) -> None:
    assert ex("SET", "k", "v") == OK
    assert ex("GET", "k") == b"v"


def test_get_of_missing_key_is_null_bulk(ex: Exec) -> None:
    assert ex("GET", "nokey") is NULL_BULK


def test_set_px_expires_lazily_with_the_engine_clock(ex: Exec, clock: FakeClock) -> None:
    ex("SET", "k", "v", "PX", "100")
    clock.now += 99
    assert ex("GET", "k") == b"v"
    clock.now += 1
    assert ex("GET", "k") is NULL_BULK


def test_set_keepttl_keeps_the_deadline(ex: Exec, clock: FakeClock) -> None:
    ex("SET", "k", "v", "EX", "10")
    ex("SET", "k", "w", "KEEPTTL")
    assert ex("PTTL", "k") == 10_000


def test_plain_set_clears_the_ttl(ex: Exec) -> None:
    ex("SET", "k", "v", "EX", "10")
    ex("SET", "k", "w")
    assert ex("TTL", "k") == -1


def test_incr_on_non_integer_is_an_error(ex: Exec) -> None:
    ex("SET", "k", "1.5")
    reply = ex("INCR", "k")
    assert isinstance(reply, CommandError)
    assert reply.text == "ERR value is not an integer or out of range"


def test_incrbyfloat_uses_long_double_formatting(ex: Exec) -> None:
    ex("SET", "k", "10.5")
    assert ex("INCRBYFLOAT", "k", "0.1") == b"10.6"


def test_incr_keeps_the_ttl(ex: Exec) -> None:
    ex("SET", "k", "1", "EX", "100")
    ex("INCR", "k")
    assert ex("TTL", "k") == 100


SCRIPTS = {
    "set_options_and_errors": """
        SET k v
        SET k v NX
        SET k v XX
        SET k v NX XX
        SET k v EX 10 PX 10
        SET k v KEEPTTL EX 10
        SET k v EX 10 EX 20
        SET k v EX
        SET k v EX 0
        SET k v EX -5
        SET k v PX abc
        SET k v EX 9223372036854775
        SET k v PX 9223372036854775807
        SET k v EXAT 1
        GET k
        SET k v FOO
        SET k
    """,
    "set_get_returns_old_value_and_respects_nx": """
        SET k v1 GET
        SET k v2 GET
        SET k v3 NX GET
        SET k v4 XX GET
        GET k
        HSET h f v
        SET h x GET
        GET h
    """,
    "setnx_setex_psetex_getset_getdel_getex": """
        SETNX a 1
        SETNX a 2
        SETEX b 100 v
        TTL b
        SETEX b 0 v
        SETEX b abc v
        PSETEX c 100000 v
        PTTL nokey
        GETSET a 3
        GETSET nokey x
        GETDEL a
        GETDEL a
        GETEX b PERSIST
        TTL b
        GETEX b EX 100
        TTL b
        GETEX b EX 10 PX 10
        GETEX nokey EX 10
    """,
    "incr_family_and_overflow": """
        INCR n
        INCRBY n 10
        DECR n
        DECRBY n 5
        INCRBY n abc
        INCRBY n 1.5
        DECRBY n -9223372036854775808
        SET n 9223372036854775807
        INCR n
        SET n -9223372036854775808
        DECR n
        SET n 01
        INCR n
        SET n " 1"
        INCR n
        SET n 12345678901234567890
        INCR n
        HSET h f v
        INCR h
        INCRBY h abc
    """,
    "incrbyfloat_precision_and_errors": """
        INCRBYFLOAT f 10.5
        INCRBYFLOAT f 0.1
        INCRBYFLOAT f -10.6
        INCRBYFLOAT f 5.0e3
        INCRBYFLOAT f 1e400
        INCRBYFLOAT g 3
        INCRBYFLOAT g 1.1
        INCRBYFLOAT g abc
        INCRBYFLOAT g inf
        INCRBYFLOAT g " 1"
        INCRBYFLOAT g 0x10
        SET s abc
        INCRBYFLOAT s 1
        HSET h f v
        INCRBYFLOAT h 1
    """,
    "mget_mset_msetnx": """
        MSET a 1 b 2
        MSET a
        MSET a 1 b
        MGET a b nokey
        HSET h f v
        MGET a h
        MSETNX a 1 c 3
        MSETNX c 3 d 4
        MGET c d
    """,
    "append_strlen_getrange_setrange": """
        APPEND k abc
        APPEND k def
        STRLEN k
        STRLEN nokey
        GETRANGE k 0 -1
        GETRANGE k 1 2
        GETRANGE k -2 -1
        GETRANGE k -1 -2
        GETRANGE k 5 100
        GETRANGE nokey 0 -1
        SETRANGE k 1 X
        SETRANGE k 10 Y
        GET k
        SETRANGE k -1 x
        SETRANGE new 0 ""
        EXISTS new
        HSET h f v
        APPEND h x
        STRLEN h
    """,
}


@pytest.mark.redis
@pytest.mark.parametrize("resp", [2, 3])
@pytest.mark.parametrize("name", list(SCRIPTS))
def test_strings_match_redis(differ: Differ, name: str, resp: int) -> None:
    run_script(differ, cmds(SCRIPTS[name]), resp)
