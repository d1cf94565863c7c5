"""Replication as a standalone Redis 7.0 master exposes it, side by side with redis-server
7.0.15: the replication parameters (defaults, validation, the replica/slave aliases), and the
stream a SYNC / PSYNC client receives (the RDB of the data, then every write in its propagated
form, with SELECT, MULTI/EXEC and PEXPIREAT as Redis streams them)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest

from streamworker.engine import Engine, msgs
from streamworker.engine.errors import CommandError
from streamworker.engine.rdb.files import load_rdb_bytes
from tests.engine.admin_support import Conn, Pair, pair_fixture
from tests.engine.differential.backends import EngineBackend, RedisBackend
from tests.engine.differential.scripts import mismatches

_DEFAULTS = (
    "CONFIG SET repl-ping-replica-period 10 repl-timeout 60 min-replicas-to-write 0 "
    "min-replicas-max-lag 10 repl-diskless-sync yes repl-diskless-sync-delay 5 "
    "repl-diskless-sync-max-replicas 0 repl-diskless-load disabled repl-backlog-size 1mb "
    "repl-backlog-ttl 3600 repl-disable-tcp-nodelay no replica-read-only yes "
    "replica-serve-stale-data yes replica-priority 100 replica-lazy-flush no"
)

CONFIG_CASES = {
    "defaults": [
        "CONFIG GET repl-ping-replica-period",
        "CONFIG GET repl-ping-slave-period",
        "CONFIG GET repl-timeout",
        # Exact names: a glob's order is redis-server's hash table order.
        "CONFIG GET min-replicas-to-write",
        "CONFIG GET min-slaves-to-write",
        "CONFIG GET min-replicas-max-lag",
        "CONFIG GET min-slaves-max-lag",
        "CONFIG GET repl-diskless-sync",
        "CONFIG GET repl-diskless-sync-delay",
        "CONFIG GET repl-diskless-sync-max-replicas",
        "CONFIG GET repl-diskless-load",
        "CONFIG GET repl-backlog-size",
        "CONFIG GET repl-backlog-ttl",
        "CONFIG GET repl-disable-tcp-nodelay",
        "CONFIG GET replica-read-only",
        "CONFIG GET slave-read-only",
        "CONFIG GET replica-serve-stale-data",
        "CONFIG GET slave-serve-stale-data",
        "CONFIG GET replica-priority",
        "CONFIG GET slave-priority",
        "CONFIG GET replica-lazy-flush",
        "CONFIG GET slave-lazy-flush",
    ],
    "set": [
        "CONFIG SET repl-ping-replica-period 3600",
        "CONFIG GET repl-ping-slave-period",
        "CONFIG SET repl-ping-slave-period 7",
        "CONFIG GET repl-ping-replica-period",
        "CONFIG SET min-replicas-to-write 2",
        "CONFIG GET min-slaves-to-write",
        "CONFIG SET min-slaves-max-lag 0",
        "CONFIG GET min-replicas-max-lag",
        "CONFIG SET repl-diskless-sync NO",
        "CONFIG GET repl-diskless-sync",
        "CONFIG SET repl-diskless-load SwapDB",
        "CONFIG GET repl-diskless-load",
        "CONFIG SET repl-backlog-size 2mb",
        "CONFIG GET repl-backlog-size",
        "CONFIG SET replica-read-only no slave-priority 5",
        "CONFIG GET slave-read-only",
        "CONFIG GET replica-priority",
        _DEFAULTS,
    ],
    "invalid": [
        "CONFIG SET repl-ping-replica-period 0",
        "CONFIG SET repl-ping-replica-period 2147483648",
        "CONFIG SET repl-ping-replica-period x",
        "CONFIG SET repl-timeout 0",
        "CONFIG SET min-replicas-to-write -1",
        "CONFIG SET min-replicas-max-lag -1",
        "CONFIG SET repl-diskless-sync maybe",
        "CONFIG SET repl-diskless-sync-delay -1",
        "CONFIG SET repl-diskless-load foo",
        "CONFIG SET repl-backlog-size 0",
        "CONFIG SET repl-backlog-size 1x",
        "CONFIG SET repl-backlog-ttl -1",
        "CONFIG SET replica-priority -1",
        "CONFIG GET repl-ping-replica-period",
        _DEFAULTS,
    ],
}


@pytest.mark.redis
@pytest.mark.parametrize("conn", [0, 1], ids=["resp2", "resp3"])
@pytest.mark.parametrize("case", sorted(CONFIG_CASES))
def test_replication_parameters_behave_as_redis(
    both: tuple[RedisBackend, EngineBackend], case: str, conn: int
) -> None:
    """CONFIG GET/SET of the replication parameters reply as redis-server 7.0.15's."""
    failures = mismatches(*both, CONFIG_CASES[case], conn)
    assert not failures, "engine differs from redis-server 7.0:\n" + "\n".join(failures)


