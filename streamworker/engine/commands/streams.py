"""Stream commands (X*): argument parsing, Redis 7.0's error order, replies.

The data structure is :mod:`streamworker.engine.model.stream`; this module only parses, checks
and shapes replies. Every function follows the order in which Redis 7.0.15's ``t_stream.c``
validates its arguments, looks the key up and fails, because the differential tests compare
the error a malformed command gets, not only the happy path.

Reply shapes that depend on the protocol: XREAD / XREADGROUP answer a map keyed by stream in
RESP3 and an array of ``[stream, entries]`` pairs in RESP2. Redis branches on the client's
protocol there (a RESP2 :class:`Map` would be flattened, which is XINFO's shape, not XREAD's),
so :func:`streams_reply` does too.
"""

from __future__ import annotations

from itertools import repeat
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Final, Protocol

from streamworker.engine import msgs
from streamworker.engine.commands import command
from streamworker.engine.commands._args import to_int
from streamworker.engine.errors import CommandError
from streamworker.engine.ids import (
    MASK64,
    MAX_ID,
    format_id,
    parse_id,
    parse_interval_id,
    parse_ll,
    parse_strict_id,
    parse_xadd_id,
)
from streamworker.engine.keyspace import register_type
from streamworker.engine.model.stream import (
    INVALID_ENTRIES_READ,
    Consumer,
    ConsumerGroup,
    Entry,
    PendingEntry,
    Stream,
    StreamIDExhaustedError,
    StreamIDTooSmallError,
    StreamSeqOverflowError,
)
from streamworker.engine.notify import NOTIFY_STREAM
from streamworker.engine.replies import EMPTY_ARRAY, NULL_ARRAY, NULL_BULK, OK, Map, Status

if TYPE_CHECKING:
    from streamworker.engine.context import Blocked, Ctx
    from streamworker.engine.replies import Reply

__all__ = ["entry_reply", "get_stream"]

register_type(Stream, "stream")

_LLONG_MAX: Final = (1 << 63) - 1
XREAD_BLOCKED_DEFAULT_COUNT: Final = 1000
_XAUTOCLAIM_ATTEMPTS_FACTOR: Final = 10
_XAUTOCLAIM_MAX_COUNT: Final = _LLONG_MAX // 16
_ADDRESS_SPACE: Final = 1 << 47

_FIRST: Final = itemgetter(0)

_TRIM_NONE: Final = 0
_TRIM_MAXLEN: Final = 1
_TRIM_MINID: Final = 2

# What a trim or a deletion does to the groups' references to the entries it removes (Redis
# 8.2's KEEPREF / DELREF / ACKED; only an 8.x engine parses them, see streams_r8).
REFS_KEEP: Final = 0
REFS_DELETE: Final = 1
REFS_ACKED: Final = 2
REF_POLICIES: Final = {b"keepref": REFS_KEEP, b"delref": REFS_DELETE, b"acked": REFS_ACKED}


# --- helpers ------------------------------------------------------------------------------


def arg_text(arg: bytes) -> str:
    """%s in Redis's error formats: the C string up to a NUL; the encoder blanks CR/LF."""
    return arg.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


def typed_word(ctx: Ctx, index: int, default: str) -> str:
    """The command/subcommand word as the client typed it, for the error texts that echo it
    (``default`` when the context carries no argv, e.g. a direct call)."""
    argv = ctx.argv
    if len(argv) > index:
        return arg_text(argv[index])
    return default


def _subcommand_syntax(ctx: Ctx, sub: str, container: str) -> CommandError:
    return CommandError(
        msgs.unknown_subcommand_or_arity(typed_word(ctx, 1, sub.upper()), container)
    )


def get_stream(ctx: Ctx, key: bytes) -> Stream | None:
    """The stream at ``key`` in the current db; None if missing; WRONGTYPE otherwise."""
    return ctx.db.get_typed(key, Stream)


def strict_id(arg: bytes) -> int:
    """A complete stream ID (``ms-seq``) as an int; CommandError (Redis's invalid ID text)
    otherwise."""
    sid = parse_strict_id(arg)
    if sid is None:
        raise CommandError(msgs.INVALID_STREAM_ID)
    return sid


def _interval(arg: bytes, missing_seq: int) -> tuple[int, bool]:
    r = parse_interval_id(arg, missing_seq)
    if r is None:
        raise CommandError(msgs.INVALID_STREAM_ID)
    return r


def _range_bounds(start_arg: bytes, end_arg: bytes) -> tuple[int, int]:
    # XRANGE / XPENDING bounds: incomplete start = ms-0, end = ms-MAX; "(" is exclusive.
    start, startex = _interval(start_arg, 0)
    if startex:
        if start >= MAX_ID:
            raise CommandError(msgs.RANGE_INVALID_START)
        start += 1
    end, endex = _interval(end_arg, (1 << 64) - 1)
    if endex:
        if end <= 0:
            raise CommandError(msgs.RANGE_INVALID_END)
        end -= 1
    return start, end


def entry_reply(entry: Entry) -> list[Any]:
    """``[id, [field, value, ...]]`` as stream commands reply an entry."""
    return [format_id(entry[0]), entry[1]]


def _entries_reply(entries: list[Entry]) -> list[Any]:
    return [[format_id(sid), fv] for sid, fv in entries]


def streams_reply(ctx: Ctx, served: list[tuple[bytes, list[Any]]], plain: bool = False) -> Reply:
    """XREAD/XREADGROUP: RESP3 map stream -> entries; RESP2 array of [stream, entries].
    ``plain``: the entries are fresh lists of bytes only (no nil bodies), see Map.plain."""
    if ctx.client.resp >= 3:
        return Map(served, plain)
    return [[key, entries] for key, entries in served]


def group_consumer(ctx: Ctx, key: bytes, g: ConsumerGroup, name: bytes, now_ms: int) -> Consumer:
    """XREADGROUP, XCLAIM and XAUTOCLAIM create a missing consumer, with Redis's event."""
    if name not in g.consumers:
        ctx.changed()  # a change of its own in Redis 7.0's count
        ctx.notify(NOTIFY_STREAM, b"xgroup-createconsumer", key)
    return g.get_or_create_consumer(name, now_ms)


def _lookup_group(s: Stream | None, name: bytes) -> ConsumerGroup | None:
    return None if s is None else s.groups.get(name)


# --- XADD / XTRIM -------------------------------------------------------------------------


class RefsTrim(Protocol):
    """The trims of Redis 8.x (:mod:`.streams_r8`): with a reference policy (DELREF, ACKED)
    or after XADD's IDMP words. The 8.x parsers put theirs on the options they parse
    (:attr:`AddTrimArgs.r8`), so that this module reaches the 8.x code without importing it."""

    def trim(self, s: Stream, by_maxlen: bool, maxlen: int, minid: int, p: AddTrimArgs) -> int:
        """Trim ``s`` as ``p`` says; the number of entries removed."""

    def exact_args(self, s: Stream, p: AddTrimArgs) -> list[bytes]:
        """The trim options that replay exactly what that trim removed."""


class AddTrimArgs:
    """The parsed options of XADD / XTRIM (``streamAddTrimArgs``)."""

    __slots__ = (
        "approx",
        "id_given",
        "idmp_iid",
        "idmp_pid",
        "idpos",
        "limit",
        "maxlen",
        "minid",
        "nomkstream",
        "r8",
        "refs",
        "seq_given",
        "sid",
        "strategy",
    )

    def __init__(self) -> None:
        self.strategy = _TRIM_NONE
        self.maxlen = -1
        self.minid = 0
        self.approx = False
        self.limit = 0
        self.nomkstream = False
        self.refs = REFS_KEEP
        # The 8.x trims, set by the 8.x parsers (the only ones that accept refs or IDMP).
        self.r8: RefsTrim | None = None
        # XADD IDMP pid iid / IDMPAUTO pid (8.6): the iid is None for IDMPAUTO.
        self.idmp_pid: bytes | None = None
        self.idmp_iid: bytes | None = None
        self.id_given = False
        self.seq_given = True
        self.sid = 0
        self.idpos = 0


