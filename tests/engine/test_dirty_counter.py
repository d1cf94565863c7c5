"""The change counter (Redis's ``server.dirty``, INFO ``rdb_changes_since_last_save``) side by
side with redis-server 7.0.15: what each write command adds, per family, including the no-ops
that add nothing (SETBIT of the same bit, SET NX on an existing key, DEL of missing keys), the
commands that add more than one (DEL of three keys, HSET of two fields, LPUSH of three
elements), PFCOUNT refreshing its cached cardinality, and blocked clients served later. On the
engine alone: SAVE resets the counter, BGSAVE takes off what was counted when it started,
FLUSHALL with save points saves and resets it, the ``save`` schedule starts a BGSAVE, and the
``save`` parameter is validated as Redis does."""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamworker.engine import Engine
from streamworker.engine.aof import open_persistent
from streamworker.engine.commands.rdb import wait_bgsave
from streamworker.engine.context import Blocked
from streamworker.engine.rdb.files import snapshot_state
from tests.engine.conftest import RawEngine, RawRedis, pack, read_raw_reply
from tests.support.servers import RedisServer

_DIRTY = re.compile(rb"rdb_changes_since_last_save:(\d+)")


def _dirty(side: RawRedis | RawEngine) -> int:
    found = _DIRTY.search(side.call("INFO", "persistence"))
    assert found is not None
    return int(found.group(1))


