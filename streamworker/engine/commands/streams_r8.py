"""The stream commands and options of Redis 8.x, installed into an 8.x engine's table only.

A 7.0 engine never sees this module's commands: :func:`install` adds them to (or swaps them
into) one engine's dispatch table when it is built with ``redis_version`` 8.x, so the 7.0
path carries no version test. What each 8.x version adds (see :mod:`..versions`):

* 8.2: ``XACKDEL``, ``XDELEX``, and ``KEEPREF | DELREF | ACKED`` on ``XADD`` / ``XTRIM``
  (https://redis.io/docs/latest/commands/xackdel/, .../xdelex/, .../xadd/, .../xtrim/).
* 8.4: ``XREADGROUP ... CLAIM min-idle-time``
  (https://redis.io/docs/latest/commands/xreadgroup/).
* 8.6: ``XADD ... IDMP pid iid | IDMPAUTO pid``, ``XCFGSET``, XINFO STREAM's IDMP fields
  (https://redis.io/docs/latest/develop/data-types/streams/idempotency/,
  https://redis.io/docs/latest/commands/xcfgset/).
* 8.8: ``XNACK key group SILENT|FAIL|FATAL IDS n id ... [RETRYCOUNT c] [FORCE]``
  (https://redis.io/docs/latest/commands/xnack/), and XPENDING's idle of -1 for the entries
  it released.
* 8.10: ``MAXCOUNT`` and ``MAXSIZE`` on ``XREAD`` and ``XREADGROUP``
  (https://redis.io/docs/latest/commands/xread/, .../xreadgroup/).

Built from those pages (no Redis 8 server can run here); where a page leaves a choice open the
choice is stated where it is made and in docs/engine-redis8.md. What gets logged follows the
7.0 commands: a deterministic command is logged as received, a claim as the ``XCLAIM ... FORCE
JUSTID`` that sets owner, time and count exactly (as XAUTOCLAIM is), an approximate trim as the
exact trim it amounted to.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Final, TypeVar

from streamworker.engine import msgs
from streamworker.engine.commands import CommandFunc, CommandSpec
from streamworker.engine.commands import streams as s7
from streamworker.engine.commands._args import to_int
from streamworker.engine.context import Blocked
from streamworker.engine.errors import CommandError
from streamworker.engine.ids import MAX_ID, format_id, parse_ll
from streamworker.engine.keyspecs_data import KEY_SPECS
from streamworker.engine.model.idmp import IdmpState, content_iid
from streamworker.engine.model.stream import ConsumerGroup, PendingEntry, Stream
from streamworker.engine.notify import NOTIFY_STREAM
from streamworker.engine.protocol import encode
from streamworker.engine.replies import NULL_ARRAY, OK, Map
from streamworker.engine.versions import (
    ACKDEL_SINCE,
    CLAIM_SINCE,
    IDMP_SINCE,
    READ_LIMITS_SINCE,
    XNACK_SINCE,
    RedisVersion,
)

if TYPE_CHECKING:
    from streamworker.engine.commands.streams import AddTrimArgs
    from streamworker.engine.context import Ctx
    from streamworker.engine.replies import Reply

__all__ = ["exact_trim_args_with_refs", "install", "referenced", "trim_with_refs"]

LLONG_MAX: Final = (1 << 63) - 1

# (since, name, function, arity, flags, first key): what install() puts in an 8.x table, in
# order (a later entry for the same name wins: XADD of 8.6 over 8.2's). A name the 7.0 table
# has gets a new spec with its 8.x function; ``"xinfo|stream"`` replaces a subcommand.
_R8: list[tuple[tuple[int, int], str, CommandFunc, int, tuple[str, ...], int]] = []

# Key specs of the new commands, as their redis.io pages give them (COMMAND GETKEYSANDFLAGS,
# ACL key checks); the 7.0 table has none of these names.
_R8_KEY_SPECS: Final = {
    "xackdel": ((("RW", "update", "delete"), ("index", 1), ("range", 0, 1, 0)),),
    "xdelex": ((("RW", "delete"), ("index", 1), ("range", 0, 1, 0)),),
    "xnack": ((("RW", "update"), ("index", 1), ("range", 0, 1, 0)),),
    "xcfgset": ((("RW", "update"), ("index", 1), ("range", 0, 1, 0)),),
}


_F = TypeVar("_F", bound=Callable[..., Any])


def _r8(
    since: tuple[int, int], name: str, arity: int, flags: tuple[str, ...], first_key: int = 1
) -> Callable[[_F], _F]:
    def deco(func: _F) -> _F:
        _R8.append((since, name, func, arity, flags, first_key))
        return func

    return deco


def install(table: dict[bytes, CommandSpec], version: RedisVersion) -> None:
    """Add the commands of ``version`` (an 8.x one) to ``table``, an engine's fresh dispatch
    table, replacing XADD / XTRIM / XREADGROUP / XPENDING by their 8.x parsers where that
    version has their options. Called once, while the engine is built."""
    for since, name, func, arity, flags, first in _R8:
        if not version.at_least(since):
            continue
        spec = CommandSpec(
            name, func, arity, flags, first_key=first, last_key=first, step=1 if first else 0
        )
        if spec.container is not None:
            parent = table[spec.container.encode()]
            assert parent.subcommands is not None
            parent.subcommands[name.split("|", 1)[1].encode()] = spec
        else:
            table[name.encode()] = spec
    for name, specs in _R8_KEY_SPECS.items():
        KEY_SPECS.setdefault(name, specs)


# --- references ---------------------------------------------------------------------------


def referenced(s: Stream, sid: int) -> bool:
    """Whether a group still needs entry ``sid``: it is pending in a group, or a group has not
    read that far (the ACKED condition of XADD / XTRIM / XDELEX / XACKDEL: "read and
    acknowledged by all consumer groups"). A stream without groups references nothing (XADD's
    page: with no groups the options have no effect)."""
    return any(g.last_id < sid or sid in g.pel for g in s.groups.values())


def _drop_refs(s: Stream, sid: int) -> int:
    # DELREF: the entry leaves every group's PEL; returns how many PELs held it.
    n = 0
    for g in s.groups.values():
        if sid in g.pel:
            g.drop_pending(sid)
            n += 1
    return n


def _live_ids(s: Stream, start: int, end: int) -> Iterator[int]:
    # The live entries' IDs from start to end, read in chunks (a trim rarely goes far).
    while start <= end:
        chunk = s.range(start, end, 256)
        if not chunk:
            return
        for sid, _ in chunk:
            yield sid
        last = chunk[-1][0]
        if last >= end or len(chunk) < 256:
            return
        start = last + 1


def trim_with_refs(s: Stream, by_maxlen: bool, maxlen: int, minid: int, p: AddTrimArgs) -> int:
    """XADD / XTRIM trimming with DELREF or ACKED (``p.refs``); returns the entries removed.

    DELREF trims as KEEPREF does (whole nodes with ``~``) and then drops the removed entries
    from every group's PEL. ACKED removes, from the head, only entries no group references
    (:func:`referenced`) and goes past the ones it keeps, until the stream is short enough
    (MAXLEN) or the IDs reach the threshold (MINID); with ``~`` it examines at most LIMIT
    entries (the default limit applies) but does not round to nodes. Entries it removes
    behind a kept one are tombstones like XDEL's (max-deleted-entry-id moves), so lag stays
    honest. A stream without groups is trimmed as KEEPREF trims it."""
    if p.refs == s7.REFS_DELETE:
        candidates: list[int] = []
        if any(g.pel for g in s.groups.values()):
            if by_maxlen:
                excess = s.length - maxlen
                if excess > 0:
                    candidates = [sid for sid, _ in s.range(0, MAX_ID, excess)]
            elif minid > 0:
                candidates = list(_live_ids(s, 0, minid - 1))
        deleted = s.trim_maxlen(maxlen, p.approx, p.limit) if by_maxlen else 0
        if not by_maxlen:
            deleted = s.trim_minid(minid, p.approx, p.limit)
        # Trimming removes from the head: the first ``deleted`` candidates are what went.
        for sid in candidates[:deleted]:
            _drop_refs(s, sid)
        return deleted
    if not s.groups:
        if by_maxlen:
            return s.trim_maxlen(maxlen, p.approx, p.limit)
        return s.trim_minid(minid, p.approx, p.limit)
    limit = p.limit if p.approx else 0
    end = MAX_ID if by_maxlen else minid - 1
    victims: list[int] = []
    kept_before = False
    first_kept = 0
    examined = 0
    for sid in _live_ids(s, 0, end) if end >= 0 else ():
        if by_maxlen and s.length - len(victims) <= maxlen:
            break
        if limit and examined >= limit:
            break
        examined += 1
        if referenced(s, sid):
            if not kept_before:
                kept_before = True
                first_kept = sid
            continue
        victims.append(sid)
    for sid in victims:
        s.delete(sid)
        if kept_before and sid > first_kept and sid > s.max_deleted_id:
            s.max_deleted_id = sid
    if victims:
        s.refresh_first_id()
    return len(victims)


def exact_trim_args_with_refs(s: Stream, p: AddTrimArgs) -> list[bytes]:
    """The trim options that, replayed on the same state, remove what an approximate
    DELREF / ACKED trim removed (what the file and the replicas get instead of ``~``), after
    XADD's IDMP / IDMPAUTO words when it had them."""
    head: list[bytes] = []
    if p.idmp_pid is not None:
        # XADD's IDMP words ride along: the replayed XADD records the same iid.
        if p.idmp_iid is None:
            head = [b"IDMPAUTO", p.idmp_pid]
        else:
            head = [b"IDMP", p.idmp_pid, p.idmp_iid]
    if p.refs == s7.REFS_ACKED:
        # ACKED removes the first unreferenced entries from the head: replaying "down to the
        # length it left" removes the same ones, whichever strategy was asked.
        return [*head, b"ACKED", b"MAXLEN", b"=", b"%d" % s.length]
    if p.refs == s7.REFS_DELETE:
        head.append(b"DELREF")
    if p.strategy == 1:  # MAXLEN
        return [*head, b"MAXLEN", b"=", b"%d" % s.length]
    return [*head, b"MINID", b"=", format_id(s.first_id if s.length else s.last_id + 1)]