def parse_add_trim(ctx: Ctx, args: list[bytes], xadd: bool, refs: int = 0) -> AddTrimArgs:
    """streamParseAddOrTrimArgsOrReply; indexes are into args (argv without the command name).
    ``refs``: 1, the KEEPREF / DELREF / ACKED words are options (8.2+); 2, XADD's IDMP and
    IDMPAUTO too (8.6+). 0 (7.0) never looks at them."""
    p = AddTrimArgs()
    limit_given = False
    n = len(args)
    i = 1
    while i < n:
        more = n - 1 - i
        opt = args[i]
        if xadd and opt == b"*":
            break
        lopt = opt.lower()
        if lopt == b"maxlen" and more:
            if p.strategy != _TRIM_NONE:
                raise CommandError(msgs.TRIM_MAXLEN_AND_MINID)
            p.approx = False
            nxt = args[i + 1]
            if more >= 2 and nxt == b"~":
                p.approx = True
                i += 1
            elif more >= 2 and nxt == b"=":
                i += 1
            p.maxlen = to_int(args[i + 1])
            if p.maxlen < 0:
                raise CommandError(msgs.TRIM_MAXLEN_NEGATIVE)
            i += 1
            p.strategy = _TRIM_MAXLEN
        elif lopt == b"minid" and more:
            if p.strategy != _TRIM_NONE:
                raise CommandError(msgs.TRIM_MAXLEN_AND_MINID)
            p.approx = False
            nxt = args[i + 1]
            if more >= 2 and nxt == b"~":
                p.approx = True
                i += 1
            elif more >= 2 and nxt == b"=":
                i += 1
            p.minid = strict_id(args[i + 1])
            i += 1
            p.strategy = _TRIM_MINID
        elif lopt == b"limit" and more:
            p.limit = to_int(args[i + 1])
            if p.limit < 0:
                raise CommandError(msgs.TRIM_LIMIT_NEGATIVE)
            limit_given = True
            i += 1
        elif refs and lopt in REF_POLICIES:
            p.refs = REF_POLICIES[lopt]
        elif refs > 1 and xadd and lopt in (b"idmp", b"idmpauto"):
            auto = lopt == b"idmpauto"
            if p.idmp_pid is not None or more < (1 if auto else 2):
                raise CommandError(msgs.SYNTAX)
            p.idmp_pid = args[i + 1]
            if not auto:
                p.idmp_iid = args[i + 2]
            i += 1 if auto else 2
        elif xadd and lopt == b"nomkstream":
            p.nomkstream = True
        elif xadd:
            r = parse_xadd_id(opt)
            if r is None:
                raise CommandError(msgs.INVALID_STREAM_ID)
            p.sid, p.seq_given = r
            p.id_given = True
            break
        else:
            raise CommandError(msgs.SYNTAX)
        i += 1
    p.idpos = i
    if p.limit and p.strategy == _TRIM_NONE:
        raise CommandError(msgs.TRIM_LIMIT_WITHOUT_STRATEGY)
    if not xadd and p.strategy == _TRIM_NONE:
        raise CommandError(msgs.XTRIM_WITHOUT_STRATEGY)
    if limit_given:
        if not p.approx:
            raise CommandError(msgs.TRIM_LIMIT_WITHOUT_APPROX)
    elif p.approx:
        # Approximate trimming does a bounded amount of work unless told otherwise.
        limit = 100 * ctx.engine.config.stream_node_max_entries
        p.limit = 1_000_000 if limit <= 0 or limit > 1_000_000 else limit
    else:
        p.limit = 0
    return p


def _trim(s: Stream, p: AddTrimArgs) -> int:
    if p.refs:
        assert p.r8 is not None, "a reference policy comes from an 8.x parser"
        return p.r8.trim(s, p.strategy == _TRIM_MAXLEN, p.maxlen, p.minid, p)
    if p.strategy == _TRIM_MAXLEN:
        return s.trim_maxlen(p.maxlen, p.approx, p.limit)
    return s.trim_minid(p.minid, p.approx, p.limit)


@command("xadd", arity=-5, flags=("write", "denyoom", "fast"), first_key=1, last_key=1, step=1)
def xadd(ctx: Ctx, args: list[bytes], parsed: AddTrimArgs | None = None) -> Reply:
    """XADD key [NOMKSTREAM] [MAXLEN|MINID [=|~] threshold [LIMIT count]] *|id field value
    [field value ...] -> the new entry's ID (nil with NOMKSTREAM on a missing key).

    ``parsed``: the options as an 8.x engine's XADD parsed them (streams_r8)."""
    p: AddTrimArgs | None
    if parsed is not None:
        p = parsed
        idpos = p.idpos
    elif args[1] == b"*":
        p = None
        idpos = 1
    else:
        p = parse_add_trim(ctx, args, True)
        idpos = p.idpos
    nfv = len(args) - idpos - 1
    if nfv < 2 or nfv & 1:
        raise CommandError(msgs.wrong_arity("xadd"))
    if p is not None and p.id_given and p.seq_given and p.sid == 0:
        raise CommandError(msgs.XADD_ID_ZERO)
    key = args[0]
    db = ctx.db
    s = db.get(key) if db.expires else db.data.get(key)
    if s is not None and type(s) is not Stream:
        s = db.get_typed(key, Stream)  # WRONGTYPE
    created = False
    if s is None:
        if p is not None and p.nomkstream:
            ctx.changed(0)
            return NULL_BULK
        s = Stream()
        created = True
    try:
        if p is not None and p.id_given:
            sid = s.resolve_explicit_id(p.sid, p.seq_given)
        else:
            sid = s.next_auto_id(ctx.engine.clock())
    except StreamIDExhaustedError:
        raise CommandError(msgs.STREAM_EXHAUSTED) from None
    except StreamIDTooSmallError:
        raise CommandError(msgs.XADD_ID_TOO_SMALL) from None
    except StreamSeqOverflowError:
        # 7.0's streamAppendItem fails here without setting errno, so XADD takes its
        # "not EDOM" branch.
        raise CommandError(msgs.STREAM_ELEMENTS_TOO_LARGE) from None
    if created:
        db.set(key, s)
    cfg = ctx.engine.config
    s.append(sid, args[idpos + 1 :], cfg.stream_node_max_entries, cfg.stream_node_max_bytes)
    if db.watchers:
        db.touch(key)
    ctx.notify(NOTIFY_STREAM, b"xadd", key)
    if p is not None and p.strategy != _TRIM_NONE and _trim(s, p):
        ctx.notify(NOTIFY_STREAM, b"xtrim", key)
    ctx.signal_key_ready(key)
    idb = b"%d-%d" % (sid >> 64, sid & MASK64)
    if ctx.propagating:
        # Logged with the ID it got (as Redis propagates XADD *) and approximate trimming
        # spelled out as the exact trim it amounted to (it depends on the node layout).
        if p is None:
            ctx.propagate([b"XADD", key, idb, *args[2:]])
        elif not p.approx:
            # Exact (or no) trimming replays as received: only the ID is spelled out, as
            # Redis rewrites nothing else (NOMKSTREAM, MAXLEN n stay as they were).
            ctx.propagate([b"XADD", *args[:idpos], idb, *args[idpos + 1 :]])
        else:
            argv = [b"XADD", key]
            if p.strategy != _TRIM_NONE:
                argv += _exact_trim_args(s, p)
            argv.append(idb)
            argv += args[idpos + 1 :]
            ctx.propagate(argv)
    return idb


