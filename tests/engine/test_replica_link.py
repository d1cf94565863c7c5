"""The engine's server as a replica of a real master: a redis-server 7.0 (both snapshot forms:
the ``$<length>`` bulk of a disk-based sync and the ``$EOF:<mark>`` of a diskless one), or
another engine. The master's data arrives by full resynchronization, its later writes by the
stream (strings, lists, hashes, sets, sorted sets, streams with consumer groups, expiry), the
replica acknowledges its offset (WAIT on the master counts it), authenticates with
masterauth, survives the master going away (link down, then up again), keeps the data after
REPLICAOF NO ONE, writes what it replicates to its append-only file, and hands the stream on
to a replica of its own."""

from __future__ import annotations

import random
import re
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from streamworker.engine import Engine
from streamworker.engine.aof import open_persistent
from streamworker.engine.protocol import RequestParser
from streamworker.engine.rdb.files import build_rdb
from tests.engine.aof_support import Session, dump_state, random_workload
from tests.support.engine_server import EngineServerProcess, ThreadedServer
from tests.support.proc import run_cli
from tests.support.servers import RedisServer

pytestmark = pytest.mark.redis


def _wait(cond: Callable[[], Any], timeout_s: float = 15.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or cond}")
        time.sleep(0.05)


def _link_up(client: redis.Redis) -> bool:
    return client.info("replication").get("master_link_status") == "up"


def _start_master(tmp: Path, diskless: bool, *extra: str) -> RedisServer:
    args = [
        "--repl-diskless-sync",
        "yes" if diskless else "no",
        "--repl-diskless-sync-delay",
        "0",
        *extra,
    ]
    return RedisServer(tmp, extra_args=args).start()


@pytest.fixture
def replica() -> Iterator[ThreadedServer]:
    server = ThreadedServer()
    yield server
    server.close()


def _follow(replica: ThreadedServer, port: int) -> redis.Redis:
    client = replica.client(decode_responses=True)
    assert client.execute_command("REPLICAOF", "127.0.0.1", port) == "OK"
    _wait(lambda: _link_up(client), what="the link to come up")
    return client


def _fill(m: redis.Redis) -> None:
    m.set("str", "v")
    m.rpush("list", "a", "b", "c")
    m.hset("hash", mapping={"f1": "1", "f2": "2"})
    m.sadd("set", "x", "y")
    m.zadd("zset", {"m1": 1.5, "m2": 2})
    m.xadd("stream", {"f": "v"}, id="1-1")
    m.xadd("stream", {"f": "w"}, id="1-2")
    m.xgroup_create("stream", "g", id="0")
    m.xreadgroup("g", "alice", {"stream": ">"}, count=1)


def _snapshot(c: redis.Redis) -> dict[str, Any]:
    if not c.exists("stream"):
        return {"keys": sorted(c.keys("*"))}
    return {
        "keys": sorted(c.keys("*")),
        "str": c.get("str"),
        "list": c.lrange("list", 0, -1),
        "hash": c.hgetall("hash"),
        "set": sorted(c.smembers("set")),
        "zset": c.zrange("zset", 0, -1, withscores=True),
        "stream": c.xrange("stream"),
        "groups": c.xinfo_groups("stream"),
        "pending": c.xpending_range("stream", "g", "-", "+", 10),
    }


def _same_data(master: redis.Redis, replica: redis.Redis) -> None:
    def equal() -> bool:
        real = _snapshot(master)
        fake = _snapshot(replica)
        for entry in real.get("pending", []) + fake.get("pending", []):
            entry.pop("time_since_delivered", None)
        # XREADGROUP reaches replicas as XCLAIM ... LASTID, which sets the group's last ID
        # but not its read counter: a redis-server replica shows entries-read nil too.
        for group in real.get("groups", []) + fake.get("groups", []):
            group.pop("entries-read", None)
            group.pop("lag", None)
        return real == fake

    _wait(equal, what="the replica's data to match the master's")


@pytest.mark.parametrize("diskless", [False, True], ids=["disk-bulk", "diskless-eof"])
def test_a_full_resync_loads_the_master_s_data(
    tmp_path: Path, replica: ThreadedServer, diskless: bool
) -> None:
    master = _start_master(tmp_path / "m", diskless)
    try:
        m = redis.Redis(port=master.port, decode_responses=True)
        _fill(m)
        r = _follow(replica, master.port)
        _same_data(m, r)
        role = r.execute_command("ROLE")
        assert role[:4] == ["slave", "127.0.0.1", master.port, "connected"]
    finally:
        master.stop()


