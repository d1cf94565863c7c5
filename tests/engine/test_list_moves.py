"""LREM, LMOVE, RPOPLPUSH, BLMOVE and BRPOPLPUSH side by side with redis-server 7.0.15 (RESP2
and RESP3), with the edge cases of Redis's ``unit/type/list.tcl``: counts from both ends and
int64 extremes, the same list as source and destination (rotation), which type error wins,
BLMOVE's timeout parsing and its null *bulk* inside MULTI (its timeout reply is a null array).

Then blocking: a BLMOVE served by a later push, first-come-first-served with BLPOP clients, a
destination of the wrong type that leaves the client blocked, a chain of BLMOVEs, WATCH, the
append-only file (the move is logged as LMOVE / RPOPLPUSH, never as the blocking form) and a
wake-up over TCP compared with redis-server."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

from streamworker.engine import Engine, msgs
from streamworker.engine.aof import iter_records, open_persistent
from streamworker.engine.context import Blocked
from streamworker.engine.errors import CommandError
from streamworker.engine.replies import NULL_ARRAY
from tests.engine.aof_support import Session, dump_state
from tests.engine.conftest import pack, read_raw_reply
from tests.engine.differential.backends import EngineBackend, RedisBackend
from tests.engine.differential.scripts import mismatches
from tests.support.engine_server import ThreadedServer
from tests.support.servers import RedisServer
from tests.support.waiting import wait_until

CASES = {
    "lrem": [
        "RPUSH l a b a c a d a",
        "SET s x",
        "LREM l 2 a",
        "LRANGE l 0 -1",
        "LREM l -1 a",
        "LRANGE l 0 -1",
        "LREM l 0 a",
        "LRANGE l 0 -1",
        "LREM l 0 zz",
        "RPUSH m x y x y x y",
        "LREM m -2 x",
        "LRANGE m 0 -1",
        "LREM m 9223372036854775807 y",
        "LRANGE m 0 -1",
        "RPUSH n q q q",
        "LREM n -9223372036854775808 q",
        "EXISTS n",
        "RPUSH n q q",
        "LREM n 0 q",
        "EXISTS n",
        "LREM l 9223372036854775808 a",
        "LREM l x a",
        "LREM l 1.5 a",
        "LREM nokey 1 a",
        "LREM nokey x a",
        "LREM s 1 a",
        "LREM s x a",
        "LREM l 1",
        "LREM l 1 a b",
    ],
    "lmove": [
        "RPUSH l a b c d",
        "SET s x",
        "LMOVE l d LEFT RIGHT",
        "LMOVE l d RIGHT LEFT",
        "LMOVE l d left left",
        "LMOVE l d Right Right",
        "LRANGE d 0 -1",
        "EXISTS l",
        "LMOVE l d LEFT RIGHT",
        "LMOVE d d LEFT RIGHT",
        "LMOVE d d RIGHT LEFT",
        "LMOVE d d LEFT LEFT",
        "LMOVE d d RIGHT RIGHT",
        "LRANGE d 0 -1",
        "RPUSH one x",
        "LMOVE one one LEFT RIGHT",
        "LRANGE one 0 -1",
        "LMOVE d s LEFT RIGHT",
        "LMOVE s d LEFT RIGHT",
        "LMOVE nokey s LEFT RIGHT",
        "LMOVE s nokey LEFT RIGHT",
        "LMOVE d x MIDDLE RIGHT",
        "LMOVE d x LEFT MIDDLE",
        "LMOVE nokey x MIDDLE RIGHT",
        "LMOVE s x LEFT MIDDLE",
        "LMOVE d x LEFT",
        "LRANGE d 0 -1",
        "RPOPLPUSH d e",
        "RPOPLPUSH d e",
        "RPOPLPUSH e e",
        "LRANGE e 0 -1",
        "RPOPLPUSH nokey e",
        "RPOPLPUSH e s",
        "RPOPLPUSH s e",
        "RPOPLPUSH nokey s",
        "RPOPLPUSH d",
        "RPOPLPUSH d e f",
        "RPUSH t 1",
        "EXPIRE t 100",
        "RPUSH u 2",
        "EXPIRE u 100",
        "LMOVE t u LEFT LEFT",
        "TTL u",
        "EXISTS t",
        "COMMAND GETKEYS LMOVE a b LEFT RIGHT",
        "COMMAND GETKEYS BLMOVE a b LEFT RIGHT 0",
        "COMMAND GETKEYS BRPOPLPUSH a b 0",
        "COMMAND GETKEYS LREM a 0 x",
    ],
    "blmove-at-once": [
        "RPUSH l a b c d",
        "SET s x",
        "BLMOVE l d LEFT RIGHT 0",
        "BLMOVE l d RIGHT LEFT 0.01",
        "BLMOVE l l LEFT RIGHT 0",
        "LRANGE l 0 -1",
        "LRANGE d 0 -1",
        "BRPOPLPUSH l d 0",
        "BRPOPLPUSH d d 0",
        "LRANGE d 0 -1",
        "BLMOVE nokey d LEFT RIGHT 0.01",
        "BRPOPLPUSH nokey d 0.01",
        "BLMOVE nokey s LEFT RIGHT 0.01",
        "BLMOVE s d LEFT RIGHT 0",
        "BLMOVE d s LEFT RIGHT 0",
        "BRPOPLPUSH s d 0",
        "BRPOPLPUSH d s 0",
        "BLMOVE d x MIDDLE RIGHT 0",
        "BLMOVE d x LEFT MIDDLE x",
        "BLMOVE d x LEFT RIGHT x",
        "BLMOVE d x LEFT RIGHT -1",
        "BLMOVE d x LEFT RIGHT -0.0001",
        "BLMOVE nokey x LEFT RIGHT -0.0001x",
        "BLMOVE d x LEFT RIGHT inf",
        "BLMOVE d x LEFT RIGHT nan",
        "BLMOVE d x LEFT RIGHT 1e400",
        "BLMOVE s x LEFT RIGHT -1",
        "BRPOPLPUSH d x -1",
        "BRPOPLPUSH d x abc",
        "BRPOPLPUSH nokey x 9223372036854775807",
        "BRPOPLPUSH d x",
        "BLMOVE d x LEFT RIGHT",
        "MULTI",
        "BLMOVE nokey d LEFT RIGHT 0",
        "BRPOPLPUSH nokey d 0",
        "BLMOVE d d2 LEFT RIGHT 0",
        "BLMOVE s d LEFT RIGHT 0",
        "EXEC",
        "LRANGE d2 0 -1",
        "EVAL \"return redis.call('BLMOVE','nokey','d','LEFT','RIGHT','0')\" 0",
        "EVAL \"return redis.call('BRPOPLPUSH','d','e','0')\" 0",
        "EVAL \"return redis.call('LMOVE','d','e','LEFT','RIGHT')\" 0",
        "EVAL \"return redis.call('RPOPLPUSH','nokey','e')\" 0",
        "EVAL \"return redis.call('LREM','e',0,'zz')\" 0",
    ],
}


@pytest.mark.redis
@pytest.mark.parametrize("conn", [0, 1], ids=["resp2", "resp3"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_list_move_commands_reply_as_redis_does(
    both: tuple[RedisBackend, EngineBackend], case: str, conn: int
) -> None:
    """Every reply of the case equals redis-server 7.0.15's, byte for byte."""
    failures = mismatches(*both, CASES[case], conn)
    assert not failures, "engine differs from redis-server 7.0:\n" + "\n".join(failures)


