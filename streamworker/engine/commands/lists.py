"""List commands (values are ``collections.deque[bytes]``)."""

from __future__ import annotations

from collections import deque
from itertools import islice
from typing import TYPE_CHECKING

from streamworker.engine import msgs
from streamworker.engine.commands import command
from streamworker.engine.commands._args import to_int, to_long_in, to_timeout_ms
from streamworker.engine.errors import CommandError
from streamworker.engine.notify import NOTIFY_GENERIC, NOTIFY_LIST
from streamworker.engine.numbers import LLONG_MAX, LLONG_MIN
from streamworker.engine.replies import EMPTY_ARRAY, NULL_ARRAY, NULL_BULK, OK

if TYPE_CHECKING:
    from streamworker.engine.context import Blocked, Ctx
    from streamworker.engine.replies import Reply


def _list(ctx: Ctx, key: bytes) -> deque[bytes] | None:
    return ctx.db.get_typed(key, deque)


def _push(ctx: Ctx, args: list[bytes], left: bool, only_existing: bool) -> Reply:
    key = args[0]
    lst = _list(ctx, key)
    if lst is None:
        if only_existing:
            ctx.changed(0)
            return 0
        lst = deque()
        ctx.db.set(key, lst)
    ctx.changed(len(args) - 1)
    if left:
        lst.extendleft(args[1:])
    else:
        lst.extend(args[1:])
    ctx.touch(key)
    ctx.signal_key_ready(key)
    ctx.notify(NOTIFY_LIST, b"lpush" if left else b"rpush", key)
    return len(lst)


@command("lpush", arity=-3, flags=("write", "denyoom", "fast"), first_key=1, last_key=1, step=1)
def lpush(ctx: Ctx, args: list[bytes]) -> Reply:
    """LPUSH key element [element ...] -> new length."""
    return _push(ctx, args, True, False)


@command("rpush", arity=-3, flags=("write", "denyoom", "fast"), first_key=1, last_key=1, step=1)
def rpush(ctx: Ctx, args: list[bytes]) -> Reply:
    """RPUSH key element [element ...] -> new length."""
    return _push(ctx, args, False, False)


@command("lpushx", arity=-3, flags=("write", "denyoom", "fast"), first_key=1, last_key=1, step=1)
def lpushx(ctx: Ctx, args: list[bytes]) -> Reply:
    """LPUSHX key element [element ...] -> new length (0 if the key is missing)."""
    return _push(ctx, args, True, True)


@command("rpushx", arity=-3, flags=("write", "denyoom", "fast"), first_key=1, last_key=1, step=1)
def rpushx(ctx: Ctx, args: list[bytes]) -> Reply:
    """RPUSHX key element [element ...] -> new length (0 if the key is missing)."""
    return _push(ctx, args, False, True)


def _pop(ctx: Ctx, args: list[bytes], left: bool, name: str) -> Reply:
    if len(args) > 2:
        raise CommandError(msgs.wrong_arity(name))
    has_count = len(args) == 2
    count = 0
    if has_count:
        count = to_int(args[1], msgs.NOT_POSITIVE)
        if count < 0:
            raise CommandError(msgs.NOT_POSITIVE)
    key = args[0]
    lst = _list(ctx, key)
    if lst is None or (has_count and not count):
        ctx.changed(0)
        return EMPTY_ARRAY if lst is not None else NULL_ARRAY if has_count else NULL_BULK
    if not has_count:
        value = lst.popleft() if left else lst.pop()
        out: Reply = value
    else:
        take = min(count, len(lst))
        pop = lst.popleft if left else lst.pop
        out = [pop() for _ in range(take)]
    ctx.changed(len(out) if type(out) is list else 1)
    _popped(ctx, key, lst, left)
    return out


def _popped(ctx: Ctx, key: bytes, lst: deque[bytes], left: bool) -> None:
    # After a pop: the empty list goes, and the events say so (Redis's order).
    ctx.notify(NOTIFY_LIST, b"lpop" if left else b"rpop", key)
    if not lst:
        ctx.db.delete(key)
        ctx.notify(NOTIFY_GENERIC, b"del", key)
    else:
        ctx.touch(key)


@command("lpop", arity=-2, flags=("write", "fast"), first_key=1, last_key=1, step=1)
def lpop(ctx: Ctx, args: list[bytes]) -> Reply:
    """LPOP key [count] -> element (or array of up to count elements)."""
    return _pop(ctx, args, True, "lpop")


