"""Hostile clients against redis-server 7.0 and ``streamworker engine serve``, side by side
(issue #24): numbers that take ages to parse, pipelines that never read their replies,
runaway scripts, strict CONFIG SET integers, huge SETRANGE offsets.

Each test runs the same bytes against both servers over raw sockets. Hangs are judged with
generous bounds ("answers within 2 s"); memory is read from the server process
(``/proc/PID/status``). The damaged-file cases are in ``test_aof_damage.py``.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.engine.conftest import pack, read_raw_reply
from tests.support.engine_server import EngineServerProcess
from tests.support.servers import RedisServer

pytestmark = pytest.mark.redis

LLONG_MIN = "-9223372036854775808"


class Raw:
    """A raw RESP connection that times every reply."""

    def __init__(self, port: int, timeout_s: float = 30) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
        self.buf = bytearray()

    def call(self, *args: bytes | str | int) -> bytes:
        self.sock.sendall(pack(args))
        return read_raw_reply(self.sock, self.buf)

    def timed(self, *args: bytes | str | int) -> tuple[bytes, float]:
        started = time.monotonic()
        reply = self.call(*args)
        return reply, time.monotonic() - started

    def close(self) -> None:
        self.sock.close()


@pytest.fixture(scope="module")
def engine_proc() -> Iterator[EngineServerProcess]:
    """One ``streamworker engine serve`` (in memory) for the module's quick cases."""
    proc = EngineServerProcess().start()
    yield proc
    proc.stop()


@pytest.fixture
def pair(redis_server: RedisServer, engine_proc: EngineServerProcess) -> Iterator[tuple[Raw, Raw]]:
    """Raw connections to (redis-server, engine), both flushed."""
    real, fake = Raw(redis_server.port), Raw(engine_proc.port)
    real.call("FLUSHALL")
    fake.call("FLUSHALL")
    yield real, fake
    real.close()
    fake.close()


# --- 2. numbers with bounded work --------------------------------------------------------

SLOW_NUMBERS = [
    ("INCRBYFLOAT", "k", "1e999999999"),
    ("INCRBYFLOAT", "k", "-1e999999999"),
    ("INCRBYFLOAT", "k", "1e-999999999"),
    ("INCRBYFLOAT", "k", "-1e-999999999"),
    ("INCRBYFLOAT", "k", "0x1p999999999"),
    ("INCRBYFLOAT", "k", "1e" + "9" * 5000),
    ("INCRBYFLOAT", "k", "0." + "0" * 200_000 + "1"),
    ("INCRBYFLOAT", "k", "1" + "0" * 200_000),
    ("HINCRBYFLOAT", "h", "f", "1e999999999"),
    ("HINCRBYFLOAT", "h", "f", "-1e-999999999"),
    ("BLPOP", "l", "1e9999999"),
    ("BLPOP", "l", "1e-999999999"),
    ("BRPOP", "l", "-1e-999999999"),
    ("BRPOP", "l", "-1e9999999"),
    ("BLPOP", "l", "0x1p-999999999"),
    ("ZADD", "z", "1e999999999", "m"),
    ("ZINCRBY", "z", "-1e-999999999", "m"),
    ("ZRANGEBYSCORE", "z", "1e999999999", "-1e-999999999"),
    ("SET", "k", "v", "EX", "9" * 5000),
]


@pytest.mark.parametrize("cmd", SLOW_NUMBERS, ids=lambda c: f"{c[0]}-{c[-1][:14]}")
def test_a_number_that_is_slow_to_parse_is_answered_at_once_as_redis(
    pair: tuple[Raw, Raw], cmd: tuple[str, ...]
) -> None:
    real, fake = pair
    expected = real.call(*cmd)
    got, took_s = fake.timed(*cmd)
    assert got == expected
    assert took_s < 2


LONG_DOUBLE_EXTREMES = [
    ("INCRBYFLOAT", "k", "1e4900"),
    ("INCRBYFLOAT", "k", "1e4932"),
    ("INCRBYFLOAT", "k", "-1e4932"),
    ("INCRBYFLOAT", "k", "1.2e4932"),
    ("INCRBYFLOAT", "k", "0x1p16383"),
    ("INCRBYFLOAT", "k", "0x1p16384"),
    ("INCRBYFLOAT", "k", "1e-4950"),
    ("INCRBYFLOAT", "k", "1e-4960"),
    ("INCRBYFLOAT", "k", "1e400"),
    ("HINCRBYFLOAT", "h", "f", "1e4900"),
    ("HINCRBYFLOAT", "h", "f", "-1e4900"),
]