@command("xtrim", arity=-4, flags=("write",), first_key=1, last_key=1, step=1)
def xtrim(ctx: Ctx, args: list[bytes], parsed: AddTrimArgs | None = None) -> Reply:
    """XTRIM key MAXLEN|MINID [=|~] threshold [LIMIT count] -> number of entries removed.

    ``parsed``: the options as an 8.x engine's XTRIM parsed them (streams_r8)."""
    p = parsed if parsed is not None else parse_add_trim(ctx, args, False)
    s = get_stream(ctx, args[0])
    if s is None:
        return 0
    deleted = _trim(s, p)
    if deleted:
        ctx.touch(args[0])
        ctx.notify(NOTIFY_STREAM, b"xtrim", args[0])
        if p.approx:
            ctx.propagate([b"XTRIM", args[0], *_exact_trim_args(s, p)])
    else:
        ctx.no_propagate()
    return deleted


def _exact_trim_args(s: Stream, p: AddTrimArgs) -> list[bytes]:
    # The trim options that remove exactly what this trim removed (Redis's
    # streamRewriteApproxSpecifier / streamRewriteTrimArgument).
    if p.refs or p.idmp_pid is not None:
        assert p.r8 is not None, "a reference policy or IDMP comes from an 8.x parser"
        return p.r8.exact_args(s, p)
    if not p.approx:
        if p.strategy == _TRIM_MAXLEN:
            return [b"MAXLEN", b"=", b"%d" % p.maxlen]
        return [b"MINID", b"=", format_id(p.minid)]
    if p.strategy == _TRIM_MAXLEN:
        return [b"MAXLEN", b"=", b"%d" % s.length]
    return [b"MINID", b"=", format_id(s.first_id if s.length else s.last_id + 1)]


# --- XLEN / XDEL / XRANGE -----------------------------------------------------------------


@command("xlen", arity=2, flags=("readonly", "fast"), first_key=1, last_key=1, step=1)
def xlen(ctx: Ctx, args: list[bytes]) -> Reply:
    """XLEN key -> number of entries (0 for a missing key)."""
    s = get_stream(ctx, args[0])
    return 0 if s is None else s.length


@command("xdel", arity=-3, flags=("write", "fast"), first_key=1, last_key=1, step=1)
def xdel(ctx: Ctx, args: list[bytes]) -> Reply:
    """XDEL key id [id ...] -> number of entries deleted. All IDs are parsed before any is
    deleted; a missing key answers 0 without looking at them."""
    s = get_stream(ctx, args[0])
    if s is None:
        return 0
    sids = [strict_id(a) for a in args[1:]]
    deleted = 0
    first_deleted = False
    for sid in sids:
        if s.delete(sid):
            if sid == s.first_id:
                first_deleted = True
            if sid > s.max_deleted_id:
                s.max_deleted_id = sid
            deleted += 1
    if deleted:
        if s.length == 0:
            s.first_id = 0
        elif first_deleted:
            s.refresh_first_id()
        ctx.touch(args[0])
        ctx.notify(NOTIFY_STREAM, b"xdel", args[0])
    return deleted


def _xrange(ctx: Ctx, args: list[bytes], rev: bool) -> Reply:
    start_arg, end_arg = (args[2], args[1]) if rev else (args[1], args[2])
    start, end = _range_bounds(start_arg, end_arg)
    count = -1
    n = len(args)
    j = 3
    while j < n:
        if args[j].lower() == b"count" and n - j - 1 >= 1:
            count = to_int(args[j + 1])
            if count < 0:
                count = 0
            j += 2
        else:
            raise CommandError(msgs.SYNTAX)
    s = get_stream(ctx, args[0])
    if s is None:
        return EMPTY_ARRAY
    if count == 0:
        return NULL_ARRAY
    if not rev:
        return s.range_reply(start, end, max(count, 0))
    return _entries_reply(s.range(start, end, max(count, 0), rev))


@command("xrange", arity=-4, flags=("readonly",), first_key=1, last_key=1, step=1)
def xrange(ctx: Ctx, args: list[bytes]) -> Reply:
    """XRANGE key start end [COUNT n] -> entries in ID order (COUNT 0: null array)."""
    return _xrange(ctx, args, False)


@command("xrevrange", arity=-4, flags=("readonly",), first_key=1, last_key=1, step=1)
def xrevrange(ctx: Ctx, args: list[bytes]) -> Reply:
    """XREVRANGE key end start [COUNT n] -> entries in reverse ID order."""
    return _xrange(ctx, args, True)


# --- XREAD / XREADGROUP -------------------------------------------------------------------

# The IDs of recent group deliveries as sent (b"<ms>-<seq>" -> packed ID): XACK mostly gets
# these very strings back, and a lookup is far cheaper than parsing. A pure cache of
# parse_strict_id (a canonical ID parses to exactly that), bounded, shared by all engines.
_DELIVERED_IDS: dict[bytes, int] = {}
_DELIVERED_IDS_MAX: Final = 1 << 15


def _remember_ids(entries: list[list[Any]], sids: list[int]) -> None:
    if len(_DELIVERED_IDS) >= _DELIVERED_IDS_MAX:
        _DELIVERED_IDS.clear()
    _DELIVERED_IDS.update(zip(map(_FIRST, entries), sids, strict=True))


def read_group_new(
    ctx: Ctx,
    s: Stream,
    g: ConsumerGroup,
    consumer: Consumer,
    count: int,
    noack: bool,
    delivered: list[int] | None = None,
) -> list[Any]:
    """Deliver entries after the group's last-delivered ID ('>'); their IDs are appended to
    ``delivered`` when given."""
    sids: list[int] = []
    out = s.range_reply(g.last_id + 1, MAX_ID, count, sids)
    if not out:
        return out
    # Redis's per-entry entries-read update, with the stream-level tombstone facts hoisted:
    # "a tombstone at or after sid" only depends on sid <= max_deleted_id.
    er = g.entries_read
    mdel = s.max_deleted_id
    tombs = bool(s.length and mdel and s.first_id <= mdel)
    if er != INVALID_ENTRIES_READ and not (tombs and sids[0] <= mdel):
        er += len(sids)  # IDs ascend: no tombstone after any of them either
    else:
        added = s.entries_added
        for sid in sids:
            if er != INVALID_ENTRIES_READ and not (tombs and sid <= mdel):
                er += 1
            elif added:
                er = s.estimate_entries_read(sid)
    g.entries_read = er
    g.last_id = sids[-1]
    if not noack:
        g.deliver_new(sids, consumer, ctx.engine.clock())
        _remember_ids(out, sids)
        if delivered is not None:
            delivered += sids
    return out


def read_group_history(
    ctx: Ctx,
    s: Stream,
    consumer: Consumer,
    start: int,
    count: int,
    delivered: list[int] | None = None,
) -> list[Any]:
    """The consumer's own pending entries from 'start'; deleted entries come back as nil bodies
    and stay pending, the others count one more delivery (their IDs are appended to
    ``delivered`` when given)."""
    now = ctx.engine.clock()
    out: list[Any] = []
    pel = consumer.pel
    for sid in pel.irange(start):
        if count and len(out) >= count:
            break
        fv = s.get(sid)
        if fv is None:
            out.append([format_id(sid), NULL_ARRAY])
        else:
            pe: PendingEntry = pel[sid]
            pe.delivery_time = now
            if pe.delivery_count < _LLONG_MAX:
                # A count at LLONG_MAX (XCLAIM RETRYCOUNT, 8.8's XNACK FATAL) stays there: one
                # more would not fit the records that log it.
                pe.delivery_count += 1
            out.append([format_id(sid), fv])
            if delivered is not None:
                delivered.append(sid)
    return out


