"""Keyspace notification classes: Redis's NOTIFY_* bits and the ``notify-keyspace-events``
letters that choose them.

Below :mod:`.config` (which validates and renders the parameter) and :mod:`.pubsub` (which
delivers the notifications); commands name the class of the events they raise.
"""

from __future__ import annotations

__all__ = [
    "NOTIFY_ALL",
    "NOTIFY_EVICTED",
    "NOTIFY_EXPIRED",
    "NOTIFY_GENERIC",
    "NOTIFY_HASH",
    "NOTIFY_KEYEVENT",
    "NOTIFY_KEYSPACE",
    "NOTIFY_KEY_MISS",
    "NOTIFY_LIST",
    "NOTIFY_MODULE",
    "NOTIFY_NEW",
    "NOTIFY_SET",
    "NOTIFY_STREAM",
    "NOTIFY_STRING",
    "NOTIFY_ZSET",
    "keyspace_events_from_string",
    "keyspace_events_to_string",
]

# Redis's notification classes (server.h NOTIFY_*), one bit each.
NOTIFY_KEYSPACE = 1 << 0  # K
NOTIFY_KEYEVENT = 1 << 1  # E
NOTIFY_GENERIC = 1 << 2  # g
NOTIFY_STRING = 1 << 3  # $
NOTIFY_LIST = 1 << 4  # l
NOTIFY_SET = 1 << 5  # s
NOTIFY_HASH = 1 << 6  # h
NOTIFY_ZSET = 1 << 7  # z
NOTIFY_EXPIRED = 1 << 8  # x
NOTIFY_EVICTED = 1 << 9  # e
NOTIFY_STREAM = 1 << 10  # t
NOTIFY_KEY_MISS = 1 << 11  # m
NOTIFY_MODULE = 1 << 12  # d
NOTIFY_NEW = 1 << 13  # n
# 'A': every class but key-miss and new-key (those must be asked for by name).
NOTIFY_ALL = (
    NOTIFY_GENERIC
    | NOTIFY_STRING
    | NOTIFY_LIST
    | NOTIFY_SET
    | NOTIFY_HASH
    | NOTIFY_ZSET
    | NOTIFY_EXPIRED
    | NOTIFY_EVICTED
    | NOTIFY_STREAM
    | NOTIFY_MODULE
)

_LETTERS = {
    "A": NOTIFY_ALL,
    "g": NOTIFY_GENERIC,
    "$": NOTIFY_STRING,
    "l": NOTIFY_LIST,
    "s": NOTIFY_SET,
    "h": NOTIFY_HASH,
    "z": NOTIFY_ZSET,
    "x": NOTIFY_EXPIRED,
    "e": NOTIFY_EVICTED,
    "K": NOTIFY_KEYSPACE,
    "E": NOTIFY_KEYEVENT,
    "t": NOTIFY_STREAM,
    "m": NOTIFY_KEY_MISS,
    "d": NOTIFY_MODULE,
    "n": NOTIFY_NEW,
}
# The order CONFIG GET renders the classes in when not all of 'A' is set.
_RENDER_ORDER = (
    ("g", NOTIFY_GENERIC),
    ("$", NOTIFY_STRING),
    ("l", NOTIFY_LIST),
    ("s", NOTIFY_SET),
    ("h", NOTIFY_HASH),
    ("z", NOTIFY_ZSET),
    ("x", NOTIFY_EXPIRED),
    ("e", NOTIFY_EVICTED),
    ("t", NOTIFY_STREAM),
    ("d", NOTIFY_MODULE),
    ("n", NOTIFY_NEW),
)


def keyspace_events_from_string(text: str) -> int | None:
    """``notify-keyspace-events`` letters -> class bits; None for a letter Redis refuses."""
    flags = 0
    for ch in text:
        bit = _LETTERS.get(ch)
        if bit is None:
            return None
        flags |= bit
    return flags


def keyspace_events_to_string(flags: int) -> str:
    """Class bits -> the letters CONFIG GET shows (Redis's order; 'A' hides 'n', as in 7.0)."""
    if flags & NOTIFY_ALL == NOTIFY_ALL:
        out = "A"
    else:
        out = "".join(letter for letter, bit in _RENDER_ORDER if flags & bit)
    if flags & NOTIFY_KEYSPACE:
        out += "K"
    if flags & NOTIFY_KEYEVENT:
        out += "E"
    if flags & NOTIFY_KEY_MISS:
        out += "m"
    return out
