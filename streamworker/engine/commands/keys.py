"""Generic key commands: DEL, UNLINK, EXISTS, TYPE, EXPIRE family, TTL family, PERSIST, SCAN,
KEYS, RENAME, RENAMENX, RANDOMKEY, TOUCH, COPY, OBJECT."""

from __future__ import annotations

import bisect
import copy
import time
from collections import deque
from typing import TYPE_CHECKING

from streamworker.engine import msgs
from streamworker.engine.commands import command
from streamworker.engine.commands._args import to_int, to_str
from streamworker.engine.errors import CommandError
from streamworker.engine.keyspace import glob_match, type_name
from streamworker.engine.model.zset import ZSet
from streamworker.engine.notify import NOTIFY_GENERIC
from streamworker.engine.numbers import LLONG_MAX, parse_int
from streamworker.engine.replies import NULL_BULK, OK, Status

if TYPE_CHECKING:
    from streamworker.engine.context import Ctx
    from streamworker.engine.keyspace import Database
    from streamworker.engine.replies import Reply


@command("del", arity=-2, flags=("write",), first_key=1, last_key=-1, step=1)
def del_(ctx: Ctx, args: list[bytes]) -> Reply:
    """DEL key [key ...] -> number of keys removed."""
    db = ctx.db
    removed = 0
    for key in args:
        if db.delete(key):
            removed += 1
            ctx.notify(NOTIFY_GENERIC, b"del", key)
    if not removed:
        ctx.no_propagate()  # Redis propagates only what changed the data set
    return removed


@command("unlink", arity=-2, flags=("write", "fast"), first_key=1, last_key=-1, step=1)
def unlink(ctx: Ctx, args: list[bytes]) -> Reply:
    """UNLINK key [key ...] -> number of keys removed."""
    return del_(ctx, args)


@command("exists", arity=-2, flags=("readonly", "fast"), first_key=1, last_key=-1, step=1)
def exists(ctx: Ctx, args: list[bytes]) -> Reply:
    """EXISTS key [key ...] -> how many of the keys exist (repeats count again)."""
    db = ctx.db
    return sum(1 for key in args if db.get(key) is not None)


@command("touch", arity=-2, flags=("readonly", "fast"), first_key=1, last_key=-1, step=1)
def touch(ctx: Ctx, args: list[bytes]) -> Reply:
    """TOUCH key [key ...] -> how many of the keys exist."""
    return exists(ctx, args)


@command("type", arity=2, flags=("readonly", "fast"), first_key=1, last_key=1, step=1)
def type_(ctx: Ctx, args: list[bytes]) -> Reply:
    """TYPE key -> +string/+list/+set/+zset/+hash/+stream/+none."""
    value = ctx.db.get(args[0])
    return Status("none" if value is None else type_name(value))


# --- expiry --------------------------------------------------------------------------------

_NX, _XX, _GT, _LT = 1, 2, 4, 8


def _expire_flags(args: list[bytes]) -> int:
    flags = 0
    for opt in args:
        low = opt.lower()
        if low == b"nx":
            flags |= _NX
        elif low == b"xx":
            flags |= _XX
        elif low == b"gt":
            flags |= _GT
        elif low == b"lt":
            flags |= _LT
        else:
            raise CommandError(msgs.unsupported_option(to_str(opt.split(b"\0", 1)[0])))
    if flags & _NX and flags & (_XX | _GT | _LT):
        raise CommandError(msgs.EXPIRE_NX_XX_GT_LT)
    if flags & _GT and flags & _LT:
        raise CommandError(msgs.EXPIRE_GT_LT)
    return flags


