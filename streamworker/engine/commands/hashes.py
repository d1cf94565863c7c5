"""Hash commands (values are ``dict[bytes, bytes]``, insertion-ordered like Redis's listpack)."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from streamworker.engine import msgs
from streamworker.engine.commands import command
from streamworker.engine.commands._args import to_int
from streamworker.engine.commands._scan import EMPTY_SCAN, parse_scan_options, scan_members
from streamworker.engine.commands.keys import object_encoding, parse_cursor
from streamworker.engine.errors import CommandError
from streamworker.engine.notify import NOTIFY_GENERIC, NOTIFY_HASH
from streamworker.engine.numbers import (
    LLONG_MAX,
    LLONG_MIN,
    ld_add,
    ld_format_human,
    ld_parse,
    parse_int,
)
from streamworker.engine.replies import EMPTY_ARRAY, NULL_BULK, OK, Map

if TYPE_CHECKING:
    from streamworker.engine.context import Ctx
    from streamworker.engine.replies import Reply

_W = ("write", "denyoom", "fast")


def _hash(ctx: Ctx, key: bytes) -> dict[bytes, bytes] | None:
    return ctx.db.get_typed(key, dict)


def _hash_for_write(ctx: Ctx, key: bytes) -> dict[bytes, bytes]:
    h = ctx.db.get_typed(key, dict)
    if h is None:
        h = {}
        ctx.db.set(key, h)
    return h


def _note_conversion(ctx: Ctx, key: bytes, h: dict[bytes, bytes], written: list[bytes]) -> None:
    """After a write of the fields/values ``written``: Redis converts a listpack hash to a
    hashtable, for good, when one of them is longer than hash-max-listpack-value or the hash
    has more fields than hash-max-listpack-entries."""
    db = ctx.db
    if key in db.big_keys:
        return
    entries, value = ctx.engine.config.hash_limits
    if len(h) > entries:
        db.mark_big(key)
        return
    for x in written:  # a plain loop: a handful of items, cheaper than max(map(...))
        if len(x) > value:
            db.mark_big(key)
            return


@command("hset", arity=-4, flags=_W, first_key=1, last_key=1, step=1)
def hset(ctx: Ctx, args: list[bytes]) -> Reply:
    """HSET key field value [field value ...] -> number of new fields."""
    if len(args) % 2 == 0:
        raise CommandError(msgs.wrong_arity("hset"))
    h = _hash_for_write(ctx, args[0])
    added = 0
    for i in range(1, len(args), 2):
        if args[i] not in h:
            added += 1
        h[args[i]] = args[i + 1]
    _note_conversion(ctx, args[0], h, args[1:])
    ctx.touch(args[0])
    ctx.notify(NOTIFY_HASH, b"hset", args[0])
    ctx.changed(len(args) // 2)  # every field given, new or not (Redis 7.0)
    return added


@command("hmset", arity=-4, flags=("write", "denyoom", "fast"), first_key=1, last_key=1, step=1)
def hmset(ctx: Ctx, args: list[bytes]) -> Reply:
    """HMSET key field value [field value ...] -> OK."""
    if len(args) % 2 == 0:
        raise CommandError(msgs.wrong_arity("hmset"))
    hset(ctx, args)
    return OK


@command("hsetnx", arity=4, flags=_W, first_key=1, last_key=1, step=1)
def hsetnx(ctx: Ctx, args: list[bytes]) -> Reply:
    """HSETNX key field value -> 1 if set, 0 if the field exists."""
    key, field, value = args
    h = _hash(ctx, key)
    if h is not None and field in h:
        return 0
    h = _hash_for_write(ctx, key)
    h[field] = value
    _note_conversion(ctx, key, h, [field, value])
    ctx.touch(key)
    ctx.notify(NOTIFY_HASH, b"hset", key)
    return 1


@command("hget", arity=3, flags=("readonly", "fast"), first_key=1, last_key=1, step=1)
def hget(ctx: Ctx, args: list[bytes]) -> Reply:
    """HGET key field -> value or nil."""
    h = _hash(ctx, args[0])
    if h is None:
        return NULL_BULK
    value = h.get(args[1])
    return NULL_BULK if value is None else value


@command("hmget", arity=-3, flags=("readonly", "fast"), first_key=1, last_key=1, step=1)
def hmget(ctx: Ctx, args: list[bytes]) -> Reply:
    """HMGET key field [field ...] -> values (nil for missing)."""
    h = _hash(ctx, args[0])
    if h is None:
        return [NULL_BULK] * (len(args) - 1)
    return [h.get(f, NULL_BULK) for f in args[1:]]


@command("hgetall", arity=2, flags=("readonly",), first_key=1, last_key=1, step=1)
def hgetall(ctx: Ctx, args: list[bytes]) -> Reply:
    """HGETALL key -> map field -> value."""
    h = _hash(ctx, args[0])
    return Map(h.items() if h else ())


@command("hdel", arity=-3, flags=("write", "fast"), first_key=1, last_key=1, step=1)
def hdel(ctx: Ctx, args: list[bytes]) -> Reply:
    """HDEL key field [field ...] -> number removed (the key goes when empty)."""
    key = args[0]
    h = _hash(ctx, key)
    if h is None:
        return 0
    removed = 0
    for f in args[1:]:
        if h.pop(f, None) is not None:
            removed += 1
            if not h:
                break
    if removed:
        ctx.notify(NOTIFY_HASH, b"hdel", key)
        if not h:
            ctx.db.delete(key)
            ctx.notify(NOTIFY_GENERIC, b"del", key)
        else:
            ctx.touch(key)
    return removed


@command("hlen", arity=2, flags=("readonly", "fast"), first_key=1, last_key=1, step=1)
def hlen(ctx: Ctx, args: list[bytes]) -> Reply:
    """HLEN key -> number of fields."""
    h = _hash(ctx, args[0])
    return len(h) if h else 0


@command("hstrlen", arity=3, flags=("readonly", "fast"), first_key=1, last_key=1, step=1)
def hstrlen(ctx: Ctx, args: list[bytes]) -> Reply:
    """HSTRLEN key field -> length of the value (0 if missing)."""
    h = _hash(ctx, args[0])
    return len(h.get(args[1], b"")) if h else 0


@command("hexists", arity=3, flags=("readonly", "fast"), first_key=1, last_key=1, step=1)
def hexists(ctx: Ctx, args: list[bytes]) -> Reply:
    """HEXISTS key field -> 1 or 0."""
    h = _hash(ctx, args[0])
    return 1 if h and args[1] in h else 0


@command("hkeys", arity=2, flags=("readonly",), first_key=1, last_key=1, step=1)
def hkeys(ctx: Ctx, args: list[bytes]) -> Reply:
    """HKEYS key -> fields."""
    h = _hash(ctx, args[0])
    return list(h) if h else []


@command("hvals", arity=2, flags=("readonly",), first_key=1, last_key=1, step=1)
def hvals(ctx: Ctx, args: list[bytes]) -> Reply:
    """HVALS key -> values."""
    h = _hash(ctx, args[0])
    return list(h.values()) if h else []


@command("hincrby", arity=4, flags=_W, first_key=1, last_key=1, step=1)
def hincrby(ctx: Ctx, args: list[bytes]) -> Reply:
    """HINCRBY key field increment -> new value."""
    key, field = args[0], args[1]
    incr = to_int(args[2])
    h = _hash_for_write(ctx, key)
    old = h.get(field)
    if old is None:
        value = 0
    else:
        parsed = parse_int(old)
        if parsed is None:
            raise CommandError(msgs.HASH_NOT_INTEGER)
        value = parsed
    if (incr < 0 and value < 0 and incr < LLONG_MIN - value) or (
        incr > 0 and value > 0 and incr > LLONG_MAX - value
    ):
        raise CommandError(msgs.OVERFLOW)
    value += incr
    h[field] = str(value).encode()
    _note_conversion(ctx, key, h, [field])
    ctx.touch(key)
    ctx.notify(NOTIFY_HASH, b"hincrby", key)
    return value


@command("hincrbyfloat", arity=4, flags=_W, first_key=1, last_key=1, step=1)
def hincrbyfloat(ctx: Ctx, args: list[bytes]) -> Reply:
    """HINCRBYFLOAT key field increment -> new value as text."""
    key, field = args[0], args[1]
    delta = ld_parse(args[2])
    if delta is None:
        raise CommandError(msgs.NOT_FLOAT)
    if not delta.is_finite():
        raise CommandError(msgs.VALUE_NAN_OR_INF)
    h = _hash_for_write(ctx, key)
    old = h.get(field)
    current = ld_parse(old) if old is not None else ld_parse(b"0")
    if current is None:
        raise CommandError(msgs.HASH_NOT_FLOAT)
    result = ld_add(current, delta)
    if result is None:
        raise CommandError(msgs.INCR_NAN_OR_INF)
    text = ld_format_human(result)
    h[field] = text
    _note_conversion(ctx, key, h, [field, text])
    ctx.touch(key)
    ctx.notify(NOTIFY_HASH, b"hincrbyfloat", key)
    ctx.propagate([b"HSET", key, field, text])
    return text


@command("hscan", arity=-3, flags=("readonly",), first_key=1, last_key=1, step=1)
def hscan(ctx: Ctx, args: list[bytes]) -> Reply:
    """HSCAN key cursor [MATCH pattern] [COUNT count] -> [next-cursor, [field, value, ...]]; a
    listpack comes back whole with cursor 0."""
    cursor = parse_cursor(args[1])
    h = _hash(ctx, args[0])
    if h is None:
        return EMPTY_SCAN
    options = parse_scan_options(args[2:])
    small = object_encoding(ctx, h, args[0]) == b"listpack"
    next_cursor, found = scan_members(
        ctx, args[0], h, lambda: list(h), h.__contains__, cursor, options, small
    )
    flat: list[Reply] = []
    for field in found:
        flat.append(field)
        flat.append(h[field])
    return [str(next_cursor).encode(), flat]


@command("hrandfield", arity=-2, flags=("readonly",), first_key=1, last_key=1, step=1)
def hrandfield(ctx: Ctx, args: list[bytes]) -> Reply:
    """HRANDFIELD key [count [WITHVALUES]] -> a random field, or count fields (distinct when
    count > 0, repeats allowed when < 0), with their values."""
    if len(args) == 1:
        h = _hash(ctx, args[0])
        if not h:
            return NULL_BULK
        return random.choice(list(h))
    count = random_count(args, b"withvalues")
    withvalues = len(args) == 3
    h = _hash(ctx, args[0])
    if not h or count == 0:
        return EMPTY_ARRAY
    if count < 0 or count == 1 or count < len(h):
        fields = random_members(list(h), count)
    else:
        fields = list(h)
    if not withvalues:
        return fields
    if ctx.client.resp > 2:
        return [[f, h[f]] for f in fields]
    flat: list[Reply] = []
    for f in fields:
        flat.append(f)
        flat.append(h[f])
    return flat


def random_count(args: list[bytes], with_word: bytes) -> int:
    """HRANDFIELD / ZRANDMEMBER's count and option checks, in Redis 7.0's order."""
    count = to_int(args[1])
    if count == LLONG_MIN:
        raise CommandError(msgs.COUNT_OUT_OF_RANGE_LONG)
    if len(args) > 3 or (len(args) == 3 and args[2].lower() != with_word):
        raise CommandError(msgs.SYNTAX)
    if len(args) == 3 and not -(LLONG_MAX // 2) <= count <= LLONG_MAX // 2:
        raise CommandError(msgs.VALUE_OUT_OF_RANGE)
    return count


def random_members(members: list[bytes], count: int) -> list[bytes]:
    """``count`` distinct members (count > 0, fewer than there are) or -count with repeats,
    bounded as SRANDMEMBER's repeats are."""
    if count > 0:
        return random.sample(members, min(count, len(members)))
    if -count > msgs.SRANDMEMBER_MAX_REPEATS:
        raise CommandError(msgs.SRANDMEMBER_REPEATS_OUT_OF_RANGE)
    return random.choices(members, k=-count)
