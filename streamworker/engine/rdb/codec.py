"""Values <-> RDB objects (Redis 7.0, RDB version 10), and DUMP payloads.

Encoding follows what redis-server 7.0 would hold for the same contents under the same
``*-max-listpack-*`` / ``set-max-intset-entries`` / ``list-max-listpack-size`` parameters, so a
DUMP is byte-identical to redis-server's wherever Redis's own bytes are deterministic:

* strings: ``rdbSaveRawString`` (int8/16/32 for short canonical integers, LZF over 20 bytes);
* lists: ``QUICKLIST_2`` with listpack nodes split as ``RPUSH`` fills them (a list built by LPUSH
  or LINSERT has other node boundaries on redis-server: same elements, other bytes);
* sets: ``SET_INTSET`` (all canonical integers, at most ``set-max-intset-entries``) or ``SET``;
* hashes: ``HASH_LISTPACK`` in insertion order, or ``HASH``;
* zsets: ``ZSET_LISTPACK`` (scores as Redis 7.0's ``d2string``) or ``ZSET_2`` (tail to head,
  binary doubles);
* streams: ``STREAM_LISTPACKS_2`` (see :mod:`.streams`).

Hashtable-encoded sets and hashes are written in the engine's iteration order; redis-server's
order there depends on its per-process hash seed, so only their decoded contents can match.
The engine keeps no encoding history: a value that once crossed a threshold on redis-server
stays in the big encoding there, while the engine encodes from the current contents.

Reading accepts everything Redis 7.0 loads: the types above plus ``LIST``, ``ZSET``,
``ZIPMAP``, ``LIST_ZIPLIST``, ``ZSET_ZIPLIST``, ``HASH_ZIPLIST``, ``LIST_QUICKLIST`` and
``STREAM_LISTPACKS``. Module types and anything newer (Redis 7.2's ``SET_LISTPACK``,
``STREAM_LISTPACKS_3``) are refused like Redis 7.0 refuses them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from streamworker.engine.crc64 import crc64_bytes
from streamworker.engine.ids import parse_ll
from streamworker.engine.model.stream import Stream
from streamworker.engine.model.zset import ZSet
from streamworker.engine.numbers import strtod_prefix
from streamworker.engine.rdb import streams
from streamworker.engine.rdb.listpack import (
    PackedFormatError,
    intset_decode,
    intset_encode,
    listpack_decode,
    listpack_encode,
    ziplist_decode,
    zipmap_decode,
)
from streamworker.engine.rdb.primitives import (
    RdbFormatError,
    Reader,
    d2string,
    save_binary_double,
    save_len,
    save_string,
)

__all__ = [
    "KNOWN_TYPES",
    "RDB_VERSION",
    "EncodingLimits",
    "decode_object",
    "dump_payload",
    "encode_object",
    "parse_payload",
    "payload_ok",
]

RDB_VERSION = 10

TYPE_STRING = 0
TYPE_LIST = 1
TYPE_SET = 2
TYPE_ZSET = 3
TYPE_HASH = 4
TYPE_ZSET_2 = 5
TYPE_HASH_ZIPMAP = 9
TYPE_LIST_ZIPLIST = 10
TYPE_SET_INTSET = 11
TYPE_ZSET_ZIPLIST = 12
TYPE_HASH_ZIPLIST = 13
TYPE_LIST_QUICKLIST = 14
TYPE_STREAM_LISTPACKS = 15
TYPE_HASH_LISTPACK = 16
TYPE_ZSET_LISTPACK = 17
TYPE_LIST_QUICKLIST_2 = 18
TYPE_STREAM_LISTPACKS_2 = 19

KNOWN_TYPES = frozenset(
    {0, 1, 2, 3, 4, 5, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19}
)  # rdbIsObjectType in 7.0, without the module types (6, 7)

_QUICKLIST_PLAIN = 1
_QUICKLIST_PACKED = 2
_PACKED_THRESHOLD = 1 << 30  # elements this large get a node of their own ("plain")
_SIZE_SAFETY_LIMIT = 8192
_SIZE_ESTIMATE_OVERHEAD = 8
_OPTIMIZATION_LEVEL = (4096, 8192, 16384, 32768, 65536)


@dataclass(frozen=True)
class EncodingLimits:
    """The parameters that choose encodings (Redis's defaults)."""

    hash_max_listpack_entries: int = 512
    hash_max_listpack_value: int = 64
    zset_max_listpack_entries: int = 128
    zset_max_listpack_value: int = 64
    set_max_intset_entries: int = 512
    list_max_listpack_size: int = -2
    rdbcompression: bool = True

    @classmethod
    def from_config(cls, get: Any) -> EncodingLimits:
        """Limits from a config getter (``EngineConfig.get``)."""

        def num(name: str, default: int) -> int:
            v = get(name)
            return default if v is None or v == "" else int(v)

        return cls(
            hash_max_listpack_entries=num("hash-max-listpack-entries", 512),
            hash_max_listpack_value=num("hash-max-listpack-value", 64),
            zset_max_listpack_entries=num("zset-max-listpack-entries", 128),
            zset_max_listpack_value=num("zset-max-listpack-value", 64),
            set_max_intset_entries=num("set-max-intset-entries", 512),
            list_max_listpack_size=num("list-max-listpack-size", -2),
            rdbcompression=(get("rdbcompression") or "yes") == "yes",
        )


# -- encoding -------------------------------------------------------------------------------


def _allow_insert(node_sz: int, count: int, fill: int, sz: int) -> bool:
    # quicklist.c's _quicklistNodeAllowInsert in 7.0.15: the entry is estimated at its length
    # plus 8 bytes; a negative fill is a size limit, a positive one a count limit under the
    # 8 KiB safety limit.
    new_sz = node_sz + sz + _SIZE_ESTIMATE_OVERHEAD
    if fill < 0:
        return new_sz <= _OPTIMIZATION_LEVEL[min(-fill - 1, len(_OPTIMIZATION_LEVEL) - 1)]
    if new_sz > _SIZE_SAFETY_LIMIT:
        return False
    return count + 1 <= max(fill, 1)


def _quicklist(items: Iterable[bytes], fill: int, compress: bool) -> bytes:
    fill = min(fill, (1 << 15) - 1)
    nodes: list[bytes] = []
    cur: list[bytes] = []
    cur_sz = 0
    n_nodes = 0

    def flush() -> None:
        nonlocal cur, cur_sz, n_nodes
        if cur:
            nodes.append(save_len(_QUICKLIST_PACKED) + save_string(listpack_encode(cur), compress))
            n_nodes += 1
        cur = []
        cur_sz = 0

    for item in items:
        sz = len(item)
        if sz >= _PACKED_THRESHOLD:
            flush()
            nodes.append(save_len(_QUICKLIST_PLAIN) + save_string(item, compress))
            n_nodes += 1
            continue
        if cur and not _allow_insert(cur_sz, len(cur), fill, sz):
            flush()
        if not cur:
            cur_sz = 7
        cur.append(item)
        # the node's real listpack size, as Redis's node->sz
        cur_sz += len(listpack_encode((item,))) - 7
    flush()
    return save_len(n_nodes) + b"".join(nodes)


def _is_intset(members: set[bytes], limits: EncodingLimits) -> list[int] | None:
    if len(members) > limits.set_max_intset_entries:
        return None
    out = []
    for m in members:
        v = parse_ll(m)
        if v is None:
            return None
        out.append(v)
    return out


def encode_object(value: object, limits: EncodingLimits, big: bool = False) -> tuple[int, bytes]:
    """``(type byte, object body)`` of a keyspace value, as ``rdbSaveObject`` writes it.
    ``big``: the key's hash or set was converted to its big encoding (``Database.is_big``),
    which Redis keeps, and writes, even after the value shrank back (a sorted set carries
    its own ``ZSet.big``)."""
    c = limits.rdbcompression
    if isinstance(value, bytes):
        return TYPE_STRING, save_string(value, c)
    if isinstance(value, deque):
        return TYPE_LIST_QUICKLIST_2, _quicklist(value, limits.list_max_listpack_size, c)
    if isinstance(value, set):
        ints = None if big else _is_intset(value, limits)
        if ints is not None:
            return TYPE_SET_INTSET, save_string(intset_encode(ints), c)
        return TYPE_SET, save_len(len(value)) + b"".join(save_string(m, c) for m in value)
    if isinstance(value, dict):
        lim = limits.hash_max_listpack_value
        if (
            not big
            and len(value) <= limits.hash_max_listpack_entries
            and all(len(f) <= lim and len(v) <= lim for f, v in value.items())
        ):
            flat = [x for fv in value.items() for x in fv]
            return TYPE_HASH_LISTPACK, save_string(listpack_encode(flat), c)
        return TYPE_HASH, save_len(len(value)) + b"".join(
            save_string(f, c) + save_string(v, c) for f, v in value.items()
        )
    if isinstance(value, ZSet):
        lim = limits.zset_max_listpack_value
        if (
            not value.big
            and len(value) <= limits.zset_max_listpack_entries
            and all(len(m) <= lim for m in value.scores)
        ):
            flat2: list[bytes] = []
            for score, member in value.order:
                flat2 += (member, d2string(score))
            return TYPE_ZSET_LISTPACK, save_string(listpack_encode(flat2), c)
        body = [save_len(len(value))]
        for score, member in reversed(value.order):
            body.append(save_string(member, c))
            body.append(save_binary_double(score))
        return TYPE_ZSET_2, b"".join(body)
    if isinstance(value, Stream):
        return TYPE_STREAM_LISTPACKS_2, streams.encode_stream(value, c)
    raise TypeError(f"no RDB encoding for {type(value).__name__}")


def dump_payload(value: object, limits: EncodingLimits, big: bool = False) -> bytes:
    """A DUMP payload: type, object, RDB version (2 bytes LE), CRC-64 (8 bytes LE); ``big`` as
    for :func:`encode_object`."""
    kind, body = encode_object(value, limits, big)
    data = bytes((kind,)) + body + RDB_VERSION.to_bytes(2, "little")
    return data + crc64_bytes(data)


# -- decoding -------------------------------------------------------------------------------


def payload_ok(payload: bytes) -> bool:
    """``verifyDumpPayload``: at least 10 bytes, RDB version <= 10, and a matching CRC-64
    (Redis checks the CRC over everything but the last 8 bytes)."""
    if len(payload) < 10:
        return False
    footer = payload[-10:]
    if int.from_bytes(footer[:2], "little") > RDB_VERSION:
        return False
    return crc64_bytes(payload[:-8]) == footer[2:]


def parse_payload(payload: bytes) -> object:
    """The value inside a verified DUMP payload; :class:`RdbFormatError` if it does not
    decode (RESTORE's "Bad data format")."""
    r = Reader(payload)
    kind = r.byte()
    return decode_object(kind, r)


def _score(x: bytes | int, r: Reader) -> float:
    if isinstance(x, int):
        return float(x)
    v = strtod_prefix(x)
    if v is None:
        raise r.error("bad zset score")
    return v


def _zset_from_pairs(items: list[Any], r: Reader) -> ZSet:
    if len(items) % 2:
        raise r.error("zset listpack with an odd element count")
    z = ZSet()
    for i in range(0, len(items), 2):
        member = items[i]
        if isinstance(member, int):
            member = b"%d" % member
        z.add(member, _score(items[i + 1], r))
    if not z:
        raise r.error("empty zset")
    return z


def _hash_from_pairs(items: list[bytes], r: Reader) -> dict[bytes, bytes]:
    if len(items) % 2:
        raise r.error("hash with an odd element count")
    h = {items[i]: items[i + 1] for i in range(0, len(items), 2)}
    if not h:
        raise r.error("empty hash")
    return h


def _packed(fn: Any, blob: bytes, r: Reader, what: str) -> Any:
    try:
        return fn(blob)
    except PackedFormatError as exc:
        raise r.error(f"{what}: {exc}") from None


def decode_object(kind: int, r: Reader) -> object:
    """``rdbLoadObject``: the value of type ``kind`` read from ``r``. Empty collections are
    errors (Redis refuses them in a DUMP payload and skips them in a file: the caller decides)."""
    if kind == TYPE_STRING:
        return r.string()
    if kind == TYPE_LIST:
        n = r.count()
        lst = deque(r.string() for _ in range(n))
        if not lst:
            raise r.error("empty list")
        return lst
    if kind in (TYPE_LIST_QUICKLIST, TYPE_LIST_QUICKLIST_2):
        n = r.count()
        lst = deque()
        for _ in range(n):
            container = _QUICKLIST_PACKED
            if kind == TYPE_LIST_QUICKLIST_2:
                container = r.length()
                if container not in (_QUICKLIST_PLAIN, _QUICKLIST_PACKED):
                    raise r.error("unknown quicklist node container")
            blob = r.string()
            if container == _QUICKLIST_PLAIN:
                lst.append(blob)
            elif kind == TYPE_LIST_QUICKLIST:
                lst.extend(_packed(ziplist_decode, blob, r, "quicklist ziplist"))
            else:
                lst.extend(_packed(listpack_decode, blob, r, "quicklist listpack"))
        if not lst:
            raise r.error("empty list")
        return lst
    if kind == TYPE_LIST_ZIPLIST:
        lst = deque(_packed(ziplist_decode, r.string(), r, "ziplist"))
        if not lst:
            raise r.error("empty list")
        return lst
    if kind == TYPE_SET:
        n = r.count()
        s: set[bytes] = set()
        for _ in range(n):
            m = r.string()
            if m in s:
                raise r.error("duplicate set member")
            s.add(m)
        if not s:
            raise r.error("empty set")
        return s
    if kind == TYPE_SET_INTSET:
        ints = _packed(intset_decode, r.string(), r, "intset")
        if not ints:
            raise r.error("empty set")
        return {b"%d" % v for v in ints}
    if kind in (TYPE_ZSET, TYPE_ZSET_2):
        n = r.count(2)
        z = ZSet()
        for _ in range(n):
            m = r.string()
            score = r.binary_double() if kind == TYPE_ZSET_2 else r.string_double()
            if m in z:
                raise r.error("duplicate zset member")
            if score != score:
                raise r.error("zset score is NaN")
            z.add(m, score)
        if not z:
            raise r.error("empty zset")
        return z
    if kind == TYPE_ZSET_LISTPACK:
        return _zset_from_pairs(_packed(_lp_ints, r.string(), r, "zset listpack"), r)
    if kind == TYPE_ZSET_ZIPLIST:
        return _zset_from_pairs(_packed(ziplist_decode, r.string(), r, "zset ziplist"), r)
    if kind == TYPE_HASH:
        n = r.count(2)
        h: dict[bytes, bytes] = {}
        for _ in range(n):
            f = r.string()
            v = r.string()
            if f in h:
                raise r.error("duplicate hash field")
            h[f] = v
        if not h:
            raise r.error("empty hash")
        return h
    if kind == TYPE_HASH_LISTPACK:
        return _hash_from_pairs(_packed(listpack_decode, r.string(), r, "hash listpack"), r)
    if kind == TYPE_HASH_ZIPLIST:
        return _hash_from_pairs(_packed(ziplist_decode, r.string(), r, "hash ziplist"), r)
    if kind == TYPE_HASH_ZIPMAP:
        return _hash_from_pairs(_packed(zipmap_decode, r.string(), r, "zipmap"), r)
    if kind == TYPE_STREAM_LISTPACKS:
        return streams.decode_stream(r, 1)
    if kind == TYPE_STREAM_LISTPACKS_2:
        return streams.decode_stream(r, 2)
    raise r.error(f"unknown object type {kind}")


def _lp_ints(blob: bytes) -> list[bytes | int]:
    return listpack_decode(blob, as_int=True)


__all__ += ["RdbFormatError"]
