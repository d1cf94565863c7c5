"""Sans-I/O RESP2/RESP3: a request parser and a reply encoder.

:class:`RequestParser` turns bytes into commands (``list[bytes]``) following Redis 7.0's
``processMultibulkBuffer`` / ``processInlineBuffer``, with its limits and error texts; after a
:class:`ProtocolError` the server replies with ``-<text>`` and closes the connection.
:func:`encode` renders :mod:`.replies` values for a protocol version (2 or 3).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from streamworker.engine import msgs
from streamworker.engine.errors import CommandError
from streamworker.engine.replies import (
    Double,
    Map,
    NullArray,
    NullBulk,
    SetReply,
    Status,
    Verbatim,
    format_double,
)

__all__ = [
    "INLINE_MAX_SIZE",
    "ProtocolError",
    "RequestParser",
    "encode",
    "encode_into",
    "parse_inline_args",
]

INLINE_MAX_SIZE: Final = 64 * 1024
"""Redis's PROTO_INLINE_MAX_SIZE: the longest inline request or count line."""

_INT_MAX: Final = 2**31 - 1


class ProtocolError(Exception):
    """Malformed input. ``text`` is the error reply (``ERR Protocol error: ...``)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


def _string2ll(buf: bytes) -> int | None:
    # Redis's string2ll: optional '-', no '+', no spaces, no leading zeros, fits in int64.
    n = len(buf)
    if n == 0 or n > 20:
        return None
    if buf == b"0":
        return 0
    start = 1 if buf[0] == 0x2D else 0
    if start == n or not (0x31 <= buf[start] <= 0x39):
        return None
    digits = buf[start:]
    if not digits.isdigit():
        return None
    value = int(digits)
    if start:
        value = -value
        if value < -(2**63):
            return None
    elif value > 2**63 - 1:
        return None
    return value


class RequestParser:
    """Incremental request parser. Feed bytes, get complete commands.

    ``max_bulk_len`` is ``proto-max-bulk-len`` (512 MB by default). Empty commands (``*0``,
    ``*-1`` and blank inline lines) produce nothing, as in Redis.
    """

    __slots__ = ("_buf", "_pos", "max_bulk_len")

    def __init__(self, max_bulk_len: int = 512 * 1024 * 1024) -> None:
        self._buf = bytearray()
        self._pos = 0
        self.max_bulk_len = max_bulk_len

    @property
    def pending(self) -> int:
        """Bytes received but not yet consumed as a complete command."""
        return len(self._buf) - self._pos

    def feed(self, data: bytes) -> list[list[bytes]]:
        """Append ``data`` and return every command now complete (possibly none).

        Raises :class:`ProtocolError` on malformed input; the commands completed before the
        error are lost with it (Redis has executed them already; callers that need them
        should feed smaller pieces).
        """
        buf = self._buf
        buf += data
        out: list[list[bytes]] = []
        while self._pos < len(buf):
            cmd = self._multibulk() if buf[self._pos] == 0x2A else self._inline()
            if cmd is _INCOMPLETE:
                break
            if cmd:
                out.append(cmd)  # type: ignore[arg-type]
        if self._pos:
            del buf[: self._pos]
            self._pos = 0
        return out

    def _inline(self) -> object:
        buf = self._buf
        nl = buf.find(b"\n", self._pos)
        if nl < 0:
            if len(buf) - self._pos > INLINE_MAX_SIZE:
                raise ProtocolError(msgs.PROTO_TOO_BIG_INLINE)
            return _INCOMPLETE
        end = nl - 1 if nl > self._pos and buf[nl - 1] == 0x0D else nl
        line = bytes(buf[self._pos : end])
        self._pos = nl + 1
        args = parse_inline_args(line)
        if args is None:
            raise ProtocolError(msgs.PROTO_UNBALANCED_QUOTES)
        return args

    def _multibulk(self) -> object:
        buf = self._buf
        pos = self._pos
        cr = buf.find(b"\r\n", pos)
        if cr < 0:
            if len(buf) - pos > INLINE_MAX_SIZE:
                raise ProtocolError(msgs.PROTO_TOO_BIG_MBULK)
            return _INCOMPLETE
        count = _string2ll(bytes(buf[pos + 1 : cr]))
        if count is None or count > _INT_MAX:
            raise ProtocolError(msgs.PROTO_INVALID_MULTIBULK_LEN)
        pos = cr + 2
        if count <= 0:
            self._pos = pos
            return []
        args: list[bytes] = []
        maxlen = self.max_bulk_len
        for _ in range(count):
            cr = buf.find(b"\r\n", pos)
            if cr < 0:
                if len(buf) - pos > INLINE_MAX_SIZE:
                    raise ProtocolError(msgs.PROTO_TOO_BIG_BULK)
                return _INCOMPLETE
            if buf[pos] != 0x24:  # '$'
                raise ProtocolError(msgs.proto_expected_dollar(chr(buf[pos])))
            size = _string2ll(bytes(buf[pos + 1 : cr]))
            if size is None or size < 0 or size > maxlen:
                raise ProtocolError(msgs.PROTO_INVALID_BULK_LEN)
            start = cr + 2
            # Redis skips the two bytes after the payload without checking they are CRLF.
            if len(buf) < start + size + 2:
                return _INCOMPLETE
            args.append(bytes(buf[start : start + size]))
            pos = start + size + 2
        self._pos = pos
        return args


_INCOMPLETE: Final = object()

_ESCAPES: Final = {
    ord("n"): b"\n",
    ord("r"): b"\r",
    ord("t"): b"\t",
    ord("b"): b"\b",
    ord("a"): b"\a",
}
_HEX: Final = frozenset(b"0123456789abcdefABCDEF")
_SPACES: Final = frozenset(b" \n\r\t\v\f\0")


def parse_inline_args(line: bytes) -> list[bytes] | None:
    """Split an inline command like Redis's ``sdssplitargs``; None on unbalanced quotes."""
    args: list[bytes] = []
    i = 0
    n = len(line)
    while True:
        while i < n and line[i] in _SPACES:
            i += 1
        if i >= n:
            return args
        cur = bytearray()
        inq = False
        insq = False
        while True:
            if inq:
                if i >= n:
                    return None
                c = line[i]
                if (
                    c == 0x5C
                    and i + 3 < n
                    and line[i + 1] == 0x78
                    and line[i + 2] in _HEX
                    and line[i + 3] in _HEX
                ):
                    cur.append(int(line[i + 2 : i + 4], 16))
                    i += 3
                elif c == 0x5C and i + 1 < n:
                    i += 1
                    cur += _ESCAPES.get(line[i], bytes((line[i],)))
                elif c == 0x22:
                    # A closing quote must be followed by a space or the end.
                    if i + 1 < n and line[i + 1] not in _SPACES:
                        return None
                    i += 1
                    break
                else:
                    cur.append(c)
            elif insq:
                if i >= n:
                    return None
                c = line[i]
                if c == 0x5C and i + 1 < n and line[i + 1] == 0x27:
                    i += 1
                    cur.append(0x27)
                elif c == 0x27:
                    if i + 1 < n and line[i + 1] not in _SPACES:
                        return None
                    i += 1
                    break
                else:
                    cur.append(c)
            else:
                if i >= n:
                    break
                c = line[i]
                if c in _SPACES:
                    break
                if c == 0x22:
                    inq = True
                elif c == 0x27:
                    insq = True
                else:
                    cur.append(c)
            i += 1
        args.append(bytes(cur))