# --- XADD / XTRIM with KEEPREF | DELREF | ACKED (8.2) ------------------------------------


class _Trims8:
    """This module's trims, as :class:`.streams.RefsTrim`."""

    __slots__ = ()

    def trim(self, s: Stream, by_maxlen: bool, maxlen: int, minid: int, p: AddTrimArgs) -> int:
        return trim_with_refs(s, by_maxlen, maxlen, minid, p)

    def exact_args(self, s: Stream, p: AddTrimArgs) -> list[bytes]:
        return exact_trim_args_with_refs(s, p)


_TRIMS8 = _Trims8()


def _parse_add_trim(ctx: Ctx, args: list[bytes], xadd: bool, refs: int) -> AddTrimArgs:
    # The 7.0 parser with the 8.x words accepted, and the 8.x trims attached.
    p = s7.parse_add_trim(ctx, args, xadd, refs=refs)
    p.r8 = _TRIMS8
    return p


@_r8(ACKDEL_SINCE, "xadd", -5, ("write", "denyoom", "fast"))
def xadd(ctx: Ctx, args: list[bytes]) -> Reply:
    """XADD key [NOMKSTREAM] [KEEPREF|DELREF|ACKED] [MAXLEN|MINID [=|~] threshold [LIMIT
    count]] *|id field value [field value ...] -> the new entry's ID. The reference policy
    says what trimming does to the groups' references (default KEEPREF, as in 7.0)."""
    if args[1] == b"*":
        return s7.xadd(ctx, args)
    return s7.xadd(ctx, args, _parse_add_trim(ctx, args, True, 1))


@_r8(ACKDEL_SINCE, "xtrim", -4, ("write",))
def xtrim(ctx: Ctx, args: list[bytes]) -> Reply:
    """XTRIM key MAXLEN|MINID [=|~] threshold [LIMIT count] [KEEPREF|DELREF|ACKED] ->
    number of entries removed."""
    return s7.xtrim(ctx, args, _parse_add_trim(ctx, args, False, 1))


