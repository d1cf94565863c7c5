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
    Frames,
    Map,
    NullArray,
    NullBulk,
    Push,
    SetReply,
    Status,
    Verbatim,
    format_double,
)
from streamworker.engine.resp import FAST_WINDOW, read_arrays

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
        # The commands that were complete before the malformed input (set by feed()).
        self.commands: list[list[bytes]] = []


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

    Like Redis's, it keeps the arguments of a multibulk command already received, so a huge
    command arriving in many reads is parsed once, and a large bulk string is not looked at
    again until all of it is there.
    """

    __slots__ = ("_args", "_buf", "_left", "_mb_bytes", "_need", "authenticated", "max_bulk_len")

    def __init__(self, max_bulk_len: int = 512 * 1024 * 1024) -> None:
        self._buf = bytearray()
        # The multibulk command in progress: its arguments so far, how many are missing,
        # and how many bytes of input they took.
        self._args: list[bytes] | None = None
        self._left = 0
        self._mb_bytes = 0
        # Do not parse again before the buffer holds this many bytes.
        self._need = 0
        self.max_bulk_len = max_bulk_len
        # Redis bounds what a client that has not authenticated yet may send: at most 10
        # arguments of at most 16 KB (a server with requirepass sets this False until AUTH).
        self.authenticated = True

    @property
    def pending(self) -> int:
        """Bytes received but not yet consumed as a complete command."""
        return len(self._buf) + self._mb_bytes

    def feed(self, data: bytes) -> list[list[bytes]]:
        """Append ``data`` and return every command now complete (possibly none).

        Raises :class:`ProtocolError` on malformed input; the commands completed before the
        error are in the exception's ``commands`` (Redis executes them before replying with
        the error).
        """
        buf = self._buf
        if buf:
            buf += data
            if len(buf) < self._need:
                return []
            view = bytes(buf)
        else:
            view = data if type(data) is bytes else bytes(data)
        out: list[list[bytes]] = []
        try:
            pos = self._parse(view, out)
        except ProtocolError as exc:
            exc.commands = out
            raise
        if buf:
            del buf[:pos]
        elif pos < len(view):
            buf += view[pos:]
        return out

    def _parse(self, data: bytes, out: list[list[bytes]]) -> int:
        # Parses complete commands from data into out; returns how many bytes were consumed.
        n = len(data)
        pos = 0
        args = self._args
        left = self._left
        maxlen = self.max_bulk_len
        authenticated = self.authenticated
        find = data.find
        self._need = 0
        if args is None and n <= FAST_WINDOW and n and data[0] == 0x2A:
            pos = _parse_split(data, out, authenticated, maxlen)
        # Where the bytes of the multibulk in progress start in data (its earlier bytes, in
        # _mb_bytes, came in earlier reads).
        mb_start = 0
        while True:
            if args is None:
                if pos >= n:
                    break
                if data[pos] != 0x2A:  # not '*': an inline command
                    nl = find(b"\n", pos)
                    if nl < 0:
                        if n - pos > INLINE_MAX_SIZE:
                            raise ProtocolError(msgs.PROTO_TOO_BIG_INLINE)
                        self._need = n - pos + 1
                        break
                    end = nl - 1 if nl > pos and data[nl - 1] == 0x0D else nl
                    line = data[pos:end]
                    pos = nl + 1
                    inline = parse_inline_args(line)
                    if inline is None:
                        raise ProtocolError(msgs.PROTO_UNBALANCED_QUOTES)
                    if inline:
                        out.append(inline)
                    continue
                cr = find(b"\r\n", pos)
                if cr < 0:
                    if n - pos > INLINE_MAX_SIZE:
                        raise ProtocolError(msgs.PROTO_TOO_BIG_MBULK)
                    self._need = n - pos + 1
                    break
                digits = data[pos + 1 : cr]
                if digits.isdigit() and cr - pos < 12 and (digits[0] != 0x30 or cr - pos == 2):
                    count = int(digits)
                else:
                    parsed = _string2ll(digits)
                    if parsed is None:
                        raise ProtocolError(msgs.PROTO_INVALID_MULTIBULK_LEN)
                    count = parsed
                if count > _INT_MAX:
                    raise ProtocolError(msgs.PROTO_INVALID_MULTIBULK_LEN)
                if count > 10 and not authenticated:
                    raise ProtocolError(msgs.PROTO_UNAUTH_MULTIBULK_LEN)
                mb_start = pos
                self._mb_bytes = 0
                pos = cr + 2
                if count <= 0:
                    continue
                args = []
                left = count
            append = args.append
            while left:
                cr = find(b"\r\n", pos)
                if cr < 0:
                    if n - pos > INLINE_MAX_SIZE:
                        raise ProtocolError(msgs.PROTO_TOO_BIG_BULK)
                    self._need = n - pos + 1
                    break
                if data[pos] != 0x24:  # '$'
                    raise ProtocolError(msgs.proto_expected_dollar(chr(data[pos])))
                digits = data[pos + 1 : cr]
                if digits.isdigit() and cr - pos < 20 and (digits[0] != 0x30 or cr - pos == 2):
                    size = int(digits)
                else:
                    parsed = _string2ll(digits)
                    if parsed is None or parsed < 0:
                        raise ProtocolError(msgs.PROTO_INVALID_BULK_LEN)
                    size = parsed
                if size > maxlen:
                    raise ProtocolError(msgs.PROTO_INVALID_BULK_LEN)
                if size > 16384 and not authenticated:
                    raise ProtocolError(msgs.PROTO_UNAUTH_BULK_LEN)
                # Redis skips the two bytes after the payload without checking they are CRLF.
                end = cr + 2 + size
                if end + 2 > n:
                    self._need = end + 2 - pos
                    break
                append(data[cr + 2 : end])
                pos = end + 2
                left -= 1
            if left:
                self._mb_bytes += pos - mb_start
                break
            out.append(args)
            args = None
            self._mb_bytes = 0
        self._args = args
        self._left = left
        return pos


def _parse_split(data: bytes, out: list[list[bytes]], authenticated: bool, maxlen: int) -> int:
    # The fast path for a read of ordinary commands (.resp): anything it does not accept is
    # parsed byte by byte from that command on (which also produces the errors).
    # Returns the bytes consumed.
    parts = data.split(b"\r\n")
    last = len(parts) - 1  # parts[last] follows the last CRLF: incomplete
    small = authenticated or len(data) <= 16384
    if len(data) > maxlen or not small:
        return 0
    # Redis bounds what a client that has not authenticated yet may send (10 arguments).
    i = read_arrays(parts, 0, last, out, last, _INT_MAX if authenticated else 10)
    return sum(map(len, parts[:i])) + 2 * i if i else 0


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
    text = value.text if value.text is not None else format_double(value.value)
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


def _enc_push(out: bytearray, value: Push, resp: int) -> None:
    out += (b">%d\r\n" if resp >= 3 else b"*%d\r\n") % len(value.items)
    for item in value.items:
        _ENCODERS.get(type(item), _enc_fallback)(out, item, resp)


def _enc_frames(out: bytearray, value: Frames, resp: int) -> None:
    for item in value.items:
        _ENCODERS.get(type(item), _enc_fallback)(out, item, resp)


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
    Push: _enc_push,
    Frames: _enc_frames,
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
