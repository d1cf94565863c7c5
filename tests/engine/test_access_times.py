"""OBJECT IDLETIME without ``maxmemory`` (the default configuration): which commands reset a
key's access time, side by side with redis-server 7.0.15 (real time, so one wait of a few
seconds serves every command at once), and on the engine with an injected clock: multi-key
and movable-key commands, MOVE and COPY into another database, stamps that survive turning
LRU eviction on and off, and deleted keys leaving no stamp behind."""

from __future__ import annotations

import shlex
import time
from collections.abc import Iterator

import pytest

from streamworker.engine import Engine
from tests.engine.conftest import FakeClock, RawEngine, RawRedis

# (setup, the command run after the wait, the key whose idle time is then read)
_AFTER_WAIT = [
    ("SET s1 v", "GET s1", "s1"),
    ("SET s2 v", "TTL s2", "s2"),
    ("SET s3 v", "TYPE s3", "s3"),
    ("SET s4 v", "EXISTS s4", "s4"),
    ("SET s5 v", "OBJECT ENCODING s5", "s5"),
    ("SET s6 v", "TOUCH s6", "s6"),
    ("SET s7 v", "PTTL s7", "s7"),
    ("SET s8 v", "STRLEN s8", "s8"),
    ("SET s9 v", "APPEND s9 w", "s9"),
    ("SET m1 v", "MGET nokey m1", "m1"),
    ("SET m2 v", "DEL nokey", "m2"),
    ("SET m3 v", "EXPIRE m3 1000", "m3"),
    ("SET m4 v", "MEMORY USAGE m4", "m4"),
    ("SET m5 v", "DUMP m5", "m5"),
    ("SET m6 v", "SCAN 0", "m6"),
    ("SET m7 v", "KEYS m7*", "m7"),
    ("SET m8 v", "SET m8 w", "m8"),
    ("SET m9 v", "RENAME m9 m10", "m10"),
    ("HSET h1 f v", "HGET h1 f", "h1"),
    ("HSET h2 f v", "HSET h2 g v", "h2"),
    ("RPUSH l1 a b", "LRANGE l1 0 -1", "l1"),
    ("RPUSH l2 a b", "LMPOP 1 l2 LEFT", "l2"),
    ("SADD z1 a", "SINTERCARD 1 z1", "z1"),
    ("ZADD z2 1 a", "ZRANGE z2 0 -1", "z2"),
    ("ZADD z3 1 a", "ZUNION 1 z3", "z3"),
    ("XADD x1 1-1 f v", "XRANGE x1 - +", "x1"),
    ("SET e1 v", "EVAL \"return redis.call('get', KEYS[1])\" 1 e1", "e1"),
    ("SET e2 v", "EVAL 'return 1' 1 e2", "e2"),
    ("XADD x2 1-1 f v", "XREAD STREAMS x2 0", "x2"),
    ("XGROUP CREATE x3 g $ MKSTREAM", "XREADGROUP GROUP g c STREAMS x3 >", "x3"),
    ("SET c1 v", "COPY c1 c2", "c1"),
    ("SET o1 v", "OBJECT FREQ o1", "o1"),
]


def _idle(side: RawRedis | RawEngine, key: str) -> int:
    reply = side.call("OBJECT", "IDLETIME", key)
    assert reply.startswith(b":"), reply
    return int(reply[1:].strip())


@pytest.fixture
def sides(redis_port: int) -> Iterator[tuple[RawRedis, RawEngine]]:
    real = RawRedis(redis_port)
    real.call("FLUSHALL")
    fake = RawEngine()
    yield real, fake
    real.call("FLUSHALL")
    real.close()
    fake.close()


@pytest.mark.slow
def test_object_idletime_is_reset_by_the_commands_redis_resets_it_with(
    sides: tuple[RawRedis, RawEngine],
) -> None:
    real, fake = sides
    for setup, _, _ in _AFTER_WAIT:
        for side in (real, fake):
            side.call(*shlex.split(setup))
    time.sleep(3.2)
    for _, command, _ in _AFTER_WAIT:
        for side in (real, fake):
            side.call(*shlex.split(command))
    wrong = []
    for _, command, key in _AFTER_WAIT:
        idle = _idle(real, key), _idle(fake, key)
        # Both clocks have a resolution of a second, cached for 100 ms: touched means 0 or 1,
        # untouched 2 or more, on both sides.
        if (idle[0] <= 1) != (idle[1] <= 1):
            wrong.append(f"{command}: redis idle {idle[0]}, engine idle {idle[1]}")
    assert not wrong, "\n".join(wrong)


def _engine() -> tuple[FakeClock, Engine, RawEngine]:
    clock = FakeClock()
    engine = Engine(clock=clock)
    return clock, engine, RawEngine(engine)


def _run(raw: RawEngine, line: str) -> bytes:
    return raw.call(*shlex.split(line))


def test_idletime_counts_from_the_last_access_in_the_default_configuration() -> None:
    clock, _, raw = _engine()
    _run(raw, "SET k v")
    clock.now += 5_000
    assert _idle(raw, "k") == 5
    _run(raw, "GET k")
    clock.now += 2_000
    assert _idle(raw, "k") == 2


def test_every_key_of_a_multi_key_command_is_stamped() -> None:
    clock, _, raw = _engine()
    _run(raw, "MSET a x b y c z")
    clock.now += 10_000
    _run(raw, "MGET a c")
    assert (_idle(raw, "a"), _idle(raw, "b"), _idle(raw, "c")) == (0, 10, 0)


def test_the_keys_a_movable_keys_command_finds_are_stamped() -> None:
    clock, _, raw = _engine()
    _run(raw, "RPUSH l1 a")
    _run(raw, "RPUSH l2 a")
    clock.now += 10_000
    _run(raw, "LMPOP 2 nolist l2 LEFT")
    _run(raw, "RPUSH l2 b")
    clock.now += 1_000
    assert (_idle(raw, "l1"), _idle(raw, "l2")) == (11, 1)


def test_move_and_copy_stamp_the_key_in_the_other_database() -> None:
    clock, _, raw = _engine()
    _run(raw, "SET k v")
    _run(raw, "SET c v")
    clock.now += 10_000
    _run(raw, "MOVE k 1")
    _run(raw, "COPY c c DB 1")
    _run(raw, "SELECT 1")
    assert (_idle(raw, "k"), _idle(raw, "c")) == (0, 0)


def test_stamps_survive_lru_eviction_being_turned_on_and_off() -> None:
    clock, _, raw = _engine()
    _run(raw, "SET k v")
    clock.now += 7_000
    _run(raw, "CONFIG SET maxmemory-policy allkeys-lru")
    assert _idle(raw, "k") == 7
    clock.now += 1_000
    _run(raw, "CONFIG SET maxmemory-policy noeviction")
    assert _idle(raw, "k") == 8


def test_a_deleted_or_expired_key_leaves_no_stamp() -> None:
    clock, engine, raw = _engine()
    _run(raw, "SET gone v")
    _run(raw, "SET short v PX 10")
    _run(raw, "GET nokey")
    _run(raw, "DEL gone")
    clock.now += 100
    _run(raw, "GET short")
    assert engine.keyspace.dbs[0].access == {}


def test_idletime_is_refused_under_an_lfu_policy() -> None:
    _, _, raw = _engine()
    _run(raw, "SET k v")
    _run(raw, "CONFIG SET maxmemory-policy allkeys-lfu")
    assert raw.call("OBJECT", "IDLETIME", "k").startswith(b"-ERR An LFU maxmemory policy")
