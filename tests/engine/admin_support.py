"""Shared pieces of the administration tests (CLIENT, MONITOR, ACL, SHUTDOWN...): a
redis-server of the module's own (CLIENT PAUSE, CLIENT KILL and MONITOR would disturb the
session's) next to the engine's RESP server, and raw RESP connections to either."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.engine.conftest import pack, read_raw_reply
from tests.support.engine_server import ThreadedServer
from tests.support.servers import RedisServer

__all__ = ["Conn", "Pair", "pair_fixture"]


class Conn:
    """A raw RESP connection returning reply bytes (10 s read timeout)."""

    def __init__(self, port: int, resp: int = 2) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.settimeout(10)
        self.buf = bytearray()
        if resp == 3:
            self.call("HELLO", "3")

    def send(self, *args: bytes | str | int) -> None:
        """Send one command without reading its reply."""
        self.sock.sendall(pack(args))

    def read(self, timeout: float = 10) -> bytes:
        """Read one reply (raises TimeoutError when none comes within ``timeout``)."""
        self.sock.settimeout(timeout)
        try:
            return read_raw_reply(self.sock, self.buf)
        finally:
            self.sock.settimeout(10)

    def call(self, *args: bytes | str | int) -> bytes:
        self.send(*args)
        return self.read()

    def nothing_within(self, seconds: float) -> bool:
        """True when no reply byte arrives within ``seconds`` (the connection stays open)."""
        if self.buf:
            return False
        self.sock.settimeout(seconds)
        try:
            data = self.sock.recv(65536)
        except TimeoutError:
            return True
        finally:
            self.sock.settimeout(10)
        self.buf += data
        return False

    def closed_by_server(self, timeout: float = 5) -> bool:
        """True when the server closed the connection (EOF or reset) within ``timeout``."""
        self.sock.settimeout(timeout)
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return True
                self.buf += data
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False
        finally:
            self.sock.settimeout(10)

    def close(self) -> None:
        self.sock.close()


class Pair:
    """redis-server and the engine's server, one port each (``ports`` in that order)."""

    def __init__(self, real: RedisServer, engine: ThreadedServer) -> None:
        self.real = real
        self.engine = engine
        self.ports = {"redis": real.port, "engine": engine.port}

    def conns(self, resp: int = 2) -> dict[str, Conn]:
        """One fresh connection to each side."""
        return {name: Conn(port, resp) for name, port in self.ports.items()}

    def both(self, *args: bytes | str | int, resp: int = 2) -> dict[str, bytes]:
        """The reply of each side to ``args`` on a fresh connection."""
        out = {}
        for name, conn in self.conns(resp).items():
            out[name] = conn.call(*args)
            conn.close()
        return out

    def cleanup(self) -> None:
        for port in self.ports.values():
            conn = Conn(port)
            conn.call("CLIENT", "UNPAUSE")
            conn.call("FLUSHALL")
            conn.close()


def pair_fixture(tmp: Path) -> Iterator[Pair]:
    """Start both servers in ``tmp``; yield the pair; stop them."""
    real = RedisServer(tmp / "redis").start()
    engine = ThreadedServer()
    pair = Pair(real, engine)
    try:
        yield pair
    finally:
        engine.close()
        real.stop()


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    """A redis-server and an engine server for this module; each test leaves them unpaused
    and empty."""
    yield from pair_fixture(tmp_path_factory.mktemp("admin"))