# --- the stream -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    """A redis-server of the module's own (replicas attach to it) and an engine server."""
    yield from pair_fixture(tmp_path_factory.mktemp("replication"))


def _attach(port: int, line: tuple[str, ...] = ("SYNC",)) -> tuple[Conn, bytes, bytes]:
    """Send SYNC (or PSYNC) on a new connection: (the connection, what came before the RDB
    bulk, the RDB bytes)."""
    setup = Conn(port)
    setup.call("CONFIG", "SET", "repl-ping-replica-period", "3600")
    setup.close()
    conn = Conn(port)
    conn.send(*line)
    head = bytearray()
    while True:
        # Redis may send newlines while it prepares the snapshot; a bulk length ends it.
        if b"\n$" in b"\n" + conn.buf and conn.buf.find(b"\r\n", conn.buf.find(b"$")) > 0:
            break
        conn.buf += conn.sock.recv(65536)
    start = conn.buf.find(b"$")
    end = conn.buf.find(b"\r\n", start)
    head = bytearray(conn.buf[:start])
    size = int(conn.buf[start + 1 : end])
    del conn.buf[: end + 2]
    while len(conn.buf) < size:
        conn.buf += conn.sock.recv(65536)
    rdb = bytes(conn.buf[:size])
    del conn.buf[:size]
    return conn, bytes(head), rdb


def _read_command(conn: Conn) -> list[bytes]:
    """One command of the replication stream (a RESP array of bulk strings)."""

    def line() -> bytes:
        while b"\r\n" not in conn.buf:
            conn.buf += conn.sock.recv(65536)
        end = conn.buf.index(b"\r\n")
        out = bytes(conn.buf[:end])
        del conn.buf[: end + 2]
        return out

    header = line()
    assert header.startswith(b"*"), header
    argv = []
    for _ in range(int(header[1:])):
        size = int(line()[1:])
        while len(conn.buf) < size + 2:
            conn.buf += conn.sock.recv(65536)
        argv.append(bytes(conn.buf[:size]))
        del conn.buf[: size + 2]
    return argv


_END = [b"SET", b"end-of-sequence", b"1"]
_MS = re.compile(rb"^1\d{12}$")
_ID = re.compile(rb"^1\d{12}-\d+$")


def _stream_until_end(conn: Conn) -> list[list[bytes]]:
    """The commands streamed up to the sequence's end marker, with clock-made values (absolute
    expiry times, generated stream IDs) replaced by placeholders."""
    out: list[list[bytes]] = []
    while True:
        argv = _read_command(conn)
        if argv == _END:
            return out
        out.append([b"<ms>" if _MS.match(a) else b"<id>" if _ID.match(a) else a for a in argv])


