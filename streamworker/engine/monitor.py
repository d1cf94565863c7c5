"""What a MONITOR connection receives for a command: Redis's replicationFeedMonitors line.

Below :mod:`.core`, which feeds every call to the monitors; MONITOR itself is in
:mod:`.commands.server_admin`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from streamworker.engine.replies import Status

if TYPE_CHECKING:
    from streamworker.engine.table import CommandSpec

__all__ = ["monitor_line", "quote_arg"]

_REPR_ESCAPES = {
    0x5C: b"\\\\",
    0x22: b'\\"',
    0x0A: b"\\n",
    0x0D: b"\\r",
    0x09: b"\\t",
    0x07: b"\\a",
    0x08: b"\\b",
}


def quote_arg(arg: bytes) -> bytes:
    """``arg`` quoted as Redis's sdscatrepr: printable ASCII as is, the C escapes for
    backslash, quote, LF, CR, TAB, BEL and BS, ``\\xHH`` for every other byte."""
    if all(0x20 <= c <= 0x7E and c != 0x5C and c != 0x22 for c in arg):
        return b'"' + arg + b'"'
    out = bytearray(b'"')
    for c in arg:
        esc = _REPR_ESCAPES.get(c)
        if esc is not None:
            out += esc
        elif 0x20 <= c <= 0x7E:
            out.append(c)
        else:
            out += b"\\x%02x" % c
    out += b'"'
    return bytes(out)


_REDACTED = b"(redacted)"


def _redacted(spec: CommandSpec, argv: Sequence[bytes]) -> list[bytes]:
    # Redis hides passwords from MONITOR: AUTH's arguments, HELLO's AUTH pair, MIGRATE's
    # AUTH / AUTH2 credentials.
    name = spec.name
    out = list(argv)
    if name == "auth":
        for i in range(1, len(out)):
            out[i] = _REDACTED
    elif name == "hello":
        for i in range(2, len(out) - 2):
            if out[i].lower() == b"auth":
                out[i + 1] = out[i + 2] = _REDACTED
                break
    elif name == "migrate":
        for i in range(6, len(out)):
            word = out[i].lower()
            if word == b"keys":
                break
            if word == b"auth" and i + 1 < len(out):
                out[i + 1] = _REDACTED
                break
            if word == b"auth2" and i + 2 < len(out):
                out[i + 1] = out[i + 2] = _REDACTED
                break
    return out


def monitor_line(spec: CommandSpec, argv: Sequence[bytes], db_index: int, addr: str) -> Status:
    """The line a MONITOR connection receives for ``argv``:
    ``<unix time with microseconds> [<db> <client address or lua>] "arg" "arg"...``."""
    now_us = time.time_ns() // 1000
    head = b"%d.%06d [%d %s]" % (now_us // 1_000_000, now_us % 1_000_000, db_index, addr.encode())
    body = b" ".join(quote_arg(a) for a in _redacted(spec, argv))
    return Status((head + b" " + body).decode("utf-8", "surrogateescape"))
