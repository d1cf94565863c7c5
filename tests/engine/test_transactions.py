"""MULTI / EXEC / DISCARD / WATCH / UNWATCH, on the engine and against redis-server 7.0."""

from __future__ import annotations

import pytest

from streamworker.engine import Engine
from streamworker.engine.errors import CommandError
from streamworker.engine.replies import NULL_ARRAY, OK, PONG, QUEUED
from tests.engine.conftest import Differ, Exec, FakeClock, cmds, run_script


def test_queued_commands_run_at_exec(ex: Exec) -> None:
    assert ex("MULTI") == OK
    assert ex("SET", "k", "1") == QUEUED
    assert ex("INCR", "k") == QUEUED
    assert ex("GET", "k") == QUEUED
    assert ex("EXEC") == [OK, 2, b"2"]


def test_commands_do_not_run_before_exec(ex: Exec, engine: Engine) -> None:
    other = engine.connect()
    ex("MULTI")
    ex("SET", "k", "1")
    assert engine.execute(other, [b"EXISTS", b"k"]) == 0


def test_runtime_error_does_not_abort_the_other_commands(ex: Exec) -> None:
    ex("SET", "s", "text")
    ex("MULTI")
    ex("INCR", "s")
    ex("SET", "k", "v")
    replies = ex("EXEC")
    assert isinstance(replies[0], CommandError)
    assert replies[1] == OK


def test_queue_time_error_aborts_exec(ex: Exec) -> None:
    ex("MULTI")
    ex("SET", "k")
    ex("SET", "k", "v")
    reply = ex("EXEC")
    assert reply == CommandError("EXECABORT Transaction discarded because of previous errors.")
    assert ex("EXISTS", "k") == 0


def test_watched_key_touched_by_another_client_nulls_exec(ex: Exec, engine: Engine) -> None:
    other = engine.connect()
    ex("WATCH", "k")
    engine.execute(other, [b"SET", b"k", b"x"])
    ex("MULTI")
    ex("SET", "k", "mine")
    assert ex("EXEC") is NULL_ARRAY
    assert engine.execute(other, [b"GET", b"k"]) == b"x"


def test_watched_key_modified_in_place_nulls_exec(ex: Exec, engine: Engine) -> None:
    other = engine.connect()
    ex("HSET", "h", "a", "1")
    ex("WATCH", "h")
    engine.execute(other, [b"HSET", b"h", b"b", b"2"])
    ex("MULTI")
    ex("HGET", "h", "a")
    assert ex("EXEC") is NULL_ARRAY


def test_watch_then_own_write_still_fails_exec(ex: Exec) -> None:
    ex("WATCH", "k")
    ex("SET", "k", "1")
    ex("MULTI")
    ex("GET", "k")
    assert ex("EXEC") is NULL_ARRAY


def test_unwatch_forgets_the_touch(ex: Exec, engine: Engine) -> None:
    other = engine.connect()
    ex("WATCH", "k")
    engine.execute(other, [b"SET", b"k", b"x"])
    ex("UNWATCH")
    ex("MULTI")
    ex("GET", "k")
    assert ex("EXEC") == [b"x"]


def test_exec_clears_the_watches(ex: Exec, engine: Engine) -> None:
    other = engine.connect()
    ex("WATCH", "k")
    ex("MULTI")
    ex("EXEC")
    engine.execute(other, [b"SET", b"k", b"x"])
    ex("MULTI")
    ex("GET", "k")
    assert ex("EXEC") == [b"x"]


def test_watched_key_that_expires_before_exec_nulls_exec(ex: Exec, clock: FakeClock) -> None:
    ex("SET", "k", "v", "PX", "100")
    ex("WATCH", "k")
    clock.now += 100
    ex("MULTI")
    ex("PING")
    assert ex("EXEC") is NULL_ARRAY


def test_watching_an_already_expired_key_ignores_its_reclaim(ex: Exec, clock: FakeClock) -> None:
    ex("SET", "k", "v", "PX", "100")
    clock.now += 100
    ex("WATCH", "k")
    ex("EXISTS", "k")  # reclaims the expired key: not a logical change
    ex("MULTI")
    ex("PING")
    assert ex("EXEC") == [PONG]


def test_flushall_touches_watched_keys_that_existed(ex: Exec, engine: Engine) -> None:
    other = engine.connect()
    ex("SET", "k", "v")
    ex("WATCH", "k")
    engine.execute(other, [b"FLUSHALL"])
    ex("MULTI")
    ex("PING")
    assert ex("EXEC") is NULL_ARRAY