def _blocked(reply: object) -> Blocked:
    assert isinstance(reply, Blocked), reply
    return reply


def test_blmove_is_served_by_a_later_push() -> None:
    engine = Engine()
    a, b = engine.connect(), engine.connect()
    w = _blocked(engine.execute(a, [b"BLMOVE", b"src", b"dst", b"RIGHT", b"LEFT", b"0"]))
    engine.execute(b, [b"RPUSH", b"src", b"x", b"y"])
    assert engine.wait(w, 1) == b"y"
    assert engine.execute(b, [b"LRANGE", b"src", b"0", b"-1"]) == [b"x"]
    assert engine.execute(b, [b"LRANGE", b"dst", b"0", b"-1"]) == [b"y"]


def test_brpoplpush_wakes_when_another_thread_pushes() -> None:
    engine = Engine()
    a, b = engine.connect(), engine.connect()
    w = _blocked(engine.execute(a, [b"BRPOPLPUSH", b"src", b"dst", b"5"]))
    threading.Timer(0.05, engine.execute, (b, [b"LPUSH", b"src", b"v"])).start()
    assert engine.wait(w) == b"v"
    assert engine.execute(b, [b"EXISTS", b"src"]) == 0


def test_blmove_times_out_with_a_null_array() -> None:
    engine = Engine()
    w = _blocked(
        engine.execute(engine.connect(), [b"BLMOVE", b"s", b"d", b"LEFT", b"LEFT", b"0.05"])
    )
    start = time.monotonic()
    assert engine.wait(w) is NULL_ARRAY  # type: ignore[arg-type]
    assert time.monotonic() - start >= 0.05


