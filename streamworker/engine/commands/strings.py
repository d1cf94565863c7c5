"""String commands: GET, SET, SETNX, SETEX, PSETEX, GETSET, GETDEL, GETEX, INCR family,
INCRBYFLOAT, MGET, MSET, MSETNX, APPEND, STRLEN, GETRANGE, SETRANGE."""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamworker.engine import msgs
from streamworker.engine.commands import command
from streamworker.engine.commands._args import to_int
from streamworker.engine.errors import CommandError
from streamworker.engine.model.lcs import LcsTable, walk_back
from streamworker.engine.notify import NOTIFY_GENERIC, NOTIFY_STRING
from streamworker.engine.numbers import (
    LLONG_MAX,
    LLONG_MIN,
    ld_add,
    ld_format_human,
    ld_parse,
    parse_int,
)
from streamworker.engine.replies import NULL_BULK, OK, Map

if TYPE_CHECKING:
    from streamworker.engine.context import Ctx
    from streamworker.engine.replies import Reply

_MAX_STRING = 512 * 1024 * 1024


@command("get", arity=2, flags=("readonly", "fast"), first_key=1, last_key=1, step=1)
def get(ctx: Ctx, args: list[bytes]) -> Reply:
    """GET key -> value or nil; WRONGTYPE for non-strings."""
    value = ctx.db.get(args[0])
    if value is None:
        return NULL_BULK
    if type(value) is not bytes:
        raise CommandError(msgs.WRONGTYPE)
    return value


_NX, _XX, _GET, _KEEPTTL, _EX, _PX, _EXAT, _PXAT, _PERSIST = (1 << i for i in range(9))
_ANY_EXPIRE = _EX | _PX | _EXAT | _PXAT


def _parse_set_options(args: list[bytes], start: int, for_set: bool) -> tuple[int, bytes | None]:
    # Mirrors Redis's parseExtendedStringArgumentsOrReply, including which repeats it allows.
    flags = 0
    expire: bytes | None = None
    j = start
    n = len(args)
    while j < n:
        opt = args[j].lower()
        has_next = j + 1 < n
        if opt == b"nx" and not flags & _XX and for_set:
            flags |= _NX
        elif opt == b"xx" and not flags & _NX and for_set:
            flags |= _XX
        elif opt == b"get" and for_set:
            flags |= _GET
        elif opt == b"keepttl" and not flags & (_PERSIST | _ANY_EXPIRE) and for_set:
            flags |= _KEEPTTL
        elif opt == b"persist" and not for_set and not flags & (_ANY_EXPIRE | _KEEPTTL):
            flags |= _PERSIST
        elif opt == b"ex" and not flags & (_KEEPTTL | _PERSIST | _EXAT | _PX | _PXAT) and has_next:
            flags |= _EX
            expire = args[j + 1]
            j += 1
        elif opt == b"px" and not flags & (_KEEPTTL | _PERSIST | _EX | _EXAT | _PXAT) and has_next:
            flags |= _PX
            expire = args[j + 1]
            j += 1
        elif opt == b"exat" and not flags & (_KEEPTTL | _PERSIST | _EX | _PX | _PXAT) and has_next:
            flags |= _EXAT
            expire = args[j + 1]
            j += 1
        elif opt == b"pxat" and not flags & (_KEEPTTL | _PERSIST | _EX | _EXAT | _PX) and has_next:
            flags |= _PXAT
            expire = args[j + 1]
            j += 1
        else:
            raise CommandError(msgs.SYNTAX)
        j += 1
    return flags, expire