# A history read past every possible ID ('>' is MAX-MAX itself): it serves nothing but
# refreshes, or creates, the consumer, which is how a read that changed nothing else is logged.
_TOUCH_ID: Final = format_id(MAX_ID - 1)


def log_claims(
    ctx: Ctx,
    key: bytes,
    g: ConsumerGroup,
    name: bytes,
    sids: list[int],
    with_lastid: bool,
    last_before: int | None = None,
) -> None:
    """Redis's streamPropagateXCLAIM, batched: one XCLAIM ... FORCE JUSTID per (delivery time,
    count), which sets owner, time and count exactly (and the consumer's seen-time, at the
    record's clock). A group read's replicas get Redis 7.0.15's form instead: one XCLAIM per new
    entry (``last_before`` being the group's last-delivered-id before the read), its LASTID that
    entry; nothing for pending entries read again."""
    engine = ctx.engine
    feed = engine.replication.feed
    split = with_lastid and feed is not None and engine.propagator is feed and feed.active
    batches: dict[tuple[int, int], list[bytes]] = {}
    pel = g.pel
    for sid in sids:
        pe = pel[sid]
        batches.setdefault((pe.delivery_time, pe.delivery_count), []).append(format_id(sid))
    tail = [b"FORCE", b"JUSTID"]
    if with_lastid:
        tail += [b"LASTID", format_id(g.last_id)]
    for (when, n), ids in batches.items():
        ctx.propagate(
            [
                b"XCLAIM",
                key,
                g.name,
                name,
                b"0",
                *ids,
                b"TIME",
                b"%d" % when,
                b"RETRYCOUNT",
                b"%d" % n,
                *tail,
            ],
            replicas=not split,
        )
    if split:
        for sid in sids:
            if last_before is not None and sid <= last_before:
                # A re-read of the consumer's own pending entries (an ID other than ">"):
                # Redis 7.0.15 streams nothing for it.
                continue
            pe = pel[sid]
            last = sid if last_before is not None else g.last_id
            ctx.propagate_to_replicas(
                [
                    b"XCLAIM",
                    key,
                    g.name,
                    name,
                    b"0",
                    format_id(sid),
                    b"TIME",
                    b"%d" % pe.delivery_time,
                    b"RETRYCOUNT",
                    b"%d" % pe.delivery_count,
                    b"FORCE",
                    b"JUSTID",
                    b"LASTID",
                    format_id(last),
                ]
            )


def _log_setid(ctx: Ctx, key: bytes, g: ConsumerGroup, replicas: bool = True) -> None:
    # Redis's streamPropagateGroupID: last-delivered-id and entries-read together.
    ctx.propagate(
        [
            b"XGROUP",
            b"SETID",
            key,
            g.name,
            format_id(g.last_id),
            b"ENTRIESREAD",
            b"%d" % g.entries_read,
        ],
        replicas=replicas,
    )


def log_group_read(
    ctx: Ctx,
    key: bytes,
    g: ConsumerGroup,
    name: bytes,
    created: bool,
    delivered: list[int],
    last_before: int,
) -> None:
    """What a group read did: XGROUP CREATECONSUMER for a consumer it created, XCLAIMs for the
    deliveries, XGROUP SETID when last-delivered-id moved (with entries-read: the file then
    replays exactly). A read that only refreshed the consumer's seen-time is logged as the touch
    read. The replicas get Redis 7.0.15's stream: the XCLAIMs alone when the read delivered
    (they create the consumer, and their LASTID moves the group), so the CREATECONSUMER and
    SETID of such a read are for the file only."""
    if created:
        ctx.propagate([b"XGROUP", b"CREATECONSUMER", key, g.name, name], replicas=not delivered)
    moved = g.last_id != last_before
    if delivered:
        log_claims(ctx, key, g, name, delivered, True, last_before)
    elif not created:
        ctx.propagate([b"XREADGROUP", b"GROUP", g.name, name, b"STREAMS", key, _TOUCH_ID])
    if moved:
        _log_setid(ctx, key, g, replicas=not delivered)


def _xread_generic(ctx: Ctx, args: list[bytes], xreadgroup: bool) -> Reply | Blocked:
    name = "xreadgroup" if xreadgroup else "xread"
    timeout = -1
    count = 0
    streams_arg = 0
    nstreams = 0
    noack = False
    groupname: bytes | None = None
    consumername = b""
    n = len(args)
    i = 0
    while i < n:
        more = n - i - 1
        opt = args[i].lower()
        if opt == b"block" and more:
            if ctx.in_script:
                raise CommandError(msgs.xread_block_in_script(typed_word(ctx, 0, name.upper())))
            i += 1
            t = parse_ll(args[i])
            if t is None:
                raise CommandError(msgs.TIMEOUT_NOT_INTEGER)
            if t < 0:
                raise CommandError(msgs.TIMEOUT_NEGATIVE)
            # 7.0 has no "timeout is out of range" check: a huge timeout blocks for good.
            timeout = t
        elif opt == b"count" and more:
            i += 1
            count = to_int(args[i])
            if count < 0:
                count = 0
        elif opt == b"streams" and more:
            streams_arg = i + 1
            rest = n - streams_arg
            if rest % 2:
                raise CommandError(msgs.XREAD_UNBALANCED)
            nstreams = rest // 2
            break
        elif opt == b"group" and more >= 2:
            if not xreadgroup:
                raise CommandError(msgs.XREAD_GROUP_OPTION)
            groupname = args[i + 1]
            consumername = args[i + 2]
            i += 2
        elif opt == b"noack":
            if not xreadgroup:
                raise CommandError(msgs.XREAD_NOACK_OPTION)
            noack = True
        else:
            raise CommandError(msgs.SYNTAX)
        i += 1
    if streams_arg == 0:
        raise CommandError(msgs.SYNTAX)
    if xreadgroup and groupname is None:
        raise CommandError(msgs.XREADGROUP_MISSING_GROUP)

    keys = args[streams_arg : streams_arg + nstreams]
    streams: list[Stream | None] = []
    groups: list[ConsumerGroup | None] = []
    gts: list[int] = []
    db = ctx.db
    for k in range(nstreams):
        key = keys[k]
        idarg = args[streams_arg + nstreams + k]
        s = db.get_typed(key, Stream)
        g: ConsumerGroup | None = None
        if groupname is not None:
            g = _lookup_group(s, groupname)
            if g is None:
                raise CommandError(msgs.xreadgroup_nogroup(arg_text(key), arg_text(groupname)))
        if idarg == b"$":
            if xreadgroup:
                raise CommandError(msgs.XREADGROUP_DOLLAR)
            gt = 0 if s is None else s.last_id
        elif idarg == b">":
            if not xreadgroup:
                raise CommandError(msgs.XREAD_GREATER)
            # '>' is the maximum ID, as in Redis (so spelling that ID out means '>' too).
            gt = MAX_ID
        else:
            gt = strict_id(idarg)
        streams.append(s)
        groups.append(g)
        gts.append(gt)

    served: list[tuple[bytes, list[Any]]] = []
    plain = True  # no history read (whose deleted entries have nil bodies)
    for k in range(nstreams):
        s = streams[k]
        if s is None:
            continue
        gt = gts[k]
        g = groups[k]
        if g is not None:
            if gt != MAX_ID:
                history = True
                plain = False
            else:
                history = False
                last = s.last_live_id() if s.length else None
                if last is None or last <= g.last_id:
                    continue
            logged = ctx.propagating
            created = logged and consumername not in g.consumers
            last_before = g.last_id
            delivered: list[int] | None = [] if logged else None
            consumer = group_consumer(ctx, keys[k], g, consumername, ctx.engine.clock())
            if history:
                entries = read_group_history(ctx, s, consumer, gt + 1, count, delivered)
            else:
                entries = read_group_new(ctx, s, g, consumer, count, noack, delivered)
            if delivered is not None:
                log_group_read(ctx, keys[k], g, consumername, created, delivered, last_before)
        else:
            last = s.last_live_id() if s.length else None
            if last is None or last <= gt:
                continue
            entries = s.range_reply(gt + 1, MAX_ID, count)
        served.append((keys[k], entries))
    if xreadgroup:
        ctx.no_propagate()
        # Redis 7.0 counts one change per stream it answered for (and each consumer created).
        ctx.changed(len(served))
    if served:
        return streams_reply(ctx, served, plain)
    if timeout == -1:
        return NULL_ARRAY

    # Block: the first ID of each key wins (Redis ignores repeated keys when blocking).
    waits: dict[bytes, int] = {}
    for k in range(nstreams):
        waits.setdefault(keys[k], gts[k])
    waiter = Waiter(waits, groupname, consumername, noack, count or XREAD_BLOCKED_DEFAULT_COUNT)
    return ctx.block(list(waits), timeout, on_ready=waiter, on_timeout_reply=NULL_ARRAY)