@pytest.mark.parametrize("cmd", LONG_DOUBLE_EXTREMES, ids=lambda c: f"{c[0]}-{c[-1]}")
def test_a_long_double_extreme_gives_redis_reply_and_value(
    pair: tuple[Raw, Raw], cmd: tuple[str, ...]
) -> None:
    real, fake = pair
    assert fake.call(*cmd) == real.call(*cmd)
    # The stored value reads back, and adds up, as in Redis (4900-digit numbers included).
    again = (*cmd[:-1], "1")
    assert fake.call(*again) == real.call(*again)
    key = cmd[1:-1]
    getter = ("GET", *key) if cmd[0] == "INCRBYFLOAT" else ("HGET", *key)
    assert fake.call(*getter) == real.call(*getter)


def test_no_python_exception_text_reaches_a_client(pair: tuple[Raw, Raw]) -> None:
    _, fake = pair
    for cmd in SLOW_NUMBERS + LONG_DOUBLE_EXTREMES:
        reply = fake.call(*cmd)
        assert b"internal error" not in reply, (cmd, reply[:200])
        assert b"Error:" not in reply, (cmd, reply[:200])


INT64_EXTREMES = [
    ("SRANDMEMBER", "s", LLONG_MIN),
    ("SRANDMEMBER", "missing", LLONG_MIN),
    ("EVAL", f"return redis.call('srandmember', 's', '{LLONG_MIN}')", "0"),
    ("EVAL", f"return redis.pcall('srandmember', 's', '{LLONG_MIN}')", "0"),
    ("SPOP", "s", LLONG_MIN),
    ("LRANGE", "l", LLONG_MIN, "9223372036854775807"),
    ("LTRIM", "l", "9223372036854775807", LLONG_MIN),
    ("GETRANGE", "str", LLONG_MIN, "9223372036854775807"),
    ("SETRANGE", "str", LLONG_MIN, "x"),
    ("SETRANGE", "str", "9223372036854775807", "x"),
    ("ZRANGE", "z", "-inf", "+inf", "BYSCORE", "LIMIT", LLONG_MIN, LLONG_MIN),
    ("ZRANGE", "z", LLONG_MIN, "9223372036854775807"),
    ("XRANGE", "x", "-", "+", "COUNT", LLONG_MIN),
    ("XAUTOCLAIM", "x", "g", "c", "0", "0", "COUNT", "9223372036854775807"),
    ("XINFO", "STREAM", "x", "FULL", "COUNT", LLONG_MIN),
    ("LPOP", "l", "9223372036854775807"),
    ("ZPOPMIN", "z", LLONG_MIN),
    ("INCRBY", "n", LLONG_MIN),
    ("DECRBY", "n", LLONG_MIN),
    ("EXPIRE", "n", "9223372036854775807"),
    ("SET", "k", "v", "PX", "9223372036854775807"),
    ("SCAN", "0", "COUNT", LLONG_MIN),
]


@pytest.mark.parametrize("cmd", INT64_EXTREMES, ids=lambda c: f"{c[0]}-{c[-1][:24]}")
def test_an_int64_extreme_count_or_offset_is_answered_at_once_as_redis(
    pair: tuple[Raw, Raw], cmd: tuple[str, ...]
) -> None:
    real, fake = pair
    setup = [
        ("SADD", "s", "a", "b"),
        ("RPUSH", "l", "a", "b"),
        ("SET", "str", "hello"),
        ("ZADD", "z", "1", "a"),
        ("XADD", "x", "1-1", "f", "v"),
        ("XGROUP", "CREATE", "x", "g", "0"),
        ("SET", "n", "5"),
    ]
    for step in setup:
        assert fake.call(*step) == real.call(*step)
    expected = real.call(*cmd)
    got, took_s = fake.timed(*cmd)
    assert got == expected
    assert took_s < 2


# --- 5. CONFIG SET integers as strict as Redis; SETRANGE memory ---------------------------