CASES: dict[str, list[str]] = {
    "strings": [
        "SET a 1",
        "SET a 1 NX",
        "SET a 2 XX",
        "SET missing 1 XX",
        "SET a 3 GET",
        "SETNX a 1",
        "SETNX b 1",
        "SETEX c 100 v",
        "PSETEX c2 100000 v",
        "MSET m1 1 m2 2 m3 3",
        "MSETNX m1 1 m9 9",
        "MSETNX m7 1 m8 9",
        "GETSET a 5",
        "GETDEL a",
        "GETDEL a",
        "GETEX b",
        "GETEX b EX 100",
        "GETEX b PERSIST",
        "GETEX b PERSIST",
        "GETEX missing EX 100",
        "SETRANGE s 0 ''",
        "SETRANGE s 0 abc",
        "SETRANGE s 1 ''",
        "APPEND s xyz",
        "INCR i",
        "INCRBY i 5",
        "DECRBY i 2",
        "INCRBYFLOAT f 1.5",
        "INCR s",
        "GET s",
    ],
    "bits": [
        "SETBIT foo 0 0",
        "SETBIT foo 0 0",
        "SETBIT foo 0 1",
        "SETBIT foo 0 1",
        "SETBIT foo 90 0",
        "BITFIELD bf SET i5 0 0",
        "BITFIELD bf SET i5 0 0",
        "BITFIELD bf SET i5 0 1 SET i5 0 1 INCRBY i5 10 1",
        "BITFIELD bf SET i5 0 1 SET i5 0 1",
        "BITFIELD bf GET i5 0",
        "BITFIELD bf INCRBY u2 0 4 OVERFLOW FAIL",
        "BITFIELD bf OVERFLOW FAIL INCRBY u2 0 4",
        "BITFIELD bf INCRBY i5 0 1",
        "BITFIELD missing GET u2 0",
        "BITOP AND dest foo bf",
        "BITOP AND dest missing1 missing2",
        "BITOP AND dest missing1 missing2",
    ],
    "keys": [
        "MSET k1 1 k2 2 k3 3",
        "DEL k1 k2 k3 missing",
        "DEL missing",
        "MSET k1 1 k2 2 k3 3",
        "UNLINK k1 k2",
        "EXPIRE k3 100",
        "EXPIRE missing 100",
        "EXPIRE k3 100 NX",
        "EXPIRE k3 200 XX",
        "PEXPIREAT k3 4000000000000",
        "PERSIST k3",
        "PERSIST k3",
        "EXPIRE k3 -1",
        "SET r1 v",
        "RENAME r1 r2",
        "RENAME r2 r2",
        "RENAMENX r2 r3",
        "SET r4 x",
        "RENAMENX r3 r4",
        "MOVE r3 1",
        "MOVE missing 1",
        "COPY r4 r5",
        "COPY r4 r5",
        "COPY r4 r5 REPLACE",
        "SWAPDB 0 1",
        "SWAPDB 0 1",
        "FLUSHDB",
        "FLUSHDB",
    ],
    "hashes": [
        "HSET h f1 v1 f2 v2",
        "HSET h f1 v1",
        "HMSET h f3 v3 f4 v4",
        "HSETNX h f1 x",
        "HSETNX h f9 x",
        "HDEL h f1 f2 nofield",
        "HDEL h nofield",
        "HINCRBY h n 1",
        "HINCRBYFLOAT h n 1.5",
    ],
    "sets": [
        "SADD s1 a b c",
        "SADD s1 a",
        "SREM s1 a z",
        "SREM s1 z",
        "SMOVE s1 s2 b",
        "SMOVE s1 s2 nomember",
        "SMOVE s2 s2 b",
        "SADD s3 1 2 3 4 5",
        "SPOP s3",
        "SPOP s3 2",
        "SPOP s3 10",
        "SPOP s3 1",
        "SPOP s3",
        "SADD s4 a b",
        "SADD s5 b c",
        "SINTERSTORE d s4 s5",
        "SUNIONSTORE d s4 s5",
        "SDIFFSTORE d s4 s4",
        "SDIFFSTORE d s4 s4",
    ],
    "zsets": [
        "ZADD z 1 a 2 b",
        "ZADD z 1 a",
        "ZADD z 5 a",
        "ZADD z CH 6 a 7 c",
        "ZADD z NX 1 a",
        "ZADD z INCR 1 a",
        "ZADD missing XX 1 a",
        "ZINCRBY z 1 b",
        "ZINCRBY z 0 b",
        "ZREM z a nomember",
        "ZREM z nomember",
        "ZADD z 1 a 2 b 3 c 4 d 5 e",
        "ZREMRANGEBYRANK z 0 1",
        "ZREMRANGEBYRANK z 100 200",
        "ZREMRANGEBYSCORE z 3 3",
        "ZREMRANGEBYLEX z - +",
        "ZADD z 1 a 2 b 3 c 4 d 5 e",
        "ZPOPMIN z",
        "ZPOPMAX z 2",
        "ZPOPMIN z 0",
        "ZPOPMIN missing",
        "ZMPOP 1 z MIN COUNT 5",
        "ZMPOP 1 z MIN COUNT 5",
        "ZADD z 1 a 2 b",
        "ZUNIONSTORE zd 1 z",
        "ZINTERSTORE zd 2 z missing",
        "ZINTERSTORE zd 2 z missing",
        "ZRANGESTORE zd z 0 -1",
        "ZRANGESTORE zd z 5 6",
        "ZRANGESTORE zd z 5 6",
        "BZPOPMIN z 1",
    ],
    "lists": [
        "LPUSH l a b c",
        "RPUSH l d",
        "LPUSHX l e f",
        "LPUSHX nolist e f",
        "RPUSHX nolist e",
        "LINSERT l BEFORE a x",
        "LINSERT l BEFORE nothere x",
        "LINSERT nolist BEFORE a x",
        "LSET l 0 y",
        "LREM l 0 a",
        "LREM l 0 nothere",
        "LTRIM l 0 100",
        "LTRIM l 1 -2",
        "LPOP l",
        "RPOP l 2",
        "LPOP l 0",
        "LPOP nolist",
        "RPUSH l a b c d e",
        "LMOVE l l2 LEFT RIGHT",
        "LMOVE nolist l2 LEFT RIGHT",
        "RPOPLPUSH l l2",
        "LMPOP 2 nolist l LEFT COUNT 2",
        "LMPOP 1 nolist LEFT",
        "BLPOP l 1",
        "BLMPOP 1 1 l RIGHT COUNT 10",
        "BRPOPLPUSH l2 l 1",
        "LTRIM l 5 1",
        "SORT l2 STORE sorted",
        "SORT l2",
        "SORT nolist STORE sorted",
        "SORT nolist STORE sorted",
    ],
    "hyperloglog_geo": [
        "PFADD hll a b c",
        "PFADD hll a",
        "PFADD hll",
        "PFADD hll2",
        "PFCOUNT hll",
        "PFCOUNT hll",
        "PFADD hll d",
        "PFCOUNT hll",
        "PFCOUNT hll hll2",
        "PFMERGE hll3 hll hll2",
        "PFDEBUG ENCODING hll",
        "PFDEBUG DECODE hll",
        "PFDEBUG GETREG hll",
        "PFDEBUG GETREG hll",
        "PFDEBUG TODENSE hll2",
        "PFDEBUG TODENSE hll2",
        "GEOADD g 13.36 38.11 Palermo 15.08 37.50 Catania",
        "GEOADD g 13.36 38.11 Palermo",
        "GEOADD g XX 13.36 38.12 Palermo",
        "GEOSEARCHSTORE gd g FROMLONLAT 15 37 BYRADIUS 200 km",
        "GEOSEARCHSTORE gd g FROMLONLAT 0 0 BYRADIUS 1 km",
        "GEOSEARCHSTORE gd g FROMLONLAT 0 0 BYRADIUS 1 km",
        "GEORADIUS g 15 37 200 km STORE gd2",
        "GEORADIUS g 15 37 200 km",
    ],
    "streams": [
        "XADD x 1-1 f v",
        "XADD x 2-1 f v",
        "XADD x 3-1 f v",
        "XADD x MAXLEN 2 4-1 f v",
        "XADD x 5-1 f v",
        "XADD nostream NOMKSTREAM * f v",
        "XGROUP CREATE x g 0",
        "XREADGROUP GROUP g c1 COUNT 2 STREAMS x >",
        "XREADGROUP GROUP g c1 COUNT 2 STREAMS x >",
        "XREADGROUP GROUP g c1 COUNT 2 STREAMS x >",
        "XREADGROUP GROUP g c1 STREAMS x 0",
        "XREADGROUP GROUP g c2 STREAMS x 0",
        "XREADGROUP GROUP g c3 STREAMS x >",
        "XADD x 6-1 f v",
        "XREADGROUP GROUP g c3 NOACK STREAMS x >",
        "XCLAIM x g c4 0 3-1 4-1",
        "XCLAIM x g c4 0 3-1 JUSTID",
        "XCLAIM x g c5 0 3-1 99-1",
        "XCLAIM x g c5 0 3-1 LASTID 90-0",
        "XCLAIM x g c5 0 98-1 LASTID 91-0",
        "XCLAIM x g c5 0 98-1 LASTID 1-0",
        "XAUTOCLAIM x g c6 0 0 COUNT 1",
        "XAUTOCLAIM x g c6 0 0 JUSTID",
        "XDEL x 5-1 9-9",
        "XDEL x 9-9",
        "XAUTOCLAIM x g c7 0 0",
        "XACK x g 3-1 4-1 5-1",
        "XGROUP DELCONSUMER x g c1",
        "XGROUP DELCONSUMER x g nobody",
        "XGROUP CREATECONSUMER x g new",
        "XGROUP CREATECONSUMER x g new",
        "XGROUP SETID x g $",
        "XSETID x 99-1",
        "XGROUP DESTROY x g",
        "XGROUP DESTROY x g",
        "XTRIM x MAXLEN 1",
        "XTRIM x MAXLEN 1",
    ],
    "scripts_and_flushall": [
        "EVAL 'return 1' 0",
        "EVAL \"redis.call('set','e1','1') return 1\" 0",
        "EVAL \"redis.call('del','e1','e2') return 1\" 0",
        "EVAL \"redis.call('del','e1') return 1\" 0",
        "FUNCTION LOAD \"#!lua name=lib1\nredis.register_function('f1', function() return 1 end)\"",
        "FUNCTION DELETE lib1",
        "SET k v",
        "FLUSHALL",
        "FLUSHALL",
    ],
}


