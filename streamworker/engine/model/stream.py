"""The stream data structure: Redis 7.0's radix tree of listpack nodes, in compact Python.

No RESP, no argument parsing: :mod:`streamworker.engine.commands.streams` turns commands into
calls on these classes. Stream IDs are packed ints (:mod:`streamworker.engine.ids`).

Layout (why it looks like this)
-------------------------------
Entries live in :class:`StreamNode` objects that play the role of Redis's listpacks, so that the
node-level behaviour Redis exposes is reproduced exactly: ``XINFO STREAM``'s
``radix-tree-keys``, approximate trimming (``~``/``LIMIT`` drop whole nodes from the head), and
tombstones (exact trimming and ``XDEL`` only flag entries deleted inside a node; a node goes
away when its last live entry is deleted, or whole when trimming can drop it).

A node keeps, for memory (a million small entries must stay under ~250 bytes each):

* ``ms`` / ``seq``: two ``array('Q')`` with every entry's ID (live or deleted), 16 bytes/entry;
  the IDs inside a node are normally increasing, so a position is found by bisecting ``ms``
  and then ``seq`` among equal ``ms``.
* ``flags``: one byte per entry (deleted / same-fields-as-master / wide lengths).
* ``offs``: ``array('I')`` of each entry's offset in ``blob``.
* ``blob``: the entries' strings, length-prefixed. Like Redis's master entry, a node remembers
  the field names of its first entry; entries with exactly those names store only their
  values. Lengths are one byte each when every string of the entry is < 256 bytes, else four.
  The tail node's blob is a ``bytearray`` (appends are amortised O(1)); it becomes immutable
  ``bytes`` (no over-allocation) when a newer node opens.

Entries are decoded only when read (one ``struct`` unpack per entry, formats cached by the
entry's length bytes). Nodes are found by bisecting the list of their master IDs (the ID of the
first entry ever added to the node, as in Redis's rax keys).

Out-of-order IDs
----------------
XSETID may set the last ID back below a deleted entry (it only checks the last *live* entry),
after which new IDs can repeat or undercut older, deleted ones. Redis then answers reads by its
iterator's rules (seek the node by master ID, walk, skip tombstones and entries before the
range, stop at the first live entry past it). A stream tracks whether its IDs are still
strictly increasing in node order; while they are, lookups bisect; once they are not (until
the stream is emptied of nodes), reads, lookups and deletions replay those rules by scanning.

Node size accounting
--------------------
Redis opens a new node when the tail listpack has ``>= stream-node-max-entries`` entries
(live + deleted) or when ``lpBytes(tail) + sum(len(field) + len(value)) >= stream-node-max-bytes``.
``lp`` tracks the exact byte size Redis 7.0's listpack would have: the 6-byte header and end
byte, the master entry (count, deleted, number of fields, field names, a 0 terminator), and per
entry its flags, ms/seq deltas from the master ID, [number of fields and field names unless
they match the master], values and the trailing element count. Each element is sized with the
listpack encoding rules (strings that are canonical int64 decimals are stored as integers of
1/2/3/4/5/9 bytes; other strings take 1/2/5 header bytes; plus a 1-5 byte back-length). The
count and deleted counters are sized on demand since their encoding grows with their value. The
result matches Redis byte for byte for the listpacks streams build, so node boundaries (and
``radix-tree-keys``) match too.

Consumer groups keep pending-entries lists (:class:`PendingList`, ordered maps keyed by ID);
one :class:`PendingEntry` object sits in both the group PEL and the owning consumer's PEL, as
Redis's NACKs are shared between its two raxes.

Not thread-safe: the engine lock serializes access.
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterator, Sequence
from itertools import repeat
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Final

from streamworker.engine.ids import MASK64, MAX_ID, MAX_U64, parse_ll

if TYPE_CHECKING:
    from streamworker.engine.model.idmp import IdmpState

__all__ = [
    "INVALID_ENTRIES_READ",
    "Consumer",
    "ConsumerGroup",
    "Entry",
    "PendingEntry",
    "PendingList",
    "Stream",
    "StreamIDExhaustedError",
    "StreamIDTooSmallError",
    "StreamSeqOverflowError",
]

Entry = tuple[int, list[bytes]]
"""A stream entry: ``(id, [field1, value1, field2, value2, ...])``."""

INVALID_ENTRIES_READ: Final = -1
"""``SCG_INVALID_ENTRIES_READ``: a group's entries-read counter is unknown."""

_DELETED: Final = 1
_SAME: Final = 2
WIDE_INT: Final = 4

_LP_MAX_SIZE: Final = 1 << 30  # STREAM_LISTPACK_MAX_SIZE
_LP_HEADER_AND_END: Final = 7
_TWO64: Final = 1 << 64
# First bytes of strings lpStringToInt64 may accept: '-' and '0'..'9'.
_NUM_START: Final = frozenset(b"-0123456789")


class StreamIDTooSmallError(Exception):
    """XADD's ID is equal or smaller than the stream's last ID (Redis's EDOM)."""


class StreamIDExhaustedError(Exception):
    """The stream's last ID is the maximum: no further ID exists."""


class StreamSeqOverflowError(Exception):
    """``ms-*`` where the last ID is ``ms-18446744073709551615``: no sequence is left in that
    millisecond (Redis 7.0 fails this without setting errno; see the XADD command)."""


def lp_int(v: int) -> int:
    """Bytes of an integer listpack element: encoding + back-length (always 1 here)."""
    if 0 <= v <= 127:
        return 2
    if -4096 <= v <= 4095:
        return 3
    if -32768 <= v <= 32767:
        return 4
    if -8388608 <= v <= 8388607:
        return 5
    if -2147483648 <= v <= 2147483647:
        return 6
    return 10


def _backlen(n: int) -> int:
    if n <= 127:
        return 1
    if n < 16383:
        return 2
    if n < 2097151:
        return 3
    if n < 268435455:
        return 4
    return 5