# --- encoder -------------------------------------------------------------------------------

_Enc = Callable[[bytearray, Any, int], None]


def _enc_bytes(out: bytearray, value: bytes, resp: int) -> None:
    out += b"$%d\r\n" % len(value)
    out += value
    out += b"\r\n"


def _enc_str(out: bytearray, value: str, resp: int) -> None:
    _enc_bytes(out, value.encode("utf-8", "surrogateescape"), resp)


def _enc_int(out: bytearray, value: int, resp: int) -> None:
    out += b":%d\r\n" % value


def _enc_bool(out: bytearray, value: bool, resp: int) -> None:
    if resp >= 3:
        out += b"#t\r\n" if value else b"#f\r\n"
    else:
        out += b":1\r\n" if value else b":0\r\n"


def _enc_status(out: bytearray, value: Status, resp: int) -> None:
    out += b"+"
    out += value.text.encode("utf-8", "surrogateescape")
    out += b"\r\n"


def _enc_error(out: bytearray, value: CommandError, resp: int) -> None:
    text = value.text.encode("utf-8", "surrogateescape")
    out += b"-"
    out += text.replace(b"\r", b" ").replace(b"\n", b" ")
    out += b"\r\n"


def _enc_list(out: bytearray, value: list[Any] | tuple[Any, ...], resp: int) -> None:
    out += b"*%d\r\n" % len(value)
    for item in value:
        _ENCODERS.get(type(item), _enc_fallback)(out, item, resp)


