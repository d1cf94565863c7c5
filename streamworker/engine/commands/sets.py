"""Set commands (values are ``set[bytes]``)."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from streamworker.engine import msgs
from streamworker.engine.commands import command
from streamworker.engine.commands._args import to_int, to_long_in
from streamworker.engine.commands._scan import EMPTY_SCAN, parse_scan_options, scan_members
from streamworker.engine.commands.keys import object_encoding, parse_cursor
from streamworker.engine.commands.zsets import intersection_size
from streamworker.engine.errors import CommandError
from streamworker.engine.notify import NOTIFY_GENERIC, NOTIFY_SET
from streamworker.engine.numbers import LLONG_MAX, LLONG_MIN, parse_int
from streamworker.engine.replies import NULL_BULK, SetReply

if TYPE_CHECKING:
    from streamworker.engine.context import Ctx
    from streamworker.engine.replies import Reply

_INTSET_MAX = 512


def _set(ctx: Ctx, key: bytes) -> set[bytes] | None:
    return ctx.db.get_typed(key, set)


def ordered_members(members: set[bytes]) -> list[bytes]:
    """Small all-integer sets are intsets in Redis and come back sorted numerically; keep that
    (deterministic, and what clients comparing against Redis see)."""
    if len(members) <= _INTSET_MAX:
        nums = []
        for m in members:
            n = parse_int(m)
            if n is None:
                return list(members)
            nums.append((n, m))
        nums.sort()
        return [m for _, m in nums]
    return list(members)


def _note_conversion(ctx: Ctx, key: bytes, s: set[bytes], added: list[bytes]) -> None:
    """After ``added`` went into ``s``: Redis converts an intset to a hashtable, for good, when
    a member is not an integer or the set has more members than set-max-intset-entries."""
    db = ctx.db
    if db.is_big(key):
        return
    limit = ctx.engine.config.get_int("set-max-intset-entries")
    if len(s) > limit or any(parse_int(m) is None for m in added):
        db.mark_big(key)


@command("sadd", arity=-3, flags=("write", "denyoom", "fast"), first_key=1, last_key=1, step=1)
def sadd(ctx: Ctx, args: list[bytes]) -> Reply:
    """SADD key member [member ...] -> number added."""
    key = args[0]
    s = _set(ctx, key)
    if s is None:
        s = set()
        ctx.db.set(key, s)
    before = len(s)
    s.update(args[1:])
    _note_conversion(ctx, key, s, args[1:])
    added = len(s) - before
    if added:
        ctx.touch(key)
        ctx.notify(NOTIFY_SET, b"sadd", key)
    return added


@command("srem", arity=-3, flags=("write", "fast"), first_key=1, last_key=1, step=1)
def srem(ctx: Ctx, args: list[bytes]) -> Reply:
    """SREM key member [member ...] -> number removed (the key goes when empty)."""
    key = args[0]
    s = _set(ctx, key)
    if s is None:
        return 0
    before = len(s)
    s.difference_update(args[1:])
    removed = before - len(s)
    if removed:
        _removed(ctx, key, s, b"srem")
    return removed


def _removed(ctx: Ctx, key: bytes, members: set[bytes], event: bytes) -> None:
    # After removing members: the event, then the empty set goes with a "del".
    ctx.notify(NOTIFY_SET, event, key)
    if not members:
        ctx.db.delete(key)
        ctx.notify(NOTIFY_GENERIC, b"del", key)
    else:
        ctx.touch(key)


@command("smembers", arity=2, flags=("readonly",), first_key=1, last_key=1, step=1)
def smembers(ctx: Ctx, args: list[bytes]) -> Reply:
    """SMEMBERS key -> set of members."""
    s = _set(ctx, args[0])
    return SetReply(ordered_members(s) if s else ())


@command("sismember", arity=3, flags=("readonly", "fast"), first_key=1, last_key=1, step=1)
def sismember(ctx: Ctx, args: list[bytes]) -> Reply:
    """SISMEMBER key member -> 1 or 0."""
    s = _set(ctx, args[0])
    return 1 if s and args[1] in s else 0


@command("smismember", arity=-3, flags=("readonly", "fast"), first_key=1, last_key=1, step=1)
def smismember(ctx: Ctx, args: list[bytes]) -> Reply:
    """SMISMEMBER key member [member ...] -> 1/0 per member."""
    s = _set(ctx, args[0]) or set()
    return [1 if m in s else 0 for m in args[1:]]


@command("scard", arity=2, flags=("readonly", "fast"), first_key=1, last_key=1, step=1)
def scard(ctx: Ctx, args: list[bytes]) -> Reply:
    """SCARD key -> number of members."""
    s = _set(ctx, args[0])
    return len(s) if s else 0


@command("spop", arity=-2, flags=("write", "fast"), first_key=1, last_key=1, step=1)
def spop(ctx: Ctx, args: list[bytes]) -> Reply:
    """SPOP key [count] -> a random member (or a set of up to count members)."""
    if len(args) > 2:
        raise CommandError(msgs.SYNTAX)
    count = None
    if len(args) == 2:
        count = to_int(args[1], msgs.NOT_POSITIVE)
        if count < 0:
            raise CommandError(msgs.NOT_POSITIVE)
    key = args[0]
    s = _set(ctx, key)
    if s is None:
        # Nothing popped, nothing to replicate (Redis propagates no SPOP of a missing key).
        ctx.no_propagate()
        ctx.changed(0)
        return NULL_BULK if count is None else SetReply()
    if count is None:
        member = random.choice(list(s))
        s.discard(member)
        out: Reply = member
        popped = [member]
    else:
        whole = count >= len(s)
        popped = random.sample(list(s), min(count, len(s)))
        s.difference_update(popped)
        out = SetReply(popped)
    ctx.changed(len(popped))
    if popped:
        _removed(ctx, key, s, b"spop")
        if count is not None and whole:
            # Redis propagates popping the whole set as deleting it.
            ctx.propagate([b"DEL", key])
        else:
            # The members chance picked are logged, not the draw.
            ctx.propagate([b"SREM", key, *popped])
    else:
        ctx.no_propagate()
    return out


@command("srandmember", arity=-2, flags=("readonly",), first_key=1, last_key=1, step=1)
def srandmember(ctx: Ctx, args: list[bytes]) -> Reply:
    """SRANDMEMBER key [count] -> random member(s); negative count allows repeats."""
    if len(args) > 2:
        raise CommandError(msgs.SYNTAX)
    count = to_int(args[1]) if len(args) == 2 else None
    if count == LLONG_MIN:
        # Redis 7.0 reads the count in [-LONG_MAX, LONG_MAX]: -2**63 has no positive twin.
        raise CommandError(msgs.COUNT_OUT_OF_RANGE_LONG)
    s = _set(ctx, args[0])
    if count is None:
        return random.choice(list(s)) if s else NULL_BULK
    if not s:
        return []
    members = list(s)
    if count >= 0:
        return random.sample(members, min(count, len(members)))
    if -count > msgs.SRANDMEMBER_MAX_REPEATS:
        # Redis builds -count replies whatever the set's size (SRANDMEMBER k -2**62 allocates
        # until the host gives out); the engine refuses past its bound instead of hanging.
        raise CommandError(msgs.SRANDMEMBER_REPEATS_OUT_OF_RANGE)
    return random.choices(members, k=-count)


def _sets(ctx: Ctx, keys: list[bytes]) -> list[set[bytes]]:
    return [_set(ctx, k) or set() for k in keys]


@command("sinter", arity=-2, flags=("readonly",), first_key=1, last_key=-1, step=1)
def sinter(ctx: Ctx, args: list[bytes]) -> Reply:
    """SINTER key [key ...] -> intersection."""
    sets = _sets(ctx, args)
    return SetReply(ordered_members(set.intersection(*sets)))


@command("sunion", arity=-2, flags=("readonly",), first_key=1, last_key=-1, step=1)
def sunion(ctx: Ctx, args: list[bytes]) -> Reply:
    """SUNION key [key ...] -> union."""
    sets = _sets(ctx, args)
    return SetReply(ordered_members(set().union(*sets)))


@command("sdiff", arity=-2, flags=("readonly",), first_key=1, last_key=-1, step=1)
def sdiff(ctx: Ctx, args: list[bytes]) -> Reply:
    """SDIFF key [key ...] -> members of the first set not in the others."""
    sets = _sets(ctx, args)
    return SetReply(ordered_members(sets[0].difference(*sets[1:])))


@command("sscan", arity=-3, flags=("readonly",), first_key=1, last_key=1, step=1)
def sscan(ctx: Ctx, args: list[bytes]) -> Reply:
    """SSCAN key cursor [MATCH pattern] [COUNT count] -> [next-cursor, [members]]; an intset
    comes back whole with cursor 0."""
    cursor = parse_cursor(args[1])
    s = _set(ctx, args[0])
    if s is None:
        return EMPTY_SCAN
    options = parse_scan_options(args[2:])
    small = object_encoding(ctx, s, args[0]) == b"intset"
    next_cursor, found = scan_members(
        ctx, args[0], s, lambda: ordered_members(s), s.__contains__, cursor, options, small
    )
    return [str(next_cursor).encode(), found]


@command("sintercard", arity=-3, flags=("readonly", "movablekeys"))
def sintercard(ctx: Ctx, args: list[bytes]) -> Reply:
    """SINTERCARD numkeys key [key ...] [LIMIT limit] -> the size of the intersection (counting
    stops at limit; 0 = no limit)."""
    numkeys = to_long_in(args[0], 1, LLONG_MAX, msgs.NUMKEYS_NOT_POSITIVE)
    if numkeys > len(args) - 1:
        raise CommandError(msgs.SINTERCARD_TOO_MANY_KEYS)
    limit = 0
    j = 1 + numkeys
    while j < len(args):
        if args[j].lower() == b"limit" and j + 1 < len(args):
            limit = to_long_in(args[j + 1], 0, LLONG_MAX, msgs.LIMIT_NEGATIVE)
            j += 2
        else:
            raise CommandError(msgs.SYNTAX)
    sets = [_set(ctx, key) for key in args[1 : 1 + numkeys]]
    return intersection_size(list(sets), limit)


@command("smove", arity=4, flags=("write", "fast"), first_key=1, last_key=2, step=1)
def smove(ctx: Ctx, args: list[bytes]) -> Reply:
    """SMOVE source destination member -> 1 if moved, 0 if the member (or the source) is
    missing. The source goes when emptied; source == destination only tests membership."""
    src, dst, member = args
    source = ctx.db.get(src)
    if source is None:
        # Redis answers 0 before looking at the types.
        return 0
    if type(source) is not set:
        raise CommandError(msgs.WRONGTYPE)
    target = _set(ctx, dst)
    if src == dst:
        ctx.no_propagate()
        ctx.changed(0)
        return 1 if member in source else 0
    if member not in source:
        ctx.no_propagate()
        ctx.changed(0)
        return 0
    source.discard(member)
    ctx.changed()
    # Redis's order: "srem" (and "del") on the source, then the destination's "new" (when
    # created) and "sadd" (only when the member was not there yet).
    _removed(ctx, src, source, b"srem")
    if target is None:
        target = set()
        ctx.db.set(dst, target)
    if member not in target:
        target.add(member)
        ctx.changed()
        _note_conversion(ctx, dst, target, [member])
        ctx.touch(dst)
        ctx.notify(NOTIFY_SET, b"sadd", dst)
    return 1


def _store_set(ctx: Ctx, dst: bytes, members: set[bytes], event: bytes) -> Reply:
    """Store ``members`` at ``dst`` (any old value and TTL replaced) and notify ``event``, or
    delete ``dst`` when empty (notifying "del" only if it existed); the resulting size."""
    if members:
        ctx.db.set_key(dst, members)
        if len(members) <= ctx.engine.config.get_int("set-max-intset-entries"):
            _note_conversion(ctx, dst, members, list(members))
        else:
            ctx.db.mark_big(dst)
        ctx.notify(NOTIFY_SET, event, dst)
    elif ctx.db.discard(dst):
        ctx.notify(NOTIFY_GENERIC, b"del", dst)
    else:
        ctx.no_propagate()
        ctx.changed(0)
    return len(members)


@command("sinterstore", arity=-3, flags=("write", "denyoom"), first_key=1, last_key=-1, step=1)
def sinterstore(ctx: Ctx, args: list[bytes]) -> Reply:
    """SINTERSTORE destination key [key ...] -> size of the intersection stored."""
    sets = _sets(ctx, args[1:])
    smallest = min(sets, key=len)
    return _store_set(ctx, args[0], smallest.intersection(*sets), b"sinterstore")


@command("sunionstore", arity=-3, flags=("write", "denyoom"), first_key=1, last_key=-1, step=1)
def sunionstore(ctx: Ctx, args: list[bytes]) -> Reply:
    """SUNIONSTORE destination key [key ...] -> size of the union stored."""
    sets = _sets(ctx, args[1:])
    return _store_set(ctx, args[0], set().union(*sets), b"sunionstore")


@command("sdiffstore", arity=-3, flags=("write", "denyoom"), first_key=1, last_key=-1, step=1)
def sdiffstore(ctx: Ctx, args: list[bytes]) -> Reply:
    """SDIFFSTORE destination key [key ...] -> size of the difference stored (members of the
    first set in none of the others)."""
    sets = _sets(ctx, args[1:])
    return _store_set(ctx, args[0], sets[0].difference(*sets[1:]), b"sdiffstore")
