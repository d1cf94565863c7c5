"""The engine as a replica, the state side: REPLICAOF / SLAVEOF and REPLICAOF NO ONE, ROLE,
INFO replication, READONLY (plain commands, MULTI/EXEC, scripts with and without flags),
MASTERDOWN with ``replica-serve-stale-data no``, EXECABORT when the state changed after
queueing, and what a demotion inside EXEC sends to the replicas already attached.

Side by side with a redis-server 7.0 of the module's own (it becomes a replica too), over
real sockets, same reply bytes in RESP2 and RESP3. The masters named here never answer
(port 1 on loopback, an unresolvable host, port 0), so the link stays down on both sides;
the link itself is tested in test_replica_link.py."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamworker.engine import Engine, msgs
from streamworker.engine.aof import iter_records
from streamworker.engine.replies import OK
from tests.engine.admin_support import Conn, Pair, pair
from tests.engine.conftest import read_raw_reply
from tests.support.engine_server import ThreadedServer

pytestmark = pytest.mark.redis

__all__ = ["pair"]

# Nothing listens there: the link stays down (connection refused) on both servers.
DEAD_MASTER = ("127.0.0.1", "1")


@pytest.fixture(autouse=True)
def _clean(pair: Pair) -> Iterator[None]:
    yield
    for port in pair.ports.values():
        conn = Conn(port)
        conn.call("REPLICAOF", "NO", "ONE")
        conn.call("CONFIG", "SET", "replica-serve-stale-data", "yes")
        conn.call("CONFIG", "SET", "replica-read-only", "yes")
        conn.call("CONFIG", "SET", "min-replicas-to-write", "0")
        conn.call("CONFIG", "SET", "min-replicas-max-lag", "10")
        conn.call("CONFIG", "SET", "maxmemory", "0")
        conn.call("CONFIG", "SET", "replica-ignore-maxmemory", "yes")
        conn.call("SCRIPT", "FLUSH")
        conn.call("FUNCTION", "FLUSH")
        conn.close()
    pair.cleanup()


def _err(text: str) -> bytes:
    return b"-" + text.encode() + b"\r\n"


def _run(pair: Pair, lines: list[list[str]], resp: int = 2) -> dict[str, list[bytes]]:
    """Each side's replies to ``lines``, sent one by one on one fresh connection."""
    out: dict[str, list[bytes]] = {}
    for name, conn in pair.conns(resp).items():
        out[name] = [conn.call(*line) for line in lines]
        conn.close()
    return out


def _same(pair: Pair, lines: list[list[str]], resp: int = 2) -> list[bytes]:
    replies = _run(pair, lines, resp)
    assert replies["engine"] == replies["redis"]
    return replies["engine"]


def _info_fields(raw: bytes) -> dict[str, str]:
    text = raw.split(b"\r\n", 1)[1].decode()
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


# --- REPLICAOF and ROLE ----------------------------------------------------------------------


@pytest.mark.parametrize("resp", [2, 3])
@pytest.mark.parametrize("verb", ["REPLICAOF", "SLAVEOF"])
def test_replicaof_answers_ok_then_already_connected_for_the_same_master(
    pair: Pair, resp: int, verb: str
) -> None:
    replies = _same(
        pair,
        [
            [verb, *DEAD_MASTER],
            [verb, *DEAD_MASTER],
            [verb, "127.0.0.1", "2"],
            [verb, "NO", "ONE"],
            [verb, "no", "one"],
        ],
        resp,
    )
    assert replies[1] == b"+" + msgs.ALREADY_CONNECTED_TO_MASTER.encode() + b"\r\n"


def test_config_get_replicaof_shows_the_master_and_cannot_be_set(pair: Pair) -> None:
    _same(
        pair,
        [
            ["CONFIG", "GET", "replicaof"],
            ["REPLICAOF", *DEAD_MASTER],
            ["CONFIG", "GET", "replicaof"],
            ["CONFIG", "GET", "slaveof"],
            ["CONFIG", "SET", "replicaof", "127.0.0.1 2"],
            ["REPLICAOF", "NO", "ONE"],
            ["CONFIG", "GET", "slaveof"],
        ],
    )