def _lp_str(s: bytes) -> int:
    # Bytes of a string listpack element (integer-encoded when it is a canonical int64).
    n = len(s)
    if 0 < n < 21 and s[0] in _NUM_START:
        v = parse_ll(s)
        if v is not None:
            return lp_int(v)
    if n < 64:
        return n + 2
    enc = n + 2 if n < 4096 else n + 5
    return enc + _backlen(enc)


def _as_i64(v: int) -> int:
    # uint64 difference as the int64 lpAppendInteger receives.
    v &= MAX_U64
    return v - _TWO64 if v >= (1 << 63) else v


class StreamNode:
    """One listpack-like node (see the module docstring)."""

    __slots__ = (
        "blob",
        "fields",
        "flags",
        "ftot",
        "head",
        "live",
        "lp",
        "master",
        "ms",
        "offs",
        "seq",
    )

    def __init__(self, master: int, fields: list[bytes]) -> None:
        self.master = master
        self.fields = fields
        self.ftot = sum(map(len, fields))
        self.ms = array("Q")
        self.seq = array("Q")
        self.flags = bytearray()
        self.offs = array("I")
        self.blob: bytes | bytearray = bytearray()
        self.live = 0
        # Index of the first entry that may be live: every entry before it is deleted.
        self.head = 0
        lp = _LP_HEADER_AND_END + lp_int(len(fields)) + 2  # num-fields, ..., 0 terminator
        for f in fields:
            lp += _lp_str(f)
        self.lp = lp

    def lp_bytes(self) -> int:
        """The Redis listpack size of this node."""
        return self.lp + lp_int(self.live) + lp_int(len(self.ms) - self.live)

    def seal(self) -> None:
        """Drop the blob's over-allocation (the node stops being the tail)."""
        if type(self.blob) is bytearray:
            self.blob = bytes(self.blob)
            # Copies are allocated to size: the arrays stop carrying growth slack.
            self.ms = array("Q", self.ms)
            self.seq = array("Q", self.seq)
            self.offs = array("I", self.offs)
            self.flags = bytearray(self.flags)

    def id_at(self, i: int) -> int:
        """The ID of the entry at index ``i``."""
        return (self.ms[i] << 64) | self.seq[i]

    def last_id(self) -> int:
        """ID of the last entry, deleted or not."""
        return (self.ms[-1] << 64) | self.seq[-1]

    def index_ge(self, sid: int) -> int:
        """Index of the first entry with ID >= ``sid`` (may be ``len``)."""
        ms = self.ms
        tms = sid >> 64
        lo = bisect_left(ms, tms)
        hi = bisect_right(ms, tms, lo)
        return bisect_left(self.seq, sid & MASK64, lo, hi)

    def index_le(self, sid: int) -> int:
        """Index of the last entry with ID <= ``sid`` (may be -1)."""
        ms = self.ms
        tms = sid >> 64
        lo = bisect_left(ms, tms)
        hi = bisect_right(ms, tms, lo)
        return bisect_right(self.seq, sid & MASK64, lo, hi) - 1

    def index_of(self, sid: int) -> int:
        """Index of the entry ``sid`` (live or deleted), or -1."""
        ms = self.ms
        tms = sid >> 64
        tseq = sid & MASK64
        i = bisect_left(ms, tms)
        n = len(ms)
        if i == n or ms[i] != tms:
            return -1
        seq = self.seq
        if seq[i] < tseq:
            # Several entries share this millisecond: bisect the sequence among them.
            i = bisect_left(seq, tseq, i + 1, bisect_right(ms, tms, i + 1))
            if i == n or ms[i] != tms:
                return -1
        return i if seq[i] == tseq else -1

    def mark_deleted(self, i: int) -> None:
        """Flag entry ``i`` deleted (it must be live)."""
        self.flags[i] |= _DELETED
        self.live -= 1
        if i == self.head:
            flags = self.flags
            n = len(flags)
            h = i + 1
            while h < n and flags[h] & _DELETED:
                h += 1
            self.head = h

    def decode(self, i: int) -> list[bytes]:
        """The field/value list of entry ``i``."""
        blob = self.blob
        p = self.offs[i]
        fl = self.flags[i]
        if fl & _SAME:
            k = len(self.fields)
        else:
            k = int.from_bytes(blob[p : p + 4], "little")
            p += 4
        if fl & WIDE_INT:
            unpacker = _unpacker_wide(bytes(blob[p : p + 4 * k]))
            p += 4 * k
        else:
            lens = blob[p : p + k]
            if type(lens) is not bytes:  # the tail node's bytearray
                lens = bytes(lens)
            p += k
            unpacker = _UNPACKERS.get(lens) or _unpacker(lens)
        values: tuple[bytes, ...] = unpacker.unpack_from(blob, p)
        if not fl & _SAME:
            return list(values)
        out: list[bytes] = self.fields * 2
        out[0::2] = self.fields
        out[1::2] = values
        return out

    def bulk_reply(self, i: int, j: int, sids: list[int] | None, out: list[list[Any]]) -> bool:
        """Append ``[b"<ms>-<seq>", [field, value, ...]]`` for entries ``i`` to ``j - 1`` to
        ``out`` (and their IDs to ``sids``) if they are all live, stored with the master
        fields and one-byte lengths, and share one value layout: then one C-level unpack
        decodes them all. Returns False, appending nothing, otherwise."""
        cnt = j - i
        if self.flags.count(_SAME, i, j) != cnt:
            return False
        fields = self.fields
        k = len(fields)
        blob = self.blob
        offs = self.offs
        p0 = offs[i]
        lens = bytes(blob[p0 : p0 + k])
        size = k + sum(lens)
        p1 = p0 + cnt * size
        if cnt > 1:
            # Same-fields entries are stored back to back as <lengths><values>: they share
            # the layout when every one starts with these lengths.
            if offs[j - 1] != p1 - size:
                return False
            for c in range(k):
                if blob[p0 + c : p1 : size] != lens[c : c + 1] * cnt:
                    return False
        st = _BULK_UNPACKERS.get(lens) or _bulk_unpacker(lens)
        ms = self.ms[i:j]
        seq = self.seq[i:j]
        if sids is not None:
            sids += [(a << 64) | b for a, b in zip(ms, seq, strict=True)]
        # Everything per entry happens in C: the values come out as columns, zipped with the
        # field names into [f1, v1, f2, v2, ...] lists, then with the formatted IDs.
        columns = zip(*st.iter_unpack(blob[p0:p1]), strict=True)
        interleaved = [
            x for f, col in zip(fields, columns, strict=True) for x in (repeat(f, cnt), col)
        ]
        fvs = map(list, zip(*interleaved, strict=True))
        out += map(list, zip(map(_FMT_ID, zip(ms, seq, strict=True)), fvs, strict=True))
        return True