# --- XDELEX / XACKDEL (8.2) ---------------------------------------------------------------


def _ids_and_policy(args: list[bytes], first: int) -> tuple[int, list[int]]:
    # [KEEPREF|DELREF|ACKED] IDS numids id [id ...] from args[first:], in any order (XDELEX's
    # page: "the IDS block can be at any position"); every ID parsed before anything changes.
    policy = s7.REFS_KEEP
    raw: list[bytes] | None = None
    n = len(args)
    i = first
    while i < n:
        word = args[i].lower()
        if word in s7.REF_POLICIES:
            policy = s7.REF_POLICIES[word]
            i += 1
        elif word == b"ids" and i + 1 < n and raw is None:
            numids = parse_ll(args[i + 1])
            if numids is None or numids <= 0:
                raise CommandError(msgs.IDS_NUMIDS)
            if numids > n - i - 2:
                raise CommandError(msgs.IDS_NUMIDS_MISMATCH)
            raw = args[i + 2 : i + 2 + numids]
            i += 2 + numids
        else:
            raise CommandError(msgs.SYNTAX)
    if raw is None:
        raise CommandError(msgs.SYNTAX)
    return policy, [s7.strict_id(a) for a in raw]


def _delete_entry(s: Stream, sid: int) -> None:
    # XDEL's bookkeeping for one entry: max-deleted-entry-id, recorded-first-entry-id.
    first = sid == s.first_id
    s.delete(sid)
    if sid > s.max_deleted_id:
        s.max_deleted_id = sid
    if s.length == 0:
        s.first_id = 0
    elif first:
        s.refresh_first_id()


def _delete_with_policy(s: Stream, sid: int, policy: int) -> int:
    # One ID's code: -1 not in the stream, 1 deleted, 2 kept (ACKED, still referenced).
    if not s.exists(sid):
        if policy == s7.REFS_DELETE:
            # "If an entry ID is not in the stream, but there are dangling references,
            # DELREF would still remove all those references" (XDELEX / XACKDEL pages).
            _drop_refs(s, sid)
        return -1
    if policy == s7.REFS_ACKED and referenced(s, sid):
        return 2
    _delete_entry(s, sid)
    if policy == s7.REFS_DELETE:
        _drop_refs(s, sid)
    return 1


@_r8(ACKDEL_SINCE, "xdelex", -5, ("write", "fast"))
def xdelex(ctx: Ctx, args: list[bytes]) -> Reply:
    """XDELEX key [KEEPREF|DELREF|ACKED] IDS numids id [id ...] -> one code per ID: 1
    deleted, -1 not in the stream (every ID when the key is missing), 2 kept because a group
    still references it (ACKED)."""
    policy, sids = _ids_and_policy(args, 1)
    s = s7.get_stream(ctx, args[0])
    if s is None:
        ctx.changed(0)
        return [-1] * len(sids)
    out = [_delete_with_policy(s, sid, policy) for sid in sids]
    deleted = out.count(1)
    ctx.changed(deleted)
    if deleted:
        ctx.touch(args[0])
        ctx.notify(NOTIFY_STREAM, b"xdel", args[0])
    return out


@_r8(ACKDEL_SINCE, "xackdel", -6, ("write", "fast"))
def xackdel(ctx: Ctx, args: list[bytes]) -> Reply:
    """XACKDEL key group [KEEPREF|DELREF|ACKED] IDS numids id [id ...] -> one code per ID:
    1 acknowledged in ``group`` and deleted, -1 not in the stream (every ID when the key or
    the group is missing, as XACK answers 0 for them), 2 acknowledged but kept because
    another group still references it (ACKED)."""
    policy, sids = _ids_and_policy(args, 2)
    s = s7.get_stream(ctx, args[0])
    g = None if s is None else s.groups.get(args[1])
    if s is None or g is None:
        ctx.changed(0)
        return [-1] * len(sids)
    out: list[int] = []
    acked = 0
    for sid in sids:
        if g.ack(sid):
            acked += 1
        out.append(_delete_with_policy(s, sid, policy))
    deleted = out.count(1)
    ctx.changed(acked + deleted)
    if deleted:
        ctx.touch(args[0])
        ctx.notify(NOTIFY_STREAM, b"xdel", args[0])
    return out


# --- XREADGROUP ... CLAIM (8.4) -----------------------------------------------------------


def _take_options(
    args: list[bytes], wanted: tuple[bytes, ...]
) -> tuple[dict[bytes, bytes], list[bytes]]:
    # The values of the ``wanted`` options (the last one given of each, by lowercased name)
    # and the arguments without them, found the way the read parsers walk their options (a
    # group or consumer named "claim" is not the option). Unknown words stop the walk: the
    # 7.0 parser then reports them.
    found: dict[bytes, bytes] = {}
    rest: list[bytes] = []
    n = len(args)
    i = 0
    while i < n:
        more = n - i - 1
        word = args[i].lower()
        if word == b"streams":
            break
        if word in wanted and more:
            found[word] = args[i + 1]
            i += 2
            continue
        if word == b"group" and more >= 2:
            step = 3
        elif word in _VALUED_OPTIONS and more:
            step = 2
        elif word == b"noack":
            step = 1
        else:
            break
        rest += args[i : i + step]
        i += step
    if not found:
        return found, args
    return found, rest + args[i:]


_VALUED_OPTIONS: Final = (b"count", b"block", b"claim", b"maxcount", b"maxsize")


def _claim_option(args: list[bytes]) -> tuple[bytes | None, list[bytes]]:
    # The CLAIM value (the last one given) and the arguments without CLAIM.
    found, rest = _take_options(args, (b"claim",))
    return found.get(b"claim"), rest