@pytest.fixture
def sides(redis_port: int) -> Iterator[tuple[RawRedis, RawEngine]]:
    real = RawRedis(redis_port)
    real.call("FLUSHALL")
    real.call("FUNCTION", "FLUSH")
    fake = RawEngine()
    yield real, fake
    real.call("FLUSHALL")
    real.call("SELECT", "0")
    real.close()
    fake.close()


@pytest.mark.parametrize("family", sorted(CASES))
def test_each_write_adds_what_redis_adds_to_the_change_counter(
    sides: tuple[RawRedis, RawEngine], family: str
) -> None:
    real, fake = sides
    wrong = []
    for line in CASES[family]:
        args = shlex.split(line)
        before = _dirty(real), _dirty(fake)
        replies = real.call(*args), fake.call(*args)
        added = _dirty(real) - before[0], _dirty(fake) - before[1]
        if added[0] != added[1]:
            wrong.append(f"{line}: redis +{added[0]}, engine +{added[1]} ({replies[1]!r})")
    assert not wrong, "\n".join(wrong)


def _wait_blocked(conn: RawRedis) -> None:
    for _ in range(200):
        if b"blocked_clients:1" in conn.call("INFO", "clients"):
            return
        time.sleep(0.01)
    raise AssertionError("the client did not block")


