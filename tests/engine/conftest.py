"""Fixtures for the engine tests: a real redis-server 7.0 for differential tests, raw RESP
clients for it and for the engine, and engine helpers."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from streamworker.engine import Engine
from streamworker.engine.context import Blocked, ClientState
from streamworker.engine.protocol import encode
from tests.engine.differential.backends import EngineBackend, RedisBackend
from tests.support.servers import RedisServer


def read_raw_reply(sock: socket.socket, buf: bytearray) -> bytes:
    """Read exactly one RESP2/RESP3 reply from ``sock`` and return its raw bytes."""
    while True:
        end = _reply_end(buf, 0)
        if end is not None:
            raw = bytes(buf[:end])
            del buf[:end]
            return raw
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("server closed the connection")
        buf += chunk


def _reply_end(buf: bytearray, pos: int) -> int | None:
    if pos >= len(buf):
        return None
    cr = buf.find(b"\r\n", pos)
    if cr < 0:
        return None
    kind = buf[pos : pos + 1]
    head = bytes(buf[pos + 1 : cr])
    after = cr + 2
    if kind in (b"+", b"-", b":", b",", b"_", b"#", b"("):
        return after
    if kind in (b"$", b"=", b"!"):
        n = int(head)
        if n < 0:
            return after
        return after + n + 2 if len(buf) >= after + n + 2 else None
    if kind in (b"*", b"~", b">", b"%", b"|"):
        n = int(head)
        if n < 0:
            return after
        if kind in (b"%", b"|"):
            n *= 2
        p: int | None = after
        for _ in range(n):
            assert p is not None
            p = _reply_end(buf, p)
            if p is None:
                return None
        return p
    raise ValueError(f"bad reply type {kind!r} in {bytes(buf[pos : pos + 40])!r}")


def pack(args: tuple[bytes | str | int, ...]) -> bytes:
    """A multibulk request."""
    out = bytearray(b"*%d\r\n" % len(args))
    for a in args:
        b = a if isinstance(a, bytes) else str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(b), b)
    return bytes(out)


class RawRedis:
    """A raw-socket client of the real server returning reply bytes."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.buf = bytearray()

    def call(self, *args: bytes | str | int) -> bytes:
        self.sock.sendall(pack(args))
        return read_raw_reply(self.sock, self.buf)

    def send_raw(self, data: bytes) -> bytes:
        self.sock.sendall(data)
        return read_raw_reply(self.sock, self.buf)

    def close(self) -> None:
        self.sock.close()


class RawEngine:
    """The engine behind the same interface: replies encoded for the client's protocol."""

    def __init__(self, engine: Engine | None = None) -> None:
        self.engine = engine or Engine()
        self.client: ClientState = self.engine.connect()

    def call(self, *args: bytes | str | int) -> bytes:
        argv = [a if isinstance(a, bytes) else str(a).encode() for a in args]
        reply = self.engine.execute(self.client, argv)
        if isinstance(reply, Blocked):
            reply = self.engine.wait(reply)
        return encode(reply, self.client.resp)

    def close(self) -> None:
        self.engine.disconnect(self.client)


@pytest.fixture(scope="session")
def redis_port(redis_server: RedisServer) -> int:
    """The port of the session's redis-server 7.0 (tests/conftest.py)."""
    return redis_server.port


class Differ:
    """Runs the same commands on redis-server and on the engine and compares reply bytes."""

    def __init__(self, port: int) -> None:
        self.real = RawRedis(port)
        self.real.call("FLUSHALL")
        self.fake = RawEngine()

    def both(self, *args: bytes | str | int) -> tuple[bytes, bytes]:
        return self.real.call(*args), self.fake.call(*args)

    def check(self, *args: bytes | str | int) -> bytes:
        """Assert both replies are byte-identical; return the reply."""
        real, fake = self.both(*args)
        assert fake == real, f"{args!r}: redis={real!r} engine={fake!r}"
        return real

    def close(self) -> None:
        self.real.call("FLUSHALL")
        self.real.close()
        self.fake.close()


Script = list[tuple[bytes | str | int, ...]]


def run_script(differ: Differ, script: Script, resp: int) -> None:
    """Run ``script`` on both sides under protocol ``resp``; every reply must be identical."""
    if resp == 3:
        differ.both("HELLO", 3)
    for cmd in script:
        differ.check(*cmd)


def cmds(text: str) -> Script:
    """A script from lines of shell-quoted commands."""
    import shlex

    return [tuple(shlex.split(line)) for line in text.strip().splitlines() if line.strip()]


@pytest.fixture
def differ(redis_port: int) -> Iterator[Differ]:
    """A fresh Differ (both sides flushed)."""
    d = Differ(redis_port)
    yield d
    d.close()


@pytest.fixture
def raw() -> Iterator[RawEngine]:
    """An engine client returning encoded reply bytes."""
    r = RawEngine()
    yield r
    r.close()


class FakeClock:
    """An injectable engine clock (Unix ms) that tests move by hand."""

    def __init__(self, now: int = 1_700_000_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


Exec = Callable[..., Any]


@pytest.fixture
def clock() -> FakeClock:
    """A fake clock for the ``engine`` fixture."""
    return FakeClock()


@pytest.fixture
def engine(clock: FakeClock) -> Engine:
    """An Engine on the fake clock."""
    return Engine(clock=clock)


@pytest.fixture
def ex(engine: Engine) -> Exec:
    """``ex("SET", "k", "v")`` runs a command on one client of ``engine`` and returns the reply
    value (or a Blocked)."""
    client = engine.connect()

    def run(*args: str | bytes | int) -> Any:
        argv = [a if isinstance(a, bytes) else str(a).encode() for a in args]
        return engine.execute(client, argv)

    return run


@pytest.fixture(scope="module")
def both(redis_server: RedisServer) -> Iterator[tuple[RedisBackend, EngineBackend]]:
    """A module's pair of differential backends: redis-server (reset afterwards) and a fresh
    engine, for scripts compared reply by reply."""
    real = RedisBackend(redis_server.port)
    engine = EngineBackend()
    yield real, engine
    real.reset()
    real.close()
    engine.close()