@_r8(CLAIM_SINCE, "xreadgroup", -7, ("write", "blocking", "movablekeys"), first_key=0)
def xreadgroup(ctx: Ctx, args: list[bytes]) -> Reply | Blocked:
    """XREADGROUP GROUP g consumer [COUNT n] [BLOCK ms] [CLAIM min-idle-time] [NOACK] STREAMS
    key [key ...] id [id ...]. Without CLAIM, 7.0's XREADGROUP. With CLAIM, for the streams
    read with ``>``: pending entries of the group idle at least min-idle-time (longest idle
    first) are claimed for the consumer, then new entries are read, all under one COUNT, every
    entry as ``[id, fields, idle-ms, deliveries-before]`` (0 and 0 for new ones). Deleted
    entries stay pending (unlike XAUTOCLAIM, nothing is dropped); streams read with another
    ID get their pending history as 7.0 gives it (CLAIM is ignored there)."""
    value, rest = _claim_option(args)
    if value is None:
        return s7.xreadgroup(ctx, args)
    minidle = to_int(value, msgs.XREADGROUP_CLAIM_MIN_IDLE)
    if minidle < 0:
        raise CommandError(msgs.XREADGROUP_CLAIM_MIN_IDLE)
    return _xreadgroup_claim(ctx, rest, minidle)


class _ReadArgs:
    __slots__ = ("consumer", "count", "group", "idargs", "keys", "noack", "timeout")

    def __init__(self) -> None:
        self.timeout = -1
        self.count = 0
        self.noack = False
        self.group = b""
        self.consumer = b""
        self.keys: list[bytes] = []
        self.idargs: list[bytes] = []

    def copy_with_count(self, count: int) -> _ReadArgs:
        """The same read with another COUNT (a blocked read's default)."""
        out = _ReadArgs()
        for name in self.__slots__:
            setattr(out, name, getattr(self, name))
        out.count = count
        return out


def _parse_read(ctx: Ctx, args: list[bytes]) -> _ReadArgs:
    # XREADGROUP's options (CLAIM already taken out), with 7.0's checks and texts.
    r = _ReadArgs()
    streams_arg = 0
    have_group = False
    n = len(args)
    i = 0
    while i < n:
        more = n - i - 1
        opt = args[i].lower()
        if opt == b"block" and more:
            if ctx.in_script:
                raise CommandError(msgs.xread_block_in_script(s7.typed_word(ctx, 0, "XREADGROUP")))
            i += 1
            t = parse_ll(args[i])
            if t is None:
                raise CommandError(msgs.TIMEOUT_NOT_INTEGER)
            if t < 0:
                raise CommandError(msgs.TIMEOUT_NEGATIVE)
            r.timeout = t
        elif opt == b"count" and more:
            i += 1
            r.count = max(to_int(args[i]), 0)
        elif opt == b"streams" and more:
            streams_arg = i + 1
            if (n - streams_arg) % 2:
                raise CommandError(msgs.XREAD_UNBALANCED)
            break
        elif opt == b"group" and more >= 2:
            r.group = args[i + 1]
            r.consumer = args[i + 2]
            have_group = True
            i += 2
        elif opt == b"noack":
            r.noack = True
        else:
            raise CommandError(msgs.SYNTAX)
        i += 1
    if streams_arg == 0:
        raise CommandError(msgs.SYNTAX)
    if not have_group:
        raise CommandError(msgs.XREADGROUP_MISSING_GROUP)
    nstreams = (n - streams_arg) // 2
    r.keys = args[streams_arg : streams_arg + nstreams]
    r.idargs = args[streams_arg + nstreams :]
    return r


def _serve_claim_stream(
    ctx: Ctx,
    key: bytes,
    s: Stream,
    g: ConsumerGroup,
    r: _ReadArgs,
    minidle: int,
    budget: int,
    limits: ReadLimits | None = None,
) -> list[Any]:
    # One '>' stream of a CLAIM read: idle pending entries, then new ones, within ``budget``
    # (0 = no limit) and ``limits`` (MAXCOUNT / MAXSIZE). Logs what it did when the engine
    # logs writes.
    now = ctx.engine.clock()
    logged = ctx.propagating
    created = r.consumer not in g.consumers
    last_before = g.last_id
    claimed, claimed_sids = _claim_idle_for(ctx, key, s, g, r, minidle, budget, now, limits)
    out = claimed
    delivered: list[int] = []
    left = budget - len(claimed) if budget else 0
    if not budget or left > 0:
        last = s.last_live_id() if s.length else None
        if last is not None and last > g.last_id and limits is not None:
            # Only as many new entries as the limits let in (a read-only look first: a '>'
            # read delivers what it returns).
            look = s.range_reply(g.last_id + 1, MAX_ID, left)
            left = limits.take([[e[0], e[1], 0, 0] for e in look])
            if not left:
                last = None
        if last is not None and last > g.last_id:
            consumer = s7.group_consumer(ctx, key, g, r.consumer, now)
            fresh = s7.read_group_new(ctx, s, g, consumer, left, r.noack, delivered)
            out = claimed + [[e[0], e[1], 0, 0] for e in fresh]
    if logged and out:
        if claimed_sids:
            if created:
                ctx.propagate([b"XGROUP", b"CREATECONSUMER", key, g.name, r.consumer])
            s7.log_claims(ctx, key, g, r.consumer, claimed_sids, False)
        if len(out) > len(claimed):
            s7.log_group_read(
                ctx, key, g, r.consumer, created and not claimed_sids, delivered, last_before
            )
    return out


def _claim_idle_for(
    ctx: Ctx,
    key: bytes,
    s: Stream,
    g: ConsumerGroup,
    r: _ReadArgs,
    minidle: int,
    budget: int,
    now: int,
    limits: ReadLimits | None = None,
) -> tuple[list[Any], list[int]]:
    # The group's pending entries idle >= minidle, longest idle first (an entry XNACK
    # released has delivery time 0, so it comes first), claimed for the consumer: each
    # [id, fields, idle, deliveries before]. Deleted entries are skipped and stay pending as
    # they are. ``budget`` 0 = no limit.
    candidates = [
        (pe.delivery_time, sid) for sid, pe in g.pel.items() if now - pe.delivery_time >= minidle
    ]
    if not candidates:
        return [], []
    candidates.sort()
    out: list[Any] = []
    sids: list[int] = []
    consumer = None
    for when, sid in candidates:
        if budget and len(out) >= budget:
            break
        fv = s.get(sid)
        if fv is None:
            continue
        pe: PendingEntry = g.pel[sid]
        before = pe.delivery_count
        if limits is not None and not limits.fits([format_id(sid), fv, max(now - when, 0), before]):
            break
        if consumer is None:
            consumer = s7.group_consumer(ctx, key, g, r.consumer, now)
        g.transfer(sid, pe, consumer)
        pe.delivery_time = now
        # FATAL set the count to LLONG_MAX: it stays there.
        pe.delivery_count = before + 1 if before < LLONG_MAX else LLONG_MAX
        out.append([format_id(sid), fv, max(now - when, 0), before])
        sids.append(sid)
    return out, sids


