"""The pure half of the append-only file: how a record is encoded (with its ``#C`` checksum) and
the records that rebuild a keyspace, as compaction (BGREWRITEAOF) writes them.

No I/O here: :mod:`.aof` owns the file (opening, appending, fsync policies, loading, and writing
the rewrite to disk in a forked child).
"""

from __future__ import annotations

import heapq
import zlib
from collections import deque
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from streamworker.engine.functions import rewrite_commands
from streamworker.engine.ids import MAX_ID, format_id
from streamworker.engine.model.idmp import DEFAULT_DURATION_S, DEFAULT_MAXSIZE
from streamworker.engine.model.stream import Stream
from streamworker.engine.model.zset import ZSet
from streamworker.engine.replies import format_double
from streamworker.engine.versions import XNACK_SINCE

if TYPE_CHECKING:
    from streamworker.engine.core import Engine
    from streamworker.engine.model.stream import ConsumerGroup, Stream

__all__ = ["RewriteItem", "checked", "encode_record", "rewrite_records", "select_record"]

# A history read past every possible ID: serves nothing, but refreshes (or creates) the
# consumer's seen-time at the record's clock. Valid Redis 7.0, and the only way to log a
# seen-time refresh that nothing else carries.
# (MAX-MAX itself would mean '>', new entries.)
_TOUCH_ID = format_id(MAX_ID - 1)
_ITEMS_PER_CMD = 64  # Redis's AOF_REWRITE_ITEMS_PER_CMD


# --- encoding --------------------------------------------------------------------------------


def encode_record(out: bytearray, argv: Sequence[bytes]) -> None:
    """Append ``argv`` as a RESP array of bulk strings, preceded by its ``#C`` checksum."""
    rec = bytearray(b"*%d\r\n" % len(argv))
    for arg in argv:
        rec += b"$%d\r\n%b\r\n" % (len(arg), arg)
    out += b"#C:%08x\r\n" % zlib.crc32(rec)
    out += rec


def checked(record: bytes) -> bytes:
    """An encoded record preceded by its ``#C`` checksum line."""
    return b"#C:%08x\r\n%b" % (zlib.crc32(record), record)


def select_record(db: int) -> bytes:
    """``SELECT db`` as a checked record."""
    n = b"%d" % db
    return checked(b"*2\r\n$6\r\nSELECT\r\n$%d\r\n%s\r\n" % (len(n), n))


# --- the rewrite -------------------------------------------------------------------------------

RewriteItem = bytes | list[bytes]
"""What :func:`rewrite_records` yields: raw bytes (annotations, SELECT) or a record's argv."""


def rewrite_records(engine: Engine, now_ms: int) -> Iterator[RewriteItem]:
    """The records that rebuild ``engine``'s current state (live keys only), with ``#T``
    annotations where the clock matters. Call with the engine lock held."""
    yield b"#T:%d\r\n" % now_ms
    # Functions first, as Redis's rewrite writes them: one FUNCTION LOAD per library.

    yield from rewrite_commands(engine)
    # Unowned pending entries (what XNACK leaves) are rewritten as XNACK ... FORCE, which only
    # an engine with XNACK replays.
    nack = engine.version.at_least(XNACK_SINCE)
    for db in engine.keyspace.dbs:
        if not db.data:
            continue
        yield select_record(db.index)
        expires = db.expires
        for key, value in db.iter_items():
            if type(value) is bytes:
                yield [b"SET", key, value]
            elif isinstance(value, Stream):
                yield from _rewrite_stream(key, value, now_ms, nack)
            elif isinstance(value, dict):
                yield from _batched(b"HSET", key, [x for kv in value.items() for x in kv], 2)
            elif isinstance(value, set):
                yield from _batched(b"SADD", key, list(value), 1)
            elif isinstance(value, ZSet):
                items = [x for score, member in value for x in (format_double(score), member)]
                yield from _batched(b"ZADD", key, items, 2)
            elif isinstance(value, deque):
                yield from _batched(b"RPUSH", key, list(value), 1)
            else:
                raise TypeError(f"cannot persist a {type(value).__name__} value")
            when = expires.get(key)
            if when is not None:
                yield [b"PEXPIREAT", key, b"%d" % when]


def _batched(cmd: bytes, key: bytes, items: list[Any], per: int) -> Iterator[list[bytes]]:
    step = _ITEMS_PER_CMD * per
    for i in range(0, len(items), step):
        yield [cmd, key, *items[i : i + step]]


def _idmp_tags(key: bytes, s: Stream, now_ms: int) -> Iterator[RewriteItem]:
    # Before the entries of a stream with an IDMP map (8.6): its settings, when they are not
    # the defaults. XCFGSET needs the stream, which a group created with MKSTREAM and
    # destroyed at once provides without touching its IDs or counters (no group exists yet).
    st = s.idmp
    assert st is not None
    if (st.duration_s, st.maxsize) != (DEFAULT_DURATION_S, DEFAULT_MAXSIZE):
        tmp = b"streamworker:rewrite"
        yield [b"XGROUP", b"CREATE", key, tmp, b"0", b"MKSTREAM"]
        yield [
            b"XCFGSET",
            key,
            b"IDMP-DURATION",
            b"%d" % st.duration_s,
            b"IDMP-MAXSIZE",
            b"%d" % st.maxsize,
        ]
        yield [b"XGROUP", b"DESTROY", key, tmp]