def test_blocked_movers_and_poppers_are_served_in_arrival_order() -> None:
    engine = Engine()
    first, second, third, pusher = (engine.connect() for _ in range(4))
    one = _blocked(engine.execute(first, [b"BLPOP", b"q", b"0"]))
    two = _blocked(engine.execute(second, [b"BLMOVE", b"q", b"out", b"LEFT", b"RIGHT", b"0"]))
    three = _blocked(engine.execute(third, [b"BRPOPLPUSH", b"q", b"out", b"0"]))
    engine.execute(pusher, [b"RPUSH", b"q", b"a", b"b"])
    assert engine.wait(one, 1) == [b"q", b"a"]
    assert engine.wait(two, 1) == b"b"
    assert not three.resolved
    engine.execute(pusher, [b"RPUSH", b"q", b"c"])
    assert engine.wait(three, 1) == b"c"
    assert engine.execute(pusher, [b"LRANGE", b"out", b"0", b"-1"]) == [b"c", b"b"]


def test_blmove_to_a_key_of_another_type_is_answered_wrongtype_when_served() -> None:
    """Redis 7.0 answers the waiter WRONGTYPE without touching the list; the next waiter gets
    the element."""
    engine = Engine()
    mover, popper, other = engine.connect(), engine.connect(), engine.connect()
    engine.execute(other, [b"SET", b"str", b"x"])
    w = _blocked(engine.execute(mover, [b"BLMOVE", b"q", b"str", b"LEFT", b"RIGHT", b"0"]))
    p = _blocked(engine.execute(popper, [b"BLPOP", b"q", b"0"]))
    engine.execute(other, [b"RPUSH", b"q", b"a", b"b"])
    error = engine.wait(w, 1)
    assert isinstance(error, CommandError)
    assert error.text == msgs.WRONGTYPE
    assert engine.wait(p, 1) == [b"q", b"a"]
    assert engine.execute(other, [b"LRANGE", b"q", b"0", b"-1"]) == [b"b"]


def test_blmove_stays_blocked_while_its_source_is_another_type() -> None:
    engine = Engine()
    mover, other = engine.connect(), engine.connect()
    w = _blocked(engine.execute(mover, [b"BLMOVE", b"q", b"d", b"LEFT", b"RIGHT", b"0"]))
    engine.execute(other, [b"SET", b"q", b"x"])
    assert not w.resolved
    engine.execute(other, [b"DEL", b"q"])
    engine.execute(other, [b"RPUSH", b"q", b"v"])
    assert engine.wait(w, 1) == b"v"


def test_blmove_chain_serves_a_client_blocked_on_the_destination() -> None:
    engine = Engine()
    a, b, c = engine.connect(), engine.connect(), engine.connect()
    first = _blocked(engine.execute(a, [b"BLMOVE", b"k1", b"k2", b"LEFT", b"LEFT", b"0"]))
    second = _blocked(engine.execute(b, [b"BRPOPLPUSH", b"k2", b"k3", b"0"]))
    engine.execute(c, [b"LPUSH", b"k1", b"v"])
    assert engine.wait(first, 1) == b"v"
    assert engine.wait(second, 1) == b"v"
    assert engine.execute(c, [b"KEYS", b"*"]) == [b"k3"]