class Waiter:
    """The retry of a blocked XREAD / XREADGROUP (``serveClientsBlockedOnStreamKey``).

    Called after a command signalled one of its keys; answers a single-stream reply, an
    UNBLOCKED/NOGROUP error for XREADGROUP when the key or group went away, or None to keep
    waiting (a plain XREAD keeps waiting across DEL and type changes).
    """

    __slots__ = ("consumer", "count", "group", "noack", "waits")

    def __init__(
        self, waits: dict[bytes, int], group: bytes | None, consumer: bytes, noack: bool, count: int
    ) -> None:
        self.waits = waits
        self.group = group
        self.consumer = consumer
        self.noack = noack
        self.count = count

    def __call__(self, ctx: Ctx, key: bytes | None = None) -> Reply | None:
        if key is not None and key in self.waits:
            keys: Any = (key,)
        else:
            keys = self.waits
        for k in keys:
            reply = self._serve(ctx, k)
            if reply is not None:
                return reply
        return None

    def _serve(self, ctx: Ctx, key: bytes) -> Reply | None:
        value = ctx.db.get(key)
        gt = self.waits[key]
        g: ConsumerGroup | None = None
        if self.group is not None:
            if type(value) is not Stream:
                return CommandError(msgs.UNBLOCKED_STREAM_DELETED)
            g = value.groups.get(self.group)
            if g is None:
                return CommandError(msgs.NOGROUP_BLOCKED_GROUP_DESTROYED)
            gt = g.last_id
        elif type(value) is not Stream:
            return None
        s: Stream = value
        # Redis compares with the last generated ID, not the last live entry.
        if s.last_id <= gt:
            return None
        if g is not None:
            logged = ctx.propagating
            created = logged and self.consumer not in g.consumers
            last_before = g.last_id
            delivered: list[int] | None = [] if logged else None
            consumer = group_consumer(ctx, key, g, self.consumer, ctx.engine.clock())
            entries = read_group_new(ctx, s, g, consumer, self.count, self.noack, delivered)
            # Served later, only a consumer created for it counts (Redis 7.0).
            ctx.changed(0)
            if delivered is not None:
                log_group_read(ctx, key, g, self.consumer, created, delivered, last_before)
        else:
            entries = s.range_reply(gt + 1, MAX_ID, self.count)
        return streams_reply(ctx, [(key, entries)], True)


@command("xread", arity=-4, flags=("readonly", "blocking", "movablekeys"))
def xread(ctx: Ctx, args: list[bytes]) -> Reply | Blocked:
    """XREAD [COUNT n] [BLOCK ms] STREAMS key [key ...] id [id ...] -> entries after each ID
    (``$``: the stream's last ID); a null array when nothing is new and no BLOCK."""
    return _xread_generic(ctx, args, False)


@command("xreadgroup", arity=-7, flags=("write", "blocking", "movablekeys"))
def xreadgroup(ctx: Ctx, args: list[bytes]) -> Reply | Blocked:
    """XREADGROUP GROUP g consumer [COUNT n] [BLOCK ms] [NOACK] STREAMS key [key ...] id
    [id ...] -> new entries for ``>``, the consumer's pending entries otherwise."""
    return _xread_generic(ctx, args, True)


# --- XACK / XPENDING / XCLAIM / XAUTOCLAIM -----------------------------------------------


@command("xack", arity=-4, flags=("write", "fast"), first_key=1, last_key=1, step=1)
def xack(ctx: Ctx, args: list[bytes]) -> Reply:
    """XACK key group id [id ...] -> number of entries acknowledged. A missing key or group
    answers 0 without parsing the IDs; otherwise one bad ID fails the whole command."""
    s = get_stream(ctx, args[0])
    g = _lookup_group(s, args[1])
    if g is None:
        return 0
    ids = args[2:]
    sids = list(map(_DELIVERED_IDS.pop, ids, repeat(None, len(ids))))
    if None in sids:
        sids = [strict_id(a) if sid is None else sid for a, sid in zip(ids, sids, strict=True)]
    return g.ack_many(sids)  # type: ignore[arg-type]


@command("xpending", arity=-3, flags=("readonly",), first_key=1, last_key=1, step=1)
def xpending(ctx: Ctx, args: list[bytes]) -> Reply:
    """XPENDING key group [[IDLE min-idle] start end count [consumer]] -> the summary
    ``[count, min, max, [[consumer, "n"], ...]]`` or the pending entries
    ``[[id, consumer, idle-ms, deliveries], ...]``."""
    argc = len(args) + 1
    justinfo = argc == 3
    if argc != 3 and (argc < 6 or argc > 9):
        raise CommandError(msgs.SYNTAX)
    start = end = 0
    count = 0
    minidle = 0
    consumername: bytes | None = None
    if argc >= 6:
        sidx = 2
        if args[2].lower() == b"idle":
            minidle = to_int(args[3])
            if argc < 8:
                raise CommandError(msgs.SYNTAX)
            sidx += 2
        count = to_int(args[sidx + 2])
        if count < 0:
            count = 0
        start, end = _range_bounds(args[sidx], args[sidx + 1])
        if sidx + 3 < len(args):
            consumername = args[sidx + 3]
    s = get_stream(ctx, args[0])
    g = _lookup_group(s, args[1])
    if g is None:
        raise CommandError(msgs.nogroup_key_or_group(arg_text(args[0]), arg_text(args[1])))
    pel = g.pel
    if justinfo:
        if not pel:
            return [0, NULL_BULK, NULL_BULK, NULL_ARRAY]
        owners = [[c.name, b"%d" % len(c.pel)] for c in g.sorted_consumers() if c.pel]
        return [len(pel), format_id(pel.first()), format_id(pel.last()), owners]
    if consumername is not None:
        c = g.lookup_consumer(consumername)
        if c is None:
            return EMPTY_ARRAY
        pel = c.pel
    now = ctx.engine.clock()
    out: list[Any] = []
    if count:
        for sid in pel.irange(start, end):
            pe: PendingEntry = pel[sid]
            if minidle and now - pe.delivery_time < minidle:
                continue
            elapsed = now - pe.delivery_time
            owner = pe.consumer
            out.append(
                [
                    format_id(sid),
                    owner.name if owner is not None else b"",
                    elapsed if elapsed > 0 else 0,
                    pe.delivery_count,
                ]
            )
            if len(out) >= count:
                break
    return out