def _enc_null_bulk(out: bytearray, value: object, resp: int) -> None:
    out += b"_\r\n" if resp >= 3 else b"$-1\r\n"


def _enc_null_array(out: bytearray, value: object, resp: int) -> None:
    out += b"_\r\n" if resp >= 3 else b"*-1\r\n"


def _enc_map(out: bytearray, value: Map, resp: int) -> None:
    items = value.items
    if resp >= 3:
        out += b"%%%d\r\n" % len(items)
    else:
        out += b"*%d\r\n" % (2 * len(items))
    for k, v in items:
        _ENCODERS.get(type(k), _enc_fallback)(out, k, resp)
        _ENCODERS.get(type(v), _enc_fallback)(out, v, resp)


def _enc_double(out: bytearray, value: Double, resp: int) -> None:
    text = format_double(value.value)
    if resp >= 3:
        out += b","
        out += text
        out += b"\r\n"
    else:
        _enc_bytes(out, text, resp)


def _enc_set(out: bytearray, value: SetReply, resp: int) -> None:
    out += (b"~%d\r\n" if resp >= 3 else b"*%d\r\n") % len(value.items)
    for item in value.items:
        _ENCODERS.get(type(item), _enc_fallback)(out, item, resp)


def _enc_verbatim(out: bytearray, value: Verbatim, resp: int) -> None:
    if resp >= 3:
        out += b"=%d\r\ntxt:" % (len(value.text) + 4)
        out += value.text
        out += b"\r\n"
    else:
        _enc_bytes(out, value.text, resp)


def _enc_fallback(out: bytearray, value: Any, resp: int) -> None:
    for cls, enc in _ENCODERS.items():
        if isinstance(value, cls):
            enc(out, value, resp)
            return
    raise TypeError(f"cannot encode {type(value).__name__} as a reply")


_ENCODERS: dict[type, _Enc] = {
    bytes: _enc_bytes,
    int: _enc_int,
    bool: _enc_bool,
    Status: _enc_status,
    list: _enc_list,
    tuple: _enc_list,
    NullBulk: _enc_null_bulk,
    type(None): _enc_null_bulk,
    NullArray: _enc_null_array,
    Map: _enc_map,
    Double: _enc_double,
    SetReply: _enc_set,
    Verbatim: _enc_verbatim,
    CommandError: _enc_error,
    str: _enc_str,
    bytearray: _enc_bytes,
    memoryview: lambda out, v, resp: _enc_bytes(out, bytes(v), resp),
}


def encode_into(out: bytearray, reply: Any, resp: int = 2) -> None:
    """Append the wire form of ``reply`` for protocol ``resp`` (2 or 3) to ``out``.

    Besides the :mod:`.replies` values, ``None`` is a null bulk and ``bool`` is an integer in
    RESP2 and a boolean in RESP3 (Lua's ``true``).
    """
    _ENCODERS.get(type(reply), _enc_fallback)(out, reply, resp)


def encode(reply: Any, resp: int = 2) -> bytes:
    """The wire form of ``reply`` for protocol ``resp`` (2 or 3)."""
    out = bytearray()
    _ENCODERS.get(type(reply), _enc_fallback)(out, reply, resp)
    return bytes(out)