def test_hello_and_client_list_types_of_a_replica(pair: Pair) -> None:
    for name, conn in pair.conns().items():
        conn.call("REPLICAOF", *DEAD_MASTER)
        hello = conn.call("HELLO", "2")
        assert b"$4\r\nrole\r\n$7\r\nreplica\r\n" in hello, name
        # The link is down: no master's client to list.
        assert conn.call("CLIENT", "LIST", "TYPE", "master") == b"$0\r\n\r\n", name
        assert conn.call("CLIENT", "KILL", "TYPE", "master") == b":0\r\n", name
        conn.call("REPLICAOF", "NO", "ONE")
        assert b"$4\r\nrole\r\n$6\r\nmaster\r\n" in conn.call("HELLO", "2"), name
        conn.close()


def test_wait_is_refused_on_a_replica(pair: Pair) -> None:
    replies = _same(
        pair,
        [
            ["WAIT", "0", "0"],
            ["REPLICAOF", *DEAD_MASTER],
            ["WAIT", "0", "0"],
            ["WAIT", "a", "0"],
            ["REPLICAOF", "NO", "ONE"],
            ["WAIT", "0", "0"],
        ],
    )
    assert replies[2] == _err(msgs.WAIT_ON_REPLICA)


def test_replicaof_compares_the_master_host_without_case(pair: Pair) -> None:
    _same(pair, [["REPLICAOF", "LOCALHOST", "1"], ["REPLICAOF", "localhost", "1"]])


@pytest.mark.parametrize("resp", [2, 3])
def test_role_of_a_replica_whose_link_is_down(pair: Pair, resp: int) -> None:
    """The link state is "connect" between attempts and "connecting" while one runs; which of
    the two a ROLE right after REPLICAOF sees depends on when redis-server's replication cron
    fires, so the two sides are compared with the state read as either."""
    replies = _run(pair, [["REPLICAOF", *DEAD_MASTER], ["ROLE"]], resp)
    shown = {
        side: [r.replace(b"$10\r\nconnecting\r\n", b"$7\r\nconnect\r\n") for r in rs]
        for side, rs in replies.items()
    }
    assert shown["engine"] == shown["redis"]
    assert b"slave" in shown["engine"][1]
    assert b"$7\r\nconnect\r\n" in shown["engine"][1]


@pytest.mark.parametrize(
    "line",
    [
        ["REPLICAOF", "127.0.0.1", "65536"],
        ["REPLICAOF", "127.0.0.1", "-1"],
        ["REPLICAOF", "127.0.0.1", "x"],
        ["REPLICAOF", "no", "two"],
    ],
)
def test_replicaof_with_a_bad_port_stays_a_master(pair: Pair, line: list[str]) -> None:
    _same(pair, [line, ["ROLE"]])


def test_replicaof_towards_an_unresolvable_host_or_port_0_answers_at_once(pair: Pair) -> None:
    for line in (["REPLICAOF", "localhsot", "0"], ["REPLICAOF", "no-such-host.invalid", "6379"]):
        for name, conn in pair.conns().items():
            started = time.monotonic()
            assert conn.call(*line) == b"+OK\r\n", name
            assert time.monotonic() - started < 1.0, name
            assert conn.call("PING") == b"+PONG\r\n"
            conn.call("REPLICAOF", "NO", "ONE")
            conn.close()


# --- INFO replication --------------------------------------------------------------------------


def test_info_replication_of_a_replica_lists_redis_s_fields_with_its_values(pair: Pair) -> None:
    infos = {}
    for name, conn in pair.conns().items():
        conn.call("REPLICAOF", *DEAD_MASTER)
        infos[name] = _info_fields(conn.call("INFO", "replication"))
        conn.close()
    real, fake = infos["redis"], infos["engine"]
    assert list(fake) == list(real)
    for field in ("master_replid", "master_replid2"):
        assert re.fullmatch("[0-9a-f]{40}", fake[field])
        real.pop(field), fake.pop(field)
    assert fake == real
    assert fake["role"] == "slave"
    assert fake["master_link_status"] == "down"


