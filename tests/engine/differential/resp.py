"""A lossless RESP2/RESP3 reply tree: parse raw reply bytes, rewrite leaves, dump them back.

``dump(parse(raw)) == raw`` for every well-formed reply, so comparing dumped trees is comparing
raw bytes; the tree only exists so that clock-decided leaves can be masked in place.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

_LINE_KINDS = frozenset(b"+-:,_#(")
_BULK_KINDS = frozenset(b"$=!")
_AGG_KINDS = frozenset(b"*~>%|")
_PAIR_KINDS = frozenset(b"%|")


@dataclass(frozen=True)
class Node:
    """One reply: ``kind`` is the type byte, ``head`` the header text after it (a length, an
    integer, a status text...), ``body`` a bulk payload, ``children`` an aggregate's elements
    (a map's keys and values interleaved)."""

    kind: int
    head: bytes
    body: bytes = b""
    children: tuple[Node, ...] = ()

    @property
    def is_null(self) -> bool:
        return self.kind == ord("_") or (self.kind in (ord("$"), ord("*")) and self.head == b"-1")

    @property
    def is_aggregate(self) -> bool:
        return self.kind in _AGG_KINDS and not self.is_null

    @property
    def text(self) -> bytes:
        """A leaf's value: the bulk payload, or the header of a one-line reply."""
        return self.body if self.kind in _BULK_KINDS else self.head


def parse(raw: bytes) -> Node:
    """Parse exactly one reply; raises ValueError on trailing or missing bytes."""
    node, end = _parse(raw, 0)
    if end != len(raw):
        raise ValueError(f"trailing bytes after a reply: {raw[end : end + 40]!r}")
    return node


def reply_end(buf: bytes | bytearray, pos: int = 0) -> int | None:
    """The index just past the reply starting at ``pos``, or None if ``buf`` is incomplete."""
    if pos >= len(buf):
        return None
    cr = buf.find(b"\r\n", pos)
    if cr < 0:
        return None
    kind = buf[pos]
    after = cr + 2
    if kind in _LINE_KINDS:
        return after
    n = int(buf[pos + 1 : cr])
    if kind in _BULK_KINDS:
        if n < 0:
            return after
        end = after + n + 2
        return end if len(buf) >= end else None
    if kind in _AGG_KINDS:
        if n < 0:
            return after
        if kind in _PAIR_KINDS:
            n *= 2
        p: int | None = after
        for _ in range(n):
            assert p is not None
            p = reply_end(buf, p)
            if p is None:
                return None
        return p
    raise ValueError(f"bad reply type byte {bytes([kind])!r} in {bytes(buf[pos : pos + 40])!r}")


def _parse(raw: bytes, pos: int) -> tuple[Node, int]:
    cr = raw.index(b"\r\n", pos)
    kind = raw[pos]
    head = raw[pos + 1 : cr]
    after = cr + 2
    if kind in _LINE_KINDS:
        return Node(kind, head), after
    n = int(head)
    if kind in _BULK_KINDS:
        if n < 0:
            return Node(kind, head), after
        body = raw[after : after + n]
        if raw[after + n : after + n + 2] != b"\r\n":
            raise ValueError("bulk string without its CRLF")
        return Node(kind, head, body), after + n + 2
    if kind in _AGG_KINDS:
        if n < 0:
            return Node(kind, head), after
        count = 2 * n if kind in _PAIR_KINDS else n
        children: list[Node] = []
        p = after
        for _ in range(count):
            child, p = _parse(raw, p)
            children.append(child)
        return Node(kind, head, b"", tuple(children)), p
    raise ValueError(f"bad reply type byte {bytes([kind])!r}")


def dump(node: Node) -> bytes:
    """The wire bytes of ``node``."""
    out = bytearray()
    _dump(node, out)
    return bytes(out)


def _dump(node: Node, out: bytearray) -> None:
    out.append(node.kind)
    out += node.head
    out += b"\r\n"
    if node.kind in _BULK_KINDS and not node.is_null:
        out += node.body
        out += b"\r\n"
    for child in node.children:
        _dump(child, out)


def masked(node: Node, placeholder: bytes = b"<clock>") -> Node:
    """``node`` with its value replaced by ``placeholder``, keeping its type byte (so an
    integer stays an integer and a bulk string stays a bulk string)."""
    if node.kind in _BULK_KINDS:
        return Node(node.kind, b"%d" % len(placeholder), placeholder)
    if node.kind in _AGG_KINDS or node.is_null:
        return node
    return Node(node.kind, placeholder)


def with_children(node: Node, children: list[Node] | tuple[Node, ...]) -> Node:
    """An aggregate like ``node`` with other elements (the length header follows)."""
    n = len(children) // 2 if node.kind in _PAIR_KINDS else len(children)
    return Node(node.kind, b"%d" % n, b"", tuple(children))


def map_items(node: Node) -> list[tuple[int, int]]:
    """Index pairs (key, value) of a map reply: a RESP3 map, or a RESP2 flat array."""
    if not node.is_aggregate or len(node.children) % 2:
        return []
    return [(i, i + 1) for i in range(0, len(node.children), 2)]


def pack_command(args: list[bytes]) -> bytes:
    """A multibulk request."""
    out = bytearray(b"*%d\r\n" % len(args))
    for a in args:
        out += b"$%d\r\n" % len(a)
        out += a
        out += b"\r\n"
    return bytes(out)


class RawConnection:
    """A raw-socket connection to a RESP server; :meth:`call` returns the reply bytes."""

    def __init__(self, port: int, host: str = "127.0.0.1", timeout_s: float = 10.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()

    def call(self, args: list[bytes]) -> bytes:
        self.sock.sendall(pack_command(args))
        return self.read_reply()

    def read_reply(self) -> bytes:
        while True:
            end = reply_end(self.buf)
            if end is not None:
                raw = bytes(self.buf[:end])
                del self.buf[:end]
                return raw
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("the server closed the connection")
            self.buf += chunk

    def close(self) -> None:
        self.sock.close()


def pretty(raw: bytes, limit: int = 600) -> str:
    """A one-line rendering of raw reply bytes for failure messages."""
    text = repr(raw)
    return text if len(text) <= limit else text[:limit] + f"... ({len(raw)} bytes)"
