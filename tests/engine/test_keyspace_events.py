"""Keyspace notifications (``notify-keyspace-events``) on the engine, side by side with
redis-server 7.0.15 over real sockets: CONFIG SET/GET parse the class letters as Redis, and a
subscriber to ``__key*__:*`` receives, for every write command, the same ``__keyspace@<db>__``
and ``__keyevent@<db>__`` messages in the same order (:mod:`.pubsub_support` compares every
byte each connection receives after each step).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from streamworker.engine.inproc import forget_engine, sync_client
from tests.engine.conftest import RawRedis
from tests.engine.pubsub_support import Pair, engine_server, steps
from tests.support.engine_server import ThreadedServer
from tests.support.servers import RedisServer

pytestmark = pytest.mark.redis

__all__ = ["engine_server"]

PARAM = "notify-keyspace-events"


@pytest.fixture
def notified(redis_server: RedisServer, engine_server: ThreadedServer) -> Iterator[Pair]:
    """Both servers with every class on; connection ``s`` subscribed to every key event."""
    p = Pair(redis_server.port, engine_server.port)
    p.step("c", "FLUSHALL")
    p.step("c", "CONFIG", "SET", PARAM, "KEA")
    p.step("s", "PSUBSCRIBE", "__key*__:*")
    yield p
    p.step("c", "CONFIG", "SET", PARAM, "")
    p.step("c", "FLUSHALL")
    p.close()


@pytest.mark.parametrize(
    "value",
    ["", "K", "E", "A", "KEA", "AKE", "Kx", "x", "KEm", "An", "Agn", "nK", "g$lshzxetdKEm", "KQ"],
)
def test_config_set_and_get_read_the_class_letters_as_redis(
    redis_server: RedisServer, engine_server: ThreadedServer, value: str
) -> None:
    real = RawRedis(redis_server.port)
    fake = RawRedis(engine_server.port)
    try:
        for args in (("CONFIG", "SET", PARAM, value), ("CONFIG", "GET", PARAM)):
            assert fake.call(*args) == real.call(*args), args
    finally:
        real.call("CONFIG", "SET", PARAM, "")
        real.close()
        fake.close()


# Each script: commands on connection "c"; connection "s" gets the events. Grouped by type.
SCRIPTS = {
    "strings": """
        c: SET s1 v
        c: SET s1 v EX 100
        c: SET s1 v NX
        c: SETNX s2 v
        c: SETEX s3 100 v
        c: PSETEX s3 100000 v
        c: GETSET s1 w
        c: MSET s4 a s5 b
        c: MSETNX s6 a s7 b
        c: APPEND s4 more
        c: APPEND s8 new
        c: SETRANGE s4 1 xy
        c: INCR n
        c: DECRBY n 5
        c: INCRBYFLOAT f 1.5
        c: GETEX s1 PERSIST
        c: GETEX s1 EX 100
        c: GETDEL s5
        c: SETBIT b 7 1
        c: SETBIT b 7 1
        c: GET s1
    """,
    "keys": """
        c: SET k1 v
        c: SET k2 v
        c: EXPIRE k1 100
        c: PEXPIRE k1 100000
        c: EXPIRE k1 100 NX
        c: PERSIST k1
        c: PERSIST k1
        c: RENAME k1 k3
        c: RENAME k3 k2
        c: RENAMENX k2 k4
        c: COPY k4 k5
        c: DEL k4 k5 nosuch
        c: UNLINK k2
        c: SET k6 v
        c: EXPIRE k6 -1
        c: EXPIREAT k7 1
    """,
    "lists": """
        c: LPUSH l a b c
        c: RPUSH l d
        c: LPUSHX l e
        c: RPUSHX nolist e
        c: LPOP l
        c: RPOP l 2
        c: LSET l 0 x
        c: LINSERT l BEFORE x y
        c: LINSERT l BEFORE nope y
        c: LTRIM l 0 0
        c: LTRIM l 5 10
        c: RPUSH l2 a b
        c: LMPOP 1 l2 LEFT COUNT 5
        c: RPUSH l3 a
        c: BLPOP l3 0
    """,
    "hashes": """
        c: HSET h a 1 b 2
        c: HSET h a 1
        c: HSETNX h c 3
        c: HSETNX h c 3
        c: HMSET h d 4
        c: HINCRBY h a 5
        c: HINCRBYFLOAT h a 0.5
        c: HDEL h a nosuch
        c: HDEL h nosuch
        c: HDEL h b c d
    """,
    "sets": """
        c: SADD st a b
        c: SADD st a
        c: SREM st a nosuch
        c: SREM st nosuch
        c: SREM st b
        c: SADD st2 only
        c: SPOP st2
    """,
    "zsets": """
        c: ZADD z 1 a 2 b 3 c 4 d 5 e 6 f
        c: ZADD z 1 a
        c: ZADD z INCR 1 a
        c: ZINCRBY z 1 b
        c: ZREM z a nosuch
        c: ZREMRANGEBYSCORE z 2 2
        c: ZREMRANGEBYRANK z 0 0
        c: ZREMRANGEBYLEX z [z [z
        c: ZPOPMIN z
        c: ZPOPMAX z 5
        c: ZADD z2 1 a 2 b
        c: ZRANGESTORE z3 z2 0 -1
        c: ZRANGESTORE z3 z2 5 6
        c: ZMPOP 1 z2 MIN COUNT 9
    """,
    "streams": """
        c: XADD x 1-1 f v
        c: XADD x MAXLEN 1 2-1 f v
        c: XADD x MAXLEN 5 3-1 f v
        c: XGROUP CREATE x g 0
        c: XGROUP SETID x g 0
        c: XGROUP CREATECONSUMER x g alice
        c: XGROUP CREATECONSUMER x g alice
        c: XGROUP DELCONSUMER x g alice
        c: XGROUP DESTROY x g
        c: XDEL x 3-1 9-9
        c: XTRIM x MAXLEN 0
        c: XSETID x 10-1
        c: XGROUP CREATE y g $ MKSTREAM
    """,
    "consumers": """
        c: XADD x 1-1 f v
        c: XADD x 2-1 f v
        c: XGROUP CREATE x g 0
        c: XREADGROUP GROUP g bob COUNT 1 STREAMS x >
        c: XREADGROUP GROUP g bob COUNT 1 STREAMS x >
        c: XCLAIM x g carol 0 1-1
        c: XCLAIM x g erin 0 9-9
        c: XAUTOCLAIM x g dave 0 0
        c: XAUTOCLAIM x g frank 0 9-9
        c: XACK x g 1-1
        c: XGROUP DELCONSUMER x g nobody
        c: XGROUP DELCONSUMER x g bob
    """,
    "bits_and_sort": """
        c: SET a 1
        c: SET b 2
        c: BITOP AND d a b
        c: BITOP AND d none1 none2
        c: BITOP AND d none1 none2
        c: BITFIELD bf SET u8 0 1
        c: BITFIELD bf SET u8 0 1
        c: BITFIELD bf GET u8 0
        c: BITFIELD bf OVERFLOW FAIL INCRBY u2 0 9
        c: RPUSH l 3 1 2
        c: SORT l STORE so
        c: SORT nolist STORE so
        c: SORT nolist STORE so
    """,
    "list_removes_and_moves": """
        c: RPUSH l a b a c a
        c: LREM l 2 a
        c: LREM l 0 nosuch
        c: LREM nolist 0 a
        c: LREM l -1 a
        c: LREM l 0 b
        c: LREM l 0 c
        c: RPUSH src a b c
        c: LMOVE src dst LEFT RIGHT
        c: LMOVE src src LEFT RIGHT
        c: LMOVE src dst RIGHT LEFT
        c: RPOPLPUSH src dst
        c: RPOPLPUSH src dst
        c: LMOVE nosuch dst LEFT LEFT
        c: BLMOVE dst d2 RIGHT LEFT 0
        c: BRPOPLPUSH dst d2 0
        c: BRPOPLPUSH dst d2 0
        c: SET str v
        c: LMOVE d2 str LEFT LEFT
        c: RPOPLPUSH d2 d2
        c: RPUSH one a
        c: LMOVE one one LEFT RIGHT
        c: RPOPLPUSH one one
    """,
    "set_moves_and_stores": """
        c: SADD s1 a b c d
        c: SADD s2 b c x
        c: SMOVE s1 s2 a
        c: SMOVE s1 s2 b
        c: SMOVE s1 s2 nosuch
        c: SMOVE s1 s1 c
        c: SMOVE s1 s3 c
        c: SMOVE s1 s3 d
        c: SMOVE nosuch s2 a
        c: SINTERSTORE d s2 s3
        c: SUNIONSTORE d s2 s3
        c: SDIFFSTORE d s2 s3
        c: SINTERSTORE d s2 nosuch
        c: SINTERSTORE d s2 nosuch
        c: SUNIONSTORE d nosuch
        c: SUNIONSTORE d s3
        c: SDIFFSTORE d s3 s3
        c: SDIFFSTORE d s3 s3
        c: SINTERSTORE s2 s2 s3
        c: SET str v
        c: SMOVE s2 str c
    """,
    "zset_stores": """
        c: ZADD z1 1 a 2 b
        c: ZADD z2 2 b 3 c
        c: ZUNIONSTORE zd 2 z1 z2
        c: ZINTERSTORE zd 2 z1 z2 WEIGHTS 2 3
        c: ZDIFFSTORE zd 2 z1 z2
        c: ZDIFFSTORE zd 2 z1 z1
        c: ZDIFFSTORE zd 2 z1 z1
        c: ZINTERSTORE zd 2 z1 nosuch
        c: ZUNIONSTORE zd 1 nosuch
        c: ZUNIONSTORE zd 1 z1
        c: ZINTERSTORE zd 2 z1 nosuch
        c: ZRANGESTORE zd z1 0 -1
        c: ZRANGESTORE zd z1 0 -1 REV
        c: ZRANGESTORE zd z1 (9 +inf BYSCORE
        c: ZUNIONSTORE z1 2 z1 z2
    """,
    "move_between_dbs": """
        c: SET m v
        c: MOVE m 1
        c: MOVE m 1
        c: SET m w
        c: MOVE m 1
        c: SELECT 1
        c: MOVE m 0
        c: RPUSH ml a
        c: PEXPIRE ml 100000
        c: MOVE ml 0
        c: SELECT 0
        c: DEL m ml
    """,
    "geo": """
        c: GEOADD g 13.361389 38.115556 Palermo 15.087269 37.502669 Catania
        c: GEOADD g NX 13.361389 38.115556 Palermo
        c: GEOADD g XX CH 13.0 38.0 Palermo
        c: GEORADIUS g 15 37 300 km STORE gd
        c: GEORADIUS g 15 37 300 km STOREDIST gd
        c: GEORADIUS g 0 0 1 km STORE gd
        c: GEORADIUS g 0 0 1 km STORE gd
        c: COPY g g4
        c: GEORADIUS g4 15 37 300 km STORE g4
        c: GEORADIUSBYMEMBER g Palermo 300 km STORE gd2
        c: GEORADIUSBYMEMBER g Palermo 300 km STOREDIST gd2 COUNT 1
        c: GEOSEARCHSTORE gd3 g FROMMEMBER Palermo BYRADIUS 300 km
        c: GEOSEARCHSTORE gd3 g FROMMEMBER Palermo BYRADIUS 300 km STOREDIST
        c: GEOSEARCHSTORE gd3 g FROMLONLAT 0 0 BYBOX 1 1 km
        c: GEOSEARCHSTORE gd3 nosuch FROMLONLAT 0 0 BYRADIUS 1 km
        c: GEOSEARCHSTORE gd2 nosuch FROMLONLAT 0 0 BYRADIUS 1 km
        c: GEORADIUS nosuch 0 0 1 km STORE gd
        c: GEOADD g 1 1 x
        c: GEORADIUS g 0 0 1 km
        c: ZREM g Palermo Catania x
    """,
    "hyperloglog": """
        c: PFADD h a b
        c: PFADD h a
        c: PFADD h2
        c: PFADD h2
        c: PFCOUNT h
        c: PFCOUNT h h2
        c: PFMERGE h3 h h2
        c: PFMERGE h3
        c: PFMERGE h4
        c: PFMERGE h4 nosuch
        c: PFADD h c
        c: PFCOUNT h
    """,
    "db": """
        c: SELECT 3
        c: SET k v
        c: DEL k
        c: SELECT 0
    """,
}


@pytest.mark.parametrize("family", sorted(SCRIPTS))
def test_write_commands_notify_the_same_events_as_redis(notified: Pair, family: str) -> None:
    notified.run(steps(SCRIPTS[family]))


# The families whose commands create keys (destinations of moves and stores, MOVE's target
# db): the same scripts with the "new" class on as well.
CREATING = (
    "list_removes_and_moves",
    "set_moves_and_stores",
    "zset_stores",
    "move_between_dbs",
    "geo",
    "hyperloglog",
)


@pytest.mark.parametrize("family", CREATING)
def test_commands_that_create_keys_send_new_as_redis(notified: Pair, family: str) -> None:
    notified.step("c", "CONFIG", "SET", PARAM, "KEAn")
    notified.run(steps(SCRIPTS[family]))


@pytest.mark.parametrize("family", ["list_removes_and_moves", "move_between_dbs", "geo"])
def test_a_resp3_subscriber_gets_the_same_events_as_pushes(notified: Pair, family: str) -> None:
    # HELLO's reply holds the connection id, which differs: switched without comparing.
    for side in (notified.real, notified.fake):
        side.send("r3", ("HELLO", "3"))
        side.collect("r3")
    notified.step("r3", "PSUBSCRIBE", "__key*__:*")
    notified.run(steps(SCRIPTS[family]))


def test_classes_filter_which_events_are_sent(notified: Pair) -> None:
    notified.run(
        steps(
            """
            c: CONFIG SET notify-keyspace-events Kl
            c: SET k v
            c: LPUSH l a
            c: CONFIG SET notify-keyspace-events E$
            c: SET k v
            c: LPUSH l a
            c: DEL k
            c: CONFIG SET notify-keyspace-events Eg
            c: DEL k l
            """
        )
    )


def test_new_keys_send_new_when_asked_for(notified: Pair) -> None:
    notified.run(
        steps(
            """
            c: CONFIG SET notify-keyspace-events KEAn
            c: CONFIG GET notify-keyspace-events
            c: SET n1 v
            c: SET n1 w
            c: LPUSH n2 a
            c: RENAME n1 n3
            c: COPY n3 n4
            c: SADD n5 a
            c: ZADD n6 1 a
            c: XADD n7 1-1 f v
            c: HSET n8 f v
            c: SETBIT n9 1 1
            c: INCR n10
            c: CONFIG SET notify-keyspace-events En
            c: APPEND n11 x
            c: SET n12 v PX 100000
            """
        )
    )


def test_a_key_reclaimed_by_expiry_sends_expired(notified: Pair) -> None:
    # One key: Redis's active expiry samples keys at random, so with several the order of
    # their "expired" events is chance's. Whether the read or the expiry cycle reclaims it,
    # the subscriber gets the event before the read's marker.
    notified.step("c", "SET", "e1", "v", "PX", "300")
    time.sleep(0.8)  # the key's time runs out (nothing may touch it meanwhile)
    notified.step("c", "GET", "e1")


def test_events_from_a_transaction_and_a_script_arrive_in_order(notified: Pair) -> None:
    notified.run(
        steps(
            """
            c: MULTI
            c: SET t1 v
            c: LPUSH t2 a
            c: EXEC
            """
        )
    )
    script = "redis.call('SET', KEYS[1], 'v'); return redis.call('DEL', KEYS[1])"
    notified.step("c", "EVAL", script, 1, "t3")


def test_in_process_subscribers_get_keyspace_events() -> None:
    url = "engine://memory/test-keyspace-events"
    try:
        r = sync_client(url, protocol=2)
        r.config_set(PARAM, "Kg$")
        p = r.pubsub(ignore_subscribe_messages=True)
        p.psubscribe("__keyspace@0__:*")
        r.set("k", "v")
        r.delete("k")
        got = []
        deadline = time.monotonic() + 5
        while len(got) < 2 and time.monotonic() < deadline:
            # The psubscribe confirmation comes back as None (ignored).
            message = p.get_message(timeout=1)
            if message is not None:
                got.append(message)
        assert [(m["channel"], m["data"]) for m in got] == [
            (b"__keyspace@0__:k", b"set"),
            (b"__keyspace@0__:k", b"del"),
        ]
        p.close()
    finally:
        forget_engine(url)


def _wait_blocked(pair: Pair, n: int) -> None:
    """Until both servers count ``n`` blocked clients (asked on a connection of its own)."""
    for side in (pair.real, pair.fake):
        admin = RawRedis(side.port)
        try:
            deadline = time.monotonic() + 5
            while b"blocked_clients:%d\r\n" % n not in admin.call("INFO", "clients"):
                assert time.monotonic() < deadline, "the waiter never blocked"
                time.sleep(0.01)
        finally:
            admin.close()


@pytest.mark.parametrize(
    "waiter",
    [
        ("BLMOVE", "src", "dst", "LEFT", "RIGHT", "0"),
        ("BLMOVE", "src", "src", "RIGHT", "LEFT", "0"),
        ("BRPOPLPUSH", "src", "dst", "0"),
        ("BLPOP", "src", "0"),
        ("BLMPOP", "0", "1", "src", "RIGHT", "COUNT", "2"),
    ],
    ids=["blmove", "blmove-same-key", "brpoplpush", "blpop", "blmpop"],
)
def test_a_blocked_pop_served_later_notifies_as_redis(
    notified: Pair, waiter: tuple[str, ...]
) -> None:
    # The waiter's events come when another client's push serves it: the push's own, then
    # the move's (push on the destination, pop on the source, "del" of the emptied source).
    notified.step("c", "CONFIG", "SET", PARAM, "KEAn")
    notified.step("b", "PING")
    for side in (notified.real, notified.fake):
        side.send("b", waiter)
    _wait_blocked(notified, 1)
    notified.step("c", "RPUSH", "src", "a")


def test_a_blocked_move_is_served_after_the_transaction_that_fed_it(notified: Pair) -> None:
    # The transaction's pushes notify first; the waiter is served (and notifies) after EXEC.
    notified.step("c", "CONFIG", "SET", PARAM, "KEAn")
    notified.step("b", "PING")
    for side in (notified.real, notified.fake):
        side.send("b", ("BLMOVE", "src", "dst", "RIGHT", "LEFT", "0"))
    _wait_blocked(notified, 1)
    # Sent without reading: every connection is read after EXEC (the waiter's marker would
    # wait behind its BLMOVE; c's replies to MULTI and the queued commands come with EXEC's).
    for args in (("MULTI",), ("RPUSH", "src", "a", "b"), ("LPOP", "src")):
        for side in (notified.real, notified.fake):
            side.send("c", args)
    notified.step("c", "EXEC")
    # And once more from a script.
    for side in (notified.real, notified.fake):
        side.send("b", ("BLMOVE", "src", "dst", "RIGHT", "LEFT", "0"))
    _wait_blocked(notified, 1)
    notified.step("c", "EVAL", "redis.call('RPUSH', KEYS[1], 'c', 'd')", 1, "src")


def test_a_blocked_move_to_a_non_list_is_refused_without_events(notified: Pair) -> None:
    notified.step("c", "SET", "dst", "v")
    notified.step("b", "PING")
    for side in (notified.real, notified.fake):
        side.send("b", ("BLMOVE", "src", "dst", "LEFT", "RIGHT", "0"))
    _wait_blocked(notified, 1)
    notified.step("c", "RPUSH", "src", "a")
    notified.step("c", "LRANGE", "src", 0, -1)


def test_restore_notifies_restore_and_del_as_redis(notified: Pair) -> None:
    notified.step("c", "CONFIG", "SET", PARAM, "KEAn")
    notified.step("c", "RPUSH", "l", "a", "b")
    dumped = notified.step("c", "DUMP", "l")["c"]
    payload = dumped[dumped.index(b"\r\n") + 2 : -2]
    notified.step("c", "DEL", "l")
    for args in (
        ("RESTORE", "k", 0, payload),
        ("RESTORE", "k", 0, payload),
        ("RESTORE", "k", 0, payload, "REPLACE"),
        ("RESTORE", "k", 100000, payload, "REPLACE"),
        ("RESTORE", "k", 1, payload, "REPLACE", "ABSTTL"),
        ("RESTORE", "k", 1, payload, "REPLACE", "ABSTTL"),
        ("RESTORE", "k2", 1, payload, "ABSTTL"),
        ("RESTORE", "k3", 0, b"not a payload"),
        ("RESTORE", "k3", 0, payload, "IDLETIME", 5),
    ):
        notified.step("c", *args)


def test_string_edits_that_change_nothing_notify_as_redis(notified: Pair) -> None:
    # SETRANGE with an empty value never notifies; APPEND of nothing does (and creates the
    # key); LCS, SUBSTR and FUNCTION are silent.
    notified.step("c", "CONFIG", "SET", PARAM, "KEAn")
    for args in (
        ("SETRANGE", "s", 0, ""),
        ("SETRANGE", "s", 2, "ab"),
        ("SETRANGE", "s", 0, ""),
        ("SETRANGE", "s", 100, ""),
        ("APPEND", "s", ""),
        ("APPEND", "s2", ""),
        ("LCS", "s", "s2"),
        ("SUBSTR", "s", 0, 1),
        ("FUNCTION", "FLUSH"),
    ):
        notified.step("c", *args)


# Each: setup commands, the one key that then expires (one only: Redis's expiry cycle samples
# keys at random), and the commands run past its TTL. Whether the expiry cycle or the
# command's lookup reclaims the key, "expired" comes before the command's own events.
EXPIRING = {
    "lmove-to-expired-destination": (
        ["RPUSH src a", "RPUSH dst x"],
        "dst",
        ["LMOVE src dst LEFT LEFT"],
    ),
    "lmove-from-expired-source": (["RPUSH src a"], "src", ["LMOVE src dst LEFT LEFT"]),
    "smove-to-expired-destination": (["SADD s a", "SADD t b"], "t", ["SMOVE s t a"]),
    "sinterstore-over-expired": (["SADD s a", "SADD d x"], "d", ["SINTERSTORE d s s"]),
    "zunionstore-empty-over-expired": (
        ["ZADD z 1 a", "ZADD zd 1 x"],
        "zd",
        ["ZUNIONSTORE zd 1 no"],
    ),
    "georadius-store-empty-over-expired": (
        ["GEOADD g 1 1 a", "GEOADD gd 1 1 a"],
        "gd",
        ["GEORADIUS g 50 50 1 km STORE gd"],
    ),
    "move-onto-expired": (
        ["SET m v", "SELECT 1", "SET m w"],
        "m",
        ["SELECT 0", "MOVE m 1", "SELECT 1", "DEL m"],
    ),
    "move-of-expired": (["SET m v"], "m", ["MOVE m 1"]),
    "restore-over-expired": (["SET k v"], "k", ["DEL l", "RPUSH l a", "DUMP l"]),
    "pfadd-to-expired": (["PFADD h a"], "h", ["PFADD h a"]),
    "pfmerge-into-expired": (["PFADD h1 a", "PFADD h a"], "h", ["PFMERGE h h1"]),
}


@pytest.mark.parametrize("case", sorted(EXPIRING))
def test_commands_on_expired_keys_notify_expired_first_as_redis(notified: Pair, case: str) -> None:
    setup, expiring, commands = EXPIRING[case]
    notified.step("c", "CONFIG", "SET", PARAM, "KEAn")
    for line in setup:
        notified.step("c", *line.split())
    notified.step("c", "PEXPIRE", expiring, 200)
    time.sleep(0.5)  # the key's time runs out (nothing may touch it meanwhile)
    for line in commands:
        out = notified.step("c", *line.split())
    if commands[-1].startswith("DUMP"):
        payload = out["c"][out["c"].index(b"\r\n") + 2 : -2]
        notified.step("c", "RESTORE", "k", 0, payload)


@pytest.fixture(scope="module")
def debuggable_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A redis-server that accepts DEBUG (to switch its active expiry off)."""
    server = RedisServer(
        tmp_path_factory.mktemp("redis-debug"), extra_args=["--enable-debug-command", "yes"]
    ).start()
    yield server
    server.stop()


@pytest.fixture
def lazy(debuggable_redis: RedisServer) -> Iterator[Pair]:
    """Both servers with active expiry off (Redis: DEBUG SET-ACTIVE-EXPIRE 0; the engine: its
    cron's expiry pass replaced by a no-op), so that a key past its TTL stays stored until a
    command meets it: every event then comes from the commands' own lookups and deletes."""
    engine = ThreadedServer(
        configure=lambda e: setattr(e.keyspace, "active_expire", lambda budget=1000: 0)
    )
    p = Pair(debuggable_redis.port, engine.port)
    admin = RawRedis(debuggable_redis.port)
    admin.call("DEBUG", "SET-ACTIVE-EXPIRE", "0")
    p.step("c", "FLUSHALL")
    p.step("c", "CONFIG", "SET", PARAM, "KEAn")
    p.step("s", "PSUBSCRIBE", "__key*__:*")
    yield p
    p.step("c", "CONFIG", "SET", PARAM, "")
    p.step("c", "FLUSHALL")
    admin.call("DEBUG", "SET-ACTIVE-EXPIRE", "1")
    admin.close()
    p.close()
    engine.close()


# Redis's STORE variants delete an empty result's destination with dbDelete, which does not
# look at TTLs: a destination past its TTL but not reclaimed yet goes with "del", not
# "expired". A non-empty result is stored with setKey, whose lookup reclaims it first
# ("expired", then "new").
LAZY = {
    "sinterstore-empty": ("SADD d x", "SINTERSTORE d nosuch"),
    "sinterstore-stored": ("SADD s a; SADD d x", "SINTERSTORE d s"),
    "sinterstore-onto-its-source": ("SADD d x", "SINTERSTORE d d"),
    "sunionstore-empty": ("SADD d x", "SUNIONSTORE d nosuch"),
    "sdiffstore-stored": ("SADD s a; SET d x", "SDIFFSTORE d s"),
    "zunionstore-empty": ("ZADD d 1 x", "ZUNIONSTORE d 1 nosuch"),
    "zinterstore-stored": ("ZADD z 1 a; ZADD d 1 x", "ZINTERSTORE d 1 z"),
    "zdiffstore-empty": ("ZADD z 1 a; ZADD d 1 x", "ZDIFFSTORE d 2 z z"),
    "zrangestore-empty": ("ZADD z 1 a; ZADD d 1 x", "ZRANGESTORE d z 5 6"),
    "zrangestore-stored": ("ZADD z 1 a; SET d x", "ZRANGESTORE d z 0 -1"),
    "georadius-store-empty": ("GEOADD g 1 1 a; SET d x", "GEORADIUS g 50 50 1 km STORE d"),
    "georadius-store-stored": ("GEOADD g 1 1 a; SET d x", "GEORADIUS g 1 1 1 km STORE d"),
    "geosearchstore-missing-source": (
        "SET d x",
        "GEOSEARCHSTORE d nosuch FROMLONLAT 0 0 BYRADIUS 1 km",
    ),
    "sort-store-empty": ("SET d x", "SORT nosuch STORE d"),
    "sort-store-stored": ("RPUSH l 1; SET d x", "SORT l STORE d"),
    "bitop-empty": ("SET d x", "BITOP AND d nosuch"),
    "bitop-stored": ("SET a 1; SET d x", "BITOP AND d a"),
    "lmove-destination": ("RPUSH l a; RPUSH d x", "LMOVE l d LEFT LEFT"),
    "lmove-source": ("RPUSH d x", "LMOVE d l LEFT LEFT"),
    "smove-destination": ("SADD s a; SADD d x", "SMOVE s d a"),
    "pfadd": ("SET d x", "PFADD d a"),
    "pfmerge": ("PFADD h a; PFADD d x", "PFMERGE d h"),
    "move-source": ("SET d x", "MOVE d 1"),
    "move-onto": ("SELECT 1; SET d x", "SELECT 0; SET d y; MOVE d 1; SELECT 1"),
    "lrem": ("RPUSH d x", "LREM d 0 x"),
}


@pytest.mark.parametrize("case", sorted(LAZY))
def test_commands_meeting_an_unreclaimed_expired_key_notify_as_redis(lazy: Pair, case: str) -> None:
    # Key "d" is created by the setup, expires, and is then met by the command.
    setup, command = LAZY[case]
    for line in setup.split(";"):
        lazy.step("c", *line.split())
    lazy.step("c", "PEXPIRE", "d", 50)
    time.sleep(0.2)  # expired, and left for the command to meet
    for line in command.split(";"):
        lazy.step("c", *line.split())
    lazy.step("c", "DBSIZE")


def test_restore_replace_over_an_unreclaimed_expired_key_notifies_as_redis(lazy: Pair) -> None:
    lazy.step("c", "RPUSH", "l", "a")
    dumped = lazy.step("c", "DUMP", "l")["c"]
    payload = dumped[dumped.index(b"\r\n") + 2 : -2]
    for ttl_args in ((0,), (1, "ABSTTL")):
        lazy.step("c", "SET", "k", "v", "PX", 50)
        time.sleep(0.2)  # expired, and left for RESTORE to meet
        lazy.step("c", "RESTORE", "k", *ttl_args[:1], payload, "REPLACE", *ttl_args[1:])
        lazy.step("c", "DBSIZE")