def test_the_master_s_client_is_listed_with_flag_m(tmp_path: Path, replica: ThreadedServer) -> None:
    master = _start_master(tmp_path / "m", diskless=True)
    try:
        r = _follow(replica, master.port)
        listed = r.client_list()
        masters = [c for c in listed if "M" in c["flags"]]
        assert [c["addr"] for c in masters] == [f"127.0.0.1:{master.port}"]
        typed = r.client_list(_type="master")
        assert [c["addr"] for c in typed] == [f"127.0.0.1:{master.port}"]
        assert all("M" not in c["flags"] for c in r.client_list(_type="normal"))
        hello = r.execute_command("HELLO", "2")
        assert hello[hello.index("role") + 1] == "replica"
    finally:
        master.stop()


def test_client_kill_type_master_drops_the_link_which_comes_back(
    tmp_path: Path, replica: ThreadedServer
) -> None:
    master = _start_master(tmp_path / "m", diskless=True)
    try:
        m = redis.Redis(port=master.port, decode_responses=True)
        r = _follow(replica, master.port)
        assert r.execute_command("CLIENT", "KILL", "TYPE", "master") == 1
        m.set("after-kill", "1")
        _wait(lambda: r.get("after-kill") == "1", what="the link to come back")
        assert _link_up(r)
    finally:
        master.stop()


def test_the_master_s_later_writes_reach_the_replica(
    tmp_path: Path, replica: ThreadedServer
) -> None:
    master = _start_master(tmp_path / "m", diskless=True)
    try:
        m = redis.Redis(port=master.port, decode_responses=True)
        r = _follow(replica, master.port)
        _fill(m)
        m.xack("stream", "g", "1-1")
        m.xreadgroup("g", "bob", {"stream": ">"})
        m.xclaim("stream", "g", "alice", 0, ["1-2"])
        m.lpop("list")
        m.hincrby("hash", "f1", 10)
        redis.Redis(port=master.port, db=3).set("in-db-3", "x")
        _same_data(m, r)
        r3 = replica.client(db=3, decode_responses=True)
        _wait(lambda: r3.get("in-db-3") == "x", what="the write in db 3")
    finally:
        master.stop()


def test_a_key_that_expires_on_the_master_goes_on_the_replica(
    tmp_path: Path, replica: ThreadedServer
) -> None:
    master = _start_master(tmp_path / "m", diskless=True)
    try:
        m = redis.Redis(port=master.port, decode_responses=True)
        r = _follow(replica, master.port)
        m.set("short", "v", px=300)
        _wait(lambda: r.get("short") == "v", what="the key")
        assert 0 < r.pttl("short") <= 300
        _wait(lambda: r.exists("short") == 0, what="the key to expire")
    finally:
        master.stop()


def test_the_replica_acknowledges_its_offset_so_wait_counts_it(
    tmp_path: Path, replica: ThreadedServer
) -> None:
    master = _start_master(tmp_path / "m", diskless=True)
    try:
        m = redis.Redis(port=master.port, decode_responses=True)
        r = _follow(replica, master.port)
        for i in range(50):
            m.set(f"k{i}", i)
        # WAIT sends REPLCONF GETACK; the engine answers with the offset it applied.
        assert m.execute_command("WAIT", 1, 5000) == 1
        offset = m.info("replication")["master_repl_offset"]
        _wait(
            lambda: r.info("replication")["slave_repl_offset"] == offset,
            what="the replica's offset",
        )
        _wait(
            lambda: m.info("replication")["slave0"]["offset"] == offset,
            what="the master to see the replica's acknowledged offset",
        )
        assert m.info("replication")["slave0"]["port"] == replica.port
    finally:
        master.stop()