def _run(port: int, script: list[list[str | bytes]]) -> None:
    conns: dict[int, Conn] = {}
    for step in script:
        who, *words = step
        conn = conns.setdefault(int(who), Conn(port))
        assert isinstance(who, str)
        if words[0] == "SLEEP":  # let keys expire
            time.sleep(float(words[1]))
        elif words[0] == "SEND":  # a blocking command, answered later
            conn.send(*words[1:])
        else:
            conn.call(*words)
    first = conns.setdefault(0, Conn(port))
    first.call("SELECT", "0")
    first.call(*_END)
    for conn in conns.values():
        conn.close()


# DUMP of the string "bar" (RDB version 10, as redis-server 7.0 writes it).
_DUMP = b"\x00\x03bar\n\x00\xe6\xbeI`\xeef\xfd\x17"

STREAM_CASES: dict[str, list[list[str | bytes]]] = {
    "strings": [
        ["0", "SET", "a", "1"],
        ["0", "INCR", "a"],
        ["0", "INCRBY", "a", "5"],
        ["0", "APPEND", "s", "xy"],
        ["0", "GETDEL", "a"],
        ["0", "GETDEL", "a"],
        ["0", "GET", "s"],
    ],
    "expiries": [
        ["0", "SET", "k", "v"],
        ["0", "EXPIRE", "k", "100"],
        ["0", "PEXPIRE", "k", "100000"],
        ["0", "SET", "k2", "v", "EX", "100"],
        ["0", "SETEX", "k3", "100", "v"],
        ["0", "GETEX", "k3", "PX", "100000"],
        ["0", "EXPIRE", "missing", "100"],
        ["0", "PERSIST", "k"],
    ],
    "transactions": [
        ["0", "MULTI"],
        ["0", "SET", "x", "1"],
        ["0", "INCR", "x"],
        ["0", "EXEC"],
        ["0", "MULTI"],
        ["0", "SET", "y", "1"],
        ["0", "EXEC"],
        ["0", "MULTI"],
        ["0", "GET", "y"],
        ["0", "EXEC"],
    ],
    "scripts": [
        ["0", "EVAL", "redis.call('set', KEYS[1], '1'); redis.call('incr', KEYS[1])", "1", "e"],
        ["0", "EVAL", "redis.call('set', KEYS[1], '2')", "1", "f"],
        ["0", "EVAL", "return redis.call('get', KEYS[1])", "1", "f"],
        ["0", "EVAL", "redis.call('expire', KEYS[1], 100)", "1", "f"],
    ],
    "random_and_clock": [
        ["0", "SADD", "s", "a"],
        ["0", "SPOP", "s"],
        ["0", "SADD", "t", "a", "b"],
        ["0", "SPOP", "t", "5"],
        ["0", "XADD", "st", "*", "f", "v"],
        ["0", "XADD", "st", "MAXLEN", "1", "*", "f", "w"],
    ],
    "expired_keys": [
        ["0", "SET", "k", "v", "PX", "100"],
        ["0", "SELECT", "5"],
        ["0", "SET", "j", "v", "PX", "100"],
        ["0", "SLEEP", "0.6"],
        ["0", "GET", "j"],
        ["0", "SELECT", "0"],
        ["0", "GET", "k"],
        ["0", "SET", "after", "1"],
    ],
    "no_effect": [
        ["0", "DEL", "missing"],
        ["0", "UNLINK", "missing", "missing2"],
        ["0", "MULTI"],
        ["0", "DEL", "missing"],
        ["0", "EXEC"],
        ["0", "SET", "k", "v"],
        ["0", "DEL", "k", "missing"],
        ["0", "ZMPOP", "2", "z1", "z2", "MAX", "COUNT", "10"],
        ["0", "LMPOP", "2", "l1", "l2", "LEFT"],
        ["0", "ZADD", "z2", "1", "a", "2", "b"],
        ["0", "ZMPOP", "2", "z1", "z2", "MIN", "COUNT", "10"],
        ["0", "RPUSH", "l2", "a", "b", "c"],
        ["0", "LMPOP", "2", "l1", "l2", "RIGHT", "COUNT", "2"],
        ["0", "SPOP", "nosuchset"],
        ["0", "SPOP", "nosuchset", "3"],
        ["0", "EVAL", "return redis.call('spop', KEYS[1])", "1", "nosuchset"],
    ],
    "restore": [
        ["0", "RESTORE", "r1", "100000", _DUMP],
        ["0", "RESTORE", "r2", "0", _DUMP, "replace"],
        ["0", "RESTORE", "r2", "1900000000000", _DUMP, "REPLACE", "absttl"],
        ["0", "RESTORE", "r3", "100000", _DUMP, "IDLETIME", "5"],
    ],
    "blocked_pop_served_later": [
        ["1", "SEND", "BLPOP", "l", "0"],
        ["0", "PING"],
        ["0", "RPUSH", "l", "x", "y"],
        ["0", "PING"],
    ],
    "group_reads": [
        ["0", "XADD", "st", "1-1", "f", "v"],
        ["0", "XADD", "st", "1-2", "f", "v"],
        ["0", "XADD", "st", "1-3", "f", "v"],
        ["0", "XGROUP", "CREATE", "st", "g", "0"],
        ["0", "XREADGROUP", "GROUP", "g", "alice", "COUNT", "1", "STREAMS", "st", ">"],
        ["0", "MULTI"],
        ["0", "XREADGROUP", "GROUP", "g", "bob", "COUNT", "1", "STREAMS", "st", ">"],
        ["0", "XREADGROUP", "GROUP", "g", "bob", "STREAMS", "st", ">"],
        ["0", "EXEC"],
        ["0", "XADD", "st", "1-4", "f", "v"],
        ["0", "XADD", "st", "1-5", "f", "v"],
        ["0", "XADD", "st", "1-6", "f", "v"],
        ["0", "XREADGROUP", "GROUP", "g", "dave", "COUNT", "2", "STREAMS", "st", ">"],
        ["0", "XREADGROUP", "GROUP", "g", "alice", "STREAMS", "st", "0"],
        ["0", "XREADGROUP", "GROUP", "g", "carol", "NOACK", "STREAMS", "st", ">"],
        ["0", "SET", "after", "1"],
    ],
    "publish": [
        ["0", "PUBLISH", "ch", "m"],
        ["0", "MULTI"],
        ["0", "PUBLISH", "ch", "m2"],
        ["0", "EXEC"],
        ["0", "MULTI"],
        ["0", "SET", "k", "v"],
        ["0", "PUBLISH", "ch", "m3"],
        ["0", "EXEC"],
        ["0", "SPUBLISH", "sh", "m4"],
        ["0", "EVAL", "redis.call('publish', 'ch', 'm5')", "0"],
        ["0", "SET", "after", "1"],
    ],
    "databases": [
        ["0", "SET", "a", "1"],
        ["0", "SELECT", "3"],
        ["0", "SET", "b", "2"],
        ["0", "MULTI"],
        ["0", "SET", "c", "3"],
        ["0", "SELECT", "4"],
        ["0", "SET", "d", "4"],
        ["0", "EXEC"],
        ["0", "SELECT", "0"],
        ["0", "SET", "e", "5"],
    ],
}