@command("xclaim", arity=-6, flags=("write", "fast"), first_key=1, last_key=1, step=1)
def xclaim(ctx: Ctx, args: list[bytes]) -> Reply:
    """XCLAIM key group consumer min-idle-time id [id ...] [IDLE ms] [TIME ms] [RETRYCOUNT n]
    [FORCE] [JUSTID] [LASTID id] -> the claimed entries (or IDs with JUSTID)."""
    s = get_stream(ctx, args[0])
    g = _lookup_group(s, args[1])
    if s is None or g is None:
        raise CommandError(msgs.nogroup_key_or_group(arg_text(args[0]), arg_text(args[1])))
    minidle = to_int(args[3], msgs.XCLAIM_MIN_IDLE)
    if minidle < 0:
        minidle = 0
    n = len(args)
    sids: list[int] = []
    j = 4
    while j < n:
        sid = parse_strict_id(args[j])
        if sid is None:
            break
        sids.append(sid)
        j += 1
    now = ctx.engine.clock()
    force = False
    justid = False
    retrycount = -1
    deliverytime = -1
    last_id = 0
    while j < n:
        more = n - 1 - j
        opt = args[j].lower()
        if opt == b"force":
            force = True
        elif opt == b"justid":
            justid = True
        elif opt == b"idle" and more:
            j += 1
            deliverytime = now - to_int(args[j], msgs.XCLAIM_IDLE)
        elif opt == b"time" and more:
            j += 1
            deliverytime = to_int(args[j], msgs.XCLAIM_TIME)
        elif opt == b"retrycount" and more:
            j += 1
            retrycount = to_int(args[j], msgs.XCLAIM_RETRYCOUNT)
        elif opt == b"lastid" and more:
            j += 1
            last_id = strict_id(args[j])
        else:
            raise CommandError(msgs.xclaim_unrecognized(arg_text(args[j])))
        j += 1
    moved = last_id > g.last_id
    if moved:
        g.last_id = last_id
    if deliverytime != -1:
        # A bogus time (negative or in the future) is clamped to now, not an error.
        if deliverytime < 0 or deliverytime > now:
            deliverytime = now
    else:
        deliverytime = now
    consumer: Consumer | None = None
    out: list[Any] = []
    pel = g.pel
    name = args[2]
    claimed: list[int] = []
    dropped: list[bytes] = []
    for sid in sids:
        pe: PendingEntry | None = pel.get(sid)
        fv = None if justid else s.get(sid)
        if (fv is None) if not justid else not s.exists(sid):
            # The entry is gone from the stream: it leaves the PEL silently.
            if pe is not None:
                g.drop_pending(sid)
                dropped.append(format_id(sid))
            continue
        if force and pe is None:
            pe = PendingEntry(None, now, 1)
            pel.add(sid, pe)
        if pe is None:
            continue
        # An entry FORCE just created has no owner and skips the idle check.
        if pe.consumer is not None and minidle and now - pe.delivery_time < minidle:
            continue
        if consumer is None:
            consumer = group_consumer(ctx, args[0], g, name, now)
        g.transfer(sid, pe, consumer)
        pe.delivery_time = deliverytime
        if retrycount >= 0:
            pe.delivery_count = retrycount
        elif not justid and pe.delivery_count < _LLONG_MAX:
            pe.delivery_count += 1
        out.append(format_id(sid) if fv is None else [format_id(sid), fv])
        claimed.append(sid)
    # Each claim and each PEL entry dropped for a deleted stream entry is a change; a LASTID
    # that moved the group counts on its own only when nothing else was (Redis 7.0 carries
    # it in the claims it propagates).
    ctx.changed(len(claimed) + len(dropped) + (moved and not claimed and not dropped))
    if ctx.propagating:
        _log_claim_effects(ctx, args[0], g, name, claimed, dropped, moved)
    return out


def _log_claim_effects(
    ctx: Ctx,
    key: bytes,
    g: ConsumerGroup,
    name: bytes,
    claimed: list[int],
    dropped: list[bytes],
    moved: bool,
) -> None:
    # XCLAIM / XAUTOCLAIM as Redis 7.0 propagates them: each claim with its resulting time
    # and count, entries deleted from the stream dropped from the PEL (an XCLAIM of an ID the
    # stream no longer has), last-delivered-id moved by LASTID as XGROUP SETID.
    ctx.no_propagate()
    if dropped:
        ctx.propagate([b"XCLAIM", key, g.name, name, b"0", *dropped, b"JUSTID"])
    if claimed:
        log_claims(ctx, key, g, name, claimed, False)
    if moved:
        _log_setid(ctx, key, g)


@command("xautoclaim", arity=-6, flags=("write", "fast"), first_key=1, last_key=1, step=1)
def xautoclaim(ctx: Ctx, args: list[bytes]) -> Reply:
    """XAUTOCLAIM key group consumer min-idle-time start [COUNT n] [JUSTID] ->
    ``[cursor, claimed entries (or IDs), deleted IDs]``. Examines at most COUNT*10 pending
    entries; deleted entries are purged and reported (they count towards COUNT)."""
    minidle = to_int(args[3], msgs.XAUTOCLAIM_MIN_IDLE)
    if minidle < 0:
        minidle = 0
    start, startex = _interval(args[4], 0)
    if startex:
        if start >= MAX_ID:
            raise CommandError(msgs.RANGE_INVALID_START)
        start += 1
    count = 100
    justid = False
    n = len(args)
    j = 5
    while j < n:
        more = n - 1 - j
        opt = args[j].lower()
        if opt == b"count" and more:
            v = parse_ll(args[j + 1])
            if v is None or v < 1 or v > _XAUTOCLAIM_MAX_COUNT:
                raise CommandError(msgs.XAUTOCLAIM_COUNT)
            count = v
            j += 1
        elif opt == b"justid":
            justid = True
        else:
            raise CommandError(msgs.SYNTAX)
        j += 1
    s = get_stream(ctx, args[0])
    g = _lookup_group(s, args[1])
    if s is None or g is None:
        raise CommandError(msgs.nogroup_key_or_group(arg_text(args[0]), arg_text(args[1])))
    if count * 16 >= _ADDRESS_SPACE:
        # Redis allocates COUNT stream IDs up front and reports the failed allocation; with
        # a 47-bit user address space that happens from about 2**43 IDs.
        raise CommandError(msgs.XAUTOCLAIM_COUNT_TOO_HIGH)
    attempts = count * _XAUTOCLAIM_ATTEMPTS_FACTOR
    now = ctx.engine.clock()
    name = args[2]
    consumer: Consumer | None = None
    claimed: list[Any] = []
    deleted: list[bytes] = []
    claimed_sids: list[int] = []
    dropped_sids: list[int] = []
    pel = g.pel
    # Walk the PEL like Redis's rax iterator, re-seeking after each removal.
    sid_or_none = pel.ceiling(start)
    while attempts and count and sid_or_none is not None:
        attempts -= 1
        sid = sid_or_none
        fv = None if justid else s.get(sid)
        if (fv is None) if not justid else not s.exists(sid):
            # Purged and reported even when not idle enough; it uses up COUNT.
            g.drop_pending(sid)
            deleted.append(format_id(sid))
            dropped_sids.append(sid)
            count -= 1
            sid_or_none = pel.ceiling(sid)
            continue
        sid_or_none = pel.ceiling(sid + 1) if sid < MAX_ID else None
        pe: PendingEntry = pel[sid]
        if minidle and now - pe.delivery_time < minidle:
            continue
        if consumer is None:
            consumer = group_consumer(ctx, args[0], g, name, now)
        g.transfer(sid, pe, consumer)
        pe.delivery_time = now
        if not justid and pe.delivery_count < _LLONG_MAX:
            pe.delivery_count += 1
        claimed.append(format_id(sid) if fv is None else [format_id(sid), fv])
        claimed_sids.append(sid)
        count -= 1
    cursor = b"0-0" if sid_or_none is None else format_id(sid_or_none)
    ctx.changed(len(claimed_sids) + len(deleted))
    if ctx.propagating:
        _log_claim_effects(ctx, args[0], g, name, claimed_sids, deleted, False)
    return [cursor, claimed, deleted]