ARABIC_INDIC_ONE = "\u0661"
CONFIG_INTEGERS = ["1_0", ARABIC_INDIC_ONE, "-0", "+1", " 1", "01", "0x10", "1.5", "", "-1", "5"]
CONFIG_INTEGERS += ["9223372036854775808", "18446744073709551616", "1kb", "1KB", "1b"]
CONFIG_INTEGER_PARAMS = [
    "timeout",
    "hz",
    "maxclients",
    "lua-time-limit",
    "maxmemory",
    "stream-node-max-entries",
    "stream-node-max-bytes",
    "proto-max-bulk-len",
    "list-max-listpack-size",
    "slowlog-log-slower-than",
]


@pytest.mark.parametrize("param", CONFIG_INTEGER_PARAMS)
def test_config_set_integers_are_parsed_as_strictly_as_redis(
    pair: tuple[Raw, Raw], param: str
) -> None:
    real, fake = pair
    original = real.call("CONFIG", "GET", param).split(b"\r\n")[4].decode()
    try:
        for value in CONFIG_INTEGERS:
            assert fake.call("CONFIG", "SET", param, value) == real.call(
                "CONFIG", "SET", param, value
            ), value
            assert fake.call("CONFIG", "GET", param) == real.call("CONFIG", "GET", param), value
    finally:
        real.call("CONFIG", "SET", param, original)
        fake.call("CONFIG", "SET", param, original)


BUFFER_LIMITS = [
    "normal 18446744073709551616 0 0",
    "normal 18446744073709551615kb 0 0",
    "normal 99999999999999999999999 1b 0",
    "normal -0 0 0",
    "normal 1_0 0 0",
    "normal 0 0 1_0",
    "normal 0 0 " + ARABIC_INDIC_ONE,
    "normal 0 0 -0",
    "normal 0 0 +1",
    "normal 0 0 01",
    "normal 0 0 2147483648",
    "normal 0 0 4294967297",
    "normal 0 0 -1",
    "normal 1kb 1K 5 pubsub 1mb 1m 7",
]


def test_client_output_buffer_limit_values_are_read_as_redis(pair: tuple[Raw, Raw]) -> None:
    real, fake = pair
    param = "client-output-buffer-limit"
    original = fake.call("CONFIG", "GET", param).split(b"\r\n")[4].decode()
    # The engine bounds normal clients by default (Redis does not): start from the same.
    real.call("CONFIG", "SET", param, original)
    try:
        for value in BUFFER_LIMITS:
            reset = "normal 0 0 0 pubsub 33554432 8388608 60"
            real.call("CONFIG", "SET", param, reset)
            fake.call("CONFIG", "SET", param, reset)
            assert fake.call("CONFIG", "SET", param, value) == real.call(
                "CONFIG", "SET", param, value
            ), value
            assert fake.call("CONFIG", "GET", param) == real.call("CONFIG", "GET", param), value
    finally:
        real.call("CONFIG", "SET", param, "normal 0 0 0")
        fake.call("CONFIG", "SET", param, original)


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident set (VmHWM), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmHWM for pid {pid}")


def current_rss_mb(pid: int) -> float:
    """The process's resident set now (VmRSS), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


@pytest.fixture
def fresh_pair(tmp_path: Path) -> Iterator[tuple[RedisServer, EngineServerProcess]]:
    """A redis-server and an engine server of the test's own (memory figures start clean)."""
    real = RedisServer(tmp_path / "redis").start()
    fake = EngineServerProcess().start()
    yield real, fake
    fake.stop()
    real.stop()


@pytest.mark.slow
def test_setrange_at_half_a_gigabyte_costs_memory_near_redis(
    fresh_pair: tuple[RedisServer, EngineServerProcess],
) -> None:
    real_srv, fake_srv = fresh_pair
    assert real_srv.proc is not None
    assert fake_srv.proc is not None
    peaks = {}
    for name, port, pid in (
        ("redis", real_srv.port, real_srv.proc.pid),
        ("engine", fake_srv.port, fake_srv.proc.pid),
    ):
        conn = Raw(port)
        before = peak_rss_mb(pid)
        assert conn.call("SETRANGE", "k", "536870911", "x") == b":536870912\r\n"
        assert conn.call("STRLEN", "k") == b":536870912\r\n"
        peaks[name] = peak_rss_mb(pid) - before
        conn.close()
    print(f"SETRANGE k 536870911 x peak RSS growth (MB): {peaks}")
    assert peaks["redis"] > 500
    assert peaks["engine"] < peaks["redis"] * 1.25