def test_watch_in_another_db_is_independent(ex: Exec, engine: Engine) -> None:
    other = engine.connect()
    ex("WATCH", "k")
    engine.execute(other, [b"SELECT", b"1"])
    engine.execute(other, [b"SET", b"k", b"x"])
    ex("MULTI")
    ex("PING")
    assert ex("EXEC") == [PONG]


def test_select_inside_multi_applies_to_later_commands(ex: Exec) -> None:
    ex("MULTI")
    ex("SELECT", "1")
    ex("SET", "k", "v")
    ex("EXEC")
    assert ex("GET", "k") == b"v"
    ex("SELECT", "0")
    assert ex("EXISTS", "k") == 0


def test_disconnect_drops_the_transaction_and_watches(engine: Engine) -> None:
    a = engine.connect()
    engine.execute(a, [b"WATCH", b"k"])
    engine.execute(a, [b"MULTI"])
    engine.disconnect(a)
    assert engine.keyspace.dbs[0].watchers == {}


SCRIPTS = {
    "multi_exec_basic": """
        MULTI
        SET k 1
        INCR k
        GET k
        EXEC
    """,
    "exec_and_discard_without_multi": """
        EXEC
        DISCARD
        UNWATCH
    """,
    "nested_multi_and_watch_inside_multi": """
        MULTI
        MULTI
        WATCH k
        SET k 1
        EXEC
    """,
    "unknown_command_aborts": """
        MULTI
        NOSUCHCMD a
        SET k 1
        EXEC
        GET k
    """,
    "arity_error_aborts": """
        MULTI
        GET
        SET k 1
        EXEC
        EXISTS k
    """,
    "runtime_errors_are_inline": """
        SET s text
        MULTI
        INCR s
        HSET s f v
        SET k 1
        EXEC
    """,
    "discard_drops_the_queue": """
        MULTI
        SET k 1
        DISCARD
        EXISTS k
        DISCARD
    """,
    "empty_transaction": """
        MULTI
        EXEC
    """,
    "watch_own_write_then_exec": """
        WATCH k
        SET k 1
        MULTI
        GET k
        EXEC
        EXEC
    """,
    "watch_arity_and_unwatch": """
        WATCH
        WATCH a b c
        UNWATCH
        MULTI
        UNWATCH
        EXEC
    """,
    "blocking_command_inside_multi": """
        MULTI
        BLPOP l 0
        BRPOP l 1
        EXEC
    """,
    "select_inside_multi": """
        MULTI
        SELECT 1
        SET k v
        SELECT 99
        EXEC
        GET k
        SELECT 0
        GET k
    """,
}


@pytest.mark.redis
@pytest.mark.parametrize("resp", [2, 3])
@pytest.mark.parametrize("name", list(SCRIPTS))
def test_transactions_match_redis(differ: Differ, name: str, resp: int) -> None:
    run_script(differ, cmds(SCRIPTS[name]), resp)


@pytest.mark.redis
@pytest.mark.parametrize("resp", [2, 3])
def test_watch_touched_by_other_client_matches_redis(
    differ: Differ, redis_port: int, resp: int
) -> None:
    from tests.engine.conftest import RawEngine, RawRedis

    real_other = RawRedis(redis_port)
    fake_other = RawEngine(differ.fake.engine)
    if resp == 3:
        differ.both("HELLO", 3)
    differ.check("WATCH", "k")
    assert real_other.call("SET", "k", "x") == fake_other.call("SET", "k", "x")
    differ.check("MULTI")
    differ.check("GET", "k")
    differ.check("EXEC")
    real_other.close()


@pytest.mark.redis
def test_watch_and_expiry_match_redis(differ: Differ) -> None:
    import time

    differ.check("SET", "gone", "v", "PX", "50")
    differ.check("SET", "going", "v", "PX", "50")
    time.sleep(0.06)  # both keys expire before the WATCH
    differ.check("WATCH", "gone")
    differ.check("EXISTS", "gone")
    differ.check("MULTI")
    differ.check("PING")
    differ.check("EXEC")
    differ.check("SET", "going", "v", "PX", "50")
    differ.check("WATCH", "going")
    time.sleep(0.06)  # the watched key expires between WATCH and EXEC
    differ.check("MULTI")
    differ.check("PING")
    differ.check("EXEC")