def test_the_replica_authenticates_with_masterauth(tmp_path: Path, replica: ThreadedServer) -> None:
    master = _start_master(tmp_path / "m", diskless=True)
    try:
        redis.Redis(port=master.port).config_set("requirepass", "s3cret")
        m = redis.Redis(port=master.port, password="s3cret", decode_responses=True)
        m.set("k", "v")
        r = replica.client(decode_responses=True)
        r.execute_command("REPLICAOF", "127.0.0.1", master.port)
        time.sleep(1.0)  # room to try, and fail, without masterauth: the link stays down
        assert r.info("replication")["master_link_status"] == "down"
        r.config_set("masterauth", "s3cret")
        _wait(lambda: _link_up(r), what="the link with masterauth")
        assert r.get("k") == "v"
    finally:
        master.stop()


@pytest.mark.slow
def test_the_link_goes_down_with_the_master_and_comes_back_with_it(
    tmp_path: Path, replica: ThreadedServer
) -> None:
    master = _start_master(tmp_path / "m", diskless=True)
    try:
        m = redis.Redis(port=master.port, decode_responses=True)
        m.set("before", "1")
        r = _follow(replica, master.port)
        r.config_set("replica-serve-stale-data", "no")
        master.stop()
        _wait(lambda: not _link_up(r), what="the link to go down")
        info = r.info("replication")
        assert info["master_link_down_since_seconds"] >= 0
        with pytest.raises(redis.ResponseError, match="Link with MASTER is down"):
            r.get("before")
        master.start()
        m = redis.Redis(port=master.port, decode_responses=True)
        m.set("after", "2")
        _wait(lambda: _link_up(r), timeout_s=20, what="the link to come back")
        assert r.get("after") == "2"
        # The master restarted empty (no persistence): a full resync replaced the data.
        assert r.get("before") is None
    finally:
        master.stop()


def test_replicaof_no_one_keeps_the_data_and_takes_writes(
    tmp_path: Path, replica: ThreadedServer
) -> None:
    master = _start_master(tmp_path / "m", diskless=True)
    try:
        m = redis.Redis(port=master.port, decode_responses=True)
        m.set("k", "v")
        r = _follow(replica, master.port)
        with pytest.raises(redis.ReadOnlyError):
            r.set("mine", "1")
        assert r.execute_command("REPLICAOF", "NO", "ONE") == "OK"
        assert r.get("k") == "v"
        assert r.set("mine", "1")
        m.set("later", "x")
        time.sleep(0.3)  # a write still streamed to a replica would have arrived by now
        assert r.get("later") is None
    finally:
        master.stop()


def test_an_engine_replicates_from_another_engine(replica: ThreadedServer) -> None:
    master = ThreadedServer()
    try:
        m = master.client(decode_responses=True)
        _fill(m)
        r = _follow(replica, master.port)
        m.xadd("stream", {"f": "auto"})
        m.set("short", "v", px=300)
        m.incrbyfloat("float", 1.5)
        _same_data(m, r)
        _wait(lambda: r.get("float") == "1.5", what="INCRBYFLOAT")
        _wait(lambda: r.exists("short") == 0, what="the key to expire")
        _wait(
            lambda: (
                m.info("replication")["slave0"]["offset"]
                == m.info("replication")["master_repl_offset"]
            ),
            what="the master to see the replica's acknowledged offset",
        )
    finally:
        master.close()


def test_the_replica_writes_what_it_replicates_to_its_append_only_file(
    tmp_path: Path,
) -> None:
    master = _start_master(tmp_path / "m", diskless=True)
    data_dir = tmp_path / "engine"
    replica = ThreadedServer.persistent(data_dir)
    try:
        m = redis.Redis(port=master.port, decode_responses=True)
        m.set("synced", "1")
        r = _follow(replica, master.port)
        m.rpush("streamed", "a", "b")
        _wait(lambda: r.llen("streamed") == 2, what="the streamed write")
    finally:
        replica.close()
        master.stop()
    reopened = open_persistent(data_dir, Engine(), appendfsync="always")
    try:
        engine = reopened.engine
        client = engine.connect()
        assert engine.execute(client, [b"GET", b"synced"]) == b"1"
        assert engine.execute(client, [b"LRANGE", b"streamed", b"0", b"-1"]) == [b"a", b"b"]
    finally:
        reopened.close()


