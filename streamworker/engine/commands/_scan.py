"""SSCAN / HSCAN / ZSCAN: Redis 7.0's scanGenericCommand for one collection.

A small encoding (intset, listpack) is answered whole with cursor 0, as Redis does. A big one
is walked in the order of a stable 64-bit hash of each member, the cursor being the hash of
the next member to return, so a member present for the whole iteration is returned exactly
once (members added meanwhile may or may not be). The sorted index is built when an iteration
starts (cursor 0, or a cursor without an index) and kept for a few keys per database, the
way SCAN keeps its key index.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from streamworker.engine import msgs
from streamworker.engine.commands._args import to_int
from streamworker.engine.errors import CommandError
from streamworker.engine.keyspace import glob_match

if TYPE_CHECKING:
    from streamworker.engine.context import Ctx

__all__ = ["EMPTY_SCAN", "ScanOptions", "parse_scan_options", "scan_members"]

_U64 = (1 << 64) - 1
# Member indexes kept per database (the oldest is dropped past this).
_MAX_INDEXES = 16

EMPTY_SCAN: list[object] = [b"0", []]


class ScanOptions:
    """COUNT and MATCH of one call."""

    __slots__ = ("count", "pattern")

    def __init__(self, count: int, pattern: bytes | None) -> None:
        self.count = count
        self.pattern = pattern


def parse_scan_options(args: list[bytes]) -> ScanOptions:
    """The options after the cursor: ``COUNT n`` (>= 1), ``MATCH pattern``; TYPE is SCAN's only."""
    count = 10
    pattern: bytes | None = None
    i = 0
    n = len(args)
    while i < n:
        opt = args[i].lower()
        if opt == b"count" and n - i >= 2:
            count = to_int(args[i + 1])
            if count < 1:
                raise CommandError(msgs.SYNTAX)
        elif opt == b"match" and n - i >= 2:
            pattern = None if args[i + 1] == b"*" else args[i + 1]
        else:
            raise CommandError(msgs.SYNTAX)
        i += 2
    return ScanOptions(count, pattern)


class _MemberIndex:
    __slots__ = ("hashes", "members", "value")

    def __init__(self, value: object, members: Iterable[bytes]) -> None:
        pairs = sorted((hash(m) & _U64, m) for m in members)
        self.value = value
        self.hashes = [h for h, _ in pairs]
        self.members = [m for _, m in pairs]


def scan_members(
    ctx: Ctx,
    key: bytes,
    value: object,
    members: Callable[[], Iterable[bytes]],
    contains: Callable[[bytes], bool],
    cursor: int,
    options: ScanOptions,
    small: bool,
) -> tuple[int, list[bytes]]:
    """(next cursor, members to return) for one call; ``members`` lists the collection's
    members in its small-encoding order, ``contains`` tells whether one is still there."""
    pattern = options.pattern
    if small:
        found = list(members())
        next_cursor = 0
    else:
        cache = ctx.db.member_scans
        index = cache.get(key)
        if cursor == 0 or index is None or index.value is not value:
            index = _MemberIndex(value, members())
            cache.pop(key, None)
            if len(cache) >= _MAX_INDEXES:
                del cache[next(iter(cache))]
            cache[key] = index
        start = bisect.bisect_left(index.hashes, cursor)
        end = min(start + options.count, len(index.members))
        # Members sharing the last hash go out together so the next cursor skips none.
        while end < len(index.members) and index.hashes[end] == index.hashes[end - 1]:
            end += 1
        next_cursor = index.hashes[end] if end < len(index.members) else 0
        found = [m for m in index.members[start:end] if contains(m)]
        if next_cursor == 0:
            cache.pop(key, None)
    if pattern is not None:
        found = [m for m in found if glob_match(pattern, m)]
    return next_cursor, found