def _xreadgroup_claim(
    ctx: Ctx,
    args: list[bytes],
    minidle: int | None,
    limits: tuple[int, int] | None = None,
) -> Reply | Blocked:
    # XREADGROUP with CLAIM (``minidle``), MAXCOUNT / MAXSIZE (``limits``), or both.
    r = _parse_read(ctx, args)
    if limits is not None and limits[0] and r.count > limits[0]:
        raise CommandError(msgs.READ_MAXCOUNT_BELOW_COUNT)
    left = ReadLimits(*limits) if limits is not None else None
    db = ctx.db
    streams: list[tuple[bytes, Stream | None, ConsumerGroup, int]] = []
    for key, idarg in zip(r.keys, r.idargs, strict=True):
        s = db.get_typed(key, Stream)
        g = None if s is None else s.groups.get(r.group)
        if g is None:
            raise CommandError(msgs.xreadgroup_nogroup(s7.arg_text(key), s7.arg_text(r.group)))
        if idarg == b"$":
            raise CommandError(msgs.XREADGROUP_DOLLAR)
        gt = MAX_ID if idarg == b">" else s7.strict_id(idarg)
        streams.append((key, s, g, gt))
    budget = r.count
    served: list[tuple[bytes, list[Any]]] = []
    for key, s, g, gt in streams:
        assert s is not None
        if gt != MAX_ID:
            # CLAIM is ignored for a history read: the consumer's own pending entries, read
            # and logged as 7.0 reads and logs them.
            entries = _read_history(ctx, key, s, g, r, gt, left)
            if entries is not None:
                served.append((key, entries))
            continue
        if minidle is None:
            entries = _read_new(ctx, key, s, g, r, left)
            if entries:
                served.append((key, entries))
            continue
        if r.count and budget <= 0:
            continue
        entries = _serve_claim_stream(ctx, key, s, g, r, minidle, budget if r.count else 0, left)
        if entries:
            served.append((key, entries))
            budget -= len(entries)
    ctx.no_propagate()
    ctx.changed(len(served))
    if served:
        return s7.streams_reply(ctx, served, False)
    if r.timeout == -1:
        return NULL_ARRAY
    waits: dict[bytes, int] = {}
    for key, _, _, gt in streams:
        waits.setdefault(key, gt)
    waiter = _ClaimWaiter(waits, r, minidle, limits)
    return ctx.block(list(waits), r.timeout, on_ready=waiter, on_timeout_reply=NULL_ARRAY)


def _read_history(
    ctx: Ctx,
    key: bytes,
    s: Stream,
    g: ConsumerGroup,
    r: _ReadArgs,
    gt: int,
    limits: ReadLimits | None,
) -> list[Any] | None:
    # A history read as 7.0 reads and logs it, cut to the limits; None when the limits left
    # no room for any of the entries it has (the stream is then left out of the reply).
    count = r.count
    if limits is not None:
        known = g.consumers.get(r.consumer)
        look: list[Any] = []
        if known is not None:
            for sid in known.pel.irange(gt + 1):
                if count and len(look) >= count:
                    break
                fv = s.get(sid)
                look.append([format_id(sid), NULL_ARRAY if fv is None else fv])
        fit = limits.take(look)
        if look and not fit:
            return None
        count = fit or count
    logged = ctx.propagating
    created = logged and r.consumer not in g.consumers
    last_before = g.last_id
    delivered: list[int] | None = [] if logged else None
    consumer = s7.group_consumer(ctx, key, g, r.consumer, ctx.engine.clock())
    entries = s7.read_group_history(ctx, s, consumer, gt + 1, count, delivered)
    if delivered is not None:
        s7.log_group_read(ctx, key, g, r.consumer, created, delivered, last_before)
    return entries


def _read_new(
    ctx: Ctx,
    key: bytes,
    s: Stream,
    g: ConsumerGroup,
    r: _ReadArgs,
    limits: ReadLimits | None,
) -> list[Any]:
    # A '>' read as 7.0 reads and logs it (COUNT per stream), cut to the limits.
    last = s.last_live_id() if s.length else None
    if last is None or last <= g.last_id:
        return []
    count = r.count
    if limits is not None:
        count = limits.take(s.range_reply(g.last_id + 1, MAX_ID, count))
        if not count:
            return []
    logged = ctx.propagating
    created = logged and r.consumer not in g.consumers
    last_before = g.last_id
    delivered: list[int] | None = [] if logged else None
    consumer = s7.group_consumer(ctx, key, g, r.consumer, ctx.engine.clock())
    entries = s7.read_group_new(ctx, s, g, consumer, count, r.noack, delivered)
    if delivered is not None:
        s7.log_group_read(ctx, key, g, r.consumer, created, delivered, last_before)
    return entries