def test_blmove_on_the_same_list_serves_from_a_later_push() -> None:
    engine = Engine()
    a, b = engine.connect(), engine.connect()
    w = _blocked(engine.execute(a, [b"BLMOVE", b"r", b"r", b"LEFT", b"RIGHT", b"0"]))
    engine.execute(b, [b"RPUSH", b"r", b"1", b"2", b"3"])
    assert engine.wait(w, 1) == b"1"
    assert engine.execute(b, [b"LRANGE", b"r", b"0", b"-1"]) == [b"2", b"3", b"1"]


def test_lmove_invalidates_a_watch_on_source_and_destination() -> None:
    engine = Engine()
    watcher, other = engine.connect(), engine.connect()
    engine.execute(other, [b"RPUSH", b"src", b"a", b"b"])
    for watched in (b"src", b"dst"):
        engine.execute(watcher, [b"WATCH", watched])
        engine.execute(other, [b"LMOVE", b"src", b"dst", b"LEFT", b"LEFT"])
        engine.execute(watcher, [b"MULTI"])
        engine.execute(watcher, [b"PING"])
        assert engine.execute(watcher, [b"EXEC"]) is NULL_ARRAY


def test_lrem_that_removes_nothing_keeps_a_watch() -> None:
    engine = Engine()
    watcher, other = engine.connect(), engine.connect()
    engine.execute(other, [b"RPUSH", b"l", b"a"])
    engine.execute(watcher, [b"WATCH", b"l"])
    engine.execute(other, [b"LREM", b"l", b"0", b"zz"])
    engine.execute(watcher, [b"MULTI"])
    engine.execute(watcher, [b"PING"])
    reply = engine.execute(watcher, [b"EXEC"])
    assert reply is not NULL_ARRAY
    assert isinstance(reply, list)
    assert len(reply) == 1


def _logged(path: Path) -> list[list[bytes]]:
    return [item for _, _, item in iter_records(path.read_bytes(), path) if isinstance(item, list)]


def test_list_moves_replay_from_the_append_only_file(tmp_path: Path) -> None:
    """LREM, LMOVE, RPOPLPUSH and BLMOVE/BRPOPLPUSH (served at once and served later) come back
    on replay; the blocking forms are logged as the LMOVE / RPOPLPUSH they amounted to."""
    aof = open_persistent(tmp_path / "data", appendfsync="always")
    engine = aof.engine
    waiter, waiter2 = engine.connect(), engine.connect()
    w = _blocked(engine.execute(waiter, [b"BLMOVE", b"w", b"wd", b"RIGHT", b"LEFT", b"0"]))
    w2 = _blocked(engine.execute(waiter2, [b"BRPOPLPUSH", b"w2", b"wd", b"0"]))
    s = Session(engine)
    s("RPUSH", "l", "a", "b", "a", "c", "a")
    s("LREM", "l", "-2", "a")
    s("LMOVE", "l", "d", "LEFT", "RIGHT")
    s("RPOPLPUSH", "l", "d")
    s("LMOVE", "d", "d", "LEFT", "RIGHT")
    s("BLMOVE", "l", "d", "LEFT", "LEFT", "0")
    s("BRPOPLPUSH", "d", "e", "0")
    s("RPUSH", "w", "x", "y")
    s("RPUSH", "w2", "z")
    assert engine.wait(w, 5) == b"y"
    assert engine.wait(w2, 5) == b"z"
    logged = _logged(aof.path)
    assert [b"LMOVE", b"l", b"d", b"LEFT", b"LEFT"] in logged
    assert [b"RPOPLPUSH", b"d", b"e"] in logged
    assert [b"LMOVE", b"w", b"wd", b"RIGHT", b"LEFT"] in logged
    assert [b"RPOPLPUSH", b"w2", b"wd"] in logged
    assert not [r for r in logged if r[0].upper() in (b"BLMOVE", b"BRPOPLPUSH")]
    before = dump_state(engine)
    directory = aof.dir
    aof.close()
    again = open_persistent(directory, appendfsync="always")
    try:
        assert dump_state(again.engine) == before
    finally:
        again.close()


class _Raw:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buf = bytearray()

    def send(self, *args: str) -> None:
        self.sock.sendall(pack(args))

    def read(self) -> bytes:
        return read_raw_reply(self.sock, self.buf)

    def call(self, *args: str) -> bytes:
        self.send(*args)
        return self.read()


