"""SORT and SORT_RO, ported from Redis 7.0's ``sort.c``: numeric or ALPHA order, ``BY
pattern`` (``*`` replaced by the element, ``->field`` reading a hash field; a pattern without
``*`` means no sorting), ``LIMIT``, ``GET`` (``#`` = the element itself), ``STORE`` into a
list. ALPHA compares bytes, as ``strcoll`` does in the C locale redis-server runs in.
"""

from __future__ import annotations

import re
from collections import deque
from typing import TYPE_CHECKING

from streamworker.engine import msgs
from streamworker.engine.commands import command
from streamworker.engine.commands._args import to_int
from streamworker.engine.commands.sets import ordered_members
from streamworker.engine.errors import CommandError
from streamworker.engine.model.zset import ZSet
from streamworker.engine.notify import NOTIFY_GENERIC, NOTIFY_LIST
from streamworker.engine.numbers import strtod_prefix
from streamworker.engine.replies import NULL_BULK

if TYPE_CHECKING:
    from streamworker.engine.context import Ctx
    from streamworker.engine.keyspace import Database
    from streamworker.engine.replies import Reply

_DBL_MIN = 2.2250738585072014e-308
_NONZERO_MANTISSA = re.compile(rb"^[\s+-]*(?:0[xX])?[0-9a-fA-F.]*[1-9a-fA-F]")


def _lookup_by_pattern(db: Database, pattern: bytes, subst: bytes) -> bytes | None:
    """Redis's lookupKeyByPattern: ``#`` is the element; ``pre*post`` the string at
    ``pre<element>post``; ``pre*post->field`` that hash's field."""
    if pattern == b"#":
        return subst
    star = pattern.find(b"*")
    if star < 0:
        return None
    arrow = pattern.find(b"->", star + 1)
    field: bytes | None = None
    end = len(pattern)
    if arrow >= 0 and arrow + 2 < len(pattern):
        field = pattern[arrow + 2 :]
        end = arrow
    key = pattern[:star] + subst + pattern[star + 1 : end]
    value = db.get(key)
    if value is None:
        return None
    if field is not None:
        if not isinstance(value, dict):
            return None
        got: bytes | None = value.get(field)
        return got
    return value if type(value) is bytes else None


def _score(text: bytes) -> float | None:
    """strtod over the whole text; None where Redis reports a conversion error (trailing
    bytes, NaN, ERANGE on overflow or underflow)."""
    value = strtod_prefix(text)
    if value is None:
        return None
    if value in (float("inf"), float("-inf")) and b"inf" not in text.lower():
        return None
    if abs(value) < _DBL_MIN and _NONZERO_MANTISSA.match(text.split(b"e")[0].split(b"E")[0]):
        return None
    return value


def _full_key_access(ctx: Ctx) -> bool:
    # BY and GET patterns name keys the ACL check cannot see: Redis allows them only to a
    # user that may read every key with this command (ACLUserCheckCmdWithUnrestrictedKeyAccess).
    user = ctx.client.user
    if user is None or user.unrestricted:
        return True
    engine = ctx.engine
    argv = ctx.argv
    spec = engine.table[argv[0].lower()]
    return bool(user.full_key_access(spec, argv, lambda: engine.acl_key_list(spec, argv)))


