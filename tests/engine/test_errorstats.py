"""INFO errorstats and ``total_error_replies``, side by side with redis-server 7.0: every error
reply is counted under its prefix (``errorstat_<PREFIX>:count=N``), once, whether a command
failed, was rejected, was refused by EXEC, reached a blocked client, or came out of a script;
CONFIG RESETSTAT empties them."""

from __future__ import annotations

import socket
import time

import pytest

from streamworker.engine import Engine
from streamworker.engine.context import Blocked
from streamworker.engine.protocol import encode
from tests.engine.conftest import Differ, RawRedis, pack, read_raw_reply
from tests.support.engine_server import ThreadedServer

pytestmark = pytest.mark.redis


def _error_stats(info_reply: bytes) -> list[bytes]:
    return [
        line
        for line in info_reply.split(b"\r\n")
        if line.startswith((b"errorstat_", b"total_error_replies:"))
    ]


def _stats(differ: Differ) -> tuple[list[bytes], list[bytes]]:
    real, fake = differ.both("INFO", "errorstats")
    real_total, fake_total = differ.both("INFO", "stats")
    return _error_stats(real) + _error_stats(real_total), _error_stats(fake) + _error_stats(
        fake_total
    )


@pytest.fixture
def d(differ: Differ) -> Differ:
    differ.both("CONFIG", "RESETSTAT")
    return differ


def test_no_error_yet_means_an_empty_section(d: Differ) -> None:
    real, fake = _stats(d)
    assert fake == real == [b"total_error_replies:0"]


def test_errors_are_counted_by_prefix(d: Differ) -> None:
    d.check("SET", "str", "abc")
    d.check("XADD", "s", "1-1", "f", "v")
    d.check("INCR", "str")  # ERR
    d.check("LPUSH", "str", "x")  # WRONGTYPE
    d.check("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">")  # NOGROUP
    d.check("XGROUP", "CREATE", "s", "g", "0")
    d.check("XGROUP", "CREATE", "s", "g", "0")  # BUSYGROUP
    d.check("NOSUCH")  # rejected: ERR
    d.check("GET")  # rejected: ERR
    real, fake = _stats(d)
    assert fake == real
    assert b"errorstat_WRONGTYPE:count=1" in fake


def test_transaction_errors_are_counted_once_each(d: Differ) -> None:
    d.check("SET", "str", "abc")
    for cmd in (("MULTI",), ("INCR", "str"), ("SET", "str", "1", "EX", "-1"), ("EXEC",)):
        d.check(*cmd)
    for cmd in (("MULTI",), ("NOSUCH",), ("EXEC",)):  # EXECABORT
        d.check(*cmd)
    real, fake = _stats(d)
    assert fake == real
    assert b"errorstat_EXECABORT:count=1" in fake


def test_script_errors_are_counted_once_each(d: Differ) -> None:
    d.check("SET", "str", "abc")
    for body in (
        "return redis.pcall('incr','str')",
        "local e = redis.pcall('incr','str'); return 1",
        "redis.pcall('incr','str'); return redis.error_reply('MY z')",
        "return redis.error_reply('noprefix')",
        "return {err='X'}",
        "return {err='" + "A" * 40 + " x'}",
    ):
        d.check("EVAL", body, "0")
    # redis.call's error carries the script's sha and line (the same on both sides).
    d.both("EVAL", "return redis.call('incr','str')", "0")
    real, fake = _stats(d)
    assert fake == real
    assert b"errorstat_MY:count=1" in fake


def test_config_resetstat_empties_the_error_stats(d: Differ) -> None:
    d.check("NOSUCH")
    d.check("CONFIG", "RESETSTAT")
    real, fake = _stats(d)
    assert fake == real == [b"total_error_replies:0"]


def test_xgroup_destroy_counts_the_nogroup_error_of_the_blocked_reader(redis_port: int) -> None:
    # Redis's own suite (stream-cgroups.tcl): "XGROUP DESTROY should unblock XREADGROUP with
    # -NOGROUP", then errorstat_NOGROUP:count=1 and total_error_replies 1.
    setup = (
        ("CONFIG", "RESETSTAT"),
        ("DEL", "mystream"),
        ("XGROUP", "CREATE", "mystream", "mygroup", "$", "MKSTREAM"),
    )
    read = ("XREADGROUP", "GROUP", "mygroup", "Alice", "BLOCK", "0", "STREAMS", "mystream", ">")

    real, reader = RawRedis(redis_port), RawRedis(redis_port)
    try:
        for cmd in setup:
            real.call(*cmd)
        reader.sock.sendall(pack(read))
        deadline = time.monotonic() + 5
        while b"blocked_clients:1" not in real.call("INFO", "clients"):
            assert time.monotonic() < deadline, "the reader did not block on redis-server"
            time.sleep(0.01)
        real.call("XGROUP", "DESTROY", "mystream", "mygroup")
        real_read = read_raw_reply(reader.sock, reader.buf)
        real_stats = _error_stats(real.call("INFO", "errorstats")) + _error_stats(
            real.call("INFO", "stats")
        )
        real.call("DEL", "mystream")
    finally:
        real.close()
        reader.close()

    engine = Engine()
    admin, alice = engine.connect(), engine.connect()
    for cmd in setup:
        engine.execute(admin, [a.encode() for a in cmd])
    blocked = engine.execute(alice, [a.encode() for a in read])
    assert isinstance(blocked, Blocked)
    engine.execute(admin, [b"XGROUP", b"DESTROY", b"mystream", b"mygroup"])
    fake_read = encode(engine.wait(blocked, 5), 2)
    info = encode(engine.execute(admin, [b"INFO", b"errorstats"]), 2)
    info += encode(engine.execute(admin, [b"INFO", b"stats"]), 2)

    assert fake_read == real_read
    assert real_read.startswith(b"-NOGROUP")
    assert _error_stats(info) == real_stats
    assert real_stats == [b"errorstat_NOGROUP:count=1", b"total_error_replies:1"]


def test_a_connection_refused_at_maxclients_is_not_an_error_reply() -> None:
    # redis-server writes that refusal straight to the socket: rejected_connections counts it,
    # total_error_replies does not (checked on 7.0.15 with maxclients 1).
    server = ThreadedServer()
    try:
        admin = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        buf = bytearray()
        admin.sendall(pack(("CONFIG", "SET", "maxclients", "1")))
        assert read_raw_reply(admin, buf) == b"+OK\r\n"
        refused = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        assert read_raw_reply(refused, bytearray()) == b"-ERR max number of clients reached\r\n"
        refused.close()
        admin.sendall(pack(("INFO", "stats")))
        stats = read_raw_reply(admin, buf)
        assert b"rejected_connections:1\r\n" in stats
        assert b"total_error_replies:0\r\n" in stats
        admin.sendall(pack(("INFO", "errorstats")))
        assert b"errorstat_" not in read_raw_reply(admin, buf)
        admin.close()
    finally:
        server.close()