_FMT_ID: Final = b"%d-%d".__mod__


# Entry decoding unpacks all of an entry's strings in one C call with a struct format built
# from its length bytes; formats are cached by those bytes (entries of a stream mostly share
# their value lengths).
_UNPACKERS: dict[bytes, struct.Struct] = {}


def _unpacker(lens: bytes) -> struct.Struct:
    if len(_UNPACKERS) >= 4096:
        _UNPACKERS.clear()
    st = struct.Struct("<" + "".join([f"{n}s" for n in lens]))
    _UNPACKERS[lens] = st
    return st


# The same for runs of entries sharing their lengths: the lengths are skipped as padding.
_BULK_UNPACKERS: dict[bytes, struct.Struct] = {}


def _bulk_unpacker(lens: bytes) -> struct.Struct:
    if len(_BULK_UNPACKERS) >= 4096:
        _BULK_UNPACKERS.clear()
    st = struct.Struct(f"<{len(lens)}x" + "".join([f"{n}s" for n in lens]))
    _BULK_UNPACKERS[lens] = st
    return st


def _unpacker_wide(lens: bytes) -> struct.Struct:
    return struct.Struct("<" + "".join([f"{n}s" for n in array("I", lens)]))


class PendingEntry:
    """A pending entry (Redis's NACK): last delivery time (Unix ms), delivery count, owner.

    The same object sits in the group PEL and in its consumer's PEL.
    """

    __slots__ = ("consumer", "delivery_count", "delivery_time")

    def __init__(self, consumer: Consumer | None, delivery_time: int, delivery_count: int = 1):
        self.consumer = consumer
        self.delivery_time = delivery_time
        self.delivery_count = delivery_count

    def __repr__(self) -> str:
        owner = self.consumer.name if self.consumer is not None else None
        return f"PendingEntry({owner!r}, {self.delivery_time}, {self.delivery_count})"


class PendingList:
    """A pending-entries list: a map ``id -> PendingEntry`` kept in ID order.

    A dict answers membership in O(1); the order lives in sorted runs of at most
    ``_LOAD * 2`` IDs indexed by their maxima (the layout of ``sortedcontainers``, trimmed to
    what PELs do). Adding an ID above the current maximum, the common case since deliveries
    go in ID order, appends to the last run. Add and remove are O(log P); ordered walks from
    any ID are O(log P + M).
    """

    __slots__ = ("_d", "_lists", "_maxes")

    _LOAD: Final = 512

    def __init__(self) -> None:
        self._d: dict[int, PendingEntry] = {}
        self._lists: list[list[int]] = []
        self._maxes: list[int] = []

    def __len__(self) -> int:
        return len(self._d)

    def __bool__(self) -> bool:
        return bool(self._d)

    def __contains__(self, sid: object) -> bool:
        return sid in self._d

    def __getitem__(self, sid: int) -> PendingEntry:
        return self._d[sid]

    def __iter__(self) -> Iterator[int]:
        for run in self._lists:
            yield from run

    def __repr__(self) -> str:
        return f"PendingList({len(self._d)} entries)"

    def get(self, sid: int) -> PendingEntry | None:
        """The entry for ``sid``, or None."""
        return self._d.get(sid)

    def add(self, sid: int, pe: PendingEntry) -> None:
        """Insert ``sid`` (which must not be present)."""
        self._d[sid] = pe
        maxes = self._maxes
        if not maxes:
            self._lists.append([sid])
            maxes.append(sid)
            return
        if sid > maxes[-1]:
            pos = len(maxes) - 1
            run = self._lists[pos]
            run.append(sid)
            maxes[pos] = sid
        else:
            pos = bisect_left(maxes, sid)
            run = self._lists[pos]
            insort(run, sid)
        if len(run) > 2 * self._LOAD:
            half = len(run) >> 1
            self._lists[pos : pos + 1] = [run[:half], run[half:]]
            maxes[pos : pos + 1] = [run[half - 1], run[-1]]

    def add_ascending(self, sids: list[int], pes: list[PendingEntry]) -> None:
        """Insert increasing IDs, none present (a batch of new deliveries)."""
        maxes = self._maxes
        if maxes and sids[0] <= maxes[-1]:
            for sid, pe in zip(sids, pes, strict=True):
                self.add(sid, pe)
            return
        self._d.update(zip(sids, pes, strict=True))
        if not maxes:
            self._lists.append([])
            maxes.append(0)
        pos = len(maxes) - 1
        run = self._lists[pos]
        run.extend(sids)
        maxes[pos] = sids[-1]
        limit = 2 * self._LOAD
        while len(run) > limit:
            self._lists[pos : pos + 1] = [run[: self._LOAD], run[self._LOAD :]]
            maxes[pos : pos + 1] = [run[self._LOAD - 1], run[-1]]
            pos += 1
            run = self._lists[pos]

    def pop(self, sid: int) -> PendingEntry | None:
        """Remove ``sid``; its entry, or None if absent."""
        pe = self._d.pop(sid, None)
        if pe is None:
            return None
        maxes = self._maxes
        pos = bisect_left(maxes, sid)
        run = self._lists[pos]
        if len(run) == 1:
            del self._lists[pos]
            del maxes[pos]
        else:
            i = bisect_left(run, sid)
            del run[i]
            if i == len(run):
                maxes[pos] = run[-1]
        return pe

    def _unlink(self, sids: list[int]) -> None:
        # Take IDs already popped from the dict out of the sorted runs (each is in a run
        # once). Acknowledgements mostly come in order, for IDs that sit next to each other
        # in one run: those go in one slice deletion.
        if len(sids) > 1:
            sids = sorted(sids)
        lists = self._lists
        maxes = self._maxes
        n = len(sids)
        k = 0
        while k < n:
            sid = sids[k]
            pos = bisect_left(maxes, sid)
            run = lists[pos]
            i = bisect_left(run, sid)
            m = min(n - k, len(run) - i)
            if m > 1 and run[i : i + m] != sids[k : k + m]:
                m = 1
                rn = len(run)
                while k + m < n and i + m < rn and run[i + m] == sids[k + m]:
                    m += 1
            del run[i : i + m]
            k += m
            if not run:
                del lists[pos]
                del maxes[pos]
            elif i == len(run):
                maxes[pos] = run[-1]

    def first(self) -> int:
        """The smallest ID (the list must not be empty)."""
        return self._lists[0][0]

    def last(self) -> int:
        """The largest ID (the list must not be empty)."""
        return self._maxes[-1]

    def ceiling(self, sid: int) -> int | None:
        """The smallest ID >= ``sid``, or None."""
        maxes = self._maxes
        pos = bisect_left(maxes, sid)
        if pos == len(maxes):
            return None
        run = self._lists[pos]
        return run[bisect_left(run, sid)]

    def irange(self, lo: int, hi: int = MAX_ID) -> Iterator[int]:
        """IDs in ``[lo, hi]`` in order (do not add or remove while iterating)."""
        maxes = self._maxes
        pos = bisect_left(maxes, lo)
        lists = self._lists
        if pos == len(maxes):
            return
        run = lists[pos]
        i = bisect_left(run, lo)
        while True:
            for j in range(i, len(run)):
                sid = run[j]
                if sid > hi:
                    return
                yield sid
            pos += 1
            if pos == len(lists):
                return
            run = lists[pos]
            i = 0

    def items(self) -> Iterator[tuple[int, PendingEntry]]:
        """``(id, entry)`` pairs in ID order."""
        d = self._d
        for run in self._lists:
            for sid in run:
                yield sid, d[sid]