def _sort(ctx: Ctx, args: list[bytes], readonly: bool) -> Reply:
    desc = alpha = dontsort = False
    limit_start, limit_count = 0, -1
    sortby: bytes | None = None
    store: bytes | None = None
    gets: list[bytes] = []
    j = 1
    n = len(args)
    while j < n:
        opt = args[j].lower()
        left = n - j - 1
        if opt == b"asc":
            desc = False
        elif opt == b"desc":
            desc = True
        elif opt == b"alpha":
            alpha = True
        elif opt == b"limit" and left >= 2:
            limit_start = to_int(args[j + 1])
            limit_count = to_int(args[j + 2])
            j += 2
        elif not readonly and opt == b"store" and left >= 1:
            store = args[j + 1]
            j += 1
        elif opt == b"by" and left >= 1:
            sortby = args[j + 1]
            # A pattern without '*' cannot name per-element keys: no sorting at all.
            dontsort = b"*" not in sortby
            if not dontsort and not _full_key_access(ctx):
                raise CommandError(msgs.SORT_BY_ACL)
            j += 1
        elif opt == b"get" and left >= 1:
            if not _full_key_access(ctx):
                raise CommandError(msgs.SORT_GET_ACL)
            gets.append(args[j + 1])
            j += 1
        else:
            raise CommandError(msgs.SYNTAX)
        j += 1
    db = ctx.db
    value = db.get(args[0])
    if value is not None and not isinstance(value, (set, deque, ZSet)):
        raise CommandError(msgs.WRONGTYPE)
    if dontsort and isinstance(value, set) and (store is not None or ctx.in_script):
        # An unsorted set would come out in hash order: forced ALPHA so that the stored or
        # scripted result is deterministic (as Redis does for replication).
        dontsort, alpha, sortby = False, True, None
    if value is None:
        elements: list[bytes] = []
    elif isinstance(value, set):
        elements = ordered_members(value)
    elif isinstance(value, ZSet):
        # Redis converts a sorted set it sorts to a skiplist, for good (SORT_RO too).
        value.big = True
        elements = [m for _, m in value]
    else:
        elements = list(value)
    size = len(elements)
    start = max(limit_start, 0)
    end = size - 1 if limit_count < 0 else start + limit_count - 1
    if start >= size:
        start, end = size - 1, size - 2
    end = min(end, size - 1)
    if dontsort and not isinstance(value, set):
        # Lists and sorted sets keep their order; DESC walks them backwards.
        if desc:
            elements.reverse()
    elif not dontsort:
        elements = _sorted(db, elements, sortby, alpha, desc)
    chosen = elements[start : end + 1] if end >= start else []
    if store is None:
        ctx.no_propagate()
        ctx.changed(0)
        if not gets:
            return list(chosen)
        out: list[Reply] = []
        for element in chosen:
            for pattern in gets:
                got = _lookup_by_pattern(db, pattern, element)
                out.append(NULL_BULK if got is None else got)
        return out
    result: deque[bytes] = deque()
    for element in chosen:
        if not gets:
            result.append(element)
            continue
        for pattern in gets:
            got = _lookup_by_pattern(db, pattern, element)
            result.append(b"" if got is None else got)
    if result:
        db.set_key(store, result)
        ctx.changed(len(result))
        ctx.signal_key_ready(store)
        ctx.notify(NOTIFY_LIST, b"sortstore", store)
    elif db.discard(store):
        ctx.notify(NOTIFY_GENERIC, b"del", store)
    else:
        ctx.changed(0)
    return len(result)


def _sorted(
    db: Database, elements: list[bytes], sortby: bytes | None, alpha: bool, desc: bool
) -> list[bytes]:
    if alpha:
        if sortby is None:
            return sorted(elements, reverse=desc)
        # Elements whose BY key is missing compare lowest; equal ones keep their order.
        keyed = [(_lookup_by_pattern(db, sortby, e), e) for e in elements]
        keyed.sort(key=lambda p: (p[0] is not None, p[0] or b""), reverse=desc)
        return [e for _, e in keyed]
    scored: list[tuple[float, bytes]] = []
    failed = False
    for element in elements:
        byval = element if sortby is None else _lookup_by_pattern(db, sortby, element)
        if byval is None:
            scored.append((0.0, element))
            continue
        score = _score(byval)
        if score is None:
            failed = True
            score = 0.0
        scored.append((score, element))
    if failed:
        raise CommandError(msgs.SORT_NOT_DOUBLE)
    # Equal scores are ordered by the elements' bytes, so the result is deterministic.
    scored.sort(reverse=desc)
    return [e for _, e in scored]


@command(
    "sort", arity=-2, flags=("write", "denyoom", "movablekeys"), first_key=1, last_key=1, step=1
)
def sort(ctx: Ctx, args: list[bytes]) -> Reply:
    """SORT key [BY pattern] [LIMIT offset count] [GET pattern ...] [ASC|DESC] [ALPHA]
    [STORE destination] -> the sorted elements (or what GET names), or with STORE the length
    of the list stored."""
    return _sort(ctx, args, False)


@command("sort_ro", arity=-2, flags=("readonly", "movablekeys"), first_key=1, last_key=1, step=1)
def sort_ro(ctx: Ctx, args: list[bytes]) -> Reply:
    """SORT_RO key [BY pattern] [LIMIT offset count] [GET pattern ...] [ASC|DESC] [ALPHA] ->
    the sorted elements (STORE is a syntax error)."""
    return _sort(ctx, args, True)