@command("rpop", arity=-2, flags=("write", "fast"), first_key=1, last_key=1, step=1)
def rpop(ctx: Ctx, args: list[bytes]) -> Reply:
    """RPOP key [count] -> element (or array of up to count elements, tail first)."""
    return _pop(ctx, args, False, "rpop")


def _norm_range(start: int, end: int, size: int) -> tuple[int, int] | None:
    if start < 0:
        start += size
    if end < 0:
        end += size
    start = max(start, 0)
    if start > end or start >= size:
        return None
    return start, min(end, size - 1)


@command("lrange", arity=4, flags=("readonly",), first_key=1, last_key=1, step=1)
def lrange(ctx: Ctx, args: list[bytes]) -> Reply:
    """LRANGE key start stop -> elements (inclusive, negative from the end)."""
    start = to_int(args[1])
    end = to_int(args[2])
    lst = _list(ctx, args[0])
    if lst is None:
        return EMPTY_ARRAY
    rng = _norm_range(start, end, len(lst))
    if rng is None:
        return EMPTY_ARRAY
    return list(islice(lst, rng[0], rng[1] + 1))


@command("llen", arity=2, flags=("readonly", "fast"), first_key=1, last_key=1, step=1)
def llen(ctx: Ctx, args: list[bytes]) -> Reply:
    """LLEN key -> length."""
    lst = _list(ctx, args[0])
    return len(lst) if lst is not None else 0


@command("lindex", arity=3, flags=("readonly",), first_key=1, last_key=1, step=1)
def lindex(ctx: Ctx, args: list[bytes]) -> Reply:
    """LINDEX key index -> element or nil."""
    lst = _list(ctx, args[0])
    if lst is None:
        return NULL_BULK
    index = to_int(args[1])
    if index < 0:
        index += len(lst)
    if not 0 <= index < len(lst):
        return NULL_BULK
    return lst[index]


@command("ltrim", arity=4, flags=("write",), first_key=1, last_key=1, step=1)
def ltrim(ctx: Ctx, args: list[bytes]) -> Reply:
    """LTRIM key start stop -> OK."""
    start = to_int(args[1])
    end = to_int(args[2])
    key = args[0]
    lst = _list(ctx, key)
    if lst is None:
        ctx.changed(0)
        return OK
    rng = _norm_range(start, end, len(lst))
    ctx.notify(NOTIFY_LIST, b"ltrim", key)
    # Redis 7.0 counts the elements trimmed away.
    ctx.changed(len(lst) - (rng[1] + 1 - rng[0] if rng is not None else 0))
    if rng is None:
        ctx.db.delete(key)
        ctx.notify(NOTIFY_GENERIC, b"del", key)
        return OK
    kept = deque(islice(lst, rng[0], rng[1] + 1))
    if len(kept) != len(lst):
        lst.clear()
        lst.extend(kept)
        ctx.touch(key)
    return OK


def _bpop(ctx: Ctx, args: list[bytes], left: bool) -> Reply | Blocked:
    keys = args[:-1]
    timeout_ms = to_timeout_ms(args[-1], True, ctx.now_ms())

    def attempt(c: Ctx) -> Reply | None:
        for key in keys:
            lst = c.db.get_typed(key, deque)
            if lst:
                value = lst.popleft() if left else lst.pop()
                _popped(c, key, lst, left)
                # Logged as the pop it amounted to (Redis rewrites BLPOP to LPOP): a client
                # served later by another's push is not logged as a command of its own.
                c.propagate([b"LPOP" if left else b"RPOP", key])
                return [key, value]
        return None

    def retry(c: Ctx) -> Reply | None:
        # A key that became a non-list while we waited is skipped, as Redis does.
        c.changed(0)  # served later: no change counted (Redis 7.0)
        try:
            return attempt(c)
        except CommandError:
            return None

    reply = attempt(ctx)
    if reply is not None:
        return reply
    return ctx.block(keys, timeout_ms, retry, NULL_ARRAY)


@command(
    "blpop", arity=-3, flags=("write", "noscript", "blocking"), first_key=1, last_key=-2, step=1
)
def blpop(ctx: Ctx, args: list[bytes]) -> Reply | Blocked:
    """BLPOP key [key ...] timeout -> [key, element], or nil after timeout seconds."""
    return _bpop(ctx, args, True)


@command(
    "brpop", arity=-3, flags=("write", "noscript", "blocking"), first_key=1, last_key=-2, step=1
)
def brpop(ctx: Ctx, args: list[bytes]) -> Reply | Blocked:
    """BRPOP key [key ...] timeout -> [key, element], or nil after timeout seconds."""
    return _bpop(ctx, args, False)