class _ClaimWaiter(s7.Waiter):
    """A blocked XREADGROUP with CLAIM or read limits, served when new entries arrive (with
    the entries that became idle enough meanwhile, claimed first). Known difference: Redis
    also wakes a CLAIM read when a pending entry ages past min-idle-time; the engine waits
    for an XADD."""

    __slots__ = ("limits", "minidle", "read")

    def __init__(
        self,
        waits: dict[bytes, int],
        r: _ReadArgs,
        minidle: int | None,
        limits: tuple[int, int] | None,
    ) -> None:
        count = r.count or s7.XREAD_BLOCKED_DEFAULT_COUNT
        super().__init__(waits, r.group, r.consumer, r.noack, count)
        self.read = r
        self.minidle = minidle
        self.limits = limits

    def _serve(self, ctx: Ctx, key: bytes) -> Reply | None:
        value = ctx.db.get(key)
        if type(value) is not Stream:
            return CommandError(msgs.UNBLOCKED_STREAM_DELETED)
        g = value.groups.get(self.read.group)
        if g is None:
            return CommandError(msgs.NOGROUP_BLOCKED_GROUP_DESTROYED)
        if value.last_id <= g.last_id:
            return None
        left = ReadLimits(*self.limits) if self.limits is not None else None
        if self.minidle is None:
            r = self.read
            if not r.count:
                r = r.copy_with_count(self.count)
            entries = _read_new(ctx, key, value, g, r, left)
        else:
            entries = _serve_claim_stream(
                ctx, key, value, g, self.read, self.minidle, self.count, left
            )
        ctx.changed(0)
        if not entries:
            return None
        return s7.streams_reply(ctx, [(key, entries)], False)


# --- MAXCOUNT and MAXSIZE (8.10) ----------------------------------------------------------


class ReadLimits:
    """What is left of one read's ``MAXCOUNT`` (entries in the whole reply, over all its
    streams) and ``MAXSIZE`` (bytes of the reply's entries as RESP2 writes them: ID, fields,
    and for CLAIM the two integers, with their framing); 0 = no such limit.

    Entries are offered in reply order. One that would pass a limit is refused, and so is
    everything after it: the reply has no gaps. The first entry of a reply is always taken,
    however large (the XREADGROUP page's "soft cap": a single entry larger than MAXSIZE is
    still returned, else such an entry would stall its readers for good)."""

    __slots__ = ("count", "full", "size", "taken")

    def __init__(self, maxcount: int, maxsize: int) -> None:
        self.count = maxcount
        self.size = maxsize
        self.taken = 0
        self.full = False

    def fits(self, entry: list[Any]) -> bool:
        """Take ``entry`` (the next of the reply) if the limits let it in."""
        if self.full or (self.count and self.taken >= self.count):
            self.full = True
            return False
        if self.size:
            need = len(encode(entry, 2))
            if self.taken and need > self.size:
                self.full = True
                return False
            self.size = max(self.size - need, 0) or -1  # -1: spent (0 means no limit)
        self.taken += 1
        return True

    def take(self, entries: list[Any]) -> int:
        """How many of ``entries`` (the next ones of the reply, in order) the limits let in."""
        n = 0
        for entry in entries:
            if not self.fits(entry):
                break
            n += 1
        return n


def _read_limits(args: list[bytes]) -> tuple[tuple[int, int] | None, list[bytes]]:
    # MAXCOUNT and MAXSIZE (0 = not given) and the arguments without them. Values: positive
    # integers.
    found, rest = _take_options(args, (b"maxcount", b"maxsize"))
    if not found:
        return None, args
    limits = []
    for word, text in ((b"maxcount", msgs.READ_MAXCOUNT), (b"maxsize", msgs.READ_MAXSIZE)):
        value = parse_ll(found[word]) if word in found else 0
        if value is None or (word in found and value < 1):
            raise CommandError(text)
        limits.append(value)
    return (limits[0], limits[1]), rest


@_r8(READ_LIMITS_SINCE, "xreadgroup", -7, ("write", "blocking", "movablekeys"), first_key=0)
def xreadgroup_limited(ctx: Ctx, args: list[bytes]) -> Reply | Blocked:
    """XREADGROUP ... [COUNT n] [MAXCOUNT m] [MAXSIZE bytes] [BLOCK ms] [CLAIM min-idle-time]
    [NOACK] STREAMS ...: 8.4's XREADGROUP, its reply cut to at most ``m`` entries over all its
    streams and to about ``bytes`` (:class:`ReadLimits`), before anything is delivered: an
    entry left out stays where it was (new, or pending with its owner). MAXCOUNT below COUNT
    is refused (https://redis.io/docs/latest/commands/xreadgroup/)."""
    limits, rest = _read_limits(args)
    if limits is None:
        return xreadgroup(ctx, args)
    value, rest = _claim_option(rest)
    minidle = None
    if value is not None:
        minidle = to_int(value, msgs.XREADGROUP_CLAIM_MIN_IDLE)
        if minidle < 0:
            raise CommandError(msgs.XREADGROUP_CLAIM_MIN_IDLE)
    return _xreadgroup_claim(ctx, rest, minidle, limits)


@_r8(READ_LIMITS_SINCE, "xread", -4, ("readonly", "blocking", "movablekeys"), first_key=0)
def xread_limited(ctx: Ctx, args: list[bytes]) -> Reply | Blocked:
    """XREAD [COUNT n] [MAXCOUNT m] [MAXSIZE bytes] [BLOCK ms] STREAMS ...: 7.0's XREAD, its
    reply (at once, or when a blocked read is served) cut to the limits
    (https://redis.io/docs/latest/commands/xread/). XREAD changes nothing, so the cut can
    come after the read."""
    limits, rest = _read_limits(args)
    if limits is None:
        return s7.xread(ctx, args)
    count = _last_count(rest)
    if limits[0] and count is not None and count > limits[0]:
        raise CommandError(msgs.READ_MAXCOUNT_BELOW_COUNT)
    reply = s7.xread(ctx, rest)
    if isinstance(reply, Blocked):
        served = reply.on_ready

        def cut_when_served(ctx: Ctx) -> Reply | None:
            got = served(ctx)
            return None if got is None else _cut_reply(got, limits)

        reply.on_ready = cut_when_served
        return reply
    return _cut_reply(reply, limits)


def _last_count(args: list[bytes]) -> int | None:
    # XREAD's COUNT, as its parser will read it (the last one before STREAMS).
    count = None
    for i in range(len(args) - 1):
        word = args[i].lower()
        if word == b"streams":
            break
        if word == b"count":
            count = parse_ll(args[i + 1])
    return count


