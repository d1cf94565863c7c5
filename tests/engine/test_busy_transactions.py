"""MULTI / DISCARD / EXEC while another client's script is busy (past lua-time-limit), against
redis-server 7.0.15: MULTI and DISCARD run (allow-busy), other commands get BUSY and flag the
transaction, EXEC is refused with EXECABORT and leaves the MULTI state.

Each test drives the same sequence on a redis-server and an engine server of its own and
compares the reply bytes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.engine.conftest import pack, read_raw_reply
from tests.engine.test_hostile_clients import Raw
from tests.support.engine_server import EngineServerProcess
from tests.support.servers import RedisServer

pytestmark = [pytest.mark.redis, pytest.mark.slow]

_SPIN = "while true do end"


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[list[tuple[str, int]]]:
    """A redis-server and an engine server, lua-time-limit 100 ms."""
    real = RedisServer(tmp_path / "redis").start()
    fake = EngineServerProcess().start()
    pairs = [("redis", real.port), ("engine", fake.port)]
    for _, port in pairs:
        conn = Raw(port)
        assert conn.call("CONFIG", "SET", "lua-time-limit", "100") == b"+OK\r\n"
        assert conn.call("SET", "xx", "1") == b"+OK\r\n"
        conn.close()
    yield pairs
    fake.stop()
    real.stop()


def _run(
    servers: list[tuple[str, int]],
    before: Callable[[Raw], list[bytes]],
    during: Callable[[Raw], list[bytes]],
    after: Callable[[Raw], list[bytes]],
) -> dict[str, list[bytes]]:
    """before() on a client, a runaway script on another, during() while it is busy, SCRIPT
    KILL, then after(); each server's replies in order."""
    out: dict[str, list[bytes]] = {}
    for name, port in servers:
        client, admin = Raw(port), Raw(port)
        runner = Raw(port, timeout_s=30)
        got = before(client)
        runner.sock.sendall(pack(("EVAL", _SPIN, "0")))
        time.sleep(0.4)  # past lua-time-limit
        got += during(client)
        assert admin.call("SCRIPT", "KILL") == b"+OK\r\n"
        got.append(read_raw_reply(runner.sock, runner.buf)[:40])
        got += after(client)
        got.append(admin.call("GET", "xx"))
        out[name] = got
        for c in (client, admin, runner):
            c.close()
    return out


def test_multi_during_a_busy_script_runs_and_a_busy_command_aborts_exec(
    servers: list[tuple[str, int]],
) -> None:
    replies = _run(
        servers,
        lambda c: [],
        lambda c: [c.call("MULTI"), c.call("INCR", "xx")],
        lambda c: [c.call("INCR", "xx"), c.call("EXEC"), c.call("PING", "asdf")],
    )
    assert replies["engine"] == replies["redis"]
    assert replies["engine"][0] == b"+OK\r\n"


def test_exec_during_a_busy_script_aborts_the_transaction(
    servers: list[tuple[str, int]],
) -> None:
    replies = _run(
        servers,
        lambda c: [c.call("MULTI"), c.call("INCR", "xx")],
        lambda c: [c.call("INCR", "xx"), c.call("EXEC")],
        lambda c: [c.call("PING", "asdf"), c.call("EXEC")],
    )
    assert replies["engine"] == replies["redis"]
    assert replies["engine"][3].startswith(b"-EXECABORT Transaction discarded because of: BUSY")


def test_a_body_command_refused_busy_aborts_exec_after_the_script(
    servers: list[tuple[str, int]],
) -> None:
    replies = _run(
        servers,
        lambda c: [c.call("MULTI"), c.call("INCR", "xx")],
        lambda c: [c.call("INCR", "xx")],
        lambda c: [c.call("EXEC"), c.call("PING", "asdf")],
    )
    assert replies["engine"] == replies["redis"]


def test_discard_and_nested_multi_during_a_busy_script_match(
    servers: list[tuple[str, int]],
) -> None:
    replies = _run(
        servers,
        lambda c: [],
        lambda c: [
            c.call("DISCARD"),
            c.call("MULTI"),
            c.call("MULTI"),
            c.call("DISCARD"),
            c.call("MULTI", "x"),
            c.call("EXEC", "x"),
            c.call("EXEC"),
        ],
        lambda c: [c.call("EXEC"), c.call("MULTI"), c.call("SET", "xx", "5"), c.call("EXEC")],
    )
    assert replies["engine"] == replies["redis"]
