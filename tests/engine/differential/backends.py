"""The three columns of the differential tests, behind one interface.

Each backend holds two connections: index 0 speaks RESP2, index 1 negotiated RESP3 with
``HELLO 3``. :meth:`Backend.call` returns the raw reply bytes of one command.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

from streamworker.engine import Engine
from streamworker.engine.context import Blocked, ClientState
from streamworker.engine.protocol import encode
from tests.engine.differential.resp import RawConnection

HELLO3 = [b"HELLO", b"3"]
# What the programs may change with CONFIG SET (the defaults of redis-server 7.0).
RESET_CONFIG = [
    b"CONFIG",
    b"SET",
    b"stream-node-max-entries",
    b"100",
    b"stream-node-max-bytes",
    b"4096",
    b"hll-sparse-max-bytes",
    b"3000",
]


class Backend(Protocol):
    """A server under test: ``reset`` empties it and its connections' state."""

    name: str

    def reset(self) -> None: ...

    def call(self, conn: int, argv: list[bytes]) -> bytes: ...

    def close(self) -> None: ...


class RedisBackend:
    """redis-server over two raw loopback sockets."""

    name = "redis"

    def __init__(self, port: int) -> None:
        self.conns = [RawConnection(port), RawConnection(port)]
        self.conns[1].call(HELLO3)

    def reset(self) -> None:
        for conn in self.conns:
            # A program always closes its MULTI blocks; UNWATCH drops WATCHes it left behind.
            conn.call([b"UNWATCH"])
        self.conns[0].call([b"FLUSHALL"])
        self.conns[0].call([b"FUNCTION", b"FLUSH"])  # FLUSHALL keeps the libraries
        self.conns[0].call(RESET_CONFIG)

    def call(self, conn: int, argv: list[bytes]) -> bytes:
        return self.conns[conn].call(argv)

    def close(self) -> None:
        for conn in self.conns:
            conn.close()


class EngineBackend:
    """The engine: ``Engine.execute`` plus the protocol encoder, a fresh Engine per program."""

    name = "engine"

    def __init__(self) -> None:
        self.engine = Engine()
        self.clients: list[ClientState] = []
        self.reset()

    def reset(self) -> None:
        self.engine = Engine()
        self.clients = [self.engine.connect(), self.engine.connect()]
        self.engine.execute(self.clients[1], HELLO3)
        # The harness must not depend on HELLO working: the RESP3 column is about replies.
        self.clients[1].resp = 3

    def call(self, conn: int, argv: list[bytes]) -> bytes:
        client = self.clients[conn]
        reply = self.engine.execute(client, argv)
        if isinstance(reply, Blocked):
            # Programs block only with a timeout of a few ms (BLMPOP 0.01), served or timed out
            # at once on both servers.
            served = self.engine.wait(reply, 2.0)
            if served is None:
                raise AssertionError(f"the engine blocked on {argv!r}")
            reply = served
        return encode(reply, client.resp)

    def close(self) -> None:
        for client in self.clients:
            self.engine.disconnect(client)


class FakeredisBackend:
    """fakeredis's FakeSocket driven with request bytes; its reply objects are encoded here
    (fakeredis keeps no wire bytes, and it cannot tell a null bulk from a null array)."""

    name = "fakeredis"

    def __init__(self) -> None:
        import fakeredis
        import redis
        from fakeredis._socket._fakesocket import FakeSocket

        class RawFakeSocket(FakeSocket):
            def _decode_result(self, result: Any) -> Any:
                return result

        self._fakeredis = fakeredis
        self._socket_class = RawFakeSocket
        self._client_class = redis.Redis
        self.socks: list[Any] = []
        self.multi: list[list[list[bytes]] | None] = [None, None]
        self.reset()

    def reset(self) -> None:
        self.multi = [None, None]
        server = self._fakeredis.FakeServer(version=(7, 0))
        self.socks = [
            self._socket_class(server, db=0, client_class=self._client_class) for _ in range(2)
        ]
        self.call(1, HELLO3)

    def call(self, conn: int, argv: list[bytes]) -> bytes:
        from tests.engine.differential.resp import pack_command

        sock = self.socks[conn]
        name = argv[0].lower() if argv else b""
        queue = self.multi[conn]
        if queue is not None:
            if name in (b"exec", b"discard"):
                self.multi[conn] = None
                if name == b"exec" and any(_blocks(q) for q in queue):
                    # fakeredis really blocks on XREAD BLOCK inside MULTI (redis-server does not).
                    self.call(conn, [b"DISCARD"])
                    return b"<fakeredis would block>"
            else:
                queue.append(argv)
        elif name == b"multi":
            self.multi[conn] = []
        elif _blocks(argv):
            return b"<fakeredis would block>"
        try:
            sock.sendall(pack_command(argv))
        except Exception as exc:  # fakeredis raises some protocol errors instead of replying
            return b"-%s\r\n" % _one_line(str(exc)).encode()
        assert sock.responses is not None
        if sock.responses.empty():
            return b"<no reply>"
        value = sock.responses.get_nowait()
        resp = sock._client_info.protocol_version
        return _encode_fake(value, resp)

    def close(self) -> None:
        self.socks = []


def _blocks(argv: list[bytes]) -> bool:
    return (
        bool(argv)
        and argv[0].lower() in (b"xread", b"xreadgroup")
        and any(a.lower() == b"block" for a in argv)
    )


def _one_line(text: str) -> str:
    return text.replace("\r", " ").replace("\n", " ")


def _encode_fake(value: Any, resp: int) -> bytes:
    from fakeredis._helpers import SimpleError, SimpleString

    if value is None:
        return b"_\r\n" if resp >= 3 else b"$-1\r\n"
    if isinstance(value, SimpleError):
        return b"-%s\r\n" % _one_line(value.value).encode()
    if isinstance(value, Exception):
        return b"-%s\r\n" % _one_line(str(value)).encode()
    if isinstance(value, SimpleString):
        text = value.value if isinstance(value.value, bytes) else str(value.value).encode()
        return b"+%s\r\n" % text
    if isinstance(value, bool):
        if resp >= 3:
            return b"#t\r\n" if value else b"#f\r\n"
        return b":1\r\n" if value else b":0\r\n"
    if isinstance(value, int):
        return b":%d\r\n" % value
    if isinstance(value, float):
        if math.isinf(value):
            text = b"inf" if value > 0 else b"-inf"
        else:
            text = repr(value).encode().removesuffix(b".0")
        return b",%s\r\n" % text if resp >= 3 else b"$%d\r\n%s\r\n" % (len(text), text)
    if isinstance(value, str):
        value = value.encode()
    if isinstance(value, bytes):
        return b"$%d\r\n%s\r\n" % (len(value), value)
    if isinstance(value, dict):
        items = [x for kv in value.items() for x in kv]
        head = b"%%%d\r\n" % len(value) if resp >= 3 else b"*%d\r\n" % len(items)
        return head + b"".join(_encode_fake(x, resp) for x in items)
    if isinstance(value, (set, frozenset)):
        head = b"~%d\r\n" % len(value) if resp >= 3 else b"*%d\r\n" % len(value)
        return head + b"".join(_encode_fake(x, resp) for x in sorted(value))
    if isinstance(value, (list, tuple)):
        return b"*%d\r\n" % len(value) + b"".join(_encode_fake(x, resp) for x in value)
    return b"<unencodable %s>" % type(value).__name__.encode()
