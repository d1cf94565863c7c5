"""Sorted-set commands."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Sized
from typing import TYPE_CHECKING

from streamworker.engine import msgs
from streamworker.engine.commands import command
from streamworker.engine.commands._args import to_double, to_int, to_long_in, to_timeout_ms
from streamworker.engine.commands._scan import EMPTY_SCAN, parse_scan_options, scan_members
from streamworker.engine.commands.hashes import random_count, random_members
from streamworker.engine.commands.keys import object_encoding, parse_cursor
from streamworker.engine.errors import CommandError
from streamworker.engine.model.zset import LexBound, ScoreBound, ZSet
from streamworker.engine.notify import NOTIFY_GENERIC, NOTIFY_ZSET
from streamworker.engine.numbers import LLONG_MAX, strtod_prefix
from streamworker.engine.replies import EMPTY_ARRAY, NULL_ARRAY, NULL_BULK, Double, format_double

if TYPE_CHECKING:
    from streamworker.engine.context import Blocked, Ctx
    from streamworker.engine.replies import Reply


def _zset(ctx: Ctx, key: bytes) -> ZSet | None:
    return ctx.db.get_typed(key, ZSet)


def _listpack_limits(ctx: Ctx) -> tuple[int, int]:
    """(zset-max-listpack-entries, zset-max-listpack-value) as they are now."""
    config = ctx.engine.config
    return (
        config.get_int("zset-max-listpack-entries"),
        config.get_int("zset-max-listpack-value"),
    )


def _new_zset(ctx: Ctx, items: Iterable[tuple[bytes, float]]) -> ZSet:
    """A stored result of ZUNIONSTORE/ZINTERSTORE/ZDIFFSTORE: Redis makes it a skiplist when it has more
    members than zset-max-listpack-entries or a member longer than zset-max-listpack-value,
    else a listpack (whose -0 scores become 0)."""
    pairs = list(items)
    entries, value = _listpack_limits(ctx)
    zs = ZSet(big=len(pairs) > entries or any(len(m) > value for m, _ in pairs))
    for member, score in pairs:
        zs.add(member, score)
    return zs


def _parse_score_bound(arg: bytes) -> ScoreBound | None:
    if arg[:1] == b"(":
        value = strtod_prefix(arg[1:]) if len(arg) > 1 else 0.0
        return None if value is None else ScoreBound(value, True)
    value = strtod_prefix(arg)
    return None if value is None else ScoreBound(value, False)


def _score_range(lo: bytes, hi: bytes) -> tuple[ScoreBound, ScoreBound]:
    low = _parse_score_bound(lo)
    high = _parse_score_bound(hi)
    if low is None or high is None:
        raise CommandError(msgs.MIN_MAX_NOT_FLOAT)
    return low, high


def _parse_lex_bound(arg: bytes) -> LexBound | None:
    c = arg[:1]
    if c == b"+":
        return LexBound(b"", True, 1) if len(arg) == 1 else None
    if c == b"-":
        return LexBound(b"", True, -1) if len(arg) == 1 else None
    if c == b"(":
        return LexBound(arg[1:], True)
    if c == b"[":
        return LexBound(arg[1:], False)
    return None


def _lex_range(lo: bytes, hi: bytes) -> tuple[LexBound, LexBound]:
    low = _parse_lex_bound(lo)
    high = _parse_lex_bound(hi)
    if low is None or high is None:
        raise CommandError(msgs.MIN_MAX_NOT_STRING)
    return low, high


# --- ZADD / ZINCRBY ------------------------------------------------------------------------


def zadd_generic(ctx: Ctx, args: list[bytes], incr: bool) -> Reply:
    """ZADD (``incr``: ZINCRBY's form, ZADD ... INCR) over ``args`` (the key first); GEOADD
    adds its members through it."""
    key = args[0]
    nx = xx = gt = lt = ch = False
    i = 1
    n = len(args)
    while i < n:
        opt = args[i].lower()
        if opt == b"nx":
            nx = True
        elif opt == b"xx":
            xx = True
        elif opt == b"ch":
            ch = True
        elif opt == b"incr":
            incr = True
        elif opt == b"gt":
            gt = True
        elif opt == b"lt":
            lt = True
        else:
            break
        i += 1
    elements = n - i
    if elements % 2 or not elements:
        raise CommandError(msgs.SYNTAX)
    if nx and xx:
        raise CommandError(msgs.ZADD_XX_NX)
    if (gt and nx) or (lt and nx) or (gt and lt):
        raise CommandError(msgs.ZADD_GT_LT_NX)
    if incr and elements > 2:
        raise CommandError(msgs.ZADD_INCR_PAIR)
    pairs = [(to_double(args[j]), args[j + 1]) for j in range(i, n, 2)]
    db = ctx.db
    zs = _zset(ctx, key)
    added = updated = processed = 0
    score = 0.0
    if zs is None:
        if xx:
            ctx.changed(0)
            return (NULL_BULK if not processed else Double(score)) if incr else 0
        zs = ZSet()
        db.set(key, zs)
        ctx.signal_key_ready(key)
    entries, value = _listpack_limits(ctx)
    for score_in, member in pairs:
        score = score_in
        cur = zs.scores.get(member)
        if cur is not None:
            if nx:
                continue
            if incr:
                score += cur
                if math.isnan(score):
                    raise CommandError(msgs.ZSET_NAN)
            if (lt and score >= cur) or (gt and score <= cur):
                continue
            processed += 1
            if score != cur:
                zs.add(member, score)
                updated += 1
        elif not xx:
            if not zs.big and (len(zs) >= entries or len(member) > value):
                # Redis converts the listpack before inserting the member that outgrows it
                # (a new key with zset-max-listpack-entries 0 starts as a skiplist).
                zs.big = True
            zs.add(member, score)
            added += 1
            processed += 1
    ctx.changed(added + updated)
    if added or updated:
        ctx.touch(key)
        ctx.notify(NOTIFY_ZSET, b"zincr" if incr else b"zadd", key)
    if incr:
        return Double(score) if processed else NULL_BULK
    return added + updated if ch else added


@command("zadd", arity=-4, flags=("write", "denyoom", "fast"), first_key=1, last_key=1, step=1)
def zadd(ctx: Ctx, args: list[bytes]) -> Reply:
    """ZADD key [NX|XX] [GT|LT] [CH] [INCR] score member [score member ...]."""
    return zadd_generic(ctx, args, False)


@command("zincrby", arity=4, flags=("write", "denyoom", "fast"), first_key=1, last_key=1, step=1)
def zincrby(ctx: Ctx, args: list[bytes]) -> Reply:
    """ZINCRBY key increment member -> new score."""
    return zadd_generic(ctx, args, True)


# --- lookups -------------------------------------------------------------------------------


@command("zscore", arity=3, flags=("readonly", "fast"), first_key=1, last_key=1, step=1)
def zscore(ctx: Ctx, args: list[bytes]) -> Reply:
    """ZSCORE key member -> score or nil."""
    zs = _zset(ctx, args[0])
    score = zs.scores.get(args[1]) if zs is not None else None
    return NULL_BULK if score is None else Double(score)


@command("zmscore", arity=-3, flags=("readonly", "fast"), first_key=1, last_key=1, step=1)
def zmscore(ctx: Ctx, args: list[bytes]) -> Reply:
    """ZMSCORE key member [member ...] -> scores (nil for missing)."""
    zs = _zset(ctx, args[0])
    scores = zs.scores if zs is not None else {}
    out: list[Reply] = []
    for m in args[1:]:
        s = scores.get(m)
        out.append(NULL_BULK if s is None else Double(s))
    return out


@command("zcard", arity=2, flags=("readonly", "fast"), first_key=1, last_key=1, step=1)
def zcard(ctx: Ctx, args: list[bytes]) -> Reply:
    """ZCARD key -> number of members."""
    zs = _zset(ctx, args[0])
    return len(zs) if zs is not None else 0


def _zrank(ctx: Ctx, args: list[bytes], reverse: bool) -> Reply:
    zs = _zset(ctx, args[0])
    if zs is None:
        return NULL_BULK
    rank = zs.rank(args[1])
    if rank is None:
        return NULL_BULK
    return len(zs) - 1 - rank if reverse else rank


@command("zrank", arity=3, flags=("readonly", "fast"), first_key=1, last_key=1, step=1)
def zrank(ctx: Ctx, args: list[bytes]) -> Reply:
    """ZRANK key member -> ascending rank or nil."""
    return _zrank(ctx, args, False)


@command("zrevrank", arity=3, flags=("readonly", "fast"), first_key=1, last_key=1, step=1)
def zrevrank(ctx: Ctx, args: list[bytes]) -> Reply:
    """ZREVRANK key member -> descending rank or nil."""
    return _zrank(ctx, args, True)


@command("zcount", arity=4, flags=("readonly", "fast"), first_key=1, last_key=1, step=1)
def zcount(ctx: Ctx, args: list[bytes]) -> Reply:
    """ZCOUNT key min max -> members with scores in range."""
    low, high = _score_range(args[1], args[2])
    zs = _zset(ctx, args[0])
    if zs is None:
        return 0
    start, stop = zs.score_range(low, high)
    return stop - start


@command("zlexcount", arity=4, flags=("readonly", "fast"), first_key=1, last_key=1, step=1)
def zlexcount(ctx: Ctx, args: list[bytes]) -> Reply:
    """ZLEXCOUNT key min max -> members in the lex range."""
    low, high = _lex_range(args[1], args[2])
    zs = _zset(ctx, args[0])
    if zs is None:
        return 0
    start, stop = zs.lex_range(low, high)
    return stop - start


@command("zrem", arity=-3, flags=("write", "fast"), first_key=1, last_key=1, step=1)
def zrem(ctx: Ctx, args: list[bytes]) -> Reply:
    """ZREM key member [member ...] -> number removed (the key goes when empty)."""
    key = args[0]
    zs = _zset(ctx, key)
    if zs is None:
        return 0
    removed = 0
    for m in args[1:]:
        if zs.remove(m):
            removed += 1
            if not len(zs):
                break
    if removed:
        _removed(ctx, key, zs, b"zrem")
    return removed


def _removed(ctx: Ctx, key: bytes, zs: ZSet, event: bytes) -> None:
    # After removing members: the event, then the empty zset goes with a "del".
    ctx.notify(NOTIFY_ZSET, event, key)
    if not len(zs):
        ctx.db.delete(key)
        ctx.notify(NOTIFY_GENERIC, b"del", key)
    else:
        ctx.touch(key)


# --- ranges --------------------------------------------------------------------------------

_RANK, _SCORE, _LEX = 0, 1, 2


def _emit(ctx: Ctx, items: list[tuple[float, bytes]], withscores: bool) -> Reply:
    if not withscores:
        return [m for _, m in items]
    # Redis itself branches here: RESP3 gets [member, score] pairs, RESP2 a flat array.
    if ctx.client.resp > 2:
        return [[m, Double(s)] for s, m in items]
    out: list[Reply] = []
    for s, m in items:
        out.append(m)
        out.append(Double(s))
    return out


def _zrange_select(
    ctx: Ctx,
    args: list[bytes],
    rangetype: int | None,
    reverse: bool | None,
    store: bool = False,
) -> tuple[list[tuple[float, bytes]], bool]:
    """The (score, member) pairs a ZRANGE-family call selects, and whether WITHSCORES was
    given (ZRANGESTORE refuses it as a syntax error)."""
    key = args[0]
    minarg, maxarg = args[1], args[2]
    withscores = False
    offset = 0
    limit = -1
    j = 3
    n = len(args)
    while j < n:
        opt = args[j].lower()
        left = n - j - 1
        if opt == b"withscores" and not store:
            withscores = True
        elif opt == b"limit" and left >= 2:
            offset = to_int(args[j + 1])
            limit = to_int(args[j + 2])
            j += 2
        elif reverse is None and opt == b"rev":
            reverse = True
        elif rangetype is None and opt == b"bylex":
            rangetype = _LEX
        elif rangetype is None and opt == b"byscore":
            rangetype = _SCORE
        else:
            raise CommandError(msgs.SYNTAX)
        j += 1
    if reverse is None:
        reverse = False
    if rangetype is None:
        rangetype = _RANK
    if limit != -1 and rangetype == _RANK:
        raise CommandError(msgs.LIMIT_NEEDS_BY)
    if withscores and rangetype == _LEX:
        raise CommandError(msgs.WITHSCORES_BYLEX)
    if reverse and rangetype != _RANK:
        minarg, maxarg = maxarg, minarg
    if rangetype == _RANK:
        start = to_int(minarg)
        end = to_int(maxarg)
    elif rangetype == _SCORE:
        srange = _score_range(minarg, maxarg)
    else:
        lrange = _lex_range(minarg, maxarg)
    zs = _zset(ctx, key)
    if zs is None:
        return [], withscores
    size = len(zs)
    if rangetype == _RANK:
        if start < 0:
            start += size
        if end < 0:
            end += size
        start = max(start, 0)
        if start > end or start >= size:
            return [], withscores
        end = min(end, size - 1)
        if reverse:
            items = zs.items_between(size - 1 - end, size - start)
            items.reverse()
        else:
            items = zs.items_between(start, end + 1)
        return items, withscores
    if offset > 0 and offset >= size:
        return [], withscores
    if offset < 0 or limit == 0:
        return [], withscores
    lo, hi = zs.score_range(*srange) if rangetype == _SCORE else zs.lex_range(*lrange)
    if reverse:
        stop = hi - offset
        begin = lo if limit < 0 else max(lo, stop - limit)
        items = zs.items_between(begin, stop) if stop > begin else []
        items.reverse()
    else:
        first = lo + offset
        last = hi if limit < 0 else min(hi, first + limit)
        items = zs.items_between(first, last) if last > first else []
    return items, withscores


def _zrange_generic(
    ctx: Ctx, args: list[bytes], rangetype: int | None, reverse: bool | None
) -> Reply:
    items, withscores = _zrange_select(ctx, args, rangetype, reverse)
    return _emit(ctx, items, withscores)


@command("zrange", arity=-4, flags=("readonly",), first_key=1, last_key=1, step=1)
def zrange(ctx: Ctx, args: list[bytes]) -> Reply:
    """ZRANGE key start stop [BYSCORE|BYLEX] [REV] [LIMIT offset count] [WITHSCORES]."""
    return _zrange_generic(ctx, args, None, None)


@command("zrangebyscore", arity=-4, flags=("readonly",), first_key=1, last_key=1, step=1)
def zrangebyscore(ctx: Ctx, args: list[bytes]) -> Reply:
    """ZRANGEBYSCORE key min max [WITHSCORES] [LIMIT offset count]."""
    return _zrange_generic(ctx, args, _SCORE, False)


@command("zrevrangebyscore", arity=-4, flags=("readonly",), first_key=1, last_key=1, step=1)
def zrevrangebyscore(ctx: Ctx, args: list[bytes]) -> Reply:
    """ZREVRANGEBYSCORE key max min [WITHSCORES] [LIMIT offset count]."""
    return _zrange_generic(ctx, args, _SCORE, True)


@command("zrevrange", arity=-4, flags=("readonly",), first_key=1, last_key=1, step=1)
def zrevrange(ctx: Ctx, args: list[bytes]) -> Reply:
    """ZREVRANGE key start stop [WITHSCORES]."""
    return _zrange_generic(ctx, args, _RANK, True)


@command("zrangebylex", arity=-4, flags=("readonly",), first_key=1, last_key=1, step=1)
def zrangebylex(ctx: Ctx, args: list[bytes]) -> Reply:
    """ZRANGEBYLEX key min max [LIMIT offset count]."""
    return _zrange_generic(ctx, args, _LEX, False)


@command("zrevrangebylex", arity=-4, flags=("readonly",), first_key=1, last_key=1, step=1)
def zrevrangebylex(ctx: Ctx, args: list[bytes]) -> Reply:
    """ZREVRANGEBYLEX key max min [LIMIT offset count]."""
    return _zrange_generic(ctx, args, _LEX, True)


def _zrem_range(ctx: Ctx, args: list[bytes], rangetype: int) -> Reply:
    key = args[0]
    if rangetype == _RANK:
        start = to_int(args[1])
        end = to_int(args[2])
    elif rangetype == _SCORE:
        srange = _score_range(args[1], args[2])
    else:
        lrange = _lex_range(args[1], args[2])
    zs = _zset(ctx, key)
    if zs is None:
        return 0
    size = len(zs)
    if rangetype == _RANK:
        if start < 0:
            start += size
        if end < 0:
            end += size
        start = max(start, 0)
        if start > end or start >= size:
            return 0
        end = min(end, size - 1)
        lo, hi = start, end + 1
    elif rangetype == _SCORE:
        lo, hi = zs.score_range(*srange)
    else:
        lo, hi = zs.lex_range(*lrange)
    victims = zs.items_between(lo, hi)
    for _, m in victims:
        zs.remove(m)
    if victims:
        _removed(ctx, key, zs, _ZREM_RANGE_EVENTS[rangetype])
    return len(victims)


_ZREM_RANGE_EVENTS = {
    _RANK: b"zremrangebyrank",
    _SCORE: b"zremrangebyscore",
    _LEX: b"zremrangebylex",
}


@command("zremrangebyscore", arity=4, flags=("write",), first_key=1, last_key=1, step=1)
def zremrangebyscore(ctx: Ctx, args: list[bytes]) -> Reply:
    """ZREMRANGEBYSCORE key min max -> number removed."""
    return _zrem_range(ctx, args, _SCORE)


@command("zremrangebyrank", arity=4, flags=("write",), first_key=1, last_key=1, step=1)
def zremrangebyrank(ctx: Ctx, args: list[bytes]) -> Reply:
    """ZREMRANGEBYRANK key start stop -> number removed."""
    return _zrem_range(ctx, args, _RANK)


@command("zremrangebylex", arity=4, flags=("write",), first_key=1, last_key=1, step=1)
def zremrangebylex(ctx: Ctx, args: list[bytes]) -> Reply:
    """ZREMRANGEBYLEX key min max -> number removed."""
    return _zrem_range(ctx, args, _LEX)


def _zpop(ctx: Ctx, args: list[bytes], reverse: bool) -> Reply:
    if len(args) > 2:
        raise CommandError(msgs.SYNTAX)
    has_count = len(args) == 2
    count = 1
    if has_count:
        count = to_int(args[1], msgs.NOT_POSITIVE)
        if count < 0:
            raise CommandError(msgs.NOT_POSITIVE)
    key = args[0]
    zs = _zset(ctx, key)
    if zs is None or count == 0:
        ctx.changed(0)
        return EMPTY_ARRAY
    size = len(zs)
    take = min(count, size)
    items = zs.items_between(size - take, size) if reverse else zs.items_between(0, take)
    if reverse:
        items.reverse()
    for _, m in items:
        zs.remove(m)
    ctx.changed(len(items))
    _removed(ctx, key, zs, b"zpopmax" if reverse else b"zpopmin")
    if has_count and ctx.client.resp > 2:
        return [[m, Double(s)] for s, m in items]
    out: list[Reply] = []
    for s, m in items:
        out.append(m)
        out.append(Double(s))
    return out


@command("zpopmin", arity=-2, flags=("write", "fast"), first_key=1, last_key=1, step=1)
def zpopmin(ctx: Ctx, args: list[bytes]) -> Reply:
    """ZPOPMIN key [count] -> lowest members with scores."""
    return _zpop(ctx, args, False)


@command("zpopmax", arity=-2, flags=("write", "fast"), first_key=1, last_key=1, step=1)
def zpopmax(ctx: Ctx, args: list[bytes]) -> Reply:
    """ZPOPMAX key [count] -> highest members with scores."""
    return _zpop(ctx, args, True)


# --- random members and scanning -------------------------------------------------------------


@command("zrandmember", arity=-2, flags=("readonly",), first_key=1, last_key=1, step=1)
def zrandmember(ctx: Ctx, args: list[bytes]) -> Reply:
    """ZRANDMEMBER key [count [WITHSCORES]] -> a random member, or count members (distinct
    when count > 0, repeats allowed when < 0), with their scores."""
    if len(args) == 1:
        z = _zset(ctx, args[0])
        if not z:
            return NULL_BULK
        return random.choice(list(z.scores))
    count = random_count(args, b"withscores")
    withscores = len(args) == 3
    z = _zset(ctx, args[0])
    if not z or count == 0:
        return EMPTY_ARRAY
    if count < 0 or count == 1 or count < len(z):
        members = random_members(list(z.scores), count)
        return _emit(ctx, [(z.scores[m], m) for m in members], withscores)
    # Every member: 7.0 replies with the whole set in descending rank order (ZREVRANGE 0 -1).
    return _emit(ctx, list(reversed(z.order)), withscores)


@command("zscan", arity=-3, flags=("readonly",), first_key=1, last_key=1, step=1)
def zscan(ctx: Ctx, args: list[bytes]) -> Reply:
    """ZSCAN key cursor [MATCH pattern] [COUNT count] -> [next-cursor, [member, score, ...]]
    (scores as bulk strings in RESP3 too); a listpack comes back whole with cursor 0."""
    cursor = parse_cursor(args[1])
    z = _zset(ctx, args[0])
    if z is None:
        return EMPTY_SCAN
    options = parse_scan_options(args[2:])
    small = object_encoding(ctx, z) == b"listpack"
    next_cursor, found = scan_members(
        ctx, args[0], z, lambda: [m for _, m in z], z.__contains__, cursor, options, small
    )
    flat: list[Reply] = []
    for member in found:
        flat.append(member)
        flat.append(format_double(z.scores[member]))
    return [str(next_cursor).encode(), flat]


# --- ZRANGESTORE, ZINTERCARD ------------------------------------------------------------------


@command("zrangestore", arity=-5, flags=("write", "denyoom"), first_key=1, last_key=2, step=1)
def zrangestore(ctx: Ctx, args: list[bytes]) -> Reply:
    """ZRANGESTORE dst src min max [BYSCORE|BYLEX] [REV] [LIMIT offset count] -> the number of
    members stored in dst (dst is deleted when the range is empty)."""
    dst = args[0]
    items, _ = _zrange_select(ctx, args[1:], None, None, store=True)
    if not items:
        if ctx.db.discard(dst):
            ctx.notify(NOTIFY_GENERIC, b"del", dst)
        else:
            ctx.changed(0)
        return 0
    entries, value = _listpack_limits(ctx)
    # Redis creates the destination as a skiplist when a rank range gives more members than
    # zset-max-listpack-entries (a score or lex range has no length hint), else as a listpack
    # converted when a member outgrows it: the members inserted before keep no -0.
    by_rank = not any(a.lower() in (b"byscore", b"bylex") for a in args[4:])
    zs = ZSet(big=by_rank and len(items) > entries)
    for score, member in items:
        if not zs.big and (len(zs) >= entries or len(member) > value):
            zs.big = True
        zs.add(member, score)
    ctx.db.set_key(dst, zs)
    ctx.signal_key_ready(dst)
    ctx.notify(NOTIFY_ZSET, b"zrangestore", dst)
    return len(items)


@command("zintercard", arity=-3, flags=("readonly", "movablekeys"))
def zintercard(ctx: Ctx, args: list[bytes]) -> Reply:
    """ZINTERCARD numkeys key [key ...] [LIMIT limit] -> the size of the intersection of sorted
    sets and sets (counting stops at limit; 0 = no limit)."""
    numkeys = to_int(args[0])
    if numkeys < 1:
        raise CommandError(msgs.at_least_one_key("zintercard"))
    if numkeys > len(args) - 1:
        raise CommandError(msgs.SYNTAX)
    keys = args[1 : 1 + numkeys]
    collections: list[Iterable[bytes] | None] = []
    for key in keys:
        value = ctx.db.get(key)
        if value is not None and not isinstance(value, (ZSet, set)):
            raise CommandError(msgs.WRONGTYPE)
        collections.append(value.scores if isinstance(value, ZSet) else value)
    limit = 0
    j = 1 + numkeys
    while j < len(args):
        if args[j].lower() == b"limit" and j + 1 < len(args):
            limit = to_long_in(args[j + 1], 0, LLONG_MAX, msgs.LIMIT_NEGATIVE)
            j += 2
        else:
            raise CommandError(msgs.SYNTAX)
    return intersection_size(collections, limit)


def intersection_size(collections: list[Iterable[bytes] | None], limit: int) -> int:
    """Members common to every collection (None = empty), counted up to ``limit`` (0 = all);
    the smallest collection is walked, the others probed."""
    if any(c is None for c in collections):
        return 0
    present = [c for c in collections if c is not None]
    sized = sorted(present, key=lambda c: len(c) if isinstance(c, Sized) else 0)
    first, rest = sized[0], sized[1:]
    probes = [c if isinstance(c, (set, dict)) else set(c) for c in rest]
    count = 0
    for member in first:
        if all(member in p for p in probes):
            count += 1
            if limit and count >= limit:
                break
    return count


# --- ZMPOP, BZMPOP, BZPOPMIN, BZPOPMAX ---------------------------------------------------------


def _pop_items(c: Ctx, key: bytes, zs: ZSet, count: int, top: bool) -> list[tuple[float, bytes]]:
    size = len(zs)
    take = min(count, size)
    items = zs.items_between(size - take, size) if top else zs.items_between(0, take)
    if top:
        items.reverse()
    for _, m in items:
        zs.remove(m)
    c.changed(len(items))
    _removed(c, key, zs, b"zpopmax" if top else b"zpopmin")
    return items


def _zmpop_args(args: list[bytes], numkeys_at: int) -> tuple[list[bytes], bool, int]:
    """Redis's zmpopGenericCommand parsing: (keys, from the top, count)."""
    numkeys = to_long_in(args[numkeys_at], 1, LLONG_MAX, msgs.NUMKEYS_NOT_POSITIVE)
    where_at = numkeys_at + numkeys + 1
    if where_at >= len(args):
        raise CommandError(msgs.SYNTAX)
    where = args[where_at].lower()
    if where not in (b"min", b"max"):
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
    return args[numkeys_at + 1 : where_at], where == b"max", 1 if count == -1 else count


def _zmpop_from(c: Ctx, keys: list[bytes], top: bool, count: int) -> Reply | None:
    """Pop from the first existing sorted set of ``keys`` (a wrong type before it is an error):
    [key, [[member, score], ...]], logged as ZPOPMIN/ZPOPMAX key n; None when none exists."""
    for key in keys:
        zs = c.db.get_typed(key, ZSet)
        if not zs:
            continue
        items = _pop_items(c, key, zs, count, top)
        c.propagate([b"ZPOPMAX" if top else b"ZPOPMIN", key, str(len(items)).encode()])
        return [key, [[m, Double(s)] for s, m in items]]
    return None


@command("zmpop", arity=-4, flags=("write", "movablekeys"))
def zmpop(ctx: Ctx, args: list[bytes]) -> Reply:
    """ZMPOP numkeys key [key ...] MIN|MAX [COUNT count] -> [key, [[member, score], ...]] or
    nil."""
    keys, top, count = _zmpop_args(args, 0)
    reply = _zmpop_from(ctx, keys, top, count)
    if reply is None:
        ctx.no_propagate()  # nothing popped: Redis propagates nothing
        ctx.changed(0)
        return NULL_ARRAY
    return reply


def _block_on(
    ctx: Ctx,
    keys: list[bytes],
    timeout_ms: int,
    attempt: Callable[[Ctx], Reply | None],
) -> Reply | Blocked:
    def retry(c: Ctx) -> Reply | None:
        # A key that became another type while we waited is skipped, as for BLPOP.
        try:
            return attempt(c)
        except CommandError:
            return None

    reply = attempt(ctx)
    if reply is not None:
        return reply
    return ctx.block(keys, timeout_ms, retry, NULL_ARRAY)


@command("bzmpop", arity=-5, flags=("write", "blocking", "movablekeys"))
def bzmpop(ctx: Ctx, args: list[bytes]) -> Reply | Blocked:
    """BZMPOP timeout numkeys key [key ...] MIN|MAX [COUNT count] -> as ZMPOP, or nil after
    timeout seconds."""
    keys, top, count = _zmpop_args(args, 1)
    timeout_ms = to_timeout_ms(args[0], True, ctx.now_ms())
    return _block_on(ctx, keys, timeout_ms, lambda c: _zmpop_from(c, keys, top, count))


def _bzpop(ctx: Ctx, args: list[bytes], top: bool) -> Reply | Blocked:
    keys = args[:-1]
    timeout_ms = to_timeout_ms(args[-1], True, ctx.now_ms())

    def attempt(c: Ctx) -> Reply | None:
        for key in keys:
            zs = c.db.get_typed(key, ZSet)
            if not zs:
                continue
            ((score, member),) = _pop_items(c, key, zs, 1, top)
            c.propagate([b"ZPOPMAX" if top else b"ZPOPMIN", key])
            return [key, member, Double(score)]
        return None

    return _block_on(ctx, keys, timeout_ms, attempt)


@command(
    "bzpopmin",
    arity=-3,
    flags=("write", "noscript", "blocking", "fast"),
    first_key=1,
    last_key=-2,
    step=1,
)
def bzpopmin(ctx: Ctx, args: list[bytes]) -> Reply | Blocked:
    """BZPOPMIN key [key ...] timeout -> [key, member, score], or nil after timeout seconds."""
    return _bzpop(ctx, args, False)


@command(
    "bzpopmax",
    arity=-3,
    flags=("write", "noscript", "blocking", "fast"),
    first_key=1,
    last_key=-2,
    step=1,
)
def bzpopmax(ctx: Ctx, args: list[bytes]) -> Reply | Blocked:
    """BZPOPMAX key [key ...] timeout -> [key, member, score], or nil after timeout seconds."""
    return _bzpop(ctx, args, True)


# --- ZUNION, ZINTER, ZDIFF and their STORE forms ------------------------------------------------

_UNION, _INTER, _DIFF = 0, 1, 2
_SUM, _MIN, _MAX = 0, 1, 2


def _aggregate(target: float, value: float, how: int) -> float:
    """Redis's zunionInterAggregate, C comparisons included: a NaN ``value`` never wins MIN or
    MAX, and a NaN sum (inf - inf) becomes 0."""
    if how == _SUM:
        total = target + value
        return 0.0 if math.isnan(total) else total
    if how == _MIN:
        return value if value < target else target
    return value if value > target else target


class _Source:
    """One input of a set operation: a sorted set's scores, or a set's members (score 1)."""

    __slots__ = ("scores", "weight")

    def __init__(self, value: ZSet | set[bytes] | None) -> None:
        self.weight = 1.0
        if value is None:
            self.scores: dict[bytes, float] | set[bytes] = {}
        elif isinstance(value, ZSet):
            self.scores = value.scores
        else:
            self.scores = value

    def __len__(self) -> int:
        return len(self.scores)

    def items(self) -> Iterable[tuple[bytes, float]]:
        scores = self.scores
        if isinstance(scores, dict):
            return scores.items()
        return ((member, 1.0) for member in scores)

    def find(self, member: bytes) -> float | None:
        scores = self.scores
        if isinstance(scores, dict):
            return scores.get(member)
        return 1.0 if member in scores else None


def _setop(
    ctx: Ctx, args: list[bytes], op: int, store: bool, name: str
) -> tuple[dict[bytes, float], bool]:
    """Redis's zunionInterDiffGenericCommand from the numkeys argument on (``args[0]``): the
    resulting member -> score map and whether WITHSCORES was given. Errors in Redis's order:
    numkeys, the key count, each key's type, then the options."""
    numkeys = to_int(args[0])
    if numkeys < 1:
        raise CommandError(msgs.at_least_one_key(name))
    if numkeys > len(args) - 1:
        raise CommandError(msgs.SYNTAX)
    sources: list[_Source] = []
    for key in args[1 : 1 + numkeys]:
        value = ctx.db.get(key)
        if value is not None and not isinstance(value, (ZSet, set)):
            raise CommandError(msgs.WRONGTYPE)
        sources.append(_Source(value))
    how = _SUM
    withscores = False
    j = 1 + numkeys
    n = len(args)
    while j < n:
        remaining = n - j
        opt = args[j].lower()
        if op != _DIFF and remaining >= numkeys + 1 and opt == b"weights":
            for i, source in enumerate(sources):
                source.weight = to_double(args[j + 1 + i], msgs.WEIGHT_NOT_FLOAT)
            j += 1 + numkeys
        elif op != _DIFF and remaining >= 2 and opt == b"aggregate":
            word = args[j + 1].lower()
            if word == b"sum":
                how = _SUM
            elif word == b"min":
                how = _MIN
            elif word == b"max":
                how = _MAX
            else:
                raise CommandError(msgs.SYNTAX)
            j += 2
        elif not store and opt == b"withscores":
            withscores = True
            j += 1
        else:
            raise CommandError(msgs.SYNTAX)
    if op == _DIFF:
        return _zdiff(sources), withscores
    # Redis sorts the inputs by size (a stable sort on glibc): the order sums are made in.
    sources.sort(key=len)
    out: dict[bytes, float] = {}
    if op == _INTER:
        first, rest = sources[0], sources[1:]
        if not len(first):
            return out, withscores
        for member, score0 in first.items():
            score = first.weight * score0
            if math.isnan(score):
                score = 0.0
            for source in rest:
                found = source.find(member)
                if found is None:
                    break
                # No NaN reset here (only the first input's product gets one), as in Redis.
                score = _aggregate(score, found * source.weight, how)
            else:
                out[member] = score
        return out, withscores
    for source in sources:
        weight = source.weight
        for member, score0 in source.items():
            score = weight * score0
            if math.isnan(score):
                score = 0.0
            old = out.get(member)
            out[member] = score if old is None else _aggregate(old, score, how)
    return out, withscores


def _zdiff(sources: list[_Source]) -> dict[bytes, float]:
    first, rest = sources[0], [s for s in sources[1:] if len(s)]
    return {
        member: score
        for member, score in first.items()
        if not any(s.find(member) is not None for s in rest)
    }


def _setop_reply(ctx: Ctx, args: list[bytes], op: int, name: str) -> Reply:
    scores, withscores = _setop(ctx, args, op, False, name)
    # Redis replies from the result's skiplist, which keeps a -0 score (a stored result
    # becomes a listpack when small, and that stores -0 as 0: see _new_zset).
    return _emit(ctx, sorted([(score, member) for member, score in scores.items()]), withscores)


def _setop_store(ctx: Ctx, args: list[bytes], op: int, name: str) -> Reply:
    dst = args[0]
    scores, _ = _setop(ctx, args[1:], op, True, name)
    if not scores:
        if ctx.db.discard(dst):
            ctx.notify(NOTIFY_GENERIC, b"del", dst)
        else:
            ctx.no_propagate()
            ctx.changed(0)
        return 0
    ctx.db.set_key(dst, _new_zset(ctx, scores.items()))
    ctx.signal_key_ready(dst)
    # The event is the command's name: zunionstore, zinterstore or zdiffstore.
    ctx.notify(NOTIFY_ZSET, name.encode(), dst)
    return len(scores)


@command("zunion", arity=-3, flags=("readonly", "movablekeys"))
def zunion(ctx: Ctx, args: list[bytes]) -> Reply:
    """ZUNION numkeys key [key ...] [WEIGHTS w ...] [AGGREGATE SUM|MIN|MAX] [WITHSCORES]."""
    return _setop_reply(ctx, args, _UNION, "zunion")


@command("zinter", arity=-3, flags=("readonly", "movablekeys"))
def zinter(ctx: Ctx, args: list[bytes]) -> Reply:
    """ZINTER numkeys key [key ...] [WEIGHTS w ...] [AGGREGATE SUM|MIN|MAX] [WITHSCORES]."""
    return _setop_reply(ctx, args, _INTER, "zinter")


@command("zdiff", arity=-3, flags=("readonly", "movablekeys"))
def zdiff(ctx: Ctx, args: list[bytes]) -> Reply:
    """ZDIFF numkeys key [key ...] [WITHSCORES] -> members of the first input in no other."""
    return _setop_reply(ctx, args, _DIFF, "zdiff")


@command(
    "zunionstore",
    arity=-4,
    flags=("write", "denyoom", "movablekeys"),
    first_key=1,
    last_key=1,
    step=1,
)
def zunionstore(ctx: Ctx, args: list[bytes]) -> Reply:
    """ZUNIONSTORE destination numkeys key [key ...] [WEIGHTS ...] [AGGREGATE ...] -> the size
    of the result stored (destination deleted when empty)."""
    return _setop_store(ctx, args, _UNION, "zunionstore")


@command(
    "zinterstore",
    arity=-4,
    flags=("write", "denyoom", "movablekeys"),
    first_key=1,
    last_key=1,
    step=1,
)
def zinterstore(ctx: Ctx, args: list[bytes]) -> Reply:
    """ZINTERSTORE destination numkeys key [key ...] [WEIGHTS ...] [AGGREGATE ...] -> the size
    of the result stored (destination deleted when empty)."""
    return _setop_store(ctx, args, _INTER, "zinterstore")


@command(
    "zdiffstore",
    arity=-4,
    flags=("write", "denyoom", "movablekeys"),
    first_key=1,
    last_key=1,
    step=1,
)
def zdiffstore(ctx: Ctx, args: list[bytes]) -> Reply:
    """ZDIFFSTORE destination numkeys key [key ...] -> the size of the difference stored."""
    return _setop_store(ctx, args, _DIFF, "zdiffstore")
