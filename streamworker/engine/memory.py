"""Memory accounting, ``maxmemory`` eviction and the LRU/LFU access data (Redis 7.0's evict.c).

**The size estimate.** The engine does not measure Python objects: it estimates what Redis
7.0 (jemalloc, x86-64) would allocate for each key, so that ``maxmemory`` means roughly what it
means on Redis and ``MEMORY USAGE`` answers in the same range. :func:`estimate` charges, like
Redis's ``objectComputeSize`` plus the key and its dict entry:

* strings: 16-byte object; integers nothing more, up to 44 bytes one "embstr" allocation,
  longer ones a separate sds allocation;
* hashes, sets, sorted sets in their small encodings (listpack, intset, chosen by size and
  the ``*-max-listpack-*`` / ``set-max-intset-entries`` parameters) as one blob of entries; in
  their big encodings a dict entry, bucket and sds allocation per element (a skiplist node
  too for sorted sets);
* lists as quicklist nodes of up to 8 KB listpacks; streams as listpack nodes of
  ``stream-node-max-bytes`` plus a rough charge for consumer groups and pending entries.

Allocation sizes are rounded up to jemalloc's size classes. Element sizes of big values are
**sampled** (``SAMPLES``, 5 by default, 0 = all) and multiplied by the element count, as Redis
does, so one estimate costs O(samples) whatever the value's size. ``used_memory`` is Redis's
start-up overhead (:data:`STARTUP_BYTES`) plus the estimates of every key.

**Incremental upkeep.** With ``maxmemory`` set or an LRU/LFU policy chosen, the engine keeps
each key's estimate (``Database.sizes``) and access field (``Database.access``): after every
write it re-estimates the keys the command named, deletions and expiry subtract theirs, and
every command stamps the keys it looked up (except Redis's LOOKUP_NOTOUCH ones: OBJECT,
EXISTS, TYPE, TTL...). Otherwise only the access field is kept, as an LRU stamp from the
engine's cached LRU clock (one dict store per command: ``Engine._dispatch``), and
``used_memory`` is computed by a walk over the keys when asked (over the first 10,000 keys of
a database, extrapolated, when it has more). Not charged until next written: a key that
MOVE or COPY ... DB puts in another database.

**Sampling keys.** Eviction samples ``maxmemory-samples`` keys per database, as Redis does; a
random key of a large database is drawn from its first 1,024 keys in insertion order (Python
dicts have no random access), so on huge databases the choice leans to older keys.

**Access field.** As in Redis, 24 bits per key: under an LRU policy the LRU clock (seconds,
mod 2**24) of the last access; under an LFU policy the last decrement time in minutes (16 bits)
and a logarithmic counter (8 bits) that starts at 5, grows with probability
``1 / ((counter - 5) * lfu-log-factor + 1)`` and loses one per ``lfu-decay-time`` minutes.
OBJECT IDLETIME and OBJECT FREQ read it.
"""

from __future__ import annotations

import itertools
import random
import time
from collections import deque
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from streamworker.engine.keyspace import SizeMeter
from streamworker.engine.keyspecs import command_keys, movable_keys
from streamworker.engine.model.zset import ZSet
from streamworker.engine.notify import NOTIFY_EVICTED
from streamworker.engine.numbers import parse_int

if TYPE_CHECKING:
    from streamworker.engine.core import Engine
    from streamworker.engine.keyspace import Database
    from streamworker.engine.table import CommandSpec

__all__ = [
    "LFU_INIT_VAL",
    "LRU_CLOCK_MAX",
    "POLICIES",
    "STARTUP_BYTES",
    "MemoryManager",
    "alloc_size",
    "estimate",
]

