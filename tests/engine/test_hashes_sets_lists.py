"""Hash, set and list commands, on the engine and against redis-server 7.0."""

from __future__ import annotations

import threading
import time

import pytest

from streamworker.engine import Engine
from streamworker.engine.context import Blocked
from streamworker.engine.replies import NULL_ARRAY, Map, SetReply
from tests.engine.conftest import Differ, Exec, cmds, run_script


def test_hgetall_is_a_map_in_field_order(ex: Exec) -> None:
    ex("HSET", "h", "b", "2", "a", "1")
    assert ex("HGETALL", "h") == Map([(b"b", b"2"), (b"a", b"1")])


def test_hdel_of_last_field_deletes_the_key(ex: Exec) -> None:
    ex("HSET", "h", "f", "v")
    assert ex("HDEL", "h", "f", "g") == 1
    assert ex("EXISTS", "h") == 0


def test_hincrbyfloat_on_missing_field_starts_at_zero(ex: Exec) -> None:
    assert ex("HINCRBYFLOAT", "h", "f", "2.5") == b"2.5"


def test_smembers_of_small_integer_set_is_sorted_like_an_intset(ex: Exec) -> None:
    ex("SADD", "s", "10", "2", "-1")
    assert ex("SMEMBERS", "s") == SetReply([b"-1", b"2", b"10"])


def test_srem_of_last_member_deletes_the_key(ex: Exec) -> None:
    ex("SADD", "s", "a")
    ex("SREM", "s", "a")
    assert ex("EXISTS", "s") == 0


def test_rpop_with_count_returns_tail_first(ex: Exec) -> None:
    ex("RPUSH", "l", "a", "b", "c")
    assert ex("RPOP", "l", "2") == [b"c", b"b"]


def test_lpush_inserts_each_element_at_the_head(ex: Exec) -> None:
    ex("LPUSH", "l", "a", "b", "c")
    assert ex("LRANGE", "l", "0", "-1") == [b"c", b"b", b"a"]


def test_blpop_serves_immediately_when_data_exists(ex: Exec) -> None:
    ex("RPUSH", "l", "x")
    assert ex("BLPOP", "l", "0") == [b"l", b"x"]


def test_blpop_wakes_when_another_thread_pushes(engine: Engine) -> None:
    a, b = engine.connect(), engine.connect()
    blocked = engine.execute(a, [b"BLPOP", b"l", b"5"])
    assert isinstance(blocked, Blocked)
    threading.Timer(0.05, engine.execute, (b, [b"RPUSH", b"l", b"x"])).start()
    assert engine.wait(blocked) == [b"l", b"x"]


def test_blpop_times_out_with_null_array(engine: Engine) -> None:
    a = engine.connect()
    blocked = engine.execute(a, [b"BLPOP", b"l", b"0.05"])
    start = time.monotonic()
    assert engine.wait(blocked) is NULL_ARRAY
    assert time.monotonic() - start >= 0.05


def test_blpop_inside_multi_does_not_block(ex: Exec) -> None:
    ex("MULTI")
    ex("BLPOP", "l", "0")
    assert ex("EXEC") == [NULL_ARRAY]


HASH_SCRIPTS = {
    "hset_hget_hmget_hlen_hexists": """
        HSET h a 1 b 2
        HSET h a 10 c 3
        HSET h a
        HMSET h d 4
        HMSET h d
        HGET h a
        HGET h nofield
        HGET nokey a
        HMGET h a nofield c
        HMGET nokey a b
        HLEN h
        HLEN nokey
        HEXISTS h a
        HEXISTS h z
        HSTRLEN h a
        HSTRLEN h z
        HGETALL h
        HGETALL nokey
        HKEYS h
        HVALS h
    """,
    "hsetnx_and_hdel": """
        HSETNX h a 1
        HSETNX h a 2
        HGET h a
        HDEL h a nofield
        HDEL h a
        EXISTS h
        HDEL nokey a
    """,
    "hincrby_and_errors": """
        HINCRBY h n 5
        HINCRBY h n -10
        HINCRBY h n abc
        HSET h s abc
        HINCRBY h s 1
        HSET h big 9223372036854775807
        HINCRBY h big 1
        HSET h f 1.5
        HINCRBY h f 1
    """,
    "hincrbyfloat_and_errors": """
        HINCRBYFLOAT h f 10.5
        HINCRBYFLOAT h f 0.1
        HINCRBYFLOAT h f abc
        HINCRBYFLOAT h f inf
        HSET h s abc
        HINCRBYFLOAT h s 1
        HINCRBYFLOAT h f 1e400
        HSET h i 5
        HINCRBYFLOAT h i 1.5
    """,
    "hash_wrongtype": """
        SET s v
        HSET s f v
        HGET s f
        HGETALL s
        HLEN s
        HDEL s f
        HINCRBY s f 1
        HINCRBY s f abc
        HINCRBYFLOAT s f abc
    """,
}