@pytest.mark.parametrize(
    ("blocking", "wake"),
    [
        ("BLPOP bl 5", "LPUSH bl x"),
        ("BLMOVE bl bl2 LEFT LEFT 5", "RPUSH bl a"),
        ("BLMPOP 5 1 bl LEFT COUNT 5", "RPUSH bl a b c"),
        ("BZPOPMIN bz 5", "ZADD bz 1 a"),
        ("BZMPOP 5 1 bz MIN COUNT 5", "ZADD bz 1 a 2 b 3 c"),
        ("XREADGROUP GROUP g newc BLOCK 5000 STREAMS xs >", "XADD xs * f v"),
    ],
)
def test_a_blocked_client_served_later_adds_what_redis_adds(
    redis_port: int, blocking: str, wake: str
) -> None:
    real, waiter = RawRedis(redis_port), RawRedis(redis_port)
    engine = Engine()
    fake = RawEngine(engine)
    blocked_client = engine.connect()
    try:
        for side in (real, fake):
            side.call("FLUSHALL")
            side.call("XGROUP", "CREATE", "xs", "g", "$", "MKSTREAM")
        before = _dirty(real), _dirty(fake)
        waiter.sock.sendall(pack(tuple(shlex.split(blocking))))
        _wait_blocked(real)
        pending = engine.execute(blocked_client, [a.encode() for a in shlex.split(blocking)])
        assert isinstance(pending, Blocked)
        real.call(*shlex.split(wake))
        fake.call(*shlex.split(wake))
        read_raw_reply(waiter.sock, waiter.buf)
        assert pending.resolved
        added = _dirty(real) - before[0], _dirty(fake) - before[1]
        assert added[1] == added[0]
    finally:
        real.call("FLUSHALL")
        real.close()
        waiter.close()


def _engine_in(tmp_path: Path) -> tuple[Engine, RawEngine]:
    # The data directory is chosen at start (engine serve --dir); CONFIG SET dir is protected.
    engine = Engine()
    engine.config.set("dir", str(tmp_path))
    return engine, RawEngine(engine)


def test_save_resets_the_change_counter(tmp_path: Path) -> None:
    _, raw = _engine_in(tmp_path)
    raw.call("MSET", "a", "1", "b", "2")
    assert _dirty(raw) == 2
    raw.call("SAVE")
    assert _dirty(raw) == 0
    assert (tmp_path / "dump.rdb").exists()


def test_bgsave_takes_off_only_what_was_counted_when_it_started(tmp_path: Path) -> None:
    engine, raw = _engine_in(tmp_path)
    raw.call("MSET", "a", "1", "b", "2", "c", "3")
    with engine.lock:
        # Held: the save cannot finish (its thread needs the lock) before the next write.
        raw.call("BGSAVE")
        raw.call("SET", "d", "4")
    wait_bgsave(engine, 30)
    assert snapshot_state(engine).last_status_ok
    assert _dirty(raw) == 1


def test_flushall_with_save_points_saves_and_resets_the_counter(tmp_path: Path) -> None:
    _, raw = _engine_in(tmp_path)
    raw.call("CONFIG", "SET", "save", "3600 1 300 100 60 10000")
    raw.call("SET", "key", "value")
    raw.call("FLUSHALL")
    assert _dirty(raw) == 0
    assert (tmp_path / "dump.rdb").exists()


def test_flushall_without_save_points_counts_the_keys_it_removed() -> None:
    raw = RawEngine()
    raw.call("MSET", "a", "1", "b", "2")
    raw.call("FLUSHALL")
    assert _dirty(raw) == 4


def test_a_reached_save_point_starts_a_bgsave(tmp_path: Path) -> None:
    engine, raw = _engine_in(tmp_path)
    raw.call("CONFIG", "SET", "save", "1 2")
    raw.call("SET", "a", "1")
    with engine.lock:
        snapshot_state(engine).last_save_s = int(time.time()) - 10
    engine.run_cron()
    assert not (tmp_path / "dump.rdb").exists()  # one change, the point asks for two
    raw.call("SET", "b", "1")
    engine.run_cron()
    wait_bgsave(engine, 30)
    assert (tmp_path / "dump.rdb").exists()
    assert _dirty(raw) == 0
    assert snapshot_state(engine).saves == 1


def test_a_save_point_waits_for_its_seconds(tmp_path: Path) -> None:
    engine, raw = _engine_in(tmp_path)
    raw.call("CONFIG", "SET", "save", "3600 1")
    raw.call("SET", "a", "1")
    engine.run_cron()
    wait_bgsave(engine, 30)
    assert not (tmp_path / "dump.rdb").exists()
    assert _dirty(raw) == 1


@pytest.mark.parametrize(
    "value", ["900 1", "1 0 2 5", "900 1 900 1", "", "  900   1  ", "900", "0 1", "abc", "1 -1"]
)
def test_config_set_save_accepts_and_refuses_what_redis_does(
    sides: tuple[RawRedis, RawEngine], value: str
) -> None:
    real, fake = sides
    try:
        assert fake.call("CONFIG", "SET", "save", value) == real.call(
            "CONFIG", "SET", "save", value
        )
        assert fake.call("CONFIG", "GET", "save") == real.call("CONFIG", "GET", "save")
    finally:
        real.call("CONFIG", "SET", "save", "")