@command("lpos", arity=-3, flags=("readonly",), first_key=1, last_key=1, step=1)
def lpos(ctx: Ctx, args: list[bytes]) -> Reply:
    """LPOS key element [RANK rank] [COUNT num-matches] [MAXLEN len] -> index, nil, or (with
    COUNT) an array of indexes."""
    element = args[1]
    rank, count, maxlen = 1, -1, 0
    j = 2
    n = len(args)
    while j < n:
        opt = args[j].lower()
        more = j + 1 < n
        if opt == b"rank" and more:
            j += 1
            rank = to_int(args[j])
            if rank == 0:
                raise CommandError(msgs.LPOS_RANK_ZERO)
        elif opt == b"count" and more:
            j += 1
            count = to_long_in(args[j], 0, LLONG_MAX, msgs.LPOS_COUNT_NEGATIVE)
        elif opt == b"maxlen" and more:
            j += 1
            maxlen = to_long_in(args[j], 0, LLONG_MAX, msgs.LPOS_MAXLEN_NEGATIVE)
        else:
            raise CommandError(msgs.SYNTAX)
        j += 1
    lst = _list(ctx, args[0])
    if lst is None:
        return EMPTY_ARRAY if count != -1 else NULL_BULK
    from_tail = rank < 0
    # 7.0 negates a negative rank in C: LLONG_MIN stays negative, so every match counts and
    # COUNT's stop test (matches - rank + 1 >= count) wraps and never stops. (7.2 refuses it.)
    every = rank == LLONG_MIN
    rank = abs(rank)
    size = len(lst)
    items = reversed(lst) if from_tail else iter(lst)
    if maxlen:
        items = islice(items, maxlen)
    found: list[Reply] = []
    matches = 0
    for index, item in enumerate(items):
        if item == element:
            matches += 1
            if every or matches >= rank:
                found.append(size - index - 1 if from_tail else index)
                if count == -1 or (count and not every and matches - rank + 1 >= count):
                    break
    if count != -1:
        return found
    return found[0] if found else NULL_BULK


@command("lset", arity=4, flags=("write", "denyoom"), first_key=1, last_key=1, step=1)
def lset(ctx: Ctx, args: list[bytes]) -> Reply:
    """LSET key index element -> OK."""
    key = args[0]
    lst = _list(ctx, key)
    if lst is None:
        raise CommandError(msgs.NO_SUCH_KEY)
    index = to_int(args[1])
    if index < 0:
        index += len(lst)
    if not 0 <= index < len(lst):
        raise CommandError(msgs.INDEX_OUT_OF_RANGE)
    lst[index] = args[2]
    ctx.touch(key)
    ctx.notify(NOTIFY_LIST, b"lset", key)
    return OK


@command("linsert", arity=5, flags=("write", "denyoom"), first_key=1, last_key=1, step=1)
def linsert(ctx: Ctx, args: list[bytes]) -> Reply:
    """LINSERT key BEFORE|AFTER pivot element -> new length, -1 without the pivot, 0 without
    the key."""
    where = args[1].lower()
    if where not in (b"before", b"after"):
        raise CommandError(msgs.SYNTAX)
    key = args[0]
    lst = _list(ctx, key)
    if lst is None:
        ctx.changed(0)
        return 0
    try:
        index = lst.index(args[2])
    except ValueError:
        ctx.no_propagate()
        ctx.changed(0)
        return -1
    lst.insert(index + 1 if where == b"after" else index, args[3])
    ctx.touch(key)
    ctx.notify(NOTIFY_LIST, b"linsert", key)
    return len(lst)


def _mpop_args(args: list[bytes], numkeys_at: int) -> tuple[list[bytes], bool, int]:
    """Redis's lmpopGenericCommand parsing: (keys, left, count)."""
    numkeys = to_long_in(args[numkeys_at], 1, LLONG_MAX, msgs.NUMKEYS_NOT_POSITIVE)
    where_at = numkeys_at + numkeys + 1
    if where_at >= len(args):
        raise CommandError(msgs.SYNTAX)
    where = args[where_at].lower()
    if where not in (b"left", b"right"):
        raise CommandError(msgs.SYNTAX)
    count = -1
    j = where_at + 1
    while j < len(args):
        if count == -1 and args[j].lower() == b"count" and j + 1 < len(args):
            j += 1
            count = to_long_in(args[j], 1, LLONG_MAX, msgs.MPOP_COUNT_NOT_POSITIVE)
        else:
            raise CommandError(msgs.SYNTAX)
        j += 1
    return args[numkeys_at + 1 : where_at], where == b"left", 1 if count == -1 else count