def _cut_reply(reply: Reply, limits: tuple[int, int]) -> Reply:
    # An XREAD reply (RESP2 list of [key, entries], or a RESP3 Map) cut to the limits.
    left = ReadLimits(*limits)
    if isinstance(reply, Map):
        pairs = [(k, v) for k, v in reply.items]
    elif isinstance(reply, list):
        pairs = [(k, v) for k, v in reply]
    else:
        return reply
    kept: list[tuple[Any, Any]] = []
    for key, entries in pairs:
        assert isinstance(entries, list)
        n = left.take(entries)
        if n:
            kept.append((key, entries[:n]))
    if isinstance(reply, Map):
        return Map(kept, reply.plain)
    return [[k, v] for k, v in kept]


# --- XNACK and XPENDING (8.8) -------------------------------------------------------------

_SILENT: Final = 0
_FAIL: Final = 1
_FATAL: Final = 2
_MODES: Final = {b"silent": _SILENT, b"fail": _FAIL, b"fatal": _FATAL}


@_r8(XNACK_SINCE, "xnack", -7, ("write", "fast"))
def xnack(ctx: Ctx, args: list[bytes]) -> Reply:
    """XNACK key group SILENT|FAIL|FATAL IDS numids id [id ...] [RETRYCOUNT count] [FORCE] ->
    how many pending entries were released.

    A released entry stays in the group PEL with no owner and delivery time 0 (so any claim
    takes it first, whatever its min-idle-time); its delivery count goes down by one
    (SILENT), stays (FAIL) or becomes LLONG_MAX (FATAL), or is RETRYCOUNT when given. IDs not
    pending are ignored, unless FORCE: then an ID the stream has gets a new unowned entry
    with count 0 (RETRYCOUNT, or LLONG_MAX for FATAL)."""
    mode = -1
    retrycount = -1
    force = False
    raw: list[bytes] | None = None
    n = len(args)
    i = 2
    while i < n:
        word = args[i].lower()
        if word in _MODES:
            mode = _MODES[word]
            i += 1
        elif word == b"ids" and i + 1 < n and raw is None:
            numids = parse_ll(args[i + 1])
            if numids is None or numids <= 0:
                raise CommandError(msgs.IDS_NUMIDS)
            if numids > n - i - 2:
                raise CommandError(msgs.IDS_NUMIDS_MISMATCH)
            raw = args[i + 2 : i + 2 + numids]
            i += 2 + numids
        elif word == b"retrycount" and i + 1 < n:
            retrycount = to_int(args[i + 1], msgs.XNACK_RETRYCOUNT)
            if retrycount < 0:
                raise CommandError(msgs.XNACK_RETRYCOUNT)
            i += 2
        elif word == b"force":
            force = True
            i += 1
        else:
            raise CommandError(msgs.SYNTAX)
    if mode < 0:
        raise CommandError(msgs.XNACK_MODE_MISSING)
    if raw is None:
        raise CommandError(msgs.SYNTAX)
    sids = [s7.strict_id(a) for a in raw]
    s = s7.get_stream(ctx, args[0])
    g = None if s is None else s.groups.get(args[1])
    if s is None or g is None:
        raise CommandError(msgs.nogroup_key_or_group(s7.arg_text(args[0]), s7.arg_text(args[1])))
    released = 0
    for sid in sids:
        pe = g.pel.get(sid)
        if pe is None:
            if not force or not s.exists(sid):
                continue
            start = LLONG_MAX if mode == _FATAL else 0
            pe = PendingEntry(None, 0, retrycount if retrycount >= 0 else start)
            g.pel.add(sid, pe)
            released += 1
            continue
        owner = pe.consumer
        if owner is not None:
            owner.pel.pop(sid)
            pe.consumer = None
        pe.delivery_time = 0
        if retrycount >= 0:
            pe.delivery_count = retrycount
        elif mode == _SILENT:
            pe.delivery_count = max(pe.delivery_count - 1, 0)
        elif mode == _FATAL:
            pe.delivery_count = LLONG_MAX
        released += 1
    ctx.changed(released)
    if not released:
        ctx.no_propagate()
    return released


@_r8(XNACK_SINCE, "xpending", -3, ("readonly",))
def xpending(ctx: Ctx, args: list[bytes]) -> Reply:
    """XPENDING key group [[IDLE min-idle] start end count [consumer]] -> as in 7.0, except
    that an entry XNACK released (no owner, delivery time 0) shows an idle time of -1 and an
    empty consumer name, as the XNACK page's example shows."""
    reply = s7.xpending(ctx, args)
    if len(args) <= 2 or not isinstance(reply, list) or not reply:
        return reply
    s = s7.get_stream(ctx, args[0])
    g = None if s is None else s.groups.get(args[1])
    if g is None:
        return reply
    for row in reply:
        pe = g.pel.get(s7.strict_id(row[0]))
        if pe is not None and pe.consumer is None and pe.delivery_time == 0:
            row[2] = -1
    return reply


# --- XADD IDMP / IDMPAUTO, XCFGSET, XINFO STREAM's IDMP fields (8.6) ----------------------


@_r8(IDMP_SINCE, "xadd", -5, ("write", "denyoom", "fast"))
def xadd_idmp(ctx: Ctx, args: list[bytes]) -> Reply:
    """XADD key [NOMKSTREAM] [KEEPREF|DELREF|ACKED] [IDMP pid iid | IDMPAUTO pid] [MAXLEN|MINID
    [=|~] threshold [LIMIT count]] *|id field value [...] -> the new entry's ID, or, for a
    (pid, iid) the stream still remembers, the ID that pair produced, adding nothing
    (https://redis.io/docs/latest/develop/data-types/streams/idempotency/). IDMPAUTO's iid
    is a digest of the field-value pairs. The map does not follow the entries: after XDEL
    the iid still answers with the deleted entry's ID until it expires."""
    if args[1] == b"*":
        return s7.xadd(ctx, args)
    p = _parse_add_trim(ctx, args, True, 2)
    pid = p.idmp_pid
    if pid is None:
        return s7.xadd(ctx, args, p)
    fields = args[p.idpos + 1 :]
    if len(fields) < 2 or len(fields) & 1:
        raise CommandError(msgs.wrong_arity("xadd"))
    iid = p.idmp_iid if p.idmp_iid is not None else content_iid(fields)
    now = ctx.engine.clock()
    s = s7.get_stream(ctx, args[0])
    if s is not None and s.idmp is not None:
        s.idmp.expire(now)
        hit = s.idmp.lookup(pid, iid)
        if hit is not None:
            # A retry: the original ID, nothing added, nothing logged.
            s.idmp.iids_duplicates += 1
            ctx.changed(0)
            ctx.no_propagate()
            return format_id(hit)
    reply = s7.xadd(ctx, args, p)
    if not isinstance(reply, bytes):
        return reply  # NOMKSTREAM on a missing key
    s = s7.get_stream(ctx, args[0])
    assert s is not None
    if s.idmp is None:
        s.idmp = IdmpState()
    s.idmp.record(pid, iid, s7.strict_id(reply), now)
    return reply