@pytest.mark.redis
@pytest.mark.parametrize("case", sorted(STREAM_CASES))
def test_replicas_receive_the_writes_as_redis_streams_them(pair: Pair, case: str) -> None:
    """The commands streamed to a SYNC client equal redis-server 7.0.15's, one by one."""
    streams = {}
    for name, port in pair.ports.items():
        pair.cleanup()
        replica, _, _ = _attach(port)
        _run(port, STREAM_CASES[case])
        streams[name] = _stream_until_end(replica)
        replica.close()
    assert streams["engine"] == streams["redis"]


@pytest.mark.redis
def test_psync_answers_fullresync_with_the_replication_id_then_the_snapshot(pair: Pair) -> None:
    """PSYNC ? -1 is answered +FULLRESYNC <replid> <offset>, as redis-server does."""
    for port in pair.ports.values():
        info = Conn(port)
        replid = re.search(rb"master_replid:(\w+)", info.call("INFO", "replication"))
        assert replid is not None
        replica, head, rdb = _attach(port, ("PSYNC", "?", "-1"))
        assert re.fullmatch(rb"\+FULLRESYNC " + replid.group(1) + rb" \d+\r\n", head)
        assert rdb.startswith(b"REDIS0010")
        replica.close()
        info.close()


def test_the_snapshot_sent_to_a_replica_loads_into_a_fresh_engine(pair: Pair) -> None:
    """The RDB a SYNC client receives holds the data at the time of the SYNC."""
    pair.cleanup()
    conn = Conn(pair.engine.port)
    conn.call("SET", "k", "v")
    conn.call("RPUSH", "l", "a", "b")
    conn.call("SELECT", "2")
    conn.call("HSET", "h", "f", "1")
    replica, _, rdb = _attach(pair.engine.port)
    engine = Engine()
    stats = load_rdb_bytes(engine, rdb)
    assert stats.keys_loaded == 3
    client = engine.connect()
    assert engine.execute(client, [b"LRANGE", b"l", b"0", b"-1"]) == [b"a", b"b"]
    replica.close()
    conn.close()


