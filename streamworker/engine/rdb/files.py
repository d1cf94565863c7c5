"""RDB files: what SAVE/BGSAVE write and ``engine serve --load-rdb`` reads (Redis 7.0, RDB
version 10).

Layout written: ``REDIS0010``; aux fields ``redis-ver`` (7.0.15), ``redis-bits``, ``ctime``,
``used-mem``, ``aof-base`` (0); per non-empty database ``SELECTDB`` and ``RESIZEDB``, then each
live key as [``EXPIRETIME_MS``] type, key, value (:mod:`.codec`); ``EOF``; the CRC-64 of all of
it (8 bytes LE; zero when ``rdbchecksum`` is ``no``, as Redis writes it). Function libraries
(FUNCTION LOAD) go after the aux fields, one ``FUNCTION2`` record of their code each, as
redis-server 7.0 writes them.

Reading accepts RDB versions 1 to 10, every opcode Redis 7.0 writes (aux fields are read and
ignored; ``FUNCTION2`` libraries are loaded as FUNCTION LOAD would, after the keys),
skips keys that are already expired and empty collections (as a Redis master does), and fails
with :class:`RdbLoadError` naming the file, the byte offset and the reason for anything else:
a truncated or damaged file, a wrong checksum, a version newer than 10, module data.
"""

from __future__ import annotations

import logging
import os
import resource
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from streamworker.engine.crc64 import crc64, crc64_bytes
from streamworker.engine.errors import CommandError
from streamworker.engine.functions import LibraryCtx, functions_for
from streamworker.engine.rdb.codec import (
    KNOWN_TYPES,
    RDB_VERSION,
    EncodingLimits,
    decode_object,
    encode_object,
)
from streamworker.engine.rdb.idmp import AUX_NAME, attach_idmp, idmp_aux_values
from streamworker.engine.rdb.primitives import RdbFormatError, Reader, save_len, save_string

if TYPE_CHECKING:
    from streamworker.engine.core import Engine

__all__ = [
    "RdbLoadError",
    "SnapshotState",
    "build_rdb",
    "load_rdb",
    "load_rdb_bytes",
    "save_rdb",
    "snapshot_state",
]

_log = logging.getLogger(__name__)

OP_FUNCTION2 = 0xF5
OP_FUNCTION_PRE_GA = 0xF6
OP_MODULE_AUX = 0xF7
OP_IDLE = 0xF8
OP_FREQ = 0xF9
OP_AUX = 0xFA
OP_RESIZEDB = 0xFB
OP_EXPIRETIME_MS = 0xFC
OP_EXPIRETIME = 0xFD
OP_SELECTDB = 0xFE
OP_EOF = 0xFF

REDIS_VERSION = b"7.0.15"


class RdbLoadError(Exception):
    """An RDB file that cannot be loaded; the message names the file, offset and reason."""

    def __init__(self, path: str, offset: int, reason: str) -> None:
        super().__init__(f"cannot load RDB file {path}: {reason} (at byte offset {offset})")
        self.path = path
        self.offset = offset
        self.reason = reason