# --- XGROUP -------------------------------------------------------------------------------


def _xgroup_target(ctx: Ctx, args: list[bytes], mkstream: bool = False) -> Stream | None:
    # The checks every XGROUP subcommand with a key does first: type, then existence.
    s = get_stream(ctx, args[0])
    if s is None and not mkstream:
        raise CommandError(msgs.XGROUP_KEY_REQUIRED)
    return s


def _xgroup_group(ctx: Ctx, args: list[bytes]) -> tuple[Stream, ConsumerGroup]:
    s = _xgroup_target(ctx, args)
    assert s is not None
    g = s.groups.get(args[1])
    if g is None:
        raise CommandError(msgs.nogroup_for_key(arg_text(args[1]), arg_text(args[0])))
    return s, g


def _entries_read_arg(arg: bytes) -> int:
    v = to_int(arg)
    if v < 0 and v != INVALID_ENTRIES_READ:
        raise CommandError(msgs.ENTRIESREAD_INVALID)
    return v


def _group_start_id(s: Stream | None, arg: bytes) -> int:
    if arg == b"$":
        return 0 if s is None else s.last_id
    return strict_id(arg)


@command("xgroup|create", arity=-5, flags=("write", "denyoom"), first_key=2, last_key=2, step=1)
def xgroup_create(ctx: Ctx, args: list[bytes]) -> Reply:
    """XGROUP CREATE key group id|$ [MKSTREAM] [ENTRIESREAD n] -> OK (BUSYGROUP if the group
    exists). entries-read stays unknown (-1) unless ENTRIESREAD is given, even for ``$``."""
    mkstream = False
    entries_read = INVALID_ENTRIES_READ
    n = len(args)
    i = 3
    while i < n:
        opt = args[i].lower()
        if opt == b"mkstream":
            mkstream = True
            i += 1
        elif opt == b"entriesread" and i + 1 < n:
            entries_read = _entries_read_arg(args[i + 1])
            i += 2
        else:
            raise _subcommand_syntax(ctx, "create", "XGROUP")
    s = _xgroup_target(ctx, args, mkstream)
    if n > 6:
        raise _subcommand_syntax(ctx, "create", "XGROUP")
    last_id = _group_start_id(s, args[2])
    if s is None:
        s = Stream()
        ctx.db.set(args[0], s)
        ctx.signal_key_ready(args[0])
    if s.create_group(args[1], last_id, entries_read) is None:
        raise CommandError(msgs.BUSYGROUP)
    ctx.notify(NOTIFY_STREAM, b"xgroup-create", args[0])
    return OK


@command("xgroup|setid", arity=-5, flags=("write",), first_key=2, last_key=2, step=1)
def xgroup_setid(ctx: Ctx, args: list[bytes]) -> Reply:
    """XGROUP SETID key group id|$ [ENTRIESREAD n] -> OK. Without ENTRIESREAD the group's
    entries-read becomes unknown (-1)."""
    # Options are parsed before the key is looked up, the argument count checked after.
    n = len(args)
    entries_read = INVALID_ENTRIES_READ
    i = 3
    while i < n:
        if args[i].lower() == b"entriesread" and i + 1 < n:
            entries_read = _entries_read_arg(args[i + 1])
            i += 2
        else:
            raise _subcommand_syntax(ctx, "setid", "XGROUP")
    s, g = _xgroup_group(ctx, args)
    if n not in (3, 5):
        raise _subcommand_syntax(ctx, "setid", "XGROUP")
    if args[2] == b"$":
        last_id = s.last_id
    else:
        sid = parse_id(args[2])
        if sid is None:
            raise CommandError(msgs.INVALID_STREAM_ID)
        last_id = sid
    g.last_id = last_id
    g.entries_read = entries_read
    ctx.notify(NOTIFY_STREAM, b"xgroup-setid", args[0])
    return OK


@command("xgroup|destroy", arity=4, flags=("write",), first_key=2, last_key=2, step=1)
def xgroup_destroy(ctx: Ctx, args: list[bytes]) -> Reply:
    """XGROUP DESTROY key group -> 1 if destroyed, 0 if there was no such group. Blocked
    XREADGROUP clients of the group get a NOGROUP error."""
    s = _xgroup_target(ctx, args)
    assert s is not None
    if s.groups.pop(args[1], None) is None:
        return 0
    ctx.signal_key_ready(args[0])
    ctx.notify(NOTIFY_STREAM, b"xgroup-destroy", args[0])
    return 1


@command(
    "xgroup|createconsumer", arity=5, flags=("write", "denyoom"), first_key=2, last_key=2, step=1
)
def xgroup_createconsumer(ctx: Ctx, args: list[bytes]) -> Reply:
    """XGROUP CREATECONSUMER key group consumer -> 1 if created, 0 if it existed."""
    _, g = _xgroup_group(ctx, args)
    if g.create_consumer(args[2], ctx.engine.clock()) is None:
        return 0
    ctx.notify(NOTIFY_STREAM, b"xgroup-createconsumer", args[0])
    return 1


@command("xgroup|delconsumer", arity=5, flags=("write",), first_key=2, last_key=2, step=1)
def xgroup_delconsumer(ctx: Ctx, args: list[bytes]) -> Reply:
    """XGROUP DELCONSUMER key group consumer -> number of pending entries it had (0 for an
    unknown consumer); those entries leave the group PEL too."""
    _, g = _xgroup_group(ctx, args)
    pending = g.delete_consumer(args[2])
    if pending is None:
        ctx.changed(0)
        return 0
    ctx.notify(NOTIFY_STREAM, b"xgroup-delconsumer", args[0])
    return pending


_XGROUP_HELP: Final = (
    "XGROUP <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CREATE <key> <groupname> <id|$> [option]",
    "    Create a new consumer group. Options are:",
    "    * MKSTREAM",
    "      Create the empty stream if it does not exist.",
    "    * ENTRIESREAD entries_read",
    "      Set the group's entries_read counter (internal use).",
    "CREATECONSUMER <key> <groupname> <consumer>",
    "    Create a new consumer in the specified group.",
    "DELCONSUMER <key> <groupname> <consumer>",
    "    Remove the specified consumer.",
    "DESTROY <key> <groupname>",
    "    Remove the specified group.",
    "SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
    "    Set the current group ID and entries_read counter.",
    "HELP",
    "    Prints this help.",
)


@command("xgroup|help", arity=2, flags=("loading", "stale"))
def xgroup_help(ctx: Ctx, args: list[bytes]) -> Reply:
    """XGROUP HELP -> the help lines."""
    return [Status(line) for line in _XGROUP_HELP]