def _expire_ms(ctx: Ctx, expire: bytes, flags: int, cmd: str) -> int:
    when = to_int(expire)
    seconds = bool(flags & (_EX | _EXAT))
    if when <= 0 or (seconds and when > LLONG_MAX // 1000):
        raise CommandError(msgs.invalid_expire(cmd))
    if seconds:
        when *= 1000
    if flags & (_EX | _PX):
        when += ctx.now_ms()
        if when > LLONG_MAX:  # C's signed overflow makes it negative
            raise CommandError(msgs.invalid_expire(cmd))
    return when


def _set_generic(
    ctx: Ctx, key: bytes, value: bytes, flags: int, expire: bytes | None, cmd: str
) -> Reply:
    when = _expire_ms(ctx, expire, flags, cmd) if expire is not None else None
    db = ctx.db
    old = db.get(key)
    reply: Reply = OK
    if flags & _GET:
        if old is None:
            reply = NULL_BULK
        elif type(old) is not bytes:
            raise CommandError(msgs.WRONGTYPE)
        else:
            reply = old
    found = old is not None
    if (flags & _NX and found) or (flags & _XX and not found):
        ctx.no_propagate()
        ctx.changed(0)
        return reply if flags & _GET else NULL_BULK
    db.set(key, value, keep_ttl=bool(flags & _KEEPTTL) or when is not None)
    ctx.notify(NOTIFY_STRING, b"set", key)
    if when is not None:
        db.set_expire(key, when)
        ctx.notify(NOTIFY_GENERIC, b"expire", key)
        if ctx.propagating:
            # A relative expiry is logged as the absolute time it resolved to.
            ctx.propagate([b"SET", key, value, b"PXAT", b"%d" % when])
    return reply


@command("set", arity=-3, flags=("write", "denyoom"), first_key=1, last_key=1, step=1)
def set_(ctx: Ctx, args: list[bytes]) -> Reply:
    """SET key value [NX|XX] [GET] [EX s|PX ms|EXAT s|PXAT ms|KEEPTTL]."""
    if len(args) == 2:
        ctx.db.set(args[0], args[1])
        ctx.notify(NOTIFY_STRING, b"set", args[0])
        return OK
    flags, expire = _parse_set_options(args, 2, True)
    return _set_generic(ctx, args[0], args[1], flags, expire, "set")


@command("setnx", arity=3, flags=("write", "denyoom", "fast"), first_key=1, last_key=1, step=1)
def setnx(ctx: Ctx, args: list[bytes]) -> Reply:
    """SETNX key value -> 1 if set, 0 if the key exists."""
    db = ctx.db
    if db.get(args[0]) is not None:
        ctx.changed(0)
        return 0
    db.set(args[0], args[1])
    ctx.notify(NOTIFY_STRING, b"set", args[0])
    return 1


@command("setex", arity=4, flags=("write", "denyoom"), first_key=1, last_key=1, step=1)
def setex(ctx: Ctx, args: list[bytes]) -> Reply:
    """SETEX key seconds value."""
    return _set_generic(ctx, args[0], args[2], _EX, args[1], "setex")


@command("psetex", arity=4, flags=("write", "denyoom"), first_key=1, last_key=1, step=1)
def psetex(ctx: Ctx, args: list[bytes]) -> Reply:
    """PSETEX key milliseconds value."""
    return _set_generic(ctx, args[0], args[2], _PX, args[1], "psetex")


@command("getset", arity=3, flags=("write", "denyoom", "fast"), first_key=1, last_key=1, step=1)
def getset(ctx: Ctx, args: list[bytes]) -> Reply:
    """GETSET key value -> old value or nil."""
    return _set_generic(ctx, args[0], args[1], _GET, None, "getset")


@command("getdel", arity=2, flags=("write", "fast"), first_key=1, last_key=1, step=1)
def getdel(ctx: Ctx, args: list[bytes]) -> Reply:
    """GETDEL key -> value (then deleted) or nil."""
    reply = get(ctx, args)
    if reply is not NULL_BULK:
        ctx.db.delete(args[0])
        ctx.notify(NOTIFY_GENERIC, b"del", args[0])
        # Redis propagates the deletion as DEL (and nothing when the key was missing).
        if ctx.propagating:
            ctx.propagate([b"DEL", args[0]])
    else:
        ctx.no_propagate()
        ctx.changed(0)
    return reply


@command("getex", arity=-2, flags=("write", "fast"), first_key=1, last_key=1, step=1)
def getex(ctx: Ctx, args: list[bytes]) -> Reply:
    """GETEX key [EX s|PX ms|EXAT s|PXAT ms|PERSIST]."""
    flags, expire = _parse_set_options(args, 1, False)
    reply = get(ctx, args[:1])
    ctx.no_propagate()
    # Counted where it changed the key (an expiry set, removed, or the key deleted).
    ctx.changed(0)
    if reply is NULL_BULK:
        return reply
    when = _expire_ms(ctx, expire, flags, "getex") if expire is not None else None
    db = ctx.db
    key = args[0]
    if when is not None:
        if when <= ctx.now_ms():
            db.delete(key)
            ctx.changed()
            ctx.propagate([b"DEL", key])
            ctx.notify(NOTIFY_GENERIC, b"del", key)
        else:
            db.set_expire(key, when)
            ctx.changed()
            ctx.touch(key)
            ctx.propagate([b"PEXPIREAT", key, b"%d" % when])
            ctx.notify(NOTIFY_GENERIC, b"expire", key)
    elif flags & _PERSIST and db.persist(key):
        ctx.changed()
        ctx.touch(key)
        ctx.propagate([b"PERSIST", key])
        ctx.notify(NOTIFY_GENERIC, b"persist", key)
    return reply


def _incr(ctx: Ctx, key: bytes, incr: int) -> Reply:
    db = ctx.db
    old = db.get(key)
    if old is None:
        value = 0
    elif type(old) is not bytes:
        raise CommandError(msgs.WRONGTYPE)
    else:
        parsed = parse_int(old)
        if parsed is None:
            raise CommandError(msgs.NOT_INTEGER)
        value = parsed
    if (incr < 0 and value < 0 and incr < LLONG_MIN - value) or (
        incr > 0 and value > 0 and incr > LLONG_MAX - value
    ):
        raise CommandError(msgs.OVERFLOW)
    value += incr
    db.set(key, str(value).encode(), keep_ttl=True)
    ctx.notify(NOTIFY_STRING, b"incrby", key)
    return value


@command("incr", arity=2, flags=("write", "denyoom", "fast"), first_key=1, last_key=1, step=1)
def incr(ctx: Ctx, args: list[bytes]) -> Reply:
    """INCR key -> new value."""
    return _incr(ctx, args[0], 1)


@command("decr", arity=2, flags=("write", "denyoom", "fast"), first_key=1, last_key=1, step=1)
def decr(ctx: Ctx, args: list[bytes]) -> Reply:
    """DECR key -> new value."""
    return _incr(ctx, args[0], -1)


@command("incrby", arity=3, flags=("write", "denyoom", "fast"), first_key=1, last_key=1, step=1)
def incrby(ctx: Ctx, args: list[bytes]) -> Reply:
    """INCRBY key increment -> new value."""
    return _incr(ctx, args[0], to_int(args[1]))


@command("decrby", arity=3, flags=("write", "denyoom", "fast"), first_key=1, last_key=1, step=1)
def decrby(ctx: Ctx, args: list[bytes]) -> Reply:
    """DECRBY key decrement -> new value."""
    amount = to_int(args[1])
    if amount == LLONG_MIN:
        raise CommandError(msgs.DECREMENT_OVERFLOW)
    return _incr(ctx, args[0], -amount)


@command(
    "incrbyfloat", arity=3, flags=("write", "denyoom", "fast"), first_key=1, last_key=1, step=1
)
def incrbyfloat(ctx: Ctx, args: list[bytes]) -> Reply:
    """INCRBYFLOAT key increment -> new value as text (long double, ``%.17Lf`` trimmed)."""
    db = ctx.db
    key = args[0]
    old = db.get(key)
    if old is not None and type(old) is not bytes:
        raise CommandError(msgs.WRONGTYPE)
    current = ld_parse(old if old is not None else b"0")
    delta = ld_parse(args[1])
    if current is None or delta is None:
        raise CommandError(msgs.NOT_FLOAT)
    result = ld_add(current, delta)
    if result is None:
        raise CommandError(msgs.INCR_NAN_OR_INF)
    text = ld_format_human(result)
    db.set(key, text, keep_ttl=True)
    ctx.notify(NOTIFY_STRING, b"incrbyfloat", key)
    # Float arithmetic is logged as its result (as Redis does, so replicas agree exactly).
    ctx.propagate([b"SET", key, text, b"KEEPTTL"])
    return text


@command("mget", arity=-2, flags=("readonly", "fast"), first_key=1, last_key=-1, step=1)
def mget(ctx: Ctx, args: list[bytes]) -> Reply:
    """MGET key [key ...] -> values (nil for missing or non-string keys)."""
    db = ctx.db
    out: list[Reply] = []
    for key in args:
        value = db.get(key)
        out.append(value if type(value) is bytes else NULL_BULK)
    return out


@command("mset", arity=-3, flags=("write", "denyoom"), first_key=1, last_key=-1, step=2)
def mset(ctx: Ctx, args: list[bytes]) -> Reply:
    """MSET key value [key value ...] -> OK."""
    if len(args) % 2:
        raise CommandError(msgs.wrong_arity("mset"))
    db = ctx.db
    for i in range(0, len(args), 2):
        db.set(args[i], args[i + 1])
        ctx.notify(NOTIFY_STRING, b"set", args[i])
    ctx.changed(len(args) // 2)
    return OK


@command("msetnx", arity=-3, flags=("write", "denyoom"), first_key=1, last_key=-1, step=2)
def msetnx(ctx: Ctx, args: list[bytes]) -> Reply:
    """MSETNX key value [key value ...] -> 1 if all were set, 0 if any key existed."""
    if len(args) % 2:
        raise CommandError(msgs.wrong_arity("msetnx"))
    db = ctx.db
    if any(db.get(args[i]) is not None for i in range(0, len(args), 2)):
        ctx.changed(0)
        return 0
    for i in range(0, len(args), 2):
        db.set(args[i], args[i + 1])
        ctx.notify(NOTIFY_STRING, b"set", args[i])
    ctx.changed(len(args) // 2)
    return 1


@command("append", arity=3, flags=("write", "denyoom", "fast"), first_key=1, last_key=1, step=1)
def append(ctx: Ctx, args: list[bytes]) -> Reply:
    """APPEND key value -> new length."""
    db = ctx.db
    key = args[0]
    old = db.get(key)
    if old is None:
        db.set(key, args[1])
        ctx.notify(NOTIFY_STRING, b"append", key)
        return len(args[1])
    if type(old) is not bytes:
        raise CommandError(msgs.WRONGTYPE)
    if len(old) + len(args[1]) > _MAX_STRING:
        raise CommandError(msgs.STRING_TOO_LONG)
    new = old + args[1]
    db.set(key, new, keep_ttl=True)
    ctx.notify(NOTIFY_STRING, b"append", key)
    # Redis appends to a private raw copy of the value: OBJECT ENCODING says raw from now on.
    db.mark_big(key)
    return len(new)


@command("strlen", arity=2, flags=("readonly", "fast"), first_key=1, last_key=1, step=1)
def strlen(ctx: Ctx, args: list[bytes]) -> Reply:
    """STRLEN key -> length (0 if missing)."""
    value = ctx.db.get(args[0])
    if value is None:
        return 0
    if type(value) is not bytes:
        raise CommandError(msgs.WRONGTYPE)
    return len(value)


@command("getrange", arity=4, flags=("readonly",), first_key=1, last_key=1, step=1)
def getrange(ctx: Ctx, args: list[bytes]) -> Reply:
    """GETRANGE key start end -> substring (inclusive, negative from the end)."""
    start = to_int(args[1])
    end = to_int(args[2])
    value = ctx.db.get(args[0])
    if value is None:
        return b""
    if type(value) is not bytes:
        raise CommandError(msgs.WRONGTYPE)
    n = len(value)
    if start < 0 and end < 0 and start > end:
        return b""
    if start < 0:
        start = max(0, n + start)
    if end < 0:
        end = max(0, n + end)
    end = min(end, n - 1)
    if start > end or n == 0:
        return b""
    return value[start : end + 1]


@command("substr", arity=4, flags=("readonly",), first_key=1, last_key=1, step=1)
def substr(ctx: Ctx, args: list[bytes]) -> Reply:
    """SUBSTR key start end -> GETRANGE key start end (its old name, still served)."""
    return getrange(ctx, args)


@command("lcs", arity=-3, flags=("readonly",), first_key=1, last_key=2, step=1)
def lcs(ctx: Ctx, args: list[bytes]) -> Reply:
    """LCS key1 key2 [LEN] [IDX] [MINMATCHLEN len] [WITHMATCHLEN] -> the longest common
    subsequence of two strings (missing keys are empty), its length (LEN), or its matching
    ranges (IDX: a map of ``matches`` and ``len``).

    Refused, as Redis does, when Redis's (len1+1) x (len2+1) table of uint32 would exceed
    ``proto-max-bulk-len``; the engine's own table is 1/32 of that (see
    :mod:`~streamworker.engine.model.lcs`)."""
    values = [ctx.db.get(args[0]), ctx.db.get(args[1])]
    if any(v is not None and type(v) is not bytes for v in values):
        raise CommandError(msgs.LCS_NOT_STRINGS)
    a, b = (v if v is not None else b"" for v in values)
    get_idx = get_len = with_len = False
    min_len = 0
    j = 2
    while j < len(args):
        opt = args[j].lower()
        if opt == b"idx":
            get_idx = True
        elif opt == b"len":
            get_len = True
        elif opt == b"withmatchlen":
            with_len = True
        elif opt == b"minmatchlen" and j + 1 < len(args):
            min_len = max(0, to_int(args[j + 1]))
            j += 1
        else:
            raise CommandError(msgs.SYNTAX)
        j += 1
    if get_idx and get_len:
        raise CommandError(msgs.LCS_LEN_AND_IDX)
    max_bulk = int(ctx.engine.config.get("proto-max-bulk-len") or _MAX_STRING)
    if (len(a) + 1) * (len(b) + 1) * 4 > max_bulk:
        raise CommandError(msgs.LCS_TOO_MUCH_MEMORY)
    table = LcsTable(a, b)
    if get_len:
        return table.at(len(a), len(b))
    found = walk_back(a, b, table, min_len)
    if not get_idx:
        return found.text
    ranges: list[Reply] = []
    for m in found.matches:
        item: list[Reply] = [[m.a_start, m.a_end], [m.b_start, m.b_end]]
        if with_len:
            item.append(m.length)
        ranges.append(item)
    return Map([(b"matches", ranges), (b"len", len(found.text))])


@command("setrange", arity=4, flags=("write", "denyoom"), first_key=1, last_key=1, step=1)
def setrange(ctx: Ctx, args: list[bytes]) -> Reply:
    """SETRANGE key offset value -> new length."""
    key = args[0]
    offset = to_int(args[1])
    if offset < 0:
        raise CommandError(msgs.OFFSET_OUT_OF_RANGE)
    patch = args[2]
    db = ctx.db
    old = db.get(key)
    if old is not None and type(old) is not bytes:
        raise CommandError(msgs.WRONGTYPE)
    base = old if old is not None else b""
    if not patch:
        ctx.changed(0)
        return len(base)
    if offset + len(patch) > _MAX_STRING:
        raise CommandError(msgs.STRING_TOO_LONG)
    # One allocation of the final size, as Redis's in-place sdsgrowzero costs: the pieces are
    # views of the old value, and the zero gap is ``bytes(n)`` (calloc: untouched pages are
    # the kernel's shared zero page, so copying from it costs no memory).
    view = memoryview(base)
    pieces: tuple[memoryview | bytes, ...]
    if len(base) < offset:
        pieces = (view, bytes(offset - len(base)), patch)
    else:
        pieces = (view[:offset], patch, view[offset + len(patch) :])
    new = b"".join(pieces)
    view.release()
    db.set(key, new, keep_ttl=True)
    ctx.notify(NOTIFY_STRING, b"setrange", key)
    db.mark_big(key)  # written in place in a raw string, as APPEND
    return len(new)