def _mpop_from(c: Ctx, keys: list[bytes], left: bool, count: int) -> Reply | None:
    """Pop up to ``count`` from the first non-empty list of ``keys``: [key, [elements]], logged
    as LPOP/RPOP key n (as Redis propagates it); None when every list is empty."""
    for key in keys:
        lst = c.db.get_typed(key, deque)
        if not lst:
            continue
        take = min(count, len(lst))
        pop = lst.popleft if left else lst.pop
        out: list[Reply] = [pop() for _ in range(take)]
        c.changed(take)
        _popped(c, key, lst, left)
        c.propagate([b"LPOP" if left else b"RPOP", key, str(take).encode()])
        return [key, out]
    return None


@command("lmpop", arity=-4, flags=("write", "movablekeys"))
def lmpop(ctx: Ctx, args: list[bytes]) -> Reply:
    """LMPOP numkeys key [key ...] LEFT|RIGHT [COUNT count] -> [key, [elements]] or nil."""
    keys, left, count = _mpop_args(args, 0)
    reply = _mpop_from(ctx, keys, left, count)
    if reply is None:
        ctx.no_propagate()  # nothing popped: Redis propagates nothing
        ctx.changed(0)
        return NULL_ARRAY
    return reply


@command("blmpop", arity=-5, flags=("write", "blocking", "movablekeys"))
def blmpop(ctx: Ctx, args: list[bytes]) -> Reply | Blocked:
    """BLMPOP timeout numkeys key [key ...] LEFT|RIGHT [COUNT count] -> [key, [elements]], or
    nil after timeout seconds."""
    keys, left, count = _mpop_args(args, 1)
    timeout_ms = to_timeout_ms(args[0], True, ctx.now_ms())

    def retry(c: Ctx) -> Reply | None:
        # A key that became a non-list while we waited is skipped, as for BLPOP.
        try:
            return _mpop_from(c, keys, left, count)
        except CommandError:
            return None

    reply = _mpop_from(ctx, keys, left, count)
    if reply is not None:
        return reply
    return ctx.block(keys, timeout_ms, retry, NULL_ARRAY)


@command("lrem", arity=4, flags=("write",), first_key=1, last_key=1, step=1)
def lrem(ctx: Ctx, args: list[bytes]) -> Reply:
    """LREM key count element -> number removed: the first ``count`` matches from the head
    (count > 0), from the tail (count < 0), or all (0). The key goes when emptied."""
    count = to_int(args[1])
    key = args[0]
    lst = _list(ctx, key)
    if lst is None:
        return 0
    element = args[2]
    # Redis compares |count| against a running total, so LLONG_MIN simply means "all".
    limit = abs(count)
    if count >= 0:
        kept: list[bytes] = []
        removed = 0
        for item in lst:
            if item == element and (not limit or removed < limit):
                removed += 1
            else:
                kept.append(item)
    else:
        kept_rev: list[bytes] = []
        removed = 0
        for item in reversed(lst):
            if item == element and removed < limit:
                removed += 1
            else:
                kept_rev.append(item)
        kept_rev.reverse()
        kept = kept_rev
    if not removed:
        ctx.no_propagate()
        return 0
    if kept:
        lst.clear()
        lst.extend(kept)
    ctx.touch(key)
    # Redis: "lrem" on the key, then "del" once the list is gone.
    ctx.notify(NOTIFY_LIST, b"lrem", key)
    if not kept:
        ctx.db.delete(key)
        ctx.notify(NOTIFY_GENERIC, b"del", key)
    return removed


def _where(arg: bytes) -> bool:
    """LEFT -> True, RIGHT -> False (any case); anything else is a syntax error."""
    word = arg.lower()
    if word == b"left":
        return True
    if word == b"right":
        return False
    raise CommandError(msgs.SYNTAX)


def _move(c: Ctx, src: bytes, dst: bytes, from_left: bool, to_left: bool) -> bytes | None:
    """Redis's lmoveGenericCommand: pop from ``src``, push onto ``dst`` (the same list rotates);
    None when ``src`` is missing. WRONGTYPE for a non-list source, then for a non-list
    destination (checked only when there is something to move)."""
    lst: deque[bytes] | None = c.db.get_typed(src, deque)
    if not lst:
        return None
    target: deque[bytes] | None = c.db.get_typed(dst, deque)
    value = lst.popleft() if from_left else lst.pop()
    if target is None:
        target = deque()
        c.db.set(dst, target)
    if to_left:
        target.appendleft(value)
    else:
        target.append(value)
    c.touch(dst)
    c.signal_key_ready(dst)
    # Redis's order: the push on the destination first ("new" came with its creation), then
    # the pop on the source, then "del" when the source is left empty.
    c.notify(NOTIFY_LIST, b"lpush" if to_left else b"rpush", dst)
    c.notify(NOTIFY_LIST, b"lpop" if from_left else b"rpop", src)
    if not lst:
        c.db.delete(src)
        c.notify(NOTIFY_GENERIC, b"del", src)
    elif src != dst:
        c.touch(src)
    return value


