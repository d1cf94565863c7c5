"""Raw-socket helpers for the Pub/Sub differential tests: named connections to redis-server
and to the engine's TCP server, driven by the same steps, whose every output byte (replies
and messages, in order) is collected per connection and compared."""

from __future__ import annotations

import itertools
import socket
import time
from collections.abc import Iterator, Sequence

import pytest

from tests.engine.conftest import pack
from tests.support.engine_server import ThreadedServer
from tests.support.servers import RedisServer

Arg = bytes | str | int
Step = tuple[str, Sequence[Arg]]

_MARKS = itertools.count()


class Side:
    """One server's named raw connections. After each step every open connection not inside
    MULTI is sent ``PING <mark>`` and read up to that PING's answer: what came before it is
    everything the server wrote to that connection since (replies and messages, in order).
    The marker's own reply is not kept (its shape depends on the subscribed mode)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.conns: dict[str, socket.socket] = {}
        self.bufs: dict[str, bytearray] = {}
        self.in_multi: set[str] = set()
        self.closed: set[str] = set()

    def conn(self, name: str) -> socket.socket:
        sock = self.conns.get(name)
        if sock is None:
            sock = socket.create_connection(("127.0.0.1", self.port))
            sock.settimeout(10)
            self.conns[name] = sock
            self.bufs[name] = bytearray()
        return sock

    def send(self, name: str, args: Sequence[Arg]) -> None:
        self.conn(name).sendall(pack(tuple(args)))
        word = str(args[0]).lower() if not isinstance(args[0], bytes) else args[0].decode()
        word = word.lower()
        if word == "multi":
            self.in_multi.add(name)
        elif word in ("exec", "discard", "reset"):
            self.in_multi.discard(name)
        elif word == "quit":
            self.closed.add(name)

    def collect(self, name: str) -> bytes:
        """Everything ``name`` received since the last collect (see the class doc)."""
        sock = self.conn(name)
        mark = b"mark-%d" % next(_MARKS)
        sock.sendall(pack((b"PING", mark)))
        buf = self.bufs[name]
        needle = mark + b"\r\n"
        while True:
            at = buf.find(needle)
            if at >= 0:
                break
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError(f"{name}: connection closed by the server")
            buf += chunk
        # The marker's reply starts at the last frame header before the mark: strip the
        # PING answer ($n / *2 $4 pong $n) by cutting at its first byte.
        head = _marker_reply_start(buf, at)
        out = bytes(buf[:head])
        del buf[: at + len(needle)]
        return out

    def collect_all(self, first: str) -> dict[str, bytes]:
        """Collect every connection, ``first`` first: once its command has answered, what
        it sent the others is in their streams ahead of their markers."""
        names = [first, *(n for n in self.conns if n != first)]
        return {
            name: self.collect(name)
            for name in names
            if name not in self.in_multi and name not in self.closed
        }

    def read_until_closed(self, name: str, timeout_s: float = 5.0) -> bytes:
        """What ``name`` receives until the server closes it (QUIT)."""
        sock = self.conn(name)
        buf = self.bufs[name]
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            chunk = sock.recv(65536)
            if not chunk:
                break
            buf += chunk
        out = bytes(buf)
        buf.clear()
        return out

    def close(self) -> None:
        for sock in self.conns.values():
            sock.close()
        self.conns.clear()


def _marker_reply_start(buf: bytearray, at: int) -> int:
    # PING mark answers "$n\r\nmark\r\n" (unsubscribed, or RESP3) or
    # "*2\r\n$4\r\npong\r\n$n\r\nmark\r\n" (RESP2 subscribed).
    bulk = buf.rfind(b"$", 0, at)
    pong = b"*2\r\n$4\r\npong\r\n"
    if bulk >= len(pong) and buf[bulk - len(pong) : bulk] == pong:
        return bulk - len(pong)
    return bulk


class Pair:
    """redis-server and the engine's server, driven step by step and compared byte by byte."""

    def __init__(self, real_port: int, engine_port: int) -> None:
        self.real = Side(real_port)
        self.fake = Side(engine_port)

    def step(self, name: str, *args: Arg) -> dict[str, bytes]:
        """Send one command on connection ``name`` of both servers; assert every connection
        received the same bytes; return them (by connection name)."""
        self.real.send(name, args)
        self.fake.send(name, args)
        if str(args[0]).lower() == "quit":
            real_out = {name: self.real.read_until_closed(name)}
            fake_out = {name: self.fake.read_until_closed(name)}
            assert fake_out == real_out, f"{name} {args!r}"
            return real_out
        real = self.real.collect_all(name)
        fake = self.fake.collect_all(name)
        assert fake == real, f"after {name}: {args!r}\nredis:  {real!r}\nengine: {fake!r}"
        return real

    def run(self, steps: Sequence[Step]) -> None:
        for name, args in steps:
            self.step(name, *args)

    def close(self) -> None:
        self.real.close()
        self.fake.close()


def steps(text: str) -> list[Step]:
    """``"a: SUBSCRIBE x\\nb: PUBLISH x hi"`` -> steps (words split on spaces)."""
    out: list[Step] = []
    for line in text.strip().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, command = line.partition(":")
        out.append((name.strip(), command.split()))
    return out


@pytest.fixture
def engine_server() -> Iterator[ThreadedServer]:
    """A fresh engine TCP server for one test."""
    server = ThreadedServer()
    yield server
    server.close()


@pytest.fixture
def pair(redis_server: RedisServer, engine_server: ThreadedServer) -> Iterator[Pair]:
    """The session's redis-server and a fresh engine server, compared step by step."""
    p = Pair(redis_server.port, engine_server.port)
    yield p
    p.close()