def _expire_generic(ctx: Ctx, args: list[bytes], name: str, basetime: int, seconds: bool) -> int:
    key = args[0]
    flags = _expire_flags(args[2:])
    when = to_int(args[1])
    if seconds:
        # C's LLONG_MIN / 1000 truncates toward zero: -(LLONG_MAX // 1000).
        if when > LLONG_MAX // 1000 or when < -(LLONG_MAX // 1000):
            raise CommandError(msgs.invalid_expire(name))
        when *= 1000
    if when > LLONG_MAX - basetime:
        raise CommandError(msgs.invalid_expire(name))
    when += basetime
    db = ctx.db
    # Logged as the absolute time (or the deletion) it resolved to; nothing if unchanged.
    ctx.no_propagate()
    if db.get(key) is None:
        return 0
    if flags:
        current = db.get_expire(key)
        if flags & _NX and current is not None:
            return 0
        if flags & _XX and current is None:
            return 0
        if flags & _GT and (current is None or when <= current):
            return 0
        if flags & _LT and current is not None and when >= current:
            return 0
    if when <= ctx.now_ms():
        db.delete(key)
        ctx.propagate([b"DEL", key])
        ctx.notify(NOTIFY_GENERIC, b"del", key)
        return 1
    db.set_expire(key, when)
    ctx.touch(key)
    ctx.propagate([b"PEXPIREAT", key, b"%d" % when])
    ctx.notify(NOTIFY_GENERIC, b"expire", key)
    return 1


@command("expire", arity=-3, flags=("write", "fast"), first_key=1, last_key=1, step=1)
def expire(ctx: Ctx, args: list[bytes]) -> Reply:
    """EXPIRE key seconds [NX|XX|GT|LT] -> 1 if the timeout was set, else 0."""
    return _expire_generic(ctx, args, "expire", ctx.now_ms(), True)


@command("pexpire", arity=-3, flags=("write", "fast"), first_key=1, last_key=1, step=1)
def pexpire(ctx: Ctx, args: list[bytes]) -> Reply:
    """PEXPIRE key milliseconds [NX|XX|GT|LT] -> 1 if the timeout was set, else 0."""
    return _expire_generic(ctx, args, "pexpire", ctx.now_ms(), False)


@command("expireat", arity=-3, flags=("write", "fast"), first_key=1, last_key=1, step=1)
def expireat(ctx: Ctx, args: list[bytes]) -> Reply:
    """EXPIREAT key unix-seconds [NX|XX|GT|LT]."""
    return _expire_generic(ctx, args, "expireat", 0, True)


@command("pexpireat", arity=-3, flags=("write", "fast"), first_key=1, last_key=1, step=1)
def pexpireat(ctx: Ctx, args: list[bytes]) -> Reply:
    """PEXPIREAT key unix-ms [NX|XX|GT|LT]."""
    return _expire_generic(ctx, args, "pexpireat", 0, False)


def _ttl(ctx: Ctx, key: bytes, ms: bool, absolute: bool = False) -> int:
    db = ctx.db
    if db.get(key) is None:
        return -2
    when = db.get_expire(key)
    if when is None:
        return -1
    if absolute:
        return when if ms else (when + 500) // 1000
    ttl = max(0, when - ctx.now_ms())
    return ttl if ms else (ttl + 500) // 1000


@command("ttl", arity=2, flags=("readonly", "fast"), first_key=1, last_key=1, step=1)
def ttl(ctx: Ctx, args: list[bytes]) -> Reply:
    """TTL key -> seconds left (rounded), -1 without expiry, -2 if missing."""
    return _ttl(ctx, args[0], False)


@command("pttl", arity=2, flags=("readonly", "fast"), first_key=1, last_key=1, step=1)
def pttl(ctx: Ctx, args: list[bytes]) -> Reply:
    """PTTL key -> milliseconds left, -1 without expiry, -2 if missing."""
    return _ttl(ctx, args[0], True)


@command("expiretime", arity=2, flags=("readonly", "fast"), first_key=1, last_key=1, step=1)
def expiretime(ctx: Ctx, args: list[bytes]) -> Reply:
    """EXPIRETIME key -> absolute Unix seconds, -1, or -2."""
    return _ttl(ctx, args[0], False, True)


@command("pexpiretime", arity=2, flags=("readonly", "fast"), first_key=1, last_key=1, step=1)
def pexpiretime(ctx: Ctx, args: list[bytes]) -> Reply:
    """PEXPIRETIME key -> absolute Unix ms, -1, or -2."""
    return _ttl(ctx, args[0], True, True)