def test_restore_of_an_already_expired_value_adds_only_a_deletion(
    sides: tuple[RawRedis, RawEngine],
) -> None:
    real, fake = sides
    real.call("SET", "src", "hello")
    payload = real.call("DUMP", "src").split(b"\r\n", 1)[1][:-2]
    added = []
    for side in (real, fake):
        side.call("SET", "old", "x")
        counts = []
        for args in (
            ("RESTORE", "missing", "1", payload, "ABSTTL"),
            ("RESTORE", "old", "1", payload, "REPLACE", "ABSTTL"),
            ("RESTORE", "fresh", "0", payload),
        ):
            before = _dirty(side)
            side.call(*args)
            counts.append(_dirty(side) - before)
        added.append(counts)
    assert added[1] == added[0]


def test_a_transaction_adds_what_its_commands_changed_and_nothing_more(
    sides: tuple[RawRedis, RawEngine],
) -> None:
    real, fake = sides
    added = []
    for side in (real, fake):
        side.call("SET", "old", "x")
        before = _dirty(side)
        for args in (
            ("MULTI",),
            ("SET", "m1", "v"),
            ("DEL", "m1", "old", "missing"),
            ("MSET", "a", "1", "b", "2"),
            ("GET", "a"),
            ("EXEC",),
        ):
            side.call(*args)
        added.append(_dirty(side) - before)
    assert added[1] == added[0]


@pytest.mark.parametrize("family", ["strings", "lists", "streams", "zsets"])
def test_an_engine_with_an_append_only_file_counts_as_one_in_memory(
    tmp_path: Path, family: str
) -> None:
    aof = open_persistent(tmp_path / "data", appendfsync="no")
    try:
        persistent = RawEngine(aof.engine)
        memory = RawEngine()
        wrong = []
        for line in CASES[family]:
            args = shlex.split(line)
            before = _dirty(memory), _dirty(persistent)
            memory.call(*args)
            persistent.call(*args)
            added = _dirty(memory) - before[0], _dirty(persistent) - before[1]
            if added[0] != added[1]:
                wrong.append(f"{line}: in memory +{added[0]}, with the file +{added[1]}")
        assert not wrong, "\n".join(wrong)
    finally:
        aof.close()


_AFTER_FAILED_SAVE = [
    "SET b 1",
    "PING",
    "GET a",
    "MULTI",
    "SET c 1",
    "EXEC",
    "MULTI",
    "GET a",
    "EXEC",
    "EVAL \"return redis.call('set', 'x', '1')\" 0",
    "EVAL \"return redis.call('get', 'a')\" 0",
    "PUBLISH ch x",
    "CONFIG SET stop-writes-on-bgsave-error no",
    "SET b 1",
    "CONFIG SET stop-writes-on-bgsave-error yes",
    "SET b 2",
    "CONFIG SET save ''",
    "SET b 3",
]


@pytest.mark.slow
def test_a_failed_bgsave_with_save_points_refuses_writes_as_redis_does(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "redis", extra_args=["--enable-protected-configs", "yes"])
    server.start()
    try:
        real = RawRedis(server.port)
        real_bad = tmp_path / "redis-gone"
        real_bad.mkdir()
        real.call("CONFIG", "SET", "dir", str(real_bad))
        engine_bad = tmp_path / "engine-gone"
        engine_bad.mkdir()
        engine, fake = _engine_in(engine_bad)
        # The directory disappears: the next save cannot write its file.
        real_bad.rmdir()
        engine_bad.rmdir()
        for side in (real, fake):
            side.call("SET", "a", "1")
            side.call("CONFIG", "SET", "save", "900 1")
            side.call("BGSAVE")
        wait_bgsave(engine, 30)
        for _ in range(500):
            if b"rdb_last_bgsave_status:err" in real.call("INFO", "persistence"):
                break
            time.sleep(0.01)
        assert b"rdb_last_bgsave_status:err" in fake.call("INFO", "persistence")
        wrong = []
        for line in _AFTER_FAILED_SAVE:
            args = shlex.split(line)
            replies = real.call(*args), fake.call(*args)
            if replies[0] != replies[1]:
                wrong.append(f"{line}: redis {replies[0]!r}, engine {replies[1]!r}")
        assert not wrong, "\n".join(wrong)
        real.close()
    finally:
        server.stop()