SET_SCRIPTS = {
    "sadd_srem_scard_sismember": """
        SADD s a b c a
        SADD s a
        SCARD s
        SCARD nokey
        SISMEMBER s a
        SISMEMBER s z
        SISMEMBER nokey a
        SMISMEMBER s a z b
        SMISMEMBER nokey a
        SREM s a z
        SREM nokey a
        SMEMBERS nokey
    """,
    "smembers_of_integers": """
        SADD n 5 3 -2 100 0
        SMEMBERS n
        SINTER n n
        SUNION n nokey
        SDIFF n nokey
    """,
    "set_wrongtype": """
        SET s v
        SADD s a
        SMEMBERS s
        SISMEMBER s a
        SMISMEMBER s a
        SCARD s
        SREM s a
    """,
    "spop_srandmember_arguments": """
        SPOP nokey
        SPOP nokey 3
        SPOP nokey -1
        SPOP nokey a
        SRANDMEMBER nokey
        SRANDMEMBER nokey 3
        SRANDMEMBER nokey -3
        SRANDMEMBER nokey a
        SADD one x
        SPOP one 0
        SRANDMEMBER one 5
        SRANDMEMBER one -2
        SPOP one
        EXISTS one
    """,
}

LIST_SCRIPTS = {
    "push_pop_range_len": """
        RPUSH l a b c
        LPUSH l z
        LRANGE l 0 -1
        LRANGE l 1 2
        LRANGE l -2 -1
        LRANGE l 5 10
        LRANGE l 2 1
        LRANGE l -100 100
        LRANGE nokey 0 -1
        LLEN l
        LLEN nokey
        LPOP l
        RPOP l
        LPOP l 5
        EXISTS l
        LPOP nokey
        RPOP nokey
        LPOP nokey 2
        RPOP nokey 0
    """,
    "pop_count_arguments": """
        RPUSH l a b
        LPOP l 0
        LPOP l -1
        LPOP l abc
        LPOP l 1 2
        RPOP l 1
        LPUSHX nokey a
        RPUSHX l c
        LINDEX l 0
        LINDEX l -1
        LINDEX l 5
        LINDEX l abc
        LTRIM l 0 0
        LRANGE l 0 -1
        LTRIM l 5 10
        EXISTS l
    """,
    "list_wrongtype": """
        SET s v
        LPUSH s a
        RPUSH s a
        LPOP s
        LRANGE s 0 -1
        LLEN s
        LRANGE s a 1
    """,
    "blocking_pop_arguments_and_immediate_service": """
        BLPOP l 0.01
        BLPOP l abc
        BLPOP l -1
        BLPOP l inf
        RPUSH l a b
        BLPOP l 0
        BRPOP l2 l 0
        SET s v
        BLPOP s 0.01
    """,
}


@pytest.mark.redis
@pytest.mark.parametrize("resp", [2, 3])
@pytest.mark.parametrize("name", list(HASH_SCRIPTS))
def test_hashes_match_redis(differ: Differ, name: str, resp: int) -> None:
    run_script(differ, cmds(HASH_SCRIPTS[name]), resp)


@pytest.mark.redis
@pytest.mark.parametrize("resp", [2, 3])
@pytest.mark.parametrize("name", list(SET_SCRIPTS))
def test_sets_match_redis(differ: Differ, name: str, resp: int) -> None:
    run_script(differ, cmds(SET_SCRIPTS[name]), resp)


@pytest.mark.redis
@pytest.mark.parametrize("resp", [2, 3])
@pytest.mark.parametrize("name", list(LIST_SCRIPTS))
def test_lists_match_redis(differ: Differ, name: str, resp: int) -> None:
    run_script(differ, cmds(LIST_SCRIPTS[name]), resp)