def _move_words(from_left: bool, to_left: bool) -> list[bytes]:
    return [b"LEFT" if from_left else b"RIGHT", b"LEFT" if to_left else b"RIGHT"]


@command("lmove", arity=5, flags=("write", "denyoom"), first_key=1, last_key=2, step=1)
def lmove(ctx: Ctx, args: list[bytes]) -> Reply:
    """LMOVE source destination LEFT|RIGHT LEFT|RIGHT -> the element moved, or nil when the
    source is missing."""
    from_left = _where(args[2])
    to_left = _where(args[3])
    value = _move(ctx, args[0], args[1], from_left, to_left)
    if value is None:
        ctx.no_propagate()
        ctx.changed(0)
        return NULL_BULK
    return value


@command("rpoplpush", arity=3, flags=("write", "denyoom"), first_key=1, last_key=2, step=1)
def rpoplpush(ctx: Ctx, args: list[bytes]) -> Reply:
    """RPOPLPUSH source destination -> LMOVE source destination RIGHT LEFT."""
    value = _move(ctx, args[0], args[1], False, True)
    if value is None:
        ctx.no_propagate()
        ctx.changed(0)
        return NULL_BULK
    return value


def _blocking_move(
    ctx: Ctx, src: bytes, dst: bytes, from_left: bool, to_left: bool, timeout_ms: int, brpl: bool
) -> Reply | Blocked:
    """Redis's blmoveGenericCommand. The move is logged as the non-blocking command it
    amounted to (RPOPLPUSH for BRPOPLPUSH, LMOVE for BLMOVE), whenever it happens."""
    effective = (
        [b"RPOPLPUSH", src, dst] if brpl else [b"LMOVE", src, dst, *_move_words(from_left, to_left)]
    )

    def attempt(c: Ctx) -> Reply | None:
        value = _move(c, src, dst, from_left, to_left)
        if value is not None:
            c.propagate(effective)
        return value

    def retry(c: Ctx) -> Reply | None:
        # Redis serves a waiter only when the source is a list; then a destination of another
        # type answers it with WRONGTYPE (the list untouched) and unblocks it.
        if type(c.db.get(src)) is not deque:
            return None
        # Redis 7.0 counts no change for a move served to a blocked client (BLMPOP's pops
        # count, BLMOVE's and BLPOP's do not).
        c.changed(0)
        return attempt(c)

    reply = attempt(ctx)
    if reply is not None:
        return reply
    if ctx.in_multi or ctx.in_script:
        # Redis answers a would-block BLMOVE in MULTI with a null *bulk* (its timeout reply
        # is a null array).
        return NULL_BULK
    return ctx.block([src], timeout_ms, retry, NULL_ARRAY)


@command(
    "blmove",
    arity=6,
    flags=("write", "denyoom", "noscript", "blocking"),
    first_key=1,
    last_key=2,
    step=1,
)
def blmove(ctx: Ctx, args: list[bytes]) -> Reply | Blocked:
    """BLMOVE source destination LEFT|RIGHT LEFT|RIGHT timeout -> the element moved, or nil
    after timeout seconds (0 = forever)."""
    from_left = _where(args[2])
    to_left = _where(args[3])
    timeout_ms = to_timeout_ms(args[4], True, ctx.now_ms())
    return _blocking_move(ctx, args[0], args[1], from_left, to_left, timeout_ms, False)


@command(
    "brpoplpush",
    arity=4,
    flags=("write", "denyoom", "noscript", "blocking"),
    first_key=1,
    last_key=2,
    step=1,
)
def brpoplpush(ctx: Ctx, args: list[bytes]) -> Reply | Blocked:
    """BRPOPLPUSH source destination timeout -> BLMOVE source destination RIGHT LEFT timeout."""
    timeout_ms = to_timeout_ms(args[2], True, ctx.now_ms())
    return _blocking_move(ctx, args[0], args[1], False, True, timeout_ms, True)