def test_replicaof_no_one_starts_a_new_history_and_keeps_the_old_id(pair: Pair) -> None:
    for name, conn in pair.conns().items():
        conn.call("SET", "k", "v")
        conn.call("REPLICAOF", *DEAD_MASTER)
        before = _info_fields(conn.call("INFO", "replication"))
        conn.call("REPLICAOF", "NO", "ONE")
        after = _info_fields(conn.call("INFO", "replication"))
        assert after["role"] == "master", name
        assert after["master_replid2"] == before["master_replid"], name
        assert after["master_replid"] != before["master_replid"], name
        assert after["second_repl_offset"] == str(int(before["master_repl_offset"]) + 1), name
        assert conn.call("GET", "k") == b"$1\r\nv\r\n", name
        conn.close()


# --- READONLY ------------------------------------------------------------------------------


READONLY_LINES = [
    ["SET", "a", "1"],
    ["GET", "a"],
    ["INCR", "n"],
    ["XADD", "s", "*", "f", "v"],
    ["DEL", "a"],
    ["PUBLISH", "ch", "m"],
    ["EVAL", "return redis.call('set','a','b')", "0"],
    ["EVAL", "return redis.pcall('set','a','b')", "0"],
    ["EVAL", "redis.call('get','a') return redis.call('set','a','b')", "0"],
    ["EVAL", "#!lua\nreturn redis.call('get','a')", "0"],
    ["EVAL", "#!lua flags=no-writes\nreturn redis.call('set','a','b')", "0"],
    ["EVAL", "#!lua flags=no-writes\nreturn redis.call('get','a')", "0"],
    ["EVAL_RO", "return redis.call('set','a','b')", "0"],
    ["EVAL", "return 1", "0"],
    ["CONFIG", "SET", "replica-read-only", "no"],
    ["SET", "a", "2"],
    ["EVAL", "#!lua\nreturn redis.call('set','a','3')", "0"],
    ["GET", "a"],
]


@pytest.mark.parametrize("resp", [2, 3])
def test_a_read_only_replica_refuses_writes_as_redis(pair: Pair, resp: int) -> None:
    replies = _same(pair, [["REPLICAOF", *DEAD_MASTER], *READONLY_LINES], resp)
    assert replies[1] == _err(msgs.READONLY_REPLICA)


def test_functions_on_a_read_only_replica(pair: Pair) -> None:
    lib = (
        "#!lua name=lib\n"
        "redis.register_function('w', function() return redis.call('set','a','b') end)\n"
        "redis.register_function{function_name='r', callback=function() "
        "return redis.call('get','a') end, flags={'no-writes'}}\n"
    )
    _same(
        pair,
        [
            ["FUNCTION", "LOAD", lib],
            ["REPLICAOF", *DEAD_MASTER],
            ["FCALL", "w", "0"],
            ["FCALL", "r", "0"],
            ["FCALL_RO", "r", "0"],
        ],
    )


def test_writes_queued_on_a_replica_abort_the_transaction(pair: Pair) -> None:
    replies = _same(
        pair,
        [
            ["REPLICAOF", *DEAD_MASTER],
            ["MULTI"],
            ["GET", "a"],
            ["SET", "a", "1"],
            ["EXEC"],
            ["GET", "a"],
        ],
    )
    assert replies[3] == _err(msgs.READONLY_REPLICA)
    assert replies[4] == _err(msgs.EXECABORT)


def test_exec_of_writes_queued_before_the_demotion_is_aborted_readonly(pair: Pair) -> None:
    for name, port in pair.ports.items():
        conn, other = Conn(port), Conn(port)
        assert conn.call("MULTI") == b"+OK\r\n"
        assert conn.call("INCR", "n") == b"+QUEUED\r\n"
        assert other.call("REPLICAOF", *DEAD_MASTER) == b"+OK\r\n"
        assert conn.call("EXEC") == _err(msgs.execabort_because(msgs.READONLY_REPLICA)), name
        assert conn.call("GET", "n") == b"$-1\r\n", name
        conn.close()
        other.close()