def _idmp_setting(arg: bytes, hi: int, text: str) -> int:
    value = parse_ll(arg)
    if value is None or not 1 <= value <= hi:
        raise CommandError(text)
    return value


@_r8(IDMP_SINCE, "xcfgset", -2, ("write", "fast"))
def xcfgset(ctx: Ctx, args: list[bytes]) -> Reply:
    """XCFGSET key [IDMP-DURATION seconds] [IDMP-MAXSIZE n] -> OK
    (https://redis.io/docs/latest/commands/xcfgset/): duration 1..86400 s, maxsize 1..10000
    iids per producer, at least one of them; the stream must exist. A changed setting
    forgets every iid of the stream."""
    duration: int | None = None
    maxsize: int | None = None
    n = len(args)
    i = 1
    while i < n:
        word = args[i].lower()
        if word == b"idmp-duration" and i + 1 < n:
            duration = _idmp_setting(args[i + 1], 86_400, msgs.XCFGSET_DURATION)
        elif word == b"idmp-maxsize" and i + 1 < n:
            maxsize = _idmp_setting(args[i + 1], 10_000, msgs.XCFGSET_MAXSIZE)
        else:
            raise CommandError(msgs.SYNTAX)
        i += 2
    if duration is None and maxsize is None:
        raise CommandError(msgs.SYNTAX)
    s = s7.get_stream(ctx, args[0])
    if s is None:
        raise CommandError(msgs.NO_SUCH_KEY)
    if s.idmp is None:
        s.idmp = IdmpState()
    s.idmp.configure(duration, maxsize)
    return OK


@_r8(IDMP_SINCE, "xinfo|stream", -3, ("readonly",), first_key=2)
def xinfo_stream(ctx: Ctx, args: list[bytes]) -> Reply:
    """XINFO STREAM key [FULL [COUNT n]] -> 7.0's description, and for a stream that uses
    idempotent production the idempotency page's fields at the end: idmp-duration,
    idmp-maxsize, pids-tracked, iids-tracked, iids-added, iids-duplicates."""
    reply = s7.xinfo_stream(ctx, args)
    s = s7.get_stream(ctx, args[0])
    if s is None or s.idmp is None or not isinstance(reply, Map):
        return reply
    st = s.idmp
    st.expire(ctx.engine.clock())
    reply.items += [
        (b"idmp-duration", st.duration_s),
        (b"idmp-maxsize", st.maxsize),
        (b"pids-tracked", len(st.producers)),
        (b"iids-tracked", st.iids_tracked),
        (b"iids-added", st.iids_added),
        (b"iids-duplicates", st.iids_duplicates),
    ]
    return reply


# --- COMMAND DOCS arguments ---------------------------------------------------------------

# The option tokens of the stream commands that 8.x extends, with the version each came in, as
# their redis.io pages list them: an 8.x engine's COMMAND DOCS gives them as ``arguments``, so
# that a client can ask the server for an option (CLAIM, IDMP, MAXCOUNT) by its docs rather
# than by the version string. (The 7.0 engine's COMMAND DOCS is unchanged: summary and since.)
_ARGUMENTS: Final[dict[str, tuple[tuple[str, str], ...]]] = {
    "xadd": (
        ("NOMKSTREAM", "6.2.0"),
        ("KEEPREF", "8.2.0"),
        ("DELREF", "8.2.0"),
        ("ACKED", "8.2.0"),
        ("IDMPAUTO", "8.6.0"),
        ("IDMP", "8.6.0"),
        ("MAXLEN", "5.0.0"),
        ("MINID", "6.2.0"),
        ("LIMIT", "6.2.0"),
    ),
    "xtrim": (
        ("MAXLEN", "5.0.0"),
        ("MINID", "6.2.0"),
        ("LIMIT", "6.2.0"),
        ("KEEPREF", "8.2.0"),
        ("DELREF", "8.2.0"),
        ("ACKED", "8.2.0"),
    ),
    "xread": (
        ("COUNT", "5.0.0"),
        ("MAXCOUNT", "8.10.0"),
        ("MAXSIZE", "8.10.0"),
        ("BLOCK", "5.0.0"),
        ("STREAMS", "5.0.0"),
    ),
    "xreadgroup": (
        ("GROUP", "5.0.0"),
        ("COUNT", "5.0.0"),
        ("MAXCOUNT", "8.10.0"),
        ("MAXSIZE", "8.10.0"),
        ("BLOCK", "5.0.0"),
        ("CLAIM", "8.4.0"),
        ("NOACK", "5.0.0"),
        ("STREAMS", "5.0.0"),
    ),
}


def docs_arguments(name: str, version: RedisVersion) -> list[Map] | None:
    """COMMAND DOCS ``arguments`` of ``name`` for an 8.x engine answering as ``version``: the
    option tokens it accepts (none newer than ``version``), or None for a command not listed."""
    tokens = _ARGUMENTS.get(name)
    if tokens is None:
        return None
    out: list[Map] = []
    for token, since in tokens:
        major, minor = (int(p) for p in since.split(".")[:2])
        if not version.at_least((major, minor)):
            continue
        out.append(
            Map(
                [
                    (b"name", token.lower().encode()),
                    (b"type", b"pure-token"),
                    (b"token", token.encode()),
                    (b"since", since.encode()),
                ]
            )
        )
    return out