def test_a_replica_hands_its_master_s_stream_to_its_own_replica(
    tmp_path: Path, replica: ThreadedServer
) -> None:
    master = _start_master(tmp_path / "m", diskless=True)
    downstream = RedisServer(tmp_path / "d").start()
    try:
        m = redis.Redis(port=master.port, decode_responses=True)
        m.set("first", "1")
        _follow(replica, master.port)
        d = redis.Redis(port=downstream.port, decode_responses=True)
        d.execute_command("REPLICAOF", "127.0.0.1", replica.port)
        _wait(lambda: _link_up(d), what="the downstream link")
        assert d.get("first") == "1"
        m.set("second", "2")
        m.xadd("s", {"f": "v"})
        _wait(lambda: d.get("second") == "2", what="the proxied write")
        _wait(lambda: d.xlen("s") == 1, what="the proxied XADD")
        assert d.info("replication")["master_replid"] == m.info("replication")["master_replid"]
    finally:
        downstream.stop()
        master.stop()


def test_a_full_resync_disconnects_the_replica_s_own_replicas(
    tmp_path: Path, replica: ThreadedServer
) -> None:
    # As Redis 7.0: they stay attached while the new master is not reached, and are
    # disconnected when its data replaces the replica's (they resynchronize from it).
    master = _start_master(tmp_path / "m", diskless=True)
    downstream = RedisServer(tmp_path / "d").start()
    try:
        r = replica.client(decode_responses=True)
        r.set("old", "1")
        d = redis.Redis(port=downstream.port, decode_responses=True)
        d.execute_command("REPLICAOF", "127.0.0.1", replica.port)
        _wait(lambda: _link_up(d), what="the downstream link")
        assert d.get("old") == "1"
        m = redis.Redis(port=master.port, decode_responses=True)
        m.set("new", "2")
        _follow(replica, master.port)
        _wait(lambda: d.get("new") == "2", what="the downstream resync")
        assert d.get("old") is None
        assert d.info("replication")["master_replid"] == m.info("replication")["master_replid"]
    finally:
        downstream.stop()
        master.stop()


