"""The keyspace: 16 databases of ``key -> value`` with millisecond expiry.

Value types: ``bytes`` (string), ``dict[bytes, bytes]`` (hash), ``set[bytes]`` (set),
:class:`~.model.zset.ZSet` (zset), ``collections.deque[bytes]`` (list) and the stream model's
``Stream``. Expiry is lazy (every lookup checks the key's deadline) and active (the engine's
cron calls :meth:`Database.active_expire`, which pops due keys from a heap).

Not thread-safe by itself: the engine lock serializes every access.
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from streamworker.engine import msgs
from streamworker.engine.errors import CommandError

if TYPE_CHECKING:
    from streamworker.engine.table import CommandSpec

__all__ = [
    "Database",
    "Keyspace",
    "SizeMeter",
    "WatchedKey",
    "Watcher",
    "discard_transaction",
    "glob_match",
    "type_name",
    "unwatch_all",
]

_T = TypeVar("_T")

KeyEvent = Callable[[int, bytes], None]


def type_name(value: object) -> str:
    """The TYPE name of a stored value: string, hash, set, zset, list or stream."""
    cls = type(value)
    name = _TYPE_NAMES.get(cls)
    if name is not None:
        return name
    for base, bname in _TYPE_NAMES.items():
        if isinstance(value, base):
            return bname
    # The stream model lives in the stream engineer's module; its class is named Stream.
    return cls.__name__.lower()


_TYPE_NAMES: dict[type, str] = {bytes: "string", dict: "hash", set: "set", deque: "list"}


def register_type(cls: type, name: str) -> None:
    """Declare the TYPE name of a value class (used by model modules)."""
    _TYPE_NAMES[cls] = name


class Database:
    """One numbered database. ``data`` maps keys to values, ``expires`` keys to Unix ms."""

    __slots__ = (
        "_clock",
        "_heap",
        "_key_event",
        "access",
        "big_keys",
        "data",
        "expired_count",
        "expired_event",
        "expires",
        "flush_event",
        "index",
        "member_scans",
        "meter",
        "new_event",
        "scan_cache",
        "sizes",
        "track_hook",
        "watchers",
    )

    def __init__(self, index: int, clock: Callable[[], int], key_event: KeyEvent) -> None:
        self.index = index
        self.data: dict[bytes, Any] = {}
        self.expires: dict[bytes, int] = {}
        self.expired_count = 0  # keys reclaimed by expiry (INFO stats expired_keys)
        # Keys whose value Redis holds in the encoding it converts to once and never back: a
        # string made ``raw`` by APPEND/SETRANGE/SETBIT/BITFIELD/BITOP, a hash or set made a
        # ``hashtable``. Forgotten when the key is deleted or gets another value object (Redis
        # creates a new value there); RENAME, MOVE, COPY and SWAPDB carry it. Sorted sets carry
        # their own flag (``ZSet.big``).
        self.big_keys: set[bytes] = set()
        # key -> WatchedKey entries of the clients WATCHing it
        self.watchers: dict[bytes, list[WatchedKey]] = {}
        self._clock = clock
        self._heap: list[tuple[int, bytes]] = []
        # Called when a key is deleted or overwritten, so blocked XREADGROUPs re-check it.
        self._key_event = key_event
        # SCAN's sorted key index (see commands/keys.py); rebuilt when a scan starts.
        self.scan_cache: Any = None
        # SSCAN/HSCAN/ZSCAN's member indexes by key (see commands/_scan.py), a few at most.
        self.member_scans: dict[bytes, Any] = {}
        # Called with the db index after FLUSHDB/FLUSHALL/SWAPDB instead of one key_event per
        # key (the engine re-checks only the keys somebody waits on).
        self.flush_event: Callable[[int], None] | None = None
        # Called with (db index, key) after a key is reclaimed by expiry / after a key is
        # created (keyspace events "expired" and "new").
        self.expired_event: Callable[[int, bytes], None] | None = None
        self.new_event: Callable[[int, bytes], None] | None = None
        # CLIENT TRACKING: called with (db index, key) for every modified key and with
        # (db index, None) for a flush; None while no client tracks keys.
        self.track_hook: Callable[[int, bytes | None], None] | None = None
        # Memory upkeep (see memory.py): each key's size estimate (None while the engine does
        # not track memory) and the engine-wide total they add to; each key's LRU/LFU field
        # (always kept: OBJECT IDLETIME reads it; only existing keys have one).
        self.sizes: dict[bytes, int] | None = None
        self.meter: SizeMeter | None = None
        self.access: dict[bytes, int] = {}

    # -- lookups -----------------------------------------------------------------------------

    def get(self, key: bytes) -> Any:
        """The value at ``key``, or None if missing or expired (an expired key is deleted)."""
        if self.expires:
            when = self.expires.get(key)
            if when is not None and when <= self._clock():
                self._expire_key(key)
                return None
        return self.data.get(key)

    def get_typed(self, key: bytes, cls: type[_T]) -> _T | None:
        """The value at ``key`` if it is a ``cls``; None if missing; WRONGTYPE otherwise."""
        value = self.get(key)
        if value is None or type(value) is cls:
            return value
        if isinstance(value, cls):
            return value
        raise CommandError(msgs.WRONGTYPE)

    def exists(self, key: bytes) -> bool:
        """Whether ``key`` exists (not expired)."""
        return self.get(key) is not None

    def __contains__(self, key: object) -> bool:
        return isinstance(key, bytes) and self.get(key) is not None

    def is_expired(self, key: bytes) -> bool:
        """Whether ``key`` has a deadline in the past (without deleting it)."""
        when = self.expires.get(key)
        return when is not None and when <= self._clock()

    def __len__(self) -> int:
        """Number of keys, counting expired keys not yet reclaimed (as DBSIZE does)."""
        return len(self.data)

    def keys(self) -> list[bytes]:
        """Snapshot of the live (unexpired) keys."""
        if not self.expires:
            return list(self.data)
        now = self._clock()
        exp = self.expires
        return [k for k in self.data if (w := exp.get(k)) is None or w > now]

    def random_key(self) -> bytes | None:
        """A random live key, or None when empty."""
        for _ in range(100):
            if not self.data:
                return None
            key = random.choice(list(self.data)) if len(self.data) < 64 else self._sample()
            if self.get(key) is not None:
                return key
        live = self.keys()
        return random.choice(live) if live else None

    def _sample(self) -> bytes:
        # Not uniform, but O(1)-ish without materializing the key list, like Redis's dictGetFairRandomKey.
        n = random.randrange(len(self.data))
        it = iter(self.data)
        for _ in range(min(n, 1024)):
            next(it)
        return next(it)

    # -- writes ------------------------------------------------------------------------------

    def set(self, key: bytes, value: Any, keep_ttl: bool = False) -> None:
        """Store ``value`` at ``key`` (add or overwrite); drops the TTL unless ``keep_ttl``.
        Touches WATCHers."""
        old = self.data.get(key)
        self.data[key] = value
        if self.big_keys and old is not value:
            self.big_keys.discard(key)
        if not keep_ttl and self.expires:
            self.expires.pop(key, None)
        if self.watchers or self.track_hook is not None:
            self.touch(key)
        if old is not None and old is not value:
            self._key_event(self.index, key)
        elif old is None and self.new_event is not None:
            self.new_event(self.index, key)

    def delete(self, key: bytes) -> bool:
        """Delete ``key``; True if it existed (and was not expired). Touches WATCHers."""
        if self.get(key) is None:
            return False
        del self.data[key]
        self.big_keys.discard(key)
        if self.expires:
            self.expires.pop(key, None)
        if self.sizes is not None:
            self.forget_size(key)
        elif self.access:
            self.access.pop(key, None)
        if self.watchers or self.track_hook is not None:
            self.touch(key)
        self._key_event(self.index, key)
        return True

    def set_key(self, key: bytes, value: Any) -> None:
        """Redis's ``setKey`` as the STORE variants use it: look ``key`` up first (a key past
        its deadline is reclaimed there, with its "expired" event, so the stored value then
        counts as new), then store ``value`` without a TTL."""
        self.get(key)
        self.set(key, value)

    def discard(self, key: bytes) -> bool:
        """Redis's ``dbDelete``: remove ``key`` whether or not its deadline has passed (a key
        past its TTL that expiry has not reclaimed yet goes as a live one, without an
        "expired" event); True if it was stored. Touches WATCHers."""
        if key not in self.data:
            return False
        del self.data[key]
        self.big_keys.discard(key)
        if self.expires:
            self.expires.pop(key, None)
        if self.sizes is not None:
            self.forget_size(key)
        elif self.access:
            self.access.pop(key, None)
        if self.watchers or self.track_hook is not None:
            self.touch(key)
        self._key_event(self.index, key)
        return True

    def forget_size(self, key: bytes) -> None:
        """Drop a deleted key's size estimate and access field (memory upkeep on)."""
        assert self.sizes is not None
        size = self.sizes.pop(key, None)
        if size is not None and self.meter is not None:
            self.meter.total -= size
        self.access.pop(key, None)

    def pop(self, key: bytes) -> Any:
        """Delete ``key`` and return its value (None if missing)."""
        value = self.get(key)
        if value is not None:
            self.delete(key)
        return value

    def mark_big(self, key: bytes) -> None:
        """Record that Redis has converted the value at ``key`` to its big encoding."""
        self.big_keys.add(key)

    def is_big(self, key: bytes) -> bool:
        """Whether the value at ``key`` was converted to its big encoding (see ``big_keys``)."""
        return key in self.big_keys

    def get_expire(self, key: bytes) -> int | None:
        """The key's deadline in Unix ms, or None for no TTL (the key must exist)."""
        return self.expires.get(key)

    def set_expire(self, key: bytes, when_ms: int) -> None:
        """Set the deadline of an existing key (Unix ms). Does not touch WATCHers."""
        self.expires[key] = when_ms
        heapq.heappush(self._heap, (when_ms, key))
        if len(self._heap) > 2 * len(self.expires) + 1024:
            self._heap = [(w, k) for k, w in self.expires.items()]
            heapq.heapify(self._heap)

    def persist(self, key: bytes) -> bool:
        """Remove the key's TTL; True if it had one."""
        return self.expires.pop(key, None) is not None

    def touch(self, key: bytes) -> None:
        """Signal ``key`` modified to its WATCHers (Redis's touchWatchedKey) and to client
        tracking."""
        hook = self.track_hook
        if hook is not None:
            hook(self.index, key)
        entries = self.watchers.get(key)
        if not entries:
            return
        exists = key in self.data
        for wk in list(entries):
            if wk.expired and not exists:
                # Already-expired key deleted: logically no change (Redis 7.0).
                wk.expired = False
                continue
            mark_dirty(wk.client)

    def flush(self) -> int:
        """Delete every key (FLUSHDB); returns how many there were. Touches WATCHers of keys
        that existed."""
        n = len(self.data)
        if self.track_hook is not None:
            self.track_hook(self.index, None)
        if self.watchers:
            for key, entries in list(self.watchers.items()):
                if key in self.data:
                    for wk in list(entries):
                        if wk.expired:
                            wk.expired = False
                            continue
                        mark_dirty(wk.client)
        old = self.data
        self.data = {}
        self.big_keys = set()
        self.expires = {}
        self._heap = []
        if self.sizes is not None:
            if self.meter is not None:
                self.meter.total -= sum(self.sizes.values())
            self.sizes = {}
        self.access = {}
        self.scan_cache = None
        if self.flush_event is not None:
            self.flush_event(self.index)
        else:
            for key in old:
                self._key_event(self.index, key)
        return n

    def _expire_key(self, key: bytes) -> None:
        # Expiry deletion is a modification for WATCH (signalModifiedKey in Redis 7.0).
        del self.data[key]
        del self.expires[key]
        self.big_keys.discard(key)
        self.expired_count += 1
        if self.sizes is not None:
            self.forget_size(key)
        elif self.access:
            self.access.pop(key, None)
        if self.watchers or self.track_hook is not None:
            self.touch(key)
        self._key_event(self.index, key)
        if self.expired_event is not None:
            self.expired_event(self.index, key)

    def active_expire(self, now_ms: int, budget: int = 1000) -> int:
        """Delete up to ``budget`` due keys; returns how many were deleted."""
        heap = self._heap
        done = 0
        exp = self.expires
        while heap and done < budget and heap[0][0] <= now_ms:
            when, key = heapq.heappop(heap)
            if exp.get(key) == when:
                self._expire_key(key)
                done += 1
        return done

    def iter_items(self) -> Iterator[tuple[bytes, Any]]:
        """Iterate over live items (snapshot)."""
        now = self._clock()
        exp = self.expires
        for k, v in list(self.data.items()):
            w = exp.get(k)
            if w is None or w > now:
                yield k, v