_OWNER: Final = attrgetter("consumer")


class Consumer:
    """A consumer of a group: its name, seen-time (Unix ms) and own PEL (ID -> entry)."""

    __slots__ = ("name", "pel", "seen_time")

    def __init__(self, name: bytes, seen_time: int) -> None:
        self.name = name
        self.seen_time = seen_time
        self.pel = PendingList()

    def __repr__(self) -> str:
        return f"Consumer({self.name!r}, pending={len(self.pel)})"


class ConsumerGroup:
    """A consumer group: last-delivered ID, entries-read counter (-1 = unknown), the group
    PEL (ID -> :class:`PendingEntry`) and consumers by name."""

    __slots__ = ("consumers", "entries_read", "last_id", "name", "pel")

    def __init__(self, name: bytes, last_id: int, entries_read: int) -> None:
        self.name = name
        self.last_id = last_id
        self.entries_read = entries_read
        self.pel = PendingList()
        self.consumers: dict[bytes, Consumer] = {}

    def __repr__(self) -> str:
        return f"ConsumerGroup({self.name!r}, last_id={self.last_id}, pending={len(self.pel)})"

    # -- consumers -----------------------------------------------------------------------

    def lookup_consumer(self, name: bytes, now_ms: int | None = None) -> Consumer | None:
        """The consumer ``name``; refreshes its seen-time when ``now_ms`` is given (Redis's
        SLC_DEFAULT lookup), leaves it alone otherwise (SLC_NO_REFRESH)."""
        c = self.consumers.get(name)
        if c is not None and now_ms is not None:
            c.seen_time = now_ms
        return c

    def create_consumer(self, name: bytes, now_ms: int) -> Consumer | None:
        """Create ``name``; None if it already exists."""
        if name in self.consumers:
            return None
        c = Consumer(name, now_ms)
        self.consumers[name] = c
        return c

    def get_or_create_consumer(self, name: bytes, now_ms: int) -> Consumer:
        """Look up ``name`` refreshing its seen-time, or create it."""
        c = self.consumers.get(name)
        if c is None:
            c = Consumer(name, now_ms)
            self.consumers[name] = c
        else:
            c.seen_time = now_ms
        return c

    def delete_consumer(self, name: bytes) -> int | None:
        """Delete ``name`` and its pending entries; returns how many it had, None if absent."""
        c = self.consumers.pop(name, None)
        if c is None:
            return None
        pel = self.pel
        for sid in c.pel:
            pel.pop(sid)
        return len(c.pel)

    def sorted_consumers(self) -> list[Consumer]:
        """Consumers in Redis's rax order (bytewise by name)."""
        return [self.consumers[k] for k in sorted(self.consumers)]

    # -- PEL -----------------------------------------------------------------------------

    def ack(self, sid: int) -> bool:
        """Remove ``sid`` from the PELs; True if it was pending."""
        pe = self.pel.pop(sid)
        if pe is None:
            return False
        if pe.consumer is not None:
            pe.consumer.pel.pop(sid)
        return True

    def ack_many(self, sids: list[int]) -> int:
        """:meth:`ack` each of ``sids`` in turn (repeats count once); returns how many were
        pending."""
        gpel = self.pel
        pes = list(map(gpel._d.pop, sids, repeat(None, len(sids))))
        gone = sids
        if not pes:
            return 0
        if None in pes:
            gone = [sid for sid, pe in zip(sids, pes, strict=True) if pe is not None]
            if not gone:
                return 0
            pes = [pe for pe in pes if pe is not None]
        gpel._unlink(gone)
        owners: list[Consumer | None] = list(map(_OWNER, pes))
        owner = owners[0]
        if owner is not None and owners.count(owner) == len(owners):
            cpel = owner.pel
            for _ in map(cpel._d.pop, gone):
                pass
            cpel._unlink(gone)
        else:
            for sid, c in zip(gone, owners, strict=True):
                if c is not None:
                    c.pel.pop(sid)
        return len(gone)

    def deliver_new(self, sids: list[int], consumer: Consumer, now_ms: int) -> None:
        """:meth:`deliver` for increasing IDs (a ``>`` read), batched."""
        gpel = self.pel
        if gpel and sids[0] <= gpel.last():
            # Some may be pending already (the group was rewound).
            fresh: list[int] = []
            for sid in sids:
                if sid in gpel:
                    self.deliver(sid, consumer, now_ms)
                else:
                    fresh.append(sid)
            if not fresh:
                return
        else:
            fresh = sids
        n = len(fresh)
        pes = list(map(PendingEntry, repeat(consumer, n), repeat(now_ms, n)))
        self.pel.add_ascending(fresh, pes)
        consumer.pel.add_ascending(fresh, pes)

    def deliver(self, sid: int, consumer: Consumer, now_ms: int) -> None:
        """Record a new delivery of ``sid`` to ``consumer`` (a ``>`` read without NOACK).

        If ``sid`` is already pending (the group was rewound by SETID), it moves to
        ``consumer`` and its delivery count restarts at 1.
        """
        pe = self.pel.get(sid)
        if pe is None:
            pe = PendingEntry(consumer, now_ms, 1)
            self.pel.add(sid, pe)
            consumer.pel.add(sid, pe)
            return
        old = pe.consumer
        if old is not None:
            old.pel.pop(sid)
        pe.consumer = consumer
        pe.delivery_time = now_ms
        pe.delivery_count = 1
        consumer.pel.add(sid, pe)

    def transfer(self, sid: int, pe: PendingEntry, consumer: Consumer) -> None:
        """Make ``consumer`` the owner of the pending entry ``sid``."""
        old = pe.consumer
        if old is consumer:
            return
        if old is not None:
            old.pel.pop(sid)
        pe.consumer = consumer
        consumer.pel.add(sid, pe)

    def drop_pending(self, sid: int) -> None:
        """Forget the pending entry ``sid`` (its stream entry was deleted)."""
        pe = self.pel.pop(sid)
        if pe is not None and pe.consumer is not None:
            pe.consumer.pel.pop(sid)

    def copy(self) -> ConsumerGroup:
        """A deep copy (consumers and PEL entries duplicated)."""
        g = ConsumerGroup(self.name, self.last_id, self.entries_read)
        cmap: dict[int, Consumer] = {}
        for name, c in self.consumers.items():
            nc = Consumer(name, c.seen_time)
            g.consumers[name] = nc
            cmap[id(c)] = nc
        for sid, pe in self.pel.items():
            owner = cmap.get(id(pe.consumer)) if pe.consumer is not None else None
            npe = PendingEntry(owner, pe.delivery_time, pe.delivery_count)
            g.pel.add(sid, npe)
            if owner is not None:
                owner.pel.add(sid, npe)
        return g