@command("persist", arity=2, flags=("write", "fast"), first_key=1, last_key=1, step=1)
def persist(ctx: Ctx, args: list[bytes]) -> Reply:
    """PERSIST key -> 1 if a timeout was removed."""
    key = args[0]
    db = ctx.db
    if db.get(key) is None or not db.persist(key):
        return 0
    ctx.touch(key)
    ctx.notify(NOTIFY_GENERIC, b"persist", key)
    return 1


# --- iteration -----------------------------------------------------------------------------

_U64 = (1 << 64) - 1


def _key_hash(key: bytes) -> int:
    return hash(key) & _U64


class _ScanIndex:
    """Keys sorted by a stable 64-bit hash, rebuilt when a scan starts (cursor 0).

    The cursor is the hash of the next key to return, so a key present for the whole
    iteration is returned exactly once even if the index is rebuilt in between.
    """

    __slots__ = ("hashes", "keys")

    def __init__(self, db: Database) -> None:
        pairs = sorted((_key_hash(k), k) for k in db.data)
        self.hashes = [h for h, _ in pairs]
        self.keys = [k for _, k in pairs]


def parse_cursor(arg: bytes) -> int:
    """A SCAN-family cursor as Redis 7.0 parses it (``ERR invalid cursor`` otherwise)."""
    # strtoul semantics: leading '+'/'-' accepted (negative wraps), empty means 0.
    text = arg
    if text[:1].isspace():
        raise CommandError(msgs.SCAN_INVALID_CURSOR)
    neg = text[:1] == b"-"
    if text[:1] in (b"-", b"+"):
        text = text[1:]
    if text and not text.isdigit():
        raise CommandError(msgs.SCAN_INVALID_CURSOR)
    if not text:
        if arg:
            raise CommandError(msgs.SCAN_INVALID_CURSOR)
        return 0
    value = int(text)
    if value > _U64:
        raise CommandError(msgs.SCAN_INVALID_CURSOR)
    return (-value) & _U64 if neg else value


@command("scan", arity=-2, flags=("readonly",))
def scan(ctx: Ctx, args: list[bytes]) -> Reply:
    """SCAN cursor [MATCH pattern] [COUNT count] [TYPE type] -> [next-cursor, [keys]]."""
    cursor = parse_cursor(args[0])
    count = 10
    pattern: bytes | None = None
    want_type: str | None = None
    i = 1
    n = len(args)
    while i < n:
        opt = args[i].lower()
        if opt == b"count" and n - i >= 2:
            count = to_int(args[i + 1])
            if count < 1:
                raise CommandError(msgs.SYNTAX)
            i += 2
        elif opt == b"match" and n - i >= 2:
            pattern = None if args[i + 1] == b"*" else args[i + 1]
            i += 2
        elif opt == b"type" and n - i >= 2:
            want_type = args[i + 1].decode("latin-1").lower()
            i += 2
        else:
            raise CommandError(msgs.SYNTAX)
    db = ctx.db
    index = db.scan_cache
    if cursor == 0 or not isinstance(index, _ScanIndex):
        index = _ScanIndex(db)
        db.scan_cache = index
    start = bisect.bisect_left(index.hashes, cursor)
    end = min(start + count, len(index.keys))
    # Keys sharing the last hash go out together so the next cursor skips none of them.
    while end < len(index.keys) and index.hashes[end] == index.hashes[end - 1]:
        end += 1
    next_cursor = index.hashes[end] if end < len(index.keys) else 0
    out: list[bytes] = []
    for key in index.keys[start:end]:
        value = db.get(key)
        if value is None:
            continue
        if want_type is not None and type_name(value) != want_type:
            continue
        if pattern is not None and not glob_match(pattern, key):
            continue
        out.append(key)
    if next_cursor == 0:
        db.scan_cache = None
    return [str(next_cursor).encode(), out]


@command("keys", arity=2, flags=("readonly",))
def keys(ctx: Ctx, args: list[bytes]) -> Reply:
    """KEYS pattern -> matching keys (Redis glob)."""
    pattern = args[0]
    live = ctx.db.keys()
    if pattern == b"*":
        return live
    return [k for k in live if glob_match(pattern, k)]