class SizeMeter:
    """The sum of every database's key size estimates (memory upkeep on; memory.py)."""

    __slots__ = ("total",)

    def __init__(self) -> None:
        self.total = 0


class Watcher(Protocol):
    """What the keyspace needs of a connection that WATCHes keys or queues a MULTI (a
    :class:`.context.ClientState`, which sits above the keyspace)."""

    watched: list[WatchedKey]
    """The keys it WATCHes."""
    dirty_cas: bool
    """A WATCHed key changed: its EXEC fails."""
    in_multi: bool
    multi_error: bool
    multi_queue: list[tuple[CommandSpec, Sequence[bytes]]]


class WatchedKey:
    """A WATCHed key. ``expired`` is Redis 7.0's flag for a key already logically expired when
    WATCH ran: its later deletion is not a modification."""

    __slots__ = ("client", "db", "expired", "key")

    def __init__(self, client: Watcher, db: Database, key: bytes, expired: bool) -> None:
        self.client = client
        self.db = db
        self.key = key
        self.expired = expired


def mark_dirty(client: Watcher) -> None:
    """Flag ``client``'s transaction as touched and drop its WATCHes (like Redis)."""
    client.dirty_cas = True
    unwatch_all(client)


def unwatch_all(client: Watcher) -> None:
    """Remove all of ``client``'s WATCHed keys."""
    for wk in client.watched:
        entries = wk.db.watchers.get(wk.key)
        if entries is not None:
            try:
                entries.remove(wk)
            except ValueError:
                pass
            if not entries:
                del wk.db.watchers[wk.key]
    client.watched = []