class Stream:
    """A stream value: entries in listpack-like nodes, plus its counters and consumer groups.

    Public counters (read freely, written by the command layer only where Redis writes them):
    ``length``, ``last_id`` (last generated ID), ``first_id`` (recorded first entry ID, 0 when
    empty), ``max_deleted_id``, ``entries_added``; ``groups`` maps names to
    :class:`ConsumerGroup`.
    """

    __slots__ = (
        "_keys",
        "_nodes",
        "_ordered",
        "entries_added",
        "first_id",
        "groups",
        "idmp",
        "last_id",
        "length",
        "max_deleted_id",
    )

    def __init__(self) -> None:
        self._nodes: list[StreamNode] = []
        self._keys: list[int] = []
        # True while every entry, in node order, has a greater ID than the one before it.
        # XSETID can move last_id back below a deleted entry; IDs added after that may repeat
        # or undercut older (deleted) ones, and Redis's iterator rules then decide what reads
        # see. Lookups bisect while ordered and replay those rules by scanning otherwise.
        self._ordered = True
        self.length = 0
        self.last_id = 0
        self.first_id = 0
        self.max_deleted_id = 0
        self.entries_added = 0
        self.groups: dict[bytes, ConsumerGroup] = {}
        # Redis 8.6's idempotent-production map (an IdmpState), created by the first XADD
        # IDMP / XCFGSET of an 8.6+ engine; None otherwise.
        self.idmp: IdmpState | None = None

    def __repr__(self) -> str:
        return f"Stream(length={self.length}, nodes={len(self._nodes)}, last_id={self.last_id})"

    def __len__(self) -> int:
        return self.length

    @property
    def node_count(self) -> int:
        """Number of listpack nodes (XINFO's ``radix-tree-keys``)."""
        return len(self._nodes)

    def rax_nodes_estimate(self) -> int:
        """A plausible value for XINFO's ``radix-tree-nodes`` (a rax internal)."""
        n = len(self._nodes)
        return 1 if n == 0 else 2 if n == 1 else 2 * n + 4

    # -- IDs -----------------------------------------------------------------------------

    def next_auto_id(self, now_ms: int) -> int:
        """The ID ``XADD *`` generates: ``now-0``, or last + 1 when the clock is not ahead of
        the last ID (IDs stay monotonic when the clock goes backwards).

        Raises :class:`StreamIDExhaustedError` when the last ID is the maximum.
        """
        last = self.last_id
        if last >= MAX_ID:
            raise StreamIDExhaustedError
        if now_ms > last >> 64:
            return now_ms << 64
        return last + 1

    def resolve_explicit_id(self, sid: int, seq_given: bool) -> int:
        """The ID for an explicit XADD ID (``ms-seq``, or ``ms-*`` when not ``seq_given``).

        Raises :class:`StreamIDExhaustedError` when the last ID is the maximum,
        :class:`StreamSeqOverflowError` for ``ms-*`` when ``ms``'s sequence is used up, and
        :class:`StreamIDTooSmallError` when the ID is not greater than the last ID.
        """
        last = self.last_id
        if last >= MAX_ID:
            raise StreamIDExhaustedError
        if not seq_given and last >> 64 == sid >> 64:
            if last & MASK64 == MAX_U64:
                raise StreamSeqOverflowError
            sid = last + 1
        if sid <= last:
            raise StreamIDTooSmallError
        return sid

    # -- appending -----------------------------------------------------------------------

    def append(
        self,
        sid: int,
        fv: Sequence[bytes],
        max_entries: int = 100,
        max_bytes: int = 4096,
    ) -> None:
        """Append the entry ``sid`` (greater than ``last_id``) with ``fv`` =
        ``[field1, value1, ...]`` (non-empty, even length).

        ``max_entries`` / ``max_bytes`` are ``stream-node-max-entries`` /
        ``stream-node-max-bytes`` (0 = no limit). Amortised O(1).
        """
        fields = fv[0::2]
        if type(fields) is not list:
            fields = list(fields)
        values = fv[1::2]
        nf = len(values)
        # One pass over the values: listpack bytes, total length, the one-byte lengths.
        vlp = 0
        vtot = 0
        lens = bytearray()
        wide = False
        for v in values:
            k = len(v)
            vtot += k
            # A string of k < 64 bytes takes k + 2 unless it is a canonical integer (which
            # starts with '-' or a digit, and not with '0' unless it is "0").
            if k < 64 and (not k or v[0] not in _NUM_START or (v[0] == 0x30 and k > 1)):
                vlp += k + 2
            else:
                vlp += _lp_str(v)
            if k < 256:
                lens.append(k)
            else:
                wide = True
        nodes = self._nodes
        node: StreamNode | None = None
        same = True
        if nodes:
            tail = nodes[-1]
            node = tail
            same = tail.fields == fields
            n = len(tail.flags)
            live = tail.live
            if max_bytes <= 0 or max_bytes > _LP_MAX_SIZE:
                max_bytes = _LP_MAX_SIZE
            if (max_entries > 0 and n >= max_entries) or (
                tail.lp
                + (2 if live < 128 else lp_int(live))
                + (2 if n - live < 128 else lp_int(n - live))
                + (tail.ftot if same else sum(map(len, fields)))
                + vtot
                >= max_bytes
            ):
                tail.seal()
                node = None
                same = True
            if self._ordered and sid <= ((tail.ms[-1] << 64) | tail.seq[-1]):
                self._ordered = False
        if node is None:
            node = StreamNode(sid, fields)
            keys = self._keys
            if not keys or sid > keys[-1]:
                nodes.append(node)
                keys.append(sid)
            else:
                self._insert_node(node)
        elif type(node.blob) is bytes:  # a sealed node that is the tail again
            node.blob = bytearray(node.blob)
        master = node.master
        sms = sid >> 64
        sseq = sid & MASK64
        # Listpack bytes of the entry: flags, ms-diff, seq-diff, [fields], values, lp-count.
        d = sms - (master >> 64)
        lp = vlp + (4 if 0 <= d < 128 else 2 + lp_int(_as_i64(d)))
        d = sseq - (master & MASK64)
        lp += 2 if 0 <= d < 128 else lp_int(_as_i64(d))
        blob = node.blob
        assert type(blob) is bytearray
        off = len(blob)
        if same:
            flag = _SAME
            lp += 2 if nf < 125 else lp_int(nf + 3)
            if wide:
                flag |= WIDE_INT
                blob += array("I", map(len, values)).tobytes()
            else:
                blob += lens
            blob += b"".join(values)
        else:
            flag = 0
            lp += lp_int(nf) + lp_int(2 * nf + 4)
            for f in fields:
                lp += _lp_str(f)
            blob += len(fv).to_bytes(4, "little")
            try:
                blob += bytes(map(len, fv))
            except ValueError:  # a string of 256+ bytes: four-byte lengths
                flag |= WIDE_INT
                blob += array("I", map(len, fv)).tobytes()
            blob += b"".join(fv)
        node.lp += lp
        node.ms.append(sms)
        node.seq.append(sseq)
        node.flags.append(flag)
        node.offs.append(off)
        node.live += 1
        self.length += 1
        self.entries_added += 1
        self.last_id = sid
        if self.length == 1:
            self.first_id = sid

    # -- lookups -------------------------------------------------------------------------

    def _insert_node(self, node: StreamNode) -> None:
        # A node whose master ID is not above the last one (only after XSETID went back).
        # Redis's rax keeps keys sorted and an equal key replaces the old node's listpack.
        self._ordered = False
        keys = self._keys
        pos = bisect_left(keys, node.master)
        if pos < len(keys) and keys[pos] == node.master:
            self._nodes[pos] = node
        else:
            keys.insert(pos, node.master)
            self._nodes.insert(pos, node)

    def _locate(self, sid: int) -> tuple[int, int]:
        # (node index, entry index) of the entry Redis's iterator finds for [sid, sid]: the
        # first live one with that ID in scan order; (-1, -1) when there is none.
        if not self._ordered:
            for ni, i, _ in self._scan(sid, sid, False):
                return ni, i
            return -1, -1
        ni = bisect_right(self._keys, sid) - 1
        if ni < 0:
            return -1, -1
        node = self._nodes[ni]
        i = node.index_of(sid)
        if i < 0 or node.flags[i] & _DELETED:
            return -1, -1
        return ni, i

    def exists(self, sid: int) -> bool:
        """Whether ``sid`` is a live entry. O(log N)."""
        return self._locate(sid)[0] >= 0

    def get(self, sid: int) -> list[bytes] | None:
        """The fields of the live entry ``sid``, or None. O(log N)."""
        ni, i = self._locate(sid)
        if ni < 0:
            return None
        return self._nodes[ni].decode(i)

    def first_live_id(self) -> int | None:
        """ID of the first live entry (None when empty)."""
        if not self.length:
            return None
        for node in self._nodes:
            if node.live:
                flags = node.flags
                i = node.head
                while flags[i] & _DELETED:
                    i += 1
                return node.id_at(i)
        return None  # pragma: no cover - length > 0 implies a live node

    def last_live_id(self) -> int | None:
        """ID of the last live entry (Redis's ``streamLastValidID``; None when empty)."""
        if not self.length:
            return None
        for node in reversed(self._nodes):
            if node.live:
                flags = node.flags
                i = len(flags) - 1
                while flags[i] & _DELETED:
                    i -= 1
                return node.id_at(i)
        return None  # pragma: no cover

    def range(self, start: int, end: int, count: int = 0, rev: bool = False) -> list[Entry]:
        """Live entries with ``start <= id <= end`` in ID order (descending when ``rev``), at
        most ``count`` of them (0 = all). O(log N + M) plus tombstones skipped."""
        out: list[Entry] = []
        if not self._ordered:
            nodes = self._nodes
            for ni, i, sid in self._scan(start, end, rev):
                out.append((sid, nodes[ni].decode(i)))
                if len(out) == count:
                    break
            return out
        if start > end or not self.length:
            return out
        nodes = self._nodes
        nn = len(nodes)
        if not rev:
            ni = bisect_right(self._keys, start) - 1
            if ni < 0:
                ni = 0
                i = -1
            else:
                i = nodes[ni].index_ge(start)
            while ni < nn:
                node = nodes[ni]
                if node.master > end:
                    break
                if node.live:
                    if i < node.head:
                        i = node.head
                    ms = node.ms
                    sq = node.seq
                    fl = node.flags
                    n = len(fl)
                    while i < n:
                        sid = (ms[i] << 64) | sq[i]
                        if sid > end:
                            return out
                        if not fl[i] & _DELETED:
                            out.append((sid, node.decode(i)))
                            if len(out) == count:
                                return out
                        i += 1
                ni += 1
                i = 0
        else:
            ni = bisect_right(self._keys, end) - 1
            if ni < 0:
                return out
            i = nodes[ni].index_le(end)
            while ni >= 0:
                node = nodes[ni]
                if node.live:
                    ms = node.ms
                    sq = node.seq
                    fl = node.flags
                    h = node.head
                    while i >= h:
                        sid = (ms[i] << 64) | sq[i]
                        if sid < start:
                            return out
                        if not fl[i] & _DELETED:
                            out.append((sid, node.decode(i)))
                            if len(out) == count:
                                return out
                        i -= 1
                if node.master <= start:
                    break
                ni -= 1
                if ni >= 0:
                    i = len(nodes[ni].ms) - 1
        return out

    def range_reply(
        self, start: int, end: int, count: int = 0, sids: list[int] | None = None
    ) -> list[list[Any]]:
        """The entries of ``range(start, end, count)`` (forward) shaped as stream commands
        reply them, ``[[b"<ms>-<seq>", [field, value, ...]], ...]``; their IDs are appended
        to ``sids`` when given. Runs of entries that share one layout are decoded in bulk."""
        out: list[list[Any]] = []
        if not self._ordered or start > end or not self.length:
            for sid, fv in self.range(start, end, count):
                out.append([b"%d-%d" % (sid >> 64, sid & MASK64), fv])
                if sids is not None:
                    sids.append(sid)
            return out
        nodes = self._nodes
        nn = len(nodes)
        ni = bisect_right(self._keys, start) - 1
        if ni < 0:
            ni = 0
            i = 0
        else:
            i = nodes[ni].index_ge(start)
        while ni < nn:
            node = nodes[ni]
            if node.master > end:
                break
            ni += 1
            if not node.live:
                i = 0
                continue
            if i < node.head:
                i = node.head
            ms = node.ms
            sq = node.seq
            j = len(ms)
            if ((ms[-1] << 64) | sq[-1]) > end:
                j = node.index_le(end) + 1
            if i >= j:
                i = 0
                continue
            jj = j
            if count and j - i > count - len(out):
                jj = i + count - len(out)
            if not node.bulk_reply(i, jj, sids, out):
                fl = node.flags
                while i < j:
                    if not fl[i] & _DELETED:
                        out.append([b"%d-%d" % (ms[i], sq[i]), node.decode(i)])
                        if sids is not None:
                            sids.append((ms[i] << 64) | sq[i])
                        if len(out) == count:
                            return out
                    i += 1
            elif len(out) == count:
                return out
            i = 0
        return out

    def _scan(self, start: int, end: int, rev: bool) -> Iterator[tuple[int, int, int]]:
        # Redis's streamIterator, literally: seek the last node whose master ID is <= the
        # bound (else the first/last node), walk entries in node order, skip deleted ones and
        # those on the near side of the range, stop at the first live one past the far side.
        # Yields (node index, entry index, id). O(N) in the worst case: unordered streams only.
        nodes = self._nodes
        if not nodes:
            return
        if not rev:
            ni = bisect_right(self._keys, start) - 1 if start else 0
            if ni < 0:
                ni = 0
            for k in range(ni, len(nodes)):
                node = nodes[k]
                fl = node.flags
                for i in range(len(fl)):
                    sid = node.id_at(i)
                    if sid >= start and not fl[i] & _DELETED:
                        if sid > end:
                            return
                        yield k, i, sid
        else:
            ni = bisect_right(self._keys, end) - 1 if end else -1
            if ni < 0:
                ni = len(nodes) - 1
            for k in range(ni, -1, -1):
                node = nodes[k]
                fl = node.flags
                for i in range(len(fl) - 1, -1, -1):
                    sid = node.id_at(i)
                    if sid <= end and not fl[i] & _DELETED:
                        if sid < start:
                            return
                        yield k, i, sid

    # -- deletion and trimming -----------------------------------------------------------

    def delete(self, sid: int) -> bool:
        """XDEL one ID: flag it deleted (dropping its node when it was the node's last live
        entry). Returns whether it was live. Does not update ``first_id`` /
        ``max_deleted_id`` (the command does, once for all its IDs)."""
        ni, i = self._locate(sid)
        if ni < 0:
            return False
        node = self._nodes[ni]
        if node.live == 1:
            del self._nodes[ni]
            del self._keys[ni]
            if not self._nodes:
                self._ordered = True
        else:
            node.mark_deleted(i)
        self.length -= 1
        return True

    def refresh_first_id(self) -> None:
        """Recompute ``first_id`` (0 when empty), as after trimming."""
        fid = self.first_live_id()
        self.first_id = 0 if fid is None else fid

    def trim_maxlen(self, maxlen: int, approx: bool = False, limit: int = 0) -> int:
        """Trim to at most ``maxlen`` entries (Redis's ``streamTrim``); returns how many were
        removed. ``approx`` removes whole nodes only; ``limit`` (0 = none) caps the entries
        removed, stopping before a node that would exceed it. Updates ``first_id``."""
        return self._trim(maxlen, None, approx, limit)

    def trim_minid(self, minid: int, approx: bool = False, limit: int = 0) -> int:
        """Remove entries with IDs below ``minid`` (see :meth:`trim_maxlen`)."""
        return self._trim(0, minid, approx, limit)

    def _trim(self, maxlen: int, minid: int | None, approx: bool, limit: int) -> int:
        nodes = self._nodes
        deleted = 0
        drop = 0  # leading nodes to remove
        while drop < len(nodes):
            if minid is None and self.length <= maxlen:
                break
            node = nodes[drop]
            entries = node.live
            if limit and deleted + entries > limit:
                break
            if (self.length - entries >= maxlen) if minid is None else (node.last_id() < minid):
                drop += 1
                self.length -= entries
                deleted += entries
                continue
            if approx:
                break
            # Entries before head are deleted: skipping them changes nothing unless IDs are
            # out of order (a deleted ID >= MINID there stops Redis's scan).
            i = node.head if self._ordered else 0
            flags = node.flags
            n = len(flags)
            ms = node.ms
            sq = node.seq
            while i < n:
                if minid is None:
                    if self.length <= maxlen:
                        break
                elif ((ms[i] << 64) | sq[i]) >= minid:
                    break
                if not flags[i] & _DELETED:
                    node.mark_deleted(i)
                    self.length -= 1
                    deleted += 1
                i += 1
            break
        if drop:
            del nodes[:drop]
            del self._keys[:drop]
            if not nodes:
                self._ordered = True
        self.refresh_first_id()
        return deleted

    # -- consumer groups -----------------------------------------------------------------

    def create_group(self, name: bytes, last_id: int, entries_read: int) -> ConsumerGroup | None:
        """Create group ``name``; None if it exists."""
        if name in self.groups:
            return None
        g = ConsumerGroup(name, last_id, entries_read)
        self.groups[name] = g
        return g

    def sorted_groups(self) -> list[ConsumerGroup]:
        """Groups in Redis's rax order (bytewise by name)."""
        return [self.groups[k] for k in sorted(self.groups)]

    def has_tombstones_after(self, start: int) -> bool:
        """``streamRangeHasTombstones(s, start, NULL)``: whether a deleted entry may lie at or
        after ``start`` (judged, as Redis does, from ``max_deleted_id`` only)."""
        mdel = self.max_deleted_id
        if not self.length or not mdel:
            return False
        if self.first_id > mdel:
            return False
        return start <= mdel

    def estimate_entries_read(self, sid: int) -> int:
        """``streamEstimateDistanceFromFirstEverEntry``: the logical read counter of ``sid``,
        or -1 when it cannot be known."""
        added = self.entries_added
        if not added:
            return 0
        if not self.length and sid <= self.last_id:
            return added
        last = self.last_id
        if sid == last:
            return added
        if sid > last:
            return INVALID_ENTRIES_READ
        mdel = self.max_deleted_id
        first = self.first_id
        if not mdel or mdel < first:
            if sid < first:
                return added - self.length
            if sid == first:
                return added - self.length + 1
        return INVALID_ENTRIES_READ

    def group_lag(self, g: ConsumerGroup) -> int | None:
        """``streamReplyWithCGLag``: entries not yet delivered to ``g``, None if unknown."""
        added = self.entries_added
        if not added:
            return 0
        if g.entries_read != INVALID_ENTRIES_READ and not self.has_tombstones_after(g.last_id):
            return added - g.entries_read
        er = self.estimate_entries_read(g.last_id)
        if er != INVALID_ENTRIES_READ:
            return added - er
        return None

    def advance_group(self, g: ConsumerGroup, sid: int) -> None:
        """Move ``g``'s last-delivered ID to ``sid`` (greater than it) after delivering
        ``sid``, keeping entries-read as Redis does."""
        if g.entries_read != INVALID_ENTRIES_READ and not self.has_tombstones_after(sid):
            g.entries_read += 1
        elif self.entries_added:
            g.entries_read = self.estimate_entries_read(sid)
        g.last_id = sid

    # -- copying ---------------------------------------------------------------------------

    def copy(self) -> Stream:
        """A deep copy (COPY command)."""
        s = Stream()
        for node in self._nodes:
            n = StreamNode(node.master, list(node.fields))
            n.ms = array("Q", node.ms)
            n.seq = array("Q", node.seq)
            n.flags = bytearray(node.flags)
            n.offs = array("I", node.offs)
            n.blob = bytes(node.blob)
            n.live = node.live
            n.head = node.head
            n.lp = node.lp
            s._nodes.append(n)
        if s._nodes and type(self._nodes[-1].blob) is bytearray:
            s._nodes[-1].blob = bytearray(s._nodes[-1].blob)
        s._keys = list(self._keys)
        s._ordered = self._ordered
        s.length = self.length
        s.last_id = self.last_id
        s.first_id = self.first_id
        s.max_deleted_id = self.max_deleted_id
        s.entries_added = self.entries_added
        s.groups = {name: g.copy() for name, g in self.groups.items()}
        if self.idmp is not None:
            s.idmp = self.idmp.copy()
        return s