def _wait_blocked(observer: _Raw, n: int) -> None:
    """Until the server counts ``n`` blocked clients: who blocked first is served first."""
    wait_until(
        lambda: b"blocked_clients:%d\r\n" % n in observer.call("INFO", "clients"),
        timeout_s=10,
        what=f"{n} blocked clients",
    )


def _wake_up_transcript(port: int, resp: int) -> list[bytes]:
    """Three clients block (BLMOVE, BLPOP, BRPOPLPUSH) on one list, a fourth pushes; what each
    gets and what the lists hold afterwards."""
    waiters = [_Raw(port) for _ in range(3)]
    pusher = _Raw(port)
    try:
        for c in (*waiters, pusher):
            if resp == 3:
                c.call("HELLO", "3")
        pusher.call("DEL", "{q}", "{q}out")
        waiters[0].send("BLMOVE", "{q}", "{q}out", "RIGHT", "LEFT", "5")
        _wait_blocked(pusher, 1)
        waiters[1].send("BLPOP", "{q}", "5")
        _wait_blocked(pusher, 2)
        waiters[2].send("BRPOPLPUSH", "{q}", "{q}out", "5")
        _wait_blocked(pusher, 3)
        out = [pusher.call("RPUSH", "{q}", "a", "b", "c", "d")]
        out += [w.read() for w in waiters]
        out.append(pusher.call("LRANGE", "{q}", "0", "-1"))
        out.append(pusher.call("LRANGE", "{q}out", "0", "-1"))
        pusher.call("DEL", "{q}", "{q}out")
        return out
    finally:
        for c in (*waiters, pusher):
            c.sock.close()


@pytest.mark.redis
@pytest.mark.parametrize("resp", [2, 3])
def test_blocked_wake_up_over_tcp_matches_redis(redis_server: RedisServer, resp: int) -> None:
    """The same clients on the TCP engine server and on redis-server get the same replies."""
    server = ThreadedServer()
    try:
        assert _wake_up_transcript(server.port, resp) == _wake_up_transcript(
            redis_server.port, resp
        )
    finally:
        server.close()


def _wrong_destination_transcript(port: int) -> list[bytes]:
    """A BLMOVE waits on a list whose destination holds a string; a push arrives, then the
    destination is deleted and another push arrives."""
    waiter, pusher = _Raw(port), _Raw(port)
    try:
        pusher.call("DEL", "{w}q", "{w}str")
        pusher.call("SET", "{w}str", "x")
        waiter.send("BLMOVE", "{w}q", "{w}str", "LEFT", "RIGHT", "5")
        _wait_blocked(pusher, 1)
        out = [pusher.call("RPUSH", "{w}q", "a"), waiter.read()]
        out.append(pusher.call("LRANGE", "{w}q", "0", "-1"))
        out.append(pusher.call("GET", "{w}str"))
        pusher.call("DEL", "{w}q", "{w}str")
        return out
    finally:
        waiter.sock.close()
        pusher.sock.close()


@pytest.mark.redis
def test_blmove_to_a_wrong_type_over_tcp_matches_redis(redis_server: RedisServer) -> None:
    server = ThreadedServer()
    try:
        assert _wrong_destination_transcript(server.port) == _wrong_destination_transcript(
            redis_server.port
        )
    finally:
        server.close()