@dataclass
class SnapshotState:
    """SAVE/BGSAVE bookkeeping of one engine (LASTSAVE, INFO persistence ``rdb_*``)."""

    last_save_s: int
    saves: int = 0
    last_status_ok: bool = True
    last_bgsave_time_s: int = -1
    last_bgsave_try_s: int = 0
    bgsave_started: float | None = None
    bgsave_thread: threading.Thread | None = None
    keys_loaded: int = 0
    keys_expired: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def snapshot_state(engine: Engine) -> SnapshotState:
    """The engine's :class:`SnapshotState` (created on first use; engine lock held)."""
    st: SnapshotState | None = engine.rdb_state
    if st is None:
        st = SnapshotState(last_save_s=engine.started_ms // 1000)
        engine.rdb_state = st
    return st


def _aux(name: bytes, value: bytes) -> bytes:
    return bytes((OP_AUX,)) + save_string(name) + save_string(value)


def build_rdb(engine: Engine) -> bytes:
    """The whole RDB file for the engine's current data (call with the engine lock held)."""
    cfg = engine.config
    limits = EncodingLimits.from_config(cfg.get)
    compress = limits.rdbcompression
    now = engine.clock()
    used = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    out = [
        b"REDIS%04d" % RDB_VERSION,
        _aux(b"redis-ver", REDIS_VERSION),
        _aux(b"redis-bits", b"64"),
        _aux(b"ctime", b"%d" % (now // 1000)),
        _aux(b"used-mem", b"%d" % used),
        _aux(b"aof-base", b"0"),
    ]
    runtime = engine.functions
    if runtime is not None:
        for lib in runtime.current.libraries.values():
            out.append(bytes((OP_FUNCTION2,)) + save_string(lib.code, compress))
    for db in engine.keyspace.dbs:
        items = list(db.iter_items())
        if not items:
            continue
        expires = db.expires
        n_exp = sum(1 for k, _ in items if k in expires)
        out.append(bytes((OP_SELECTDB,)) + save_len(db.index))
        out.append(bytes((OP_RESIZEDB,)) + save_len(len(items)) + save_len(n_exp))
        for key, value in items:
            when = expires.get(key)
            if when is not None:
                out.append(bytes((OP_EXPIRETIME_MS,)) + when.to_bytes(8, "little", signed=True))
            kind, body = encode_object(value, limits, db.is_big(key))
            out.append(bytes((kind,)) + save_string(key, compress) + body)
    if engine.version.is_redis8:
        # Streams' IDMP maps (8.6+): aux fields after the keys, which Redis 7.0 skips.

        out += [_aux(AUX_NAME, value) for value in idmp_aux_values(engine)]
    out.append(bytes((OP_EOF,)))
    data = b"".join(out)
    if cfg.get("rdbchecksum") == "no":
        return data + bytes(8)
    return data + crc64_bytes(data)


def save_rdb(data: bytes, path: Path) -> None:
    """Write ``data`` to ``path`` atomically (temp file, fsync, rename, as Redis does)."""
    tmp = path.with_name(f"temp-{os.getpid()}-{threading.get_ident()}.rdb")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with _suppress_oserror():
            tmp.unlink()
        raise
    with _suppress_oserror():
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class _suppress_oserror:
    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: object, tb: object) -> bool:
        return isinstance(exc, OSError)


@dataclass
class LoadStats:
    """What a load did: keys loaded and expired keys skipped."""

    keys_loaded: int = 0
    keys_expired: int = 0
    functions_loaded: int = 0
    libraries: list[bytes] = field(default_factory=list)


def load_rdb(engine: Engine, path: Path) -> LoadStats:
    """Load the RDB file ``path`` into ``engine``'s (empty) keyspace; :class:`RdbLoadError`
    names the file and the offset of a problem, OSError when it cannot be read."""
    data = Path(path).read_bytes()
    try:
        return load_rdb_bytes(engine, data)
    except RdbFormatError as exc:
        raise RdbLoadError(str(path), exc.offset, exc.reason) from None


def load_rdb_bytes(engine: Engine, data: bytes) -> LoadStats:
    """Load an RDB image; :class:`RdbFormatError` on damage. Nothing is stored unless the
    whole file (and its checksum) is valid."""
    r = Reader(data)
    magic = r.read(9) if len(data) >= 9 else b""
    if magic[:5] != b"REDIS" or not magic[5:].isdigit():
        raise RdbFormatError("not an RDB file (no REDIS0010 signature)", 0)
    version = int(magic[5:])
    if version < 1 or version > RDB_VERSION:
        raise RdbFormatError(
            f"RDB format version {version} is newer than this engine reads (up to "
            f"{RDB_VERSION}, Redis 7.0)",
            5,
        )
    stats = LoadStats()
    now = engine.clock()
    ndb = len(engine.keyspace.dbs)
    dbi = 0
    expire: int | None = None
    loaded: list[tuple[int, bytes, object, int | None]] = []
    idmp_blobs: list[bytes] = []
    while True:
        at = r.pos
        op = r.byte()
        if op == OP_EOF:
            break
        if op == OP_SELECTDB:
            dbi = r.length()
            if dbi >= ndb:
                raise RdbFormatError(f"database {dbi} out of range (databases {ndb})", at)
            continue
        if op == OP_RESIZEDB:
            r.length()
            r.length()
            continue
        if op == OP_AUX:
            name = r.string()
            value_blob = r.string()
            if name == b"sw-idmp":
                idmp_blobs.append(value_blob)
            continue
        if op == OP_EXPIRETIME_MS:
            expire = r.ms_time()
            continue
        if op == OP_EXPIRETIME:
            expire = int.from_bytes(r.read(4), "little", signed=True) * 1000
            continue
        if op == OP_IDLE:
            r.length()
            continue
        if op == OP_FREQ:
            r.byte()
            continue
        if op == OP_FUNCTION2:
            stats.libraries.append(r.string())
            continue
        if op in (OP_FUNCTION_PRE_GA, OP_MODULE_AUX):
            raise RdbFormatError("module or pre-release function data cannot be loaded", at)
        if op not in KNOWN_TYPES:
            raise RdbFormatError(f"unknown object type {op}", at)
        key = r.string()
        value = decode_or_none(op, r)
        if value is not None:
            if expire is not None and expire <= now:
                stats.keys_expired += 1
            else:
                loaded.append((dbi, key, value, expire))
        expire = None
    end = r.pos
    if version >= 5:
        at = r.pos
        stored = r.read(8)
        if stored != bytes(8) and stored != crc64(data[:end]).to_bytes(8, "little"):
            raise RdbFormatError("wrong RDB checksum", at)
    if stats.libraries:
        _load_libraries(engine, stats)
    dbs = engine.keyspace.dbs
    # Loaded keys were last accessed at the load (the IDLE/FREQ records are skipped).
    loaded_at = (now // 1000) & 0xFFFFFF
    for dbi, key, value, when in loaded:
        db = dbs[dbi]
        if key in db.data:
            raise RdbFormatError(f"duplicate key {key!r} in database {dbi}", 0)
        db.data[key] = value
        if not engine.memory_upkeep:
            db.access[key] = loaded_at
        if when is not None:
            db.set_expire(key, when)
        stats.keys_loaded += 1
    if idmp_blobs:
        attach_idmp(engine, idmp_blobs)
    st = snapshot_state(engine)
    st.keys_loaded = stats.keys_loaded
    st.keys_expired = stats.keys_expired
    st.last_save_s = int(time.time())
    return stats


def _load_libraries(engine: Engine, stats: LoadStats) -> None:
    # Before any key is stored, all or none, as FUNCTION LOAD would run each (a name twice, a
    # library that does not compile: the load fails like any other damage).

    try:
        runtime = functions_for(engine)
        staged = LibraryCtx()
        for code in stats.libraries:
            runtime.create(code, False, staged)
    except (CommandError, ImportError) as exc:
        raise RdbFormatError(f"function library cannot be loaded: {exc}", 0) from None
    runtime.current = staged
    stats.functions_loaded = len(stats.libraries)


def decode_or_none(kind: int, r: Reader) -> object | None:
    """A value, or None for an empty collection (which a load skips, like Redis)."""
    try:
        return decode_object(kind, r)
    except RdbFormatError as exc:
        if exc.reason.startswith("empty "):
            return None
        raise