@command("randomkey", arity=1, flags=("readonly",))
def randomkey(ctx: Ctx, args: list[bytes]) -> Reply:
    """RANDOMKEY -> a random key or nil."""
    key = ctx.db.random_key()
    return NULL_BULK if key is None else key


def _rename(ctx: Ctx, args: list[bytes], nx: bool) -> Reply:
    src, dst = args
    db = ctx.db
    value = db.get(src)
    if value is None:
        raise CommandError(msgs.NO_SUCH_KEY)
    if src == dst:
        ctx.changed(0)
        return 0 if nx else OK
    when = db.get_expire(src)
    if db.get(dst) is not None:
        if nx:
            return 0
        db.delete(dst)
    big = db.is_big(src)
    db.set(dst, value)
    if big:
        db.mark_big(dst)
    if when is not None:
        db.set_expire(dst, when)
    db.delete(src)
    ctx.signal_key_ready(dst)
    ctx.notify(NOTIFY_GENERIC, b"rename_from", src)
    ctx.notify(NOTIFY_GENERIC, b"rename_to", dst)
    return 1 if nx else OK


@command("rename", arity=3, flags=("write",), first_key=1, last_key=2, step=1)
def rename(ctx: Ctx, args: list[bytes]) -> Reply:
    """RENAME key newkey -> OK; ERR no such key."""
    return _rename(ctx, args, False)


@command("renamenx", arity=3, flags=("write", "fast"), first_key=1, last_key=2, step=1)
def renamenx(ctx: Ctx, args: list[bytes]) -> Reply:
    """RENAMENX key newkey -> 1 if renamed, 0 if newkey exists."""
    return _rename(ctx, args, True)


@command("copy", arity=-3, flags=("write", "denyoom"), first_key=1, last_key=2, step=1)
def copy_(ctx: Ctx, args: list[bytes]) -> Reply:
    """COPY source destination [DB destination-db] [REPLACE] -> 1 if copied, 0 if the source
    is missing or the destination exists (without REPLACE). The copy is deep (a stream's
    groups and pending entries included) and keeps the source's TTL."""
    src_key, dst_key = args[0], args[1]
    dst = ctx.db
    replace = False
    j = 2
    while j < len(args):
        opt = args[j].lower()
        if opt == b"replace":
            replace = True
        elif opt == b"db" and j + 1 < len(args):
            index = to_int(args[j + 1])
            if not -(2**31) <= index < 2**31:
                raise CommandError(msgs.INT_OUT_OF_RANGE)
            if not 0 <= index < len(ctx.keyspace.dbs):
                raise CommandError(msgs.DB_INDEX_OUT_OF_RANGE)
            dst = ctx.keyspace.dbs[index]
            j += 1
        else:
            raise CommandError(msgs.SYNTAX)
        j += 1
    src = ctx.db
    if src is dst and src_key == dst_key:
        raise CommandError(msgs.COPY_SAME_OBJECT)
    value = src.get(src_key)
    if value is None:
        return 0
    when = src.get_expire(src_key)
    if dst.get(dst_key) is not None:
        if not replace:
            return 0
        dst.delete(dst_key)
    # Strings are immutable bytes and can be shared; every other type is copied whole, as
    # Redis duplicates the object (work in proportion to the value, like Redis's).
    dst.set(dst_key, value if isinstance(value, bytes) else copy.deepcopy(value))
    if src.is_big(src_key):
        # Redis's copy keeps the source's encoding (a raw string, a hashtable).
        dst.mark_big(dst_key)
    if when is not None:
        dst.set_expire(dst_key, when)
    if dst is not ctx.db:
        ctx.engine.stamp_key(dst, dst_key)
    ctx.engine.signal_key_ready(dst.index, dst_key)
    ctx.engine.pubsub.notify(NOTIFY_GENERIC, b"copy_to", dst_key, dst.index)
    return 1