STARTUP_BYTES = 876_168
"""Redis 7.0's ``used_memory_startup`` on x86-64: charged before any key."""
LRU_CLOCK_MAX = (1 << 24) - 1
LFU_INIT_VAL = 5
POLICIES = (
    "volatile-lru",
    "volatile-lfu",
    "volatile-random",
    "volatile-ttl",
    "allkeys-lru",
    "allkeys-lfu",
    "allkeys-random",
    "noeviction",
)
_POOL_SIZE = 16  # Redis's EVPOOL_SIZE
_ROBJ = 16
_DICT_ENTRY = 24
_DICT = 64  # dict struct with its two table pointers, rounded
_SKIPLIST_NODE = 48  # a node with the average 1.33 levels, rounded
_QUICKLIST = 48
_QUICKLIST_NODE = 32
_LISTPACK_HEADER = 7  # 6 header bytes + the end byte
_LIST_NODE_BYTES = 8192  # list-max-listpack-size -2
_EMBSTR_MAX = 44
_WALK_KEYS = 10_000  # keys measured per database when the upkeep is off


def alloc_size(n: int) -> int:
    """The jemalloc size class of an ``n``-byte allocation (x86-64, 16-byte quantum)."""
    if n <= 8:
        return 8
    if n <= 128:
        return (n + 15) & ~15
    step = 1 << ((n - 1).bit_length() - 3)
    return (n + step - 1) // step * step


def _sds(n: int) -> int:
    # sds header by length (sdshdr5/8/16/32/64), the bytes and the NUL.
    if n < 32:
        hdr = 1
    elif n < 256:
        hdr = 3
    elif n < 65536:
        hdr = 5
    else:
        hdr = 9
    return alloc_size(hdr + n + 1)


def _lp_entry(item: bytes) -> int:
    # One listpack entry: encoding byte(s), the data, the back-length byte(s).
    n = len(item)
    if n <= 20 and parse_int(item) is not None:
        return 3 + (n > 4) * 4
    if n < 64:
        return n + 2
    if n < 4096:
        return n + 4
    return n + 10


def _string(value: bytes) -> int:
    n = len(value)
    if n <= 20 and (value.isdigit() or value[:1] == b"-") and parse_int(value) is not None:
        return _ROBJ
    if n <= _EMBSTR_MAX:
        return alloc_size(_ROBJ + 3 + n + 1)
    return _ROBJ + _sds(n)


def _buckets(n: int) -> int:
    return 8 * (1 << max(2, (n - 1).bit_length())) if n else 0


def _sample(items: Iterable[Any], n: int, samples: int) -> tuple[list[Any], float]:
    """Up to ``samples`` items (all if 0) and the factor from their count to ``n``."""
    taken = list(items) if samples <= 0 else list(itertools.islice(items, samples))
    return taken, (n / len(taken) if taken else 0.0)


_LIMIT_NAMES = (
    "hash-max-listpack-value",
    "hash-max-listpack-entries",
    "set-max-intset-entries",
    "zset-max-listpack-value",
    "zset-max-listpack-entries",
    "stream-node-max-bytes",
)


def read_limits(engine: Engine) -> dict[str, int]:
    """The encoding parameters the estimate depends on (cached by the MemoryManager)."""
    return {name: int(engine.config.get(name) or 0) for name in _LIMIT_NAMES}


def _config_int(engine: Engine, name: str) -> int:
    return engine.memory.limits[name]