def test_scripts_queued_before_the_demotion_are_judged_at_exec(pair: Pair) -> None:
    replies: dict[str, list[bytes]] = {}
    for name, port in pair.ports.items():
        declared, plain, other = Conn(port), Conn(port), Conn(port)
        declared.call("MULTI")
        plain.call("MULTI")
        declared.call("EVAL", "#!lua\nreturn 1", "0")
        plain.call("EVAL", "redis.call('set',KEYS[1],1) return 1", "1", "x")
        other.call("REPLICAOF", *DEAD_MASTER)
        # A declared script is a write for EXEC; a plain one fails inside, at its write.
        replies[name] = [declared.call("EXEC"), plain.call("EXEC"), other.call("GET", "x")]
        for conn in (declared, plain, other):
            conn.close()
        Conn(port).call("REPLICAOF", "NO", "ONE")
    assert replies["engine"] == replies["redis"]
    assert replies["engine"][0] == _err(msgs.execabort_because(msgs.READONLY_REPLICA))


# --- MASTERDOWN (replica-serve-stale-data no) --------------------------------------------------

STALE_LINES = [
    ["CONFIG", "SET", "replica-serve-stale-data", "no"],
    ["GET", "a"],
    ["PING"],
    ["SET", "a", "1"],
    ["ECHO", "x"],
    ["ROLE"],
    ["CONFIG", "GET", "replica-serve-stale-data"],
    ["EVAL", "return 1", "0"],
    ["EVAL", "#!lua flags=no-writes\nreturn redis.call('get','a')", "0"],
    ["EVAL", "#!lua flags=no-writes,allow-stale\nreturn redis.call('get','a')", "0"],
    ["EVAL", "#!lua flags=no-writes,allow-stale\nreturn redis.call('ping')", "0"],
    ["EVAL", "#!lua flags=allow-stale,no-writes\nreturn redis.call('echo','foobar')", "0"],
    ["SCRIPT", "LOAD", "#!lua flags=allow-stale,no-writes\nreturn redis.call('echo','x')"],
    ["EVALSHA", "5e9e0e9e18e16b0974050032b0c6b205e2d91d62", "0"],
    ["MULTI"],
    ["GET", "a"],
    ["EXEC"],
    ["MULTI"],
    ["EXEC"],
    ["CONFIG", "SET", "replica-serve-stale-data", "yes"],
    ["GET", "a"],
]


@pytest.mark.parametrize("resp", [2, 3])
def test_a_stale_replica_answers_masterdown_to_commands_without_the_stale_flag(
    pair: Pair, resp: int
) -> None:
    replies = _same(pair, [["REPLICAOF", *DEAD_MASTER], *STALE_LINES], resp)
    assert replies[2] == _err(msgs.MASTERDOWN)


def test_exec_aborts_when_the_replica_became_stale_after_queueing(pair: Pair) -> None:
    for name, port in pair.ports.items():
        conn, other = Conn(port), Conn(port)
        conn.call("CONFIG", "SET", "replica-serve-stale-data", "no")
        for queued in (["GET", "xx"], ["PING"]):
            assert conn.call("MULTI") == b"+OK\r\n"
            assert conn.call(*queued) == b"+QUEUED\r\n"
            other.call("REPLICAOF", "localhsot", "0")
            reply = conn.call("EXEC")
            assert reply == _err(msgs.execabort_because(msgs.MASTERDOWN)), name
            other.call("REPLICAOF", "NO", "ONE")
        assert conn.call("MULTI") == b"+OK\r\n"
        assert conn.call("GET", "xx") == b"+QUEUED\r\n"
        assert conn.call("EXEC") == b"*1\r\n$-1\r\n", name
        conn.close()
        other.close()


def test_a_replica_ignores_maxmemory_unless_told_otherwise(pair: Pair) -> None:
    replies = _same(
        pair,
        [
            ["CONFIG", "GET", "replica-ignore-maxmemory"],
            ["CONFIG", "GET", "slave-ignore-maxmemory"],
            ["SET", "a", "1"],
            ["REPLICAOF", *DEAD_MASTER],
            ["CONFIG", "SET", "maxmemory", "1"],
            ["GET", "a"],
            ["EVAL", "return 1", "0"],
            ["CONFIG", "SET", "replica-ignore-maxmemory", "no"],
            ["GET", "a"],
            ["CONFIG", "SET", "replica-ignore-maxmemory", "yes"],
            ["CONFIG", "SET", "maxmemory", "0"],
            ["REPLICAOF", "NO", "ONE"],
        ],
    )
    assert replies[5] == b"$1\r\n1\r\n"