def _rewrite_stream(key: bytes, s: Stream, now_ms: int, nack: bool) -> Iterator[RewriteItem]:
    live = s.range(0, MAX_ID)
    # Entries still pending although deleted from the stream: re-added for the XCLAIM that
    # restores them, then deleted again (Redis's own rewrite loses them).
    gone = {sid for g in s.groups.values() for sid in g.pel if not s.exists(sid)}
    # The IDMP map (8.6): each remembered iid rides on the XADD of the entry it produced,
    # run at the time it was first added; deleted entries it still names are re-added and
    # deleted like the phantoms above.
    tags: dict[int, tuple[bytes, bytes, int]] = {}
    if s.idmp is not None:
        s.idmp.expire(now_ms)
        yield from _idmp_tags(key, s, now_ms)
        for pid, iids in s.idmp.producers.items():
            for iid, (sid, added_ms) in iids.items():
                tags[sid] = (pid, iid, added_ms)
                if not s.exists(sid):
                    gone.add(sid)
    phantoms = sorted(gone)
    if not live and not phantoms:
        yield [b"XADD", key, b"MAXLEN", b"0", b"0-1", b"x", b"y"]
    else:
        merged = heapq.merge(((sid, fv) for sid, fv in live), ((sid, None) for sid in phantoms))
        for sid, fv in merged:
            body = fv if fv is not None else (b"", b"")
            tag = tags.get(sid)
            if tag is None:
                yield [b"XADD", key, format_id(sid), *body]
                continue
            pid, iid, added_ms = tag
            yield b"#T:%d\r\n" % added_ms
            yield [b"XADD", key, b"IDMP", pid, iid, format_id(sid), *body]
        if tags:
            yield b"#T:%d\r\n" % now_ms
    for g in s.sorted_groups():
        yield from _rewrite_group(key, g, now_ms)
        if nack:
            yield from _rewrite_unowned(key, g)
    if phantoms:
        first_live = live[0][0] if live else None
        head = [sid for sid in phantoms if first_live is None or sid < first_live]
        middle = [sid for sid in phantoms if first_live is not None and sid > first_live]
        if head:
            if first_live is None:
                yield [b"XTRIM", key, b"MAXLEN", b"0"]
            else:
                yield [b"XTRIM", key, b"MINID", format_id(first_live)]
        for i in range(0, len(middle), _ITEMS_PER_CMD):
            yield [b"XDEL", key, *(format_id(sid) for sid in middle[i : i + _ITEMS_PER_CMD])]
    last = format_id(s.last_id)
    added = b"%d" % s.entries_added
    mdel = s.max_deleted_id
    if mdel > s.last_id:
        # XSETID refuses a last ID below MAXDELETEDID; 7.0 lets an emptied stream's last ID
        # go back below it, so set both in two steps.
        yield [
            b"XSETID",
            key,
            format_id(mdel),
            b"ENTRIESADDED",
            added,
            b"MAXDELETEDID",
            format_id(mdel),
        ]
        yield [b"XSETID", key, last]
    else:
        yield [b"XSETID", key, last, b"ENTRIESADDED", added, b"MAXDELETEDID", format_id(mdel)]


def _rewrite_unowned(key: bytes, g: ConsumerGroup) -> Iterator[RewriteItem]:
    # Pending entries with no owner: one XNACK ... FORCE per delivery count, which creates
    # them unowned with delivery time 0 and that count (the XNACK page: FORCE "is primarily
    # used internally for AOF rewrite and replication").
    batches: dict[int, list[bytes]] = {}
    for sid, pe in g.pel.items():
        if pe.consumer is None:
            batches.setdefault(pe.delivery_count, []).append(format_id(sid))
    for count, ids in sorted(batches.items()):
        for i in range(0, len(ids), _ITEMS_PER_CMD):
            chunk = ids[i : i + _ITEMS_PER_CMD]
            yield [
                b"XNACK",
                key,
                g.name,
                b"FAIL",
                b"IDS",
                b"%d" % len(chunk),
                *chunk,
                b"RETRYCOUNT",
                b"%d" % count,
                b"FORCE",
            ]


def _rewrite_group(key: bytes, g: ConsumerGroup, now_ms: int) -> Iterator[RewriteItem]:
    yield [
        b"XGROUP",
        b"CREATE",
        key,
        g.name,
        format_id(g.last_id),
        b"ENTRIESREAD",
        b"%d" % g.entries_read,
    ]
    for c in g.sorted_consumers():
        seen = c.seen_time
        yield b"#T:%d\r\n" % seen
        yield [b"XGROUP", b"CREATECONSUMER", key, g.name, c.name]
        # One XCLAIM per (delivery time, count): a batch read shares both. XCLAIM clamps a
        # delivery time later than the clock to the clock, so such entries are claimed at a
        # clock of their own, and the consumer's seen-time is set again afterwards.
        batches: dict[tuple[int, int], list[bytes]] = {}
        for sid, pe in c.pel.items():
            batches.setdefault((pe.delivery_time, pe.delivery_count), []).append(format_id(sid))
        late = False
        for (when, count), ids in sorted(batches.items()):
            if when > seen:
                yield b"#T:%d\r\n" % when
                late = True
            for i in range(0, len(ids), _ITEMS_PER_CMD):
                yield [
                    b"XCLAIM",
                    key,
                    g.name,
                    c.name,
                    b"0",
                    *ids[i : i + _ITEMS_PER_CMD],
                    b"TIME",
                    b"%d" % when,
                    b"RETRYCOUNT",
                    b"%d" % count,
                    b"FORCE",
                    b"JUSTID",
                ]
        if late:
            yield b"#T:%d\r\n" % seen
            yield [b"XREADGROUP", b"GROUP", g.name, c.name, b"STREAMS", key, _TOUCH_ID]
    yield b"#T:%d\r\n" % now_ms