@command("move", arity=3, flags=("write", "fast"), first_key=1, last_key=1, step=1)
def move(ctx: Ctx, args: list[bytes]) -> Reply:
    """MOVE key db -> 1 if the key (with its TTL) moved to database ``db``, 0 if it is missing
    here or already exists there. Errors: a db that is not an int32, out of range, or the
    current one."""
    key = args[0]
    index = to_int(args[1])
    if not -(2**31) <= index < 2**31:
        raise CommandError(msgs.INT_OUT_OF_RANGE)
    if not 0 <= index < len(ctx.keyspace.dbs):
        raise CommandError(msgs.DB_INDEX_OUT_OF_RANGE)
    src = ctx.db
    dst = ctx.keyspace.dbs[index]
    if src is dst:
        raise CommandError(msgs.COPY_SAME_OBJECT)
    value = src.get(key)
    if value is None or dst.get(key) is not None:
        ctx.no_propagate()
        return 0
    when = src.get_expire(key)
    # The value object itself moves (no copy), as Redis moves the pointer.
    big = src.is_big(key)
    src.delete(key)
    dst.set(key, value)
    ctx.engine.stamp_key(dst, key)
    if big:
        dst.mark_big(key)
    if when is not None:
        dst.set_expire(key, when)
    ctx.engine.signal_key_ready(dst.index, key)
    # Redis: "new" in the target db (above, with the key's creation), then "move_from" in
    # this db and "move_to" in the target db.
    ctx.notify(NOTIFY_GENERIC, b"move_from", key)
    ctx.engine.pubsub.notify(NOTIFY_GENERIC, b"move_to", key, dst.index)
    return 1


# --- OBJECT ----------------------------------------------------------------------------------

# Redis shares the integer objects 0..9999 (OBJ_SHARED_INTEGERS), refcount INT_MAX, unless
# maxmemory is set with an LRU/LFU policy (which needs one LRU field per key).
_SHARED_INTEGERS = 10000
_SHARED_REFCOUNT = 2**31 - 1
_EMBSTR_MAX = 44
_LFU_INIT_VAL = 5
_OBJECT_HELP = (
    "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "ENCODING <key>",
    "    Return the kind of internal representation used in order to store the value",
    "    associated with a <key>.",
    "FREQ <key>",
    "    Return the access frequency index of the <key>. The returned integer is",
    "    proportional to the logarithm of the recent access frequency of the key.",
    "IDLETIME <key>",
    "    Return the idle time of the <key>, that is the approximated number of",
    "    seconds elapsed since the last access to the key.",
    "REFCOUNT <key>",
    "    Return the number of references of the value associated with the specified",
    "    <key>.",
    "HELP",
    "    Prints this help.",
)


def _config_int(ctx: Ctx, name: str) -> int:
    return ctx.engine.config.get_int(name)


def _policy(ctx: Ctx) -> str:
    return ctx.engine.config.get("maxmemory-policy") or "noeviction"


def _shared_integer(ctx: Ctx, value: object) -> bool:
    if not isinstance(value, bytes) or len(value) > 20:
        return False
    n = parse_int(value)
    if n is None or not 0 <= n < _SHARED_INTEGERS:
        return False
    return _config_int(ctx, "maxmemory") == 0 or not _policy(ctx).endswith(("-lru", "-lfu"))