# --- XINFO --------------------------------------------------------------------------------


def _xinfo_stream_target(ctx: Ctx, key: bytes) -> Stream:
    s = get_stream(ctx, key)
    if s is None:
        raise CommandError(msgs.NO_SUCH_KEY)
    return s


def _lag_reply(s: Stream, g: ConsumerGroup) -> Reply:
    lag = s.group_lag(g)
    return NULL_BULK if lag is None else lag


def _entries_read_reply(g: ConsumerGroup) -> Reply:
    return NULL_BULK if g.entries_read == INVALID_ENTRIES_READ else g.entries_read


@command("xinfo|stream", arity=-3, flags=("readonly",), first_key=2, last_key=2, step=1)
def xinfo_stream(ctx: Ctx, args: list[bytes]) -> Reply:
    """XINFO STREAM key [FULL [COUNT n]] -> the stream's description (a map)."""
    s = _xinfo_stream_target(ctx, args[0])
    full = False
    count = 10
    opts = args[1:]
    if opts:
        if opts[0].lower() != b"full":
            raise _subcommand_syntax(ctx, "stream", "XINFO")
        full = True
        if len(opts) > 1:
            if len(opts) != 3 or opts[1].lower() != b"count":
                raise _subcommand_syntax(ctx, "stream", "XINFO")
            count = to_int(opts[2])
            if count < 0:
                count = 10
    items: list[tuple[Reply, Reply]] = [
        (b"length", s.length),
        (b"radix-tree-keys", s.node_count),
        (b"radix-tree-nodes", s.rax_nodes_estimate()),
        (b"last-generated-id", format_id(s.last_id)),
        (b"max-deleted-entry-id", format_id(s.max_deleted_id)),
        (b"entries-added", s.entries_added),
        (b"recorded-first-entry-id", format_id(s.first_id)),
    ]
    if not full:
        first = s.range(0, MAX_ID, 1)
        last = s.range(0, MAX_ID, 1, rev=True)
        items.append((b"groups", len(s.groups)))
        items.append((b"first-entry", entry_reply(first[0]) if first else NULL_BULK))
        items.append((b"last-entry", entry_reply(last[0]) if last else NULL_BULK))
        return Map(items)
    items.append((b"entries", _entries_reply(s.range(0, MAX_ID, count))))
    groups: list[Any] = []
    for g in s.sorted_groups():
        pending: list[Any] = []
        for sid, pe in g.pel.items():
            if count and len(pending) >= count:
                break
            owner = pe.consumer
            pending.append(
                [
                    format_id(sid),
                    owner.name if owner is not None else b"",
                    pe.delivery_time,
                    pe.delivery_count,
                ]
            )
        consumers: list[Any] = []
        for c in g.sorted_consumers():
            cpending: list[Any] = []
            for sid, pe in c.pel.items():
                if count and len(cpending) >= count:
                    break
                cpending.append([format_id(sid), pe.delivery_time, pe.delivery_count])
            consumers.append(
                Map(
                    [
                        (b"name", c.name),
                        (b"seen-time", c.seen_time),
                        (b"pel-count", len(c.pel)),
                        (b"pending", cpending),
                    ]
                )
            )
        groups.append(
            Map(
                [
                    (b"name", g.name),
                    (b"last-delivered-id", format_id(g.last_id)),
                    (b"entries-read", _entries_read_reply(g)),
                    (b"lag", _lag_reply(s, g)),
                    (b"pel-count", len(g.pel)),
                    (b"pending", pending),
                    (b"consumers", consumers),
                ]
            )
        )
    items.append((b"groups", groups))
    return Map(items)


@command("xinfo|groups", arity=3, flags=("readonly",), first_key=2, last_key=2, step=1)
def xinfo_groups(ctx: Ctx, args: list[bytes]) -> Reply:
    """XINFO GROUPS key -> one map per group: name, consumers, pending, last-delivered-id,
    entries-read, lag."""
    s = _xinfo_stream_target(ctx, args[0])
    return [
        Map(
            [
                (b"name", g.name),
                (b"consumers", len(g.consumers)),
                (b"pending", len(g.pel)),
                (b"last-delivered-id", format_id(g.last_id)),
                (b"entries-read", _entries_read_reply(g)),
                (b"lag", _lag_reply(s, g)),
            ]
        )
        for g in s.sorted_groups()
    ]


@command("xinfo|consumers", arity=4, flags=("readonly",), first_key=2, last_key=2, step=1)
def xinfo_consumers(ctx: Ctx, args: list[bytes]) -> Reply:
    """XINFO CONSUMERS key group -> one map per consumer: name, pending, idle (ms since its
    seen-time, which reads and claims refresh)."""
    s = _xinfo_stream_target(ctx, args[0])
    g = s.groups.get(args[1])
    if g is None:
        raise CommandError(msgs.nogroup_for_key(arg_text(args[1]), arg_text(args[0])))
    now = ctx.engine.clock()
    out: list[Any] = []
    for c in g.sorted_consumers():
        idle = now - c.seen_time
        out.append(Map([(b"name", c.name), (b"pending", len(c.pel)), (b"idle", max(idle, 0))]))
    return out


_XINFO_HELP: Final = (
    "XINFO <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CONSUMERS <key> <groupname>",
    "    Show consumers of <groupname>.",
    "GROUPS <key>",
    "    Show the stream consumer groups.",
    "STREAM <key> [FULL [COUNT <count>]",
    "    Show information about the stream.",
    "HELP",
    "    Prints this help.",
)


@command("xinfo|help", arity=2, flags=("loading", "stale"))
def xinfo_help(ctx: Ctx, args: list[bytes]) -> Reply:
    """XINFO HELP -> the help lines."""
    return [Status(line) for line in _XINFO_HELP]


# --- XSETID -------------------------------------------------------------------------------


@command("xsetid", arity=-3, flags=("write", "denyoom", "fast"), first_key=1, last_key=1, step=1)
def xsetid(ctx: Ctx, args: list[bytes]) -> Reply:
    """XSETID key last-id [ENTRIESADDED n] [MAXDELETEDID id] -> OK. The ID may not go below
    the last live entry (an emptied stream can be set backwards, as in 7.0)."""
    sid = strict_id(args[1])
    entries_added = -1
    max_xdel = 0
    n = len(args)
    i = 2
    while i < n:
        more = n - 1 - i
        opt = args[i].lower()
        if opt == b"entriesadded" and more:
            entries_added = to_int(args[i + 1])
            if entries_added < 0:
                raise CommandError(msgs.XSETID_ENTRIES_ADDED_NEGATIVE)
            i += 2
        elif opt == b"maxdeletedid" and more:
            max_xdel = strict_id(args[i + 1])
            if sid < max_xdel:
                raise CommandError(msgs.XSETID_BELOW_MAX_DELETED)
            i += 2
        else:
            raise CommandError(msgs.SYNTAX)
    s = get_stream(ctx, args[0])
    if s is None:
        raise CommandError(msgs.NO_SUCH_KEY)
    if s.length:
        top = s.last_live_id()
        assert top is not None
        if sid < top:
            raise CommandError(msgs.XSETID_BELOW_TOP)
        if entries_added != -1 and s.length > entries_added:
            raise CommandError(msgs.XSETID_ENTRIES_ADDED_BELOW_LENGTH)
    s.last_id = sid
    if entries_added != -1:
        s.entries_added = entries_added
    if max_xdel:
        s.max_deleted_id = max_xdel
    ctx.notify(NOTIFY_STREAM, b"xsetid", args[0])
    return OK