def estimate(engine: Engine, value: Any, samples: int = 5) -> int:
    """Redis 7.0's approximate allocation for ``value`` (without its key): see the module
    doc. O(``samples``); ``samples`` 0 looks at every element."""
    if type(value) is bytes:
        return _string(value)
    n = len(value)
    if isinstance(value, dict):
        taken, factor = _sample(value.items(), n, samples)
        limit = _config_int(engine, "hash-max-listpack-value")
        small = n <= _config_int(engine, "hash-max-listpack-entries") and all(
            len(f) <= limit and len(v) <= limit for f, v in taken
        )
        if small:
            blob = sum(_lp_entry(f) + _lp_entry(v) for f, v in taken) * factor
            return _ROBJ + alloc_size(_LISTPACK_HEADER + int(blob))
        if not taken:
            return _ROBJ + _DICT
        # Big values: the average sampled sizes, allocated once per element.
        avg_f = sum(len(f) for f, _ in taken) // len(taken)
        avg_v = sum(len(v) for _, v in taken) // len(taken)
        return _ROBJ + _DICT + _buckets(n) + n * (_DICT_ENTRY + _sds(avg_f) + _sds(avg_v))
    if isinstance(value, set):
        taken, factor = _sample(value, n, samples)
        ints = [parse_int(m) if len(m) <= 20 else None for m in taken]
        if n <= _config_int(engine, "set-max-intset-entries") and all(i is not None for i in ints):
            width = max(
                (2 if -(2**15) <= i < 2**15 else 4 if -(2**31) <= i < 2**31 else 8)
                for i in ints
                if i is not None
            )
            return _ROBJ + alloc_size(8 + width * n)
        avg = sum(len(m) for m in taken) // max(1, len(taken))
        return _ROBJ + _DICT + _buckets(n) + n * (_DICT_ENTRY + _sds(avg))
    if isinstance(value, ZSet):
        taken, factor = _sample(value.scores, n, samples)
        limit = _config_int(engine, "zset-max-listpack-value")
        if n <= _config_int(engine, "zset-max-listpack-entries") and all(
            len(m) <= limit for m in taken
        ):
            blob = sum(_lp_entry(m) + 6 for m in taken) * factor
            return _ROBJ + alloc_size(_LISTPACK_HEADER + int(blob))
        avg = sum(len(m) for m in taken) // max(1, len(taken))
        return _ROBJ + 2 * _DICT + _buckets(n) + n * (_DICT_ENTRY + _SKIPLIST_NODE + _sds(avg))
    if isinstance(value, deque):
        taken, factor = _sample(value, n, samples)
        blob = int(sum(_lp_entry(e) for e in taken) * factor)
        nodes = max(1, -(-blob // _LIST_NODE_BYTES))
        return (
            _ROBJ
            + _QUICKLIST
            + nodes * _QUICKLIST_NODE
            + alloc_size(blob + nodes * _LISTPACK_HEADER)
        )
    return _stream(engine, value, samples)


def _stream(engine: Engine, stream: Any, samples: int) -> int:
    # Listpack nodes of up to stream-node-max-bytes (Redis allocates them whole), the radix
    # tree's share per node, and groups: consumers and pending entries (a rax node + NACK).
    n = len(stream)
    size = _ROBJ + 64
    if n:
        limit = samples if samples > 0 else n
        entries = stream.range(0, (1 << 128) - 1, count=limit)
        per = sum(16 + sum(len(x) + 2 for x in fields) for _, fields in entries)
        blob = per * n // max(1, len(entries))
        node_bytes = max(1, _config_int(engine, "stream-node-max-bytes") or 4096)
        nodes = max(1, stream.node_count)
        size += nodes * (64 + 40) + max(blob, min(nodes * node_bytes, blob + node_bytes))
    for group in stream.groups.values():
        size += 128 + len(group.pel) * 80 + len(group.consumers) * 96
    return size


def key_size(engine: Engine, key: bytes, value: Any, samples: int = 5) -> int:
    """MEMORY USAGE: the value's estimate plus the key's sds and its dict entry."""
    return estimate(engine, value, samples) + _sds(len(key)) + _DICT_ENTRY


class MemoryManager:
    """An engine's memory accounting and eviction. Engine lock held for every call."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.maxmemory = 0
        self.policy = "noeviction"
        self.samples = 5
        self.lfu = False
        self.lfu_log_factor = 10
        self.lfu_decay_time = 1
        self.evicted_keys = 0
        self.peak = STARTUP_BYTES
        # Whether Database.sizes are maintained and Database.access holds LRU/LFU fields (see
        # the module doc); Engine.memory_upkeep mirrors it.
        self.upkeep = False
        # performEvictions's verdict at the start of the current top-level command (scripts
        # refuse their first denyoom write when it was OOM).
        self.pre_command_oom = False
        self.meter = SizeMeter()
        self.limits = read_limits(engine)
        self._pool: list[tuple[int, int, bytes]] = []  # (score, db index, key), best last
        self._next_db = 0

    # -- configuration -----------------------------------------------------------------------

    def configure(self) -> None:
        """Re-read maxmemory, maxmemory-policy, maxmemory-samples and the LFU parameters;
        start or stop the incremental upkeep."""
        engine = self.engine
        cfg = engine.config
        before = self.maxmemory
        self.maxmemory = int(cfg.get("maxmemory") or 0)
        policy = cfg.get("maxmemory-policy") or "noeviction"
        self.samples = int(cfg.get("maxmemory-samples") or 5)
        self.lfu_log_factor = int(cfg.get("lfu-log-factor") or 0)
        self.lfu_decay_time = int(cfg.get("lfu-decay-time") or 0)
        self.limits = read_limits(engine)
        was_lfu = self.lfu
        self.lfu = policy.endswith("-lfu")
        changed_kind = policy != self.policy and was_lfu != self.lfu
        self.policy = policy
        want = self.maxmemory > 0 or policy.endswith(("-lru", "-lfu"))
        if want and not self.upkeep:
            self._start_upkeep()
        elif not want and self.upkeep:
            self._stop_upkeep(was_lfu)
        elif want and changed_kind:
            # Switching between LRU and LFU: the fields mean something else now (Redis lets
            # them "adjust over time"; the engine restarts them from now).
            self._stamp_all()
        self._pool.clear()
        if self.maxmemory and self.maxmemory != before:
            # Redis's updateMaxmemory: a new limit evicts at once (the evicted events go out
            # now), not at the next command.
            self.perform_evictions()

    def _start_upkeep(self) -> None:
        self.upkeep = True
        engine = self.engine
        engine.memory_upkeep = True
        meter = self.meter = SizeMeter()
        for db in engine.keyspace.dbs:
            sizes: dict[bytes, int] = {}
            for key, value in db.data.items():
                size = key_size(engine, key, value)
                sizes[key] = size
                meter.total += size
            db.sizes = sizes
            db.meter = meter
        if self.lfu:
            self._stamp_all()
        else:
            # The LRU stamps kept without the upkeep carry on; a key without one starts now.
            stamp = self._new_field()
            for db in engine.keyspace.dbs:
                access = db.access
                for key in db.data:
                    access.setdefault(key, stamp)

    def _stamp_all(self) -> None:
        stamp = self._new_field()
        for db in self.engine.keyspace.dbs:
            db.access = dict.fromkeys(db.data, stamp)

    def _stop_upkeep(self, was_lfu: bool) -> None:
        self.upkeep = False
        self.engine.memory_upkeep = False
        self.meter = SizeMeter()
        for db in self.engine.keyspace.dbs:
            db.sizes = None
            db.meter = None
        if was_lfu:
            # LFU fields are no LRU stamps: access times start again from now.
            self._stamp_all()

    # -- used memory -------------------------------------------------------------------------

    def dataset_bytes(self) -> int:
        """The estimates of every key (kept up to date, or a walk over the keys)."""
        engine = self.engine
        if self.upkeep:
            return self.meter.total
        total = 0
        for db in engine.keyspace.dbs:
            n = len(db.data)
            if n <= _WALK_KEYS:
                total += sum(key_size(engine, k, v) for k, v in db.data.items())
            else:
                # Not tracked and large: extrapolate from the first _WALK_KEYS keys, so that
                # INFO stays cheap on a big dataset.
                part = itertools.islice(db.data.items(), _WALK_KEYS)
                total += sum(key_size(engine, k, v) for k, v in part) * n // _WALK_KEYS
        return total

    def used_memory(self) -> int:
        """INFO ``used_memory``: start-up overhead plus the keys' estimates."""
        used = STARTUP_BYTES + self.dataset_bytes()
        if used > self.peak:
            self.peak = used
        return used

    # -- access data -------------------------------------------------------------------------

    def _clock_ms(self) -> int:
        return self.engine.clock()

    def lru_clock(self) -> int:
        """Redis's LRU clock: Unix seconds mod 2**24."""
        return (self._clock_ms() // 1000) & LRU_CLOCK_MAX

    def _minutes(self) -> int:
        return (self._clock_ms() // 60_000) & 0xFFFF

    def _new_field(self) -> int:
        if self.lfu:
            return (self._minutes() << 8) | LFU_INIT_VAL
        return self.lru_clock()

    def idle_ms(self, field: int) -> int:
        """Milliseconds since the access recorded in an LRU ``field`` (Redis's
        estimateObjectIdleTime)."""
        now = self.lru_clock()
        if now >= field:
            return (now - field) * 1000
        return (now + (LRU_CLOCK_MAX - field)) * 1000

    def lfu_counter(self, field: int) -> int:
        """The LFU counter of ``field`` after its decay (Redis's LFUDecrAndReturn)."""
        counter = field & 0xFF
        last = field >> 8
        now = self._minutes()
        elapsed = now - last if now >= last else 65535 - last + now
        periods = elapsed // self.lfu_decay_time if self.lfu_decay_time else 0
        return 0 if periods > counter else counter - periods

    def _lfu_incr(self, counter: int) -> int:
        if counter == 255:
            return 255
        base = max(0, counter - LFU_INIT_VAL)
        if random.random() < 1.0 / (base * self.lfu_log_factor + 1):
            return counter + 1
        return counter

    def touch(self, db: Database, key: bytes) -> None:
        """A command looked ``key`` up: refresh its access field (LRU stamp, or LFU decay and
        increment); a key without one (new) gets a fresh field."""
        access = db.access
        field = access.get(key)
        if field is None:
            access[key] = self._new_field()
        elif self.lfu:
            counter = self._lfu_incr(self.lfu_counter(field))
            access[key] = (self._minutes() << 8) | counter
        else:
            access[key] = self.lru_clock()

    def after_call(self, spec: CommandSpec, db: Database, argv: Sequence[bytes]) -> None:
        """Upkeep after a command ran (upkeep on): stamp the keys it looked up,
        re-estimate those it may have written."""
        first = spec.first_key
        keys: Sequence[bytes]
        if first <= 0:
            if not spec.movable:
                return
            keys = movable_keys(spec, argv)
        elif first == spec.last_key and first < len(argv):
            keys = (argv[first],)
        else:
            keys = command_keys(spec, argv)
        data = db.data
        sizes = db.sizes
        engine = self.engine
        for key in keys:
            value = data.get(key)
            if value is None:
                if sizes is not None and key in sizes:
                    self.meter.total -= sizes.pop(key)
                db.access.pop(key, None)
                continue
            if not spec.notouch:
                self.touch(db, key)
            if spec.write and sizes is not None:
                size = key_size(engine, key, value)
                self.meter.total += size - sizes.get(key, 0)
                sizes[key] = size

    # -- eviction ----------------------------------------------------------------------------

    def perform_evictions(self) -> bool:
        """Evict by ``maxmemory-policy`` until used memory is within ``maxmemory``; True if
        that could not be reached (Redis's EVICT_FAIL: denyoom commands are refused).
        A replica with ``replica-ignore-maxmemory yes`` does neither (its master evicts)."""
        if not self.maxmemory:
            return False
        engine = self.engine
        if (
            engine.replication.master_host is not None
            and engine.config.get("replica-ignore-maxmemory") == "yes"
        ):
            return False
        used = STARTUP_BYTES + self.meter.total
        if used <= self.maxmemory:
            return False
        if used > self.peak:
            self.peak = used
        if self.policy == "noeviction":
            return True
        started = time.perf_counter_ns()
        try:
            return self._evict_until(used - self.maxmemory)
        finally:
            self.engine.diagnostics.add_latency(
                "eviction-cycle", time.time_ns() // 1_000_000, time.perf_counter_ns() - started
            )

    def _evict_until(self, to_free: int) -> bool:
        freed = 0
        # Scores go stale between commands (the clock moves, keys are touched): start over.
        self._pool.clear()
        while freed < to_free:
            picked = self._pick()
            if picked is None:
                return True
            db, key = picked
            before = self.meter.total
            self._evict(db, key)
            freed += before - self.meter.total
        return False

    def _evict(self, db: Database, key: bytes) -> None:
        engine = self.engine
        # Redis's dbGenericDelete: gone whether or not its TTL passed, then "evicted".
        db.discard(key)
        self.evicted_keys += 1
        engine.pubsub.notify(NOTIFY_EVICTED, b"evicted", key, db.index)
        prop = engine.propagator
        if prop is not None and prop.depth == 0:
            # The eviction is a write of its own: DEL it in the append-only file.
            prop.begin_call()
            prop.ops.append((db.index, [b"DEL", key]))
            prop.end_call()
        elif prop is not None:
            # Inside a command (CONFIG SET maxmemory): the DEL joins that call's records.
            prop.ops.append((db.index, [b"DEL", key]))

    def _candidates(self, db: Database) -> dict[bytes, Any]:
        return db.expires if self.policy.startswith("volatile-") else db.data

    def _pick(self) -> tuple[Database, bytes] | None:
        dbs = self.engine.keyspace.dbs
        if self.policy.endswith("-random"):
            # Round-robin over the databases, a random key of the first non-empty one.
            for _ in range(len(dbs)):
                db = dbs[self._next_db]
                self._next_db = (self._next_db + 1) % len(dbs)
                pool = self._candidates(db)
                if pool:
                    return db, _random_key(pool)
            return None
        # LRU / LFU / TTL: sample maxmemory-samples keys per database into a pool of the
        # best candidates, evict the best one that still exists (Redis's evictionPoolPopulate).
        while True:
            found = False
            for db in dbs:
                pool = self._candidates(db)
                if pool:
                    found = True
                    self._populate(db, pool)
            if not found:
                return None
            while self._pool:
                _, index, key = self._pool.pop()
                db = dbs[index]
                if key in self._candidates(db) and key in db.data:
                    return db, key
            # Every pooled key was gone (deleted meanwhile): sample again.

    def _populate(self, db: Database, pool: dict[bytes, Any]) -> None:
        keys = _sample_keys(pool, self.samples)
        entries = {(k, i) for _, i, k in self._pool}
        for key in keys:
            if (key, db.index) in entries:
                continue
            score = self._score(db, key)
            self._pool.append((score, db.index, key))
        self._pool.sort()
        del self._pool[: max(0, len(self._pool) - _POOL_SIZE)]

    def _score(self, db: Database, key: bytes) -> int:
        # Higher = evicted first (Redis's "idle" of the pool).
        if self.policy == "volatile-ttl":
            return (1 << 64) - 1 - db.expires.get(key, 0)
        field = db.access.get(key)
        if field is None:
            field = self._new_field()
        if self.lfu:
            return 255 - self.lfu_counter(field)
        return self.idle_ms(field)


def _sample_keys(pool: dict[bytes, Any], count: int) -> list[bytes]:
    """About ``count`` keys of ``pool`` from a random place: consecutive keys from a random
    start among the first 1,024, wrapping around (Redis's dictGetSomeKeys also takes
    neighbouring buckets)."""
    n = len(pool)
    if n <= count:
        return list(pool)
    start = random.randrange(min(n, 1024))
    keys = list(itertools.islice(iter(pool), start, start + count))
    if len(keys) < count:
        keys += itertools.islice(iter(pool), count - len(keys))
    return keys


def _random_key(pool: dict[bytes, Any]) -> bytes:
    n = len(pool)
    if n < 64:
        return random.choice(list(pool))
    # Not uniform over huge dicts, but bounded work (Redis samples buckets, not keys, too).
    skip = random.randrange(min(n, 1024))
    return next(itertools.islice(iter(pool), skip, None))