# --- NOREPLICAS (min-replicas-to-write) -------------------------------------------------------

NOREPLICAS_LINES = [
    ["CONFIG", "SET", "min-replicas-to-write", "1"],
    ["SET", "a", "1"],
    ["GET", "a"],
    ["PUBLISH", "ch", "m"],
    ["EVAL", "return redis.call('set','a','b')", "0"],
    ["EVAL", "return redis.call('get','a')", "0"],
    ["EVAL", "#!lua\nreturn redis.call('get','a')", "0"],
    ["EVAL", "#!lua flags=no-writes\nreturn redis.call('get','a')", "0"],
    ["MULTI"],
    ["INCR", "n"],
    ["EXEC"],
    ["CONFIG", "SET", "min-replicas-max-lag", "0"],
    ["SET", "a", "2"],
    ["CONFIG", "SET", "min-replicas-max-lag", "10"],
    ["CONFIG", "SET", "min-replicas-to-write", "0"],
    ["SET", "a", "3"],
]


@pytest.mark.parametrize("resp", [2, 3])
def test_a_master_short_of_good_replicas_answers_noreplicas_to_writes(
    pair: Pair, resp: int
) -> None:
    replies = _same(pair, NOREPLICAS_LINES, resp)
    assert replies[1] == _err(msgs.NOREPLICAS)


def test_info_counts_the_good_replicas_when_min_replicas_to_write_is_set(pair: Pair) -> None:
    for name, conn in pair.conns().items():
        conn.call("CONFIG", "SET", "min-replicas-to-write", "2")
        info = _info_fields(conn.call("INFO", "replication"))
        assert info["min_slaves_good_slaves"] == "0", name
        conn.close()


def test_exec_aborts_when_min_replicas_to_write_was_set_after_queueing(pair: Pair) -> None:
    for name, port in pair.ports.items():
        conn, other = Conn(port), Conn(port)
        conn.call("SET", "xx", "1")
        assert conn.call("MULTI") == b"+OK\r\n"
        assert conn.call("INCR", "xx") == b"+QUEUED\r\n"
        other.call("CONFIG", "SET", "min-replicas-to-write", "2")
        assert conn.call("EXEC") == _err(msgs.execabort_because(msgs.NOREPLICAS)), name
        assert conn.call("GET", "xx") == b"$1\r\n1\r\n", name
        conn.close()
        other.close()


# --- demotion inside a transaction: what the attached replicas get ---------------------------


def _attach_replica(port: int) -> Conn:
    # A SYNC client (the Tcl suite's attach_to_replication_stream): the RDB bulk comes first.
    conn = Conn(port)
    conn.send("SYNC")
    head = b""
    while not head.endswith(b"\r\n") or head.strip() == b"":
        head += conn.sock.recv(1)
    size = int(head.strip()[1:])
    body = b""
    while len(body) < size:
        body += conn.sock.recv(size - len(body))
    return conn


def test_a_demotion_inside_exec_sends_nothing_of_the_transaction_to_replicas(
    pair: Pair,
) -> None:
    for name, port in pair.ports.items():
        repl = _attach_replica(port)
        conn = Conn(port)
        conn.call("SET", "foo", "bar")
        conn.call("MULTI")
        conn.call("SET", "foo2", "bar")
        conn.call("REPLICAOF", "localhost", "9999")
        conn.call("SET", "foo3", "bar")
        assert conn.call("EXEC") == b"*3\r\n+OK\r\n+OK\r\n+OK\r\n", name
        assert conn.call("SET", "foo4", "bar") == _err(msgs.READONLY_REPLICA), name
        assert conn.call("GET", "foo3") == b"$3\r\nbar\r\n", name
        stream = []
        repl.sock.settimeout(1.0)
        while True:
            try:
                stream.append(read_raw_reply(repl.sock, repl.buf))
            except TimeoutError:
                break
        words = [r.split(b"\r\n")[2].lower() for r in stream]
        assert [w for w in words if w != b"ping"] == [b"select", b"set"], name
        conn.call("REPLICAOF", "NO", "ONE")
        # A master again: its replicas are disconnected (their history changed).
        assert repl.closed_by_server(), name
        conn.close()