class _ScriptedMaster:
    """A master played by the test on a raw socket: it answers the handshake, sends a
    diskless snapshot (after keep-alive newlines) and whatever stream the test writes."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.conn: socket.socket | None = None
        self.parser = RequestParser()
        self.pending: list[list[bytes]] = []

    def next_command(self, timeout_s: float = 10.0) -> list[bytes]:
        assert self.conn is not None
        self.conn.settimeout(timeout_s)
        while not self.pending:
            data = self.conn.recv(65536)
            if not data:
                raise EOFError("the replica closed the link")
            self.pending += self.parser.feed(data)
        return self.pending.pop(0)

    def serve_full_sync(self, offset: int) -> list[list[bytes]]:
        self.listener.settimeout(10)
        self.conn, _ = self.listener.accept()
        seen = []
        while True:
            cmd = self.next_command()
            seen.append(cmd)
            if cmd[0].upper() == b"PSYNC":
                break
            self.conn.sendall(b"+PONG\r\n" if cmd[0].upper() == b"PING" else b"+OK\r\n")
        mark = b"m" * 40
        rdb = build_rdb(Engine())
        self.conn.sendall(b"+FULLRESYNC " + b"ab" * 20 + b" %d\r\n" % offset)
        self.conn.sendall(b"\n\n$EOF:" + mark + b"\r\n" + rdb + mark)
        return seen

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.listener.close()


def _wire(*argv: bytes) -> bytes:
    return b"*%d\r\n" % len(argv) + b"".join(b"$%d\r\n%b\r\n" % (len(a), a) for a in argv)


def test_the_replica_answers_getack_with_the_offset_of_what_it_applied_before_it(
    replica: ThreadedServer, caplog: pytest.LogCaptureFixture
) -> None:
    master = _ScriptedMaster()
    try:
        r = replica.client(decode_responses=True)
        r.execute_command("REPLICAOF", "127.0.0.1", master.port)
        handshake = master.serve_full_sync(offset=100)
        assert [c[:2] for c in handshake] == [
            [b"PING"],
            [b"REPLCONF", b"listening-port"],
            [b"REPLCONF", b"capa"],
            [b"PSYNC", b"?"],
        ]
        assert master.next_command() == [b"REPLCONF", b"ACK", b"100"]
        unknown = _wire(b"NOSUCHCOMMAND", b"x")
        write = _wire(b"SET", b"k", b"v")
        assert master.conn is not None
        master.conn.sendall(unknown + write + _wire(b"REPLCONF", b"GETACK", b"*"))
        while (ack := master.next_command()) == [b"REPLCONF", b"ACK", b"100"]:
            pass  # the periodic ACKs sent before the stream arrived
        assert ack == [b"REPLCONF", b"ACK", b"%d" % (100 + len(unknown) + len(write))]
        assert r.get("k") == "v"
        assert "the master's NOSUCHCOMMAND failed on this replica" in caplog.text
        assert r.execute_command("ROLE")[3:] == ["connected", 100 + len(unknown) + len(write) + 37]
    finally:
        master.close()


def test_engine_serve_replicaof_starts_as_a_replica(tmp_path: Path) -> None:
    master = _start_master(tmp_path / "m", diskless=True)
    replica = EngineServerProcess(
        extra=("--replicaof", "127.0.0.1", str(master.port), "--masterauth", "pw")
    )
    try:
        redis.Redis(port=master.port).config_set("requirepass", "pw")
        m = redis.Redis(port=master.port, password="pw", decode_responses=True)
        m.set("k", "v")
        replica.start()
        r = replica.client(decode_responses=True)
        _wait(lambda: _link_up(r), what="the link to come up")
        assert r.get("k") == "v"
        assert r.config_get("replicaof") == {"replicaof": f"127.0.0.1 {master.port}"}
    finally:
        replica.stop()
        master.stop()


def test_engine_serve_refuses_a_bad_replicaof_port_in_one_line() -> None:
    proc = run_cli("engine", "serve", "--port", "0", "--replicaof", "127.0.0.1", "99999")
    assert proc.returncode == 2
    assert "--replicaof 127.0.0.1 99999: the port must be a number in 0..65535" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_full_resync_replaces_the_replica_s_function_libraries(
    tmp_path: Path, replica: ThreadedServer
) -> None:
    master = _start_master(tmp_path / "m", diskless=True)
    try:
        r = replica.client(decode_responses=True)
        r.function_load("#!lua name=mine\nredis.register_function('f', function() return 1 end)")
        m = redis.Redis(port=master.port, decode_responses=True)
        m.function_load("#!lua name=theirs\nredis.register_function('g', function() return 2 end)")
        _follow(replica, master.port)
        names = [
            dict(zip(lib[::2], lib[1::2], strict=True))["library_name"] for lib in r.function_list()
        ]
        assert names == ["theirs"]
        # A function without the no-writes flag is a write: a read-only replica refuses it.
        with pytest.raises(redis.ReadOnlyError):
            r.fcall("g", 0)
    finally:
        master.stop()


def _without_delivery_clocks(state: dict[Any, Any]) -> dict[Any, Any]:
    # What Redis 7.0.15 does not stream either: consumers' seen-time, a group's entries-read
    # and lag (a group read reaches replicas as XCLAIM ... LASTID), and the delivery time and
    # count a re-read of pending entries (XREADGROUP ... 0) moves on the master only.
    out = {}
    for key, (kind, expiry, value) in state.items():
        if kind == "stream":
            value = re.sub(rb"seen-time\r\n:\d+", b"seen-time\r\n:T", value)
            value = re.sub(rb"(entries-read|lag)\r\n(:\d+|_)", rb"\1\r\n?", value)
            value = re.sub(rb":\d{13}\r\n:\d+\r\n", b":T\r\n:N\r\n", value)
        out[key] = (kind, expiry, value)
    return out


@pytest.mark.parametrize("seed", range(2))
def test_random_workloads_reach_an_engine_replica_exactly(seed: int) -> None:
    # Every write the engine propagates in a special form (streams, groups, claims, float
    # increments, SPOP, expiries, transactions), applied by an engine replica: both end
    # with the same data, stream internals included.
    master = ThreadedServer()
    replica = ThreadedServer()
    try:
        r = _follow(replica, master.port)
        random_workload(Session(master.engine), random.Random(seed), 400)
        m = master.client()
        _wait(
            lambda: (
                r.info("replication")["slave_repl_offset"]
                == m.info("replication")["master_repl_offset"]
            ),
            what="the replica to apply the whole stream",
        )
        with master.engine.lock:
            expected = _without_delivery_clocks(dump_state(master.engine))
        with replica.engine.lock:
            got = _without_delivery_clocks(dump_state(replica.engine))
        assert got == expected
    finally:
        replica.close()
        master.close()


class _RemoteSession:
    """random_workload's session over redis-py, replies unparsed (lists and bytes, errors
    returned, not raised), as the engine's Session gives them."""

    def __init__(self, port: int) -> None:
        self.client = redis.Redis(port=port)
        self.client.response_callbacks.clear()

    def __call__(self, *args: Any) -> Any:
        try:
            return self.client.execute_command(*args)
        except redis.ResponseError as exc:
            return exc