def test_a_replica_is_listed_and_gets_no_replies(pair: Pair) -> None:
    """INFO replication, ROLE and CLIENT LIST show the replica; what it sends gets no reply."""
    pair.cleanup()
    replica, _, _ = _attach(pair.engine.port)
    replica.send("REPLCONF", "ACK", "0")
    replica.send("PING")
    conn = Conn(pair.engine.port)
    info = conn.call("INFO", "replication")
    assert b"connected_slaves:1\r\n" in info
    assert b"slave0:ip=127.0.0.1,port=0,state=online" in info
    assert conn.call("ROLE").startswith(b"*3\r\n$6\r\nmaster\r\n")
    assert b" flags=S " in conn.call("CLIENT", "LIST")
    assert replica.nothing_within(0.3)
    replica.close()
    deadline = time.monotonic() + 5
    while b"connected_slaves:0" not in conn.call("INFO", "replication"):
        assert time.monotonic() < deadline, "the replica is still listed after it left"
        time.sleep(0.05)
    conn.close()


def test_replicas_are_pinged_every_repl_ping_replica_period(pair: Pair) -> None:
    """With repl-ping-replica-period 1, a replica gets PING within about a second."""
    replica, _, _ = _attach(pair.engine.port)
    conn = Conn(pair.engine.port)
    conn.call("CONFIG", "SET", "repl-ping-replica-period", "1")
    try:
        assert _read_command(replica) == [b"PING"]
    finally:
        conn.call("CONFIG", "SET", "repl-ping-replica-period", "10")
        replica.close()
        conn.close()


def test_an_engine_without_replicas_has_no_propagator_again() -> None:
    """The feed wraps the propagator while a replica is attached and is gone after it left, so
    an in-memory engine is back on the path that builds no propagated form."""
    engine = Engine()
    replica = engine.connect()
    received: list[bytes] = []
    replica.push = lambda raw: received.append(raw.data)  # type: ignore[union-attr]
    assert engine.propagator is None
    engine.execute(replica, [b"SYNC"])
    assert engine.propagator is not None
    writer = engine.connect()
    engine.execute(writer, [b"SET", b"k", b"v"])
    assert (
        received[-1]
        == b"*2\r\n$6\r\nSELECT\r\n$1\r\n0\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n"
    )
    engine.disconnect(replica)
    assert engine.propagator is None


def test_sync_needs_a_network_connection() -> None:
    """An in-process client (nothing to stream to) is refused with a clear error."""
    engine = Engine()
    reply = engine.execute(engine.connect(), [b"SYNC"])
    assert isinstance(reply, CommandError)
    assert reply.text == msgs.SYNC_NEEDS_CONNECTION