def test_becoming_a_replica_keeps_the_attached_replicas_until_the_new_master_s_data(
    pair: Pair,
) -> None:
    for name, port in pair.ports.items():
        repl = _attach_replica(port)
        conn = Conn(port)
        conn.call("REPLICAOF", *DEAD_MASTER)
        info = _info_fields(conn.call("INFO", "replication"))
        assert info["connected_slaves"] == "1", name
        conn.call("REPLICAOF", "NO", "ONE")
        assert repl.closed_by_server(), name
        conn.close()


def test_a_replica_connection_may_not_run_replicaof(pair: Pair) -> None:
    for name, port in pair.ports.items():
        repl = _attach_replica(port)
        repl.send("REPLICAOF", *DEAD_MASTER)
        # A replica gets no replies: the refusal leaves it a master.
        conn = Conn(port)
        time.sleep(0.2)  # a replica connection gets no reply to wait for: time to act on it
        assert conn.call("ROLE").startswith(b"*3\r\n$6\r\nmaster"), name
        repl.close()
        conn.close()


# --- without a server ----------------------------------------------------------------------


def test_in_process_engine_refuses_replicaof_host_port_clearly() -> None:
    engine = Engine()
    client = engine.connect()
    reply = engine.execute(client, [b"REPLICAOF", b"127.0.0.1", b"6379"])
    assert str(reply) == msgs.ENGINE_REPLICA_NEEDS_SERVER
    assert engine.execute(client, [b"ROLE"]) == [b"master", 0, []]
    # Still a writable master.
    assert engine.execute(client, [b"SET", b"k", b"v"]) == OK
    assert engine.execute(client, [b"REPLICAOF", b"NO", b"ONE"]) == OK


def test_a_demotion_inside_exec_keeps_the_whole_transaction_in_the_file(
    tmp_path: Path,
) -> None:
    # Redis 7.0 feeds its append-only file the transaction whole (its replicas get none of
    # it, see above): replaying the file gives the data the server had.
    server = ThreadedServer.persistent(tmp_path / "data")
    try:
        attached = _attach_replica(server.port)
        conn = Conn(server.port)
        conn.call("MULTI")
        conn.call("SET", "foo2", "bar")
        conn.call("REPLICAOF", "localhost", "9999")
        conn.call("SET", "foo3", "bar")
        assert conn.call("EXEC") == b"*3\r\n+OK\r\n+OK\r\n+OK\r\n"
        conn.call("REPLICAOF", "NO", "ONE")
        conn.close()
        attached.close()
        assert server.aof is not None
        path = server.aof.path
    finally:
        server.close()
    logged = [
        item for _, _, item in iter_records(path.read_bytes(), path) if isinstance(item, list)
    ]
    writes = [r[:2] for r in logged if r[0] in (b"SET", b"MULTI", b"EXEC")]
    assert writes == [[b"MULTI"], [b"SET", b"foo2"], [b"SET", b"foo3"], [b"EXEC"]]


@pytest.mark.parametrize(
    "blocking",
    [["BLPOP", "list", "0"], ["XREAD", "BLOCK", "0", "STREAMS", "s", "$"], ["WAIT", "1", "0"]],
)
def test_clients_blocked_when_the_master_becomes_a_replica_are_unblocked_and_closed(
    pair: Pair, blocking: list[str]
) -> None:
    answers = {}
    for name, port in pair.ports.items():
        waiter, admin = Conn(port), Conn(port)
        waiter.send(*blocking)
        assert waiter.nothing_within(0.2), name
        admin.call("REPLICAOF", *DEAD_MASTER)
        answers[name] = waiter.read()
        assert waiter.closed_by_server(), name
        admin.call("REPLICAOF", "NO", "ONE")
        waiter.close()
        admin.close()
    assert answers["engine"] == answers["redis"]
    assert answers["engine"].startswith(b"-UNBLOCKED ")