def discard_transaction(client: Watcher) -> None:
    """Forget the queued commands, the MULTI state and the WATCHes (Redis's
    discardTransaction)."""
    client.multi_queue = []
    client.in_multi = False
    client.multi_error = False
    client.dirty_cas = False
    unwatch_all(client)


class Keyspace:
    """The numbered databases (16 by default)."""

    def __init__(self, clock: Callable[[], int], key_event: KeyEvent, databases: int = 16) -> None:
        self.clock = clock
        self.dbs: list[Database] = [Database(i, clock, key_event) for i in range(databases)]

    def active_expire(self, budget: int = 1000) -> int:
        """Run one active-expiry pass over every database."""
        now = self.clock()
        done = 0
        for db in self.dbs:
            if db.expires:
                done += db.active_expire(now, budget)
        return done

    def flush_all(self) -> int:
        """FLUSHALL: empty every database; returns the number of keys removed."""
        return sum(db.flush() for db in self.dbs)


def glob_match(pattern: bytes, string: bytes, nocase: bool = False) -> bool:
    """Redis's ``stringmatchlen``: ``*``, ``?``, ``[...]`` (``^`` negation, ``a-z`` ranges,
    ``\\`` escapes) with its edge cases (an unclosed ``[`` runs to the pattern's end)."""
    if pattern == b"*":
        return True
    if nocase:
        pattern = pattern.lower()
        string = string.lower()
    skip = [False]
    return _match(pattern, 0, string, 0, skip)


