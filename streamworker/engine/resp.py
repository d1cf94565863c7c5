"""Reading RESP arrays of bulk strings split on CRLF: the fast path the request parser
(:mod:`.protocol`) and the AOF loader (:mod:`.aof`) share.

A chunk of input is split on CRLF once, in C; :func:`read_arrays` then accepts an array
only if every ``$<len>`` line matches the length of the part after it. A payload
holding CRLF splits short and fails that check, as does anything malformed or cut short: the
caller then falls back to its own byte-by-byte reader, which alone decides what is an error
and how it is reported (Redis's error texts for a client, a byte offset for a damaged file).
"""

from __future__ import annotations

from typing import Final

__all__ = ["FAST_WINDOW", "read_arrays"]

FAST_WINDOW: Final = 4 * 1024 * 1024
"""The most input (bytes) split at once on the fast path."""

_FMT_BULK: Final = b"$%d".__mod__
# "$<n>" for the usual argument lengths, looked up rather than formatted.
_BULK_HEAD: Final = [b"$%d" % n for n in range(4096)].__getitem__


def read_arrays(
    parts: list[bytes], i: int, last: int, out: list[list[bytes]], most: int, max_count: int
) -> int:
    """Append to ``out`` the arrays of bulk strings that start at ``parts[i]``, one after the
    other, and return the index of the part after the last one read (``i`` if none).

    ``parts`` is input split on CRLF and ``parts[last]`` the part after the last CRLF (never
    read). Reading stops at ``most`` arrays, and before any part that does not start an array
    complete before ``parts[last]`` with every length line matching, has more than
    ``max_count`` items, or whose ``*<count>`` has a leading zero (``*0`` included: the
    byte-by-byte readers decide about those)."""
    append = out.append
    while i < last and most:
        head = parts[i]
        digits = head[1:]
        if head[:1] != b"*" or not digits.isdigit() or digits[0] == 0x30:
            break
        count = int(digits)
        j = i + 1 + 2 * count
        if j > last or count > max_count:
            break
        args = parts[i + 2 : j : 2]
        try:
            heads = list(map(_BULK_HEAD, map(len, args)))
        except IndexError:  # an argument of 4 KB or more
            heads = list(map(_FMT_BULK, map(len, args)))
        if heads != parts[i + 1 : j : 2]:
            break
        append(args)
        i = j
        most -= 1
    return i
