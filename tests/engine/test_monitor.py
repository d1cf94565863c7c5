"""MONITOR side by side with redis-server 7.0 over sockets: the lines a monitoring connection
receives (Redis's quoting, database, order around MULTI/EXEC and scripts, redaction, what is
not shown), what it may still run, and QUIT; RESP2 and RESP3 monitors. Timestamps and client
ports differ between the servers and are masked before comparing."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest

from tests.engine.admin_support import Conn, Pair, pair
from tests.support.waiting import wait_until

pytestmark = pytest.mark.redis

__all__ = ["pair"]

_LINE = re.compile(rb"^\+(\d+)\.(\d{6}) \[(\d+) ([^\]]+)\] (.*)\r\n$", re.S)


@pytest.fixture(autouse=True)
def _clean(pair: Pair) -> Iterator[None]:
    yield
    pair.cleanup()


def _masked(raw: bytes, clients: dict[str, str]) -> bytes:
    m = _LINE.match(raw)
    assert m is not None, raw
    addr = m.group(4).decode()
    who = clients.get(addr, "lua" if addr == "lua" else "other")
    return b"[%s %s] %s" % (m.group(3), who.encode(), m.group(5))


def _addr(conn: Conn) -> str:
    host, port = conn.sock.getsockname()[:2]
    return f"{host}:{port}"


def _monitor_lines(port: int, script: list[tuple[str, ...]], resp: int, expect: int) -> list[bytes]:
    mon = Conn(port, resp)
    assert mon.call("MONITOR") == b"+OK\r\n"
    client = Conn(port)
    names = {_addr(client): "client", _addr(mon): "monitor"}
    for cmd in script:
        client.call(*cmd)
    lines = [_masked(mon.read(), names) for _ in range(expect)]
    assert mon.nothing_within(0.2), "more lines than expected"
    mon.close()
    client.close()
    return lines


SCRIPTS = {
    "plain commands with Redis's quoting": [
        ("SET", "foo", 'bar\n"x\\\x01\xff\t\r\x07\x08 ~'),
        ("GET", "foo"),
        ("INCR", "n"),
        ("SET", "k", "123"),
        ("PING",),
        ("ECHO", ""),
    ],
    "SELECT shows the database after it": [("SELECT", "3"), ("SET", "a", "1"), ("SELECT", "0")],
    "MULTI then the queued commands then EXEC": [
        ("MULTI",),
        ("SET", "a", "1"),
        ("GET", "a"),
        ("EXEC",),
    ],
    "a discarded transaction shows MULTI and EXEC only": [
        ("MULTI",),
        ("NOSUCH",),
        ("EXEC",),
    ],
    "EVAL before the commands its script runs": [
        (
            "EVAL",
            "redis.call('set',KEYS[1],ARGV[1]) return redis.call('get',KEYS[1])",
            "1",
            "k",
            "v",
        ),
        ("EVAL", "return redis.pcall('nosuch')", "0"),
    ],
    "rejected commands are not shown": [
        ("GET",),
        ("NOSUCH", "x"),
        ("PING",),
    ],
    "admin commands are not shown": [
        ("CONFIG", "SET", "maxclients", "10000"),
        ("CLIENT", "KILL", "1.2.3.4:5"),
        ("CLIENT", "ID"),
        ("DBSIZE",),
    ],
    "passwords are redacted": [
        ("AUTH", "secret"),
        ("AUTH", "user", "secret"),
        ("HELLO", "2", "AUTH", "default", "secret"),
        ("MIGRATE", "127.0.0.1", "1", "nokey", "9", "5000", "AUTH", "pw"),
        ("MIGRATE", "127.0.0.1", "1", "nokey", "9", "5000", "AUTH2", "u", "pw"),
    ],
    "a command that fails when it runs is shown": [
        ("SET", "s", "x"),
        ("LPUSH", "s", "y"),
    ],
    "a blocking command is shown once": [("BLPOP", "nolist", "0.01"), ("PING",)],
}
_EXPECT = {
    "plain commands with Redis's quoting": 6,
    "SELECT shows the database after it": 3,
    "MULTI then the queued commands then EXEC": 4,
    "a discarded transaction shows MULTI and EXEC only": 2,
    "EVAL before the commands its script runs": 4,
    "rejected commands are not shown": 1,
    "admin commands are not shown": 2,
    "passwords are redacted": 5,
    "a command that fails when it runs is shown": 2,
    "a blocking command is shown once": 2,
}


@pytest.mark.parametrize("resp", [2, 3])
@pytest.mark.parametrize("case", sorted(SCRIPTS))
def test_monitor_lines_are_redis_s(pair: Pair, case: str, resp: int) -> None:
    got = {
        name: _monitor_lines(port, SCRIPTS[case], resp, _EXPECT[case])
        for name, port in pair.ports.items()
    }
    assert got["engine"] == got["redis"]


def test_monitor_line_carries_the_current_unix_time_in_microseconds(pair: Pair) -> None:
    for port in pair.ports.values():
        mon = Conn(port)
        mon.call("MONITOR")
        Conn(port).call("PING")
        m = _LINE.match(mon.read())
        assert m is not None
        assert abs(int(m.group(1)) - time.time()) < 5
        mon.close()


def test_a_monitor_sees_its_own_commands_and_may_not_touch_keys(pair: Pair) -> None:
    got = {}
    for name, port in pair.ports.items():
        mon = Conn(port)
        mon.call("MONITOR")
        names = {_addr(mon): "monitor"}
        replies = [mon.call("GET", "x")]
        mon.send("PING")
        # The reply first, then the line for the command (fed after it ran).
        lines = [mon.read(), _masked(mon.read(), names)]
        got[name] = (replies, lines)
        mon.close()
    assert got["engine"] == got["redis"]


def test_every_monitor_receives_each_line(pair: Pair) -> None:
    for port in pair.ports.values():
        mons = [Conn(port) for _ in range(3)]
        for m in mons:
            m.call("MONITOR")
        Conn(port).call("SET", "k", "v")
        for m in mons:
            assert m.read().endswith(b'"SET" "k" "v"\r\n')
            m.close()


def test_quit_inside_monitor_answers_ok_and_closes(pair: Pair) -> None:
    got = {}
    for name, port in pair.ports.items():
        mon = Conn(port)
        mon.call("MONITOR")
        mon.send("QUIT")
        names = {_addr(mon): "monitor"}
        first = mon.read()
        # Redis shows the QUIT to the monitors (this one included) before answering it.
        got[name] = [_masked(first, names) if first.startswith(b"+1") else first]
        if first.startswith(b"+1"):
            got[name].append(mon.read())
        assert mon.closed_by_server()
    assert got["engine"] == got["redis"]


def test_a_closed_monitor_stops_receiving_and_the_server_goes_on(pair: Pair) -> None:
    for port in pair.ports.values():
        mon = Conn(port)
        mon.call("MONITOR")
        addr = _addr(mon)
        mon.close()
        conn = Conn(port)
        assert conn.call("SET", "k", "v") == b"+OK\r\n"
        wait_until(
            lambda c=conn, a=addr: f" addr={a} ".encode() not in c.call("CLIENT", "LIST"),
            timeout_s=10,
            what="the closed monitor to leave CLIENT LIST",
        )
        conn.close()


def test_monitor_is_refused_in_process() -> None:
    from streamworker.engine import Engine
    from streamworker.engine.errors import CommandError

    engine = Engine()
    reply = engine.execute(engine.connect(), [b"MONITOR"])
    assert isinstance(reply, CommandError)
    assert "network connection" in reply.text


def test_reset_ends_monitor_mode(pair: Pair) -> None:
    got = {}
    for name, port in pair.ports.items():
        mon = Conn(port)
        mon.call("MONITOR")
        got[name] = [mon.call("RESET")]
        Conn(port).call("SET", "k", "v")
        got[name].append(mon.nothing_within(0.2))
        got[name].append(mon.call("SET", "k", "w"))
        mon.close()
    assert got["engine"] == got["redis"]


@pytest.mark.parametrize("mode", ["OFF", "SKIP"])
def test_client_reply_off_silences_monitor_lines_and_skip_only_the_next_reply(
    pair: Pair, mode: str
) -> None:
    got = {}
    for name, port in pair.ports.items():
        mon = Conn(port)
        client = Conn(port)
        mon.send("CLIENT", "REPLY", mode)
        mon.send("MONITOR")
        client.call("SET", "k", "v")
        if mon.nothing_within(0.3):
            got[name] = b""
        else:
            m = _LINE.match(mon.read())
            got[name] = m.group(5) if m else b"?"
        mon.close()
        client.close()
    assert got["engine"] == got["redis"]