def _match(p: bytes, pi: int, s: bytes, si: int, skip: list[bool]) -> bool:
    plen = len(p)
    slen = len(s)
    while pi < plen and si < slen:
        c = p[pi]
        if c == 0x2A:  # '*'
            while pi + 1 < plen and p[pi + 1] == 0x2A:
                pi += 1
            if pi + 1 == plen:
                return True
            while si < slen:
                if _match(p, pi + 1, s, si, skip):
                    return True
                if skip[0]:
                    return False
                si += 1
            # No match for the rest anywhere: longer matches of earlier stars cannot help.
            skip[0] = True
            return False
        if c == 0x3F:  # '?'
            si += 1
        elif c == 0x5B:  # '['
            pi += 1
            negate = pi < plen and p[pi] == 0x5E
            if negate:
                pi += 1
            matched = False
            sc = s[si]
            while True:
                if pi < plen and p[pi] == 0x5C and plen - pi >= 2:
                    pi += 1
                    if p[pi] == sc:
                        matched = True
                elif pi < plen and p[pi] == 0x5D:
                    break
                elif pi >= plen:
                    pi -= 1
                    break
                elif plen - pi >= 3 and p[pi + 1] == 0x2D:
                    lo, hi = p[pi], p[pi + 2]
                    if lo > hi:
                        lo, hi = hi, lo
                    pi += 2
                    if lo <= sc <= hi:
                        matched = True
                elif p[pi] == sc:
                    matched = True
                pi += 1
            if negate:
                matched = not matched
            if not matched:
                return False
            si += 1
        else:
            if c == 0x5C and plen - pi >= 2:  # '\\'
                pi += 1
                c = p[pi]
            if c != s[si]:
                return False
            si += 1
        pi += 1
        if si == slen:
            while pi < plen and p[pi] == 0x2A:
                pi += 1
            break
    return pi == plen and si == slen