def _dump_remote(port: int) -> dict[tuple[int, bytes], Any]:
    """Every key of every database through redis-py: type, absolute expiry, contents
    (streams as XINFO STREAM FULL, consumers' seen-time left out: each replica stamps its
    own clock when it applies a claim)."""
    out: dict[tuple[int, bytes], Any] = {}
    for db in range(16):
        c = redis.Redis(port=port, db=db)
        c.response_callbacks.clear()
        for key in sorted(c.execute_command("KEYS", "*")):
            kind = c.execute_command("TYPE", key)
            expiry = c.execute_command("PEXPIRETIME", key)
            commands = {
                b"string": ("GET", key),
                b"hash": ("HGETALL", key),
                b"set": ("SMEMBERS", key),
                b"zset": ("ZRANGE", key, 0, -1, "WITHSCORES"),
                b"list": ("LRANGE", key, 0, -1),
                b"stream": ("XINFO", "STREAM", key, "FULL", "COUNT", 0),
            }
            value = c.execute_command(*commands[kind])
            if kind in (b"hash", b"set"):
                value = sorted(value)
            if kind == b"stream":
                value = re.sub(rb"seen-time'(:|,) \d+", b"seen-time': T", repr(value).encode())
                value = re.sub(rb"b'radix-tree-(keys|nodes)'(:|,) \d+, ", b"", value)
            out[(db, key)] = (kind, expiry, value)
    return out


@pytest.mark.parametrize("seed", range(2))
def test_random_workloads_leave_an_engine_replica_as_a_redis_replica(
    tmp_path: Path, replica: ThreadedServer, seed: int
) -> None:
    # The same redis-server master, a redis-server replica and an engine replica: after a
    # random workload (streams and groups first of all), both replicas hold the same data.
    master = _start_master(tmp_path / "m", diskless=True)
    twin = RedisServer(tmp_path / "r").start()
    try:
        r = _follow(replica, master.port)
        t = redis.Redis(port=twin.port, decode_responses=True)
        t.execute_command("REPLICAOF", "127.0.0.1", master.port)
        _wait(lambda: _link_up(t), what="the redis-server replica's link")
        random_workload(_RemoteSession(master.port), random.Random(seed), 300)  # type: ignore[arg-type]
        m = redis.Redis(port=master.port)
        offset = m.info("replication")["master_repl_offset"]
        _wait(
            lambda: (
                r.info("replication")["slave_repl_offset"] == offset
                and t.info("replication")["slave_repl_offset"] == offset
            ),
            what="both replicas to apply the whole stream",
        )
        assert _dump_remote(replica.port) == _dump_remote(twin.port)
    finally:
        twin.stop()
        master.stop()


def test_wait_on_an_engine_master_counts_the_replicas_that_acknowledged(
    tmp_path: Path, replica: ThreadedServer
) -> None:
    # One engine replica and one redis-server replica of an engine master: WAIT asks them
    # for an ACK and returns as soon as enough acknowledged this client's writes.
    master = ThreadedServer()
    twin = RedisServer(tmp_path / "r").start()
    try:
        m = master.client(decode_responses=True)
        r = _follow(replica, master.port)
        t = redis.Redis(port=twin.port, decode_responses=True)
        t.execute_command("REPLICAOF", "127.0.0.1", master.port)
        _wait(lambda: _link_up(t), what="the redis-server replica's link")
        m.set("k", "v")
        started = time.monotonic()
        assert m.execute_command("WAIT", 2, 5000) == 2
        assert time.monotonic() - started < 2.0
        assert r.get("k") == "v"
        assert t.get("k") == "v"
        # Asking for more replicas than there are: the count once the timeout passes.
        assert m.execute_command("WAIT", 3, 300) == 2
        assert m.execute_command("WAIT", 0, 0) == 2
    finally:
        twin.stop()
        master.close()