# Four clients; each step is (client, "send" | "call" | "read", *argv). "send" does not wait
# for a reply (the client may block), "read" takes the reply of the client's last send.
_SCENARIOS: dict[str, list[tuple[object, ...]]] = {
    "same-list-rotation": [
        (0, "send", "BLMOVE", "r", "r", "LEFT", "RIGHT", "0"),
        (1, "send", "BLMOVE", "r", "r", "RIGHT", "LEFT", "0"),
        (3, "call", "RPUSH", "r", "1", "2", "3"),
        (0, "read"),
        (1, "read"),
        (3, "call", "LRANGE", "r", "0", "-1"),
    ],
    "chain-of-moves": [
        (0, "send", "BLMOVE", "k2", "k3", "LEFT", "LEFT", "0"),
        (1, "send", "BLMOVE", "k1", "k2", "RIGHT", "LEFT", "0"),
        (3, "call", "RPUSH", "k1", "a", "b"),
        (0, "read"),
        (1, "read"),
        (3, "call", "LRANGE", "k1", "0", "-1"),
        (3, "call", "LRANGE", "k2", "0", "-1"),
        (3, "call", "LRANGE", "k3", "0", "-1"),
    ],
    "pushes-in-a-transaction": [
        (0, "send", "BRPOPLPUSH", "q", "d", "0"),
        (1, "send", "BLMOVE", "q", "d", "LEFT", "LEFT", "0"),
        (3, "call", "MULTI"),
        (3, "call", "LPUSH", "q", "a"),
        (3, "call", "LPUSH", "q", "b"),
        (3, "call", "RPUSH", "q", "c"),
        (3, "call", "EXEC"),
        (0, "read"),
        (1, "read"),
        (3, "call", "LRANGE", "q", "0", "-1"),
        (3, "call", "LRANGE", "d", "0", "-1"),
    ],
    "mixed-waiters": [
        (0, "send", "BLPOP", "q", "0"),
        (1, "send", "BRPOPLPUSH", "q", "q", "0"),
        (2, "send", "BRPOP", "q", "0"),
        (3, "call", "RPUSH", "q", "x", "y"),
        (0, "read"),
        (1, "read"),
        (2, "read"),
        (3, "call", "LRANGE", "q", "0", "-1"),
    ],
    "served-move-touches-a-watched-destination": [
        (2, "call", "WATCH", "d"),
        (0, "send", "BLMOVE", "q", "d", "LEFT", "LEFT", "0"),
        (3, "call", "RPUSH", "q", "x"),
        (0, "read"),
        (2, "call", "MULTI"),
        (2, "call", "PING"),
        (2, "call", "EXEC"),
    ],
    "lmove-wakes-a-waiter-on-its-destination": [
        (0, "send", "BLPOP", "d", "0"),
        (3, "call", "RPUSH", "q", "a", "b"),
        (3, "call", "LMOVE", "q", "d", "LEFT", "LEFT"),
        (0, "read"),
        (3, "call", "LRANGE", "d", "0", "-1"),
    ],
    "zunionstore-wakes-a-bzpopmin": [
        (0, "send", "BZPOPMIN", "z", "0"),
        (3, "call", "ZADD", "a", "1", "m"),
        (3, "call", "ZUNIONSTORE", "z", "1", "a"),
        (0, "read"),
        (3, "call", "EXISTS", "z"),
    ],
    "move-wakes-a-waiter-in-the-target-db": [
        (0, "send", "BLPOP", "l", "0"),
        (3, "call", "SELECT", "1"),
        (3, "call", "RPUSH", "l", "v"),
        (3, "call", "MOVE", "l", "0"),
        (0, "read"),
    ],
}


def _scenario_transcript(port: int, steps: list[tuple[object, ...]]) -> list[bytes]:
    clients = [_Raw(port) for _ in range(4)]
    observer = _Raw(port)  # asks INFO outside the scenario (client 3 may be inside MULTI)
    try:
        clients[3].call("FLUSHALL")
        out: list[bytes] = []
        blocked = 0
        for step in steps:
            who, what, *words = step
            client = clients[int(str(who))]
            argv = [str(w) for w in words]
            if what == "send":  # every send blocks: each scenario sends before it pushes
                client.send(*argv)
                blocked += 1
                _wait_blocked(observer, blocked)
            elif what == "call":
                out.append(client.call(*argv))
            else:
                out.append(client.read())
                blocked -= 1
        clients[3].call("FLUSHALL")
        return out
    finally:
        for c in (*clients, observer):
            c.sock.close()


@pytest.mark.redis
@pytest.mark.parametrize("name", sorted(_SCENARIOS))
def test_blocking_scenario_over_tcp_matches_redis(redis_server: RedisServer, name: str) -> None:
    """The same clients, in the same order, on the TCP engine server and on redis-server get
    the same replies and leave the same lists."""
    server = ThreadedServer()
    try:
        steps = _SCENARIOS[name]
        expected = _scenario_transcript(redis_server.port, steps)
        assert _scenario_transcript(server.port, steps) == expected
    finally:
        server.close()