def object_encoding(ctx: Ctx, value: object, key: bytes | None = None) -> bytes:
    """The encoding Redis 7.0 would report for ``value``, from its contents and the
    ``*-max-listpack-*`` / ``set-max-intset-entries`` parameters.

    Redis converts a value to its big encoding once and never back, and only when a command
    writes it: a sorted set carries that history (``ZSet.big``), strings, hashes and sets have it
    in ``Database.big_keys`` (passed ``key``), both set where Redis converts. Without history the
    contents decide, under the parameters as they are now (Redis does not convert a value when
    CONFIG SET lowers a threshold; it does at the value's next write).
    The scan stops at the entries threshold: the work is bounded by the parameter, not the value.
    With ``key`` (the value's key in the current database) the conversions Redis made earlier
    count too (``Database.big_keys``).
    """
    if key is not None and ctx.db.is_big(key):
        big = _BIG_ENCODINGS.get(type(value))
        if big is not None:
            return big
    if isinstance(value, bytes):
        if len(value) <= 20 and parse_int(value) is not None:
            return b"int"
        return b"embstr" if len(value) <= _EMBSTR_MAX else b"raw"
    if isinstance(value, deque):
        return b"quicklist"
    if isinstance(value, set):
        if len(value) > _config_int(ctx, "set-max-intset-entries"):
            return b"hashtable"
        return b"intset" if all(parse_int(m) is not None for m in value) else b"hashtable"
    if isinstance(value, dict):
        limit = _config_int(ctx, "hash-max-listpack-value")
        if len(value) > _config_int(ctx, "hash-max-listpack-entries"):
            return b"hashtable"
        small = all(len(f) <= limit and len(v) <= limit for f, v in value.items())
        return b"listpack" if small else b"hashtable"
    if isinstance(value, ZSet):
        if value.big:
            return b"skiplist"
        limit = _config_int(ctx, "zset-max-listpack-value")
        if len(value) > _config_int(ctx, "zset-max-listpack-entries"):
            return b"skiplist"
        return b"listpack" if all(len(m) <= limit for m in value.scores) else b"skiplist"
    return b"stream"


_BIG_ENCODINGS: dict[type, bytes] = {bytes: b"raw", dict: b"hashtable", set: b"hashtable"}


def _object_value(ctx: Ctx, key: bytes) -> object:
    # OBJECT looks keys up without touching them (LOOKUP_NOTOUCH): no LRU/LFU update.
    return ctx.db.get(key)


@command("object|encoding", arity=3, flags=("readonly",), first_key=2, last_key=2, step=1)
def object_encoding_cmd(ctx: Ctx, args: list[bytes]) -> Reply:
    """OBJECT ENCODING key -> the internal representation's name, or nil."""
    value = _object_value(ctx, args[0])
    return NULL_BULK if value is None else object_encoding(ctx, value, args[0])


@command("object|refcount", arity=3, flags=("readonly",), first_key=2, last_key=2, step=1)
def object_refcount(ctx: Ctx, args: list[bytes]) -> Reply:
    """OBJECT REFCOUNT key -> 2147483647 for Redis's shared integers 0..9999, else 1; nil."""
    value = _object_value(ctx, args[0])
    if value is None:
        return NULL_BULK
    return _SHARED_REFCOUNT if _shared_integer(ctx, value) else 1


@command("object|idletime", arity=3, flags=("readonly",), first_key=2, last_key=2, step=1)
def object_idletime(ctx: Ctx, args: list[bytes]) -> Reply:
    """OBJECT IDLETIME key -> seconds since the last access (a command that looked the key
    up, LOOKUP_NOTOUCH ones aside: TYPE, TTL, EXISTS, OBJECT...); nil. Refused under an LFU
    policy. Redis's shared integers report the server's start."""
    value = _object_value(ctx, args[0])
    if value is None:
        return NULL_BULK
    if _policy(ctx).endswith("-lfu"):
        raise CommandError(msgs.OBJECT_IDLETIME_LFU)
    if _shared_integer(ctx, value):
        return int(time.monotonic() - ctx.engine.started_monotonic)
    field = ctx.db.access.get(args[0])
    if field is None:
        return 0
    return ctx.engine.memory.idle_ms(field) // 1000


@command("object|freq", arity=3, flags=("readonly",), first_key=2, last_key=2, step=1)
def object_freq(ctx: Ctx, args: list[bytes]) -> Reply:
    """OBJECT FREQ key -> the key's logarithmic access counter after decay (an LFU policy
    only); nil."""
    value = _object_value(ctx, args[0])
    if value is None:
        return NULL_BULK
    if not _policy(ctx).endswith("-lfu"):
        raise CommandError(msgs.OBJECT_FREQ_NOT_LFU)
    field = ctx.db.access.get(args[0])
    if field is None:
        return _LFU_INIT_VAL
    return ctx.engine.memory.lfu_counter(field)


@command("object|help", arity=2, flags=("loading", "stale"))
def object_help(ctx: Ctx, args: list[bytes]) -> Reply:
    """OBJECT HELP -> help lines."""
    return [Status(line) for line in _OBJECT_HELP]
