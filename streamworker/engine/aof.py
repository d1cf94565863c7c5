"""Append-only persistence: every executed write, in RESP, replayed on start.

A data directory holds ``appendonly.aof`` and ``engine.lock``. The file is a sequence of
records, each a RESP array of bulk strings (``*3\\r\\n$3\\r\\nSET\\r\\n...``) as in Redis's
AOF, and annotation lines starting with ``#`` (Redis's loader skips those):

* ``#T:<unix-ms>`` sets the clock the following records run at. The engine clock is fixed for
  the duration of each command (:class:`CommandClock`), so replaying a record at the time it
  was first executed reproduces everything that depends on the clock: consumer seen-times,
  XCLAIM ``IDLE``, lazy expiry.
* Commands whose effects the clock or randomness decided are logged as their effects, as Redis
  propagates them: ``XADD *`` with the generated ID, approximate trimming as exact trimming,
  relative expiries as ``PEXPIREAT``/``PXAT``, ``INCRBYFLOAT`` as ``SET ... KEEPTTL``, ``SPOP``
  as ``SREM``, group reads as ``XCLAIM ... TIME ... RETRYCOUNT ... FORCE JUSTID LASTID`` plus
  ``XGROUP SETID ... ENTRIESREAD`` (see ``commands/streams.py``).
* The records of one command that wrote more than one record (EXEC, a script, a group read)
  are wrapped in ``MULTI`` / ``EXEC``: an incomplete transaction at the end of the file is
  reverted on load, like Redis's.

* ``#C:<crc32, 8 hex digits>`` precedes every record the engine writes: the CRC-32 of the
  record's bytes (from its ``*`` to its last CRLF). Redis cannot see damage inside a value (a
  flipped byte in a field loads silently); the engine can. redis-server skips these lines, so
  it still loads the file. Records without one (files from Redis, or older engine versions)
  are loaded unchecked.

A torn last record (the process died in the middle of a write) is dropped with a warning and
the file is truncated there (Redis's ``aof-load-truncated yes``). Any other damage stops the
load with :class:`AofCorruptError`, naming the byte offset: malformed RESP, a record whose
checksum does not match, and a record that fails when replayed (an unknown command, as
redis-server refuses it, or any other error: the engine logs only writes that succeeded).
``skip_damaged=True`` (``engine serve --aof-skip-damaged``) loads past damaged records
instead, logging each one at error level with its offset; the file is left as it is.

fsync policies (``appendfsync``) are Redis's: ``always`` syncs before the client whose write it
was is answered (in-process: before ``Engine.execute`` returns; the server syncs once per event
loop turn for all clients, then writes their replies), ``everysec`` from a background thread
once a second, ``no`` leaves it to the OS. In every mode the bytes reach the OS before the reply
is sent, so a killed process loses nothing; only a machine crash can cost up to a second
(``everysec``) or whatever the OS had not written (``no``).

Compaction (BGREWRITEAOF, and automatically past ``auto-aof-rewrite-percentage`` /
``auto-aof-rewrite-min-size``) runs in a forked child, as Redis's does: the child writes the
state to a temporary file and fsyncs it while the engine goes on logging to the old file; then
the writes made meanwhile are appended, the new file is fsynced and renamed over the old one,
and the directory fsynced. A crash at any point leaves the old or the new file, both complete. Streams come back exactly: entries,
last-generated-id, entries-added, max-deleted-entry-id, groups (last-delivered-id,
entries-read), consumers (seen-time) and PEL entries (owner, delivery time, delivery count),
including pending entries whose stream entry was deleted.

A directory is used by one process at a time (``fcntl.flock`` on ``engine.lock``):
:class:`DirectoryLockedError` names the process holding it.

This module is the file (opening, locking, appending, fsync, loading, compaction on disk);
:mod:`.aof_rewrite` is the pure half: record encoding and the records a rewrite writes.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import signal
import threading
import time
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamworker.engine.aof_rewrite import (
    encode_record,
    rewrite_records,
    select_record,
)
from streamworker.engine.core import Engine
from streamworker.engine.errors import CommandError
from streamworker.engine.framing import encode_call
from streamworker.engine.resp import FAST_WINDOW, read_arrays

if TYPE_CHECKING:
    from streamworker.engine.core import Engine

__all__ = [
    "AOF_FILENAME",
    "LOCK_FILENAME",
    "AofCorruptError",
    "AppendOnlyFile",
    "CommandClock",
    "DirectoryLockedError",
    "PersistenceError",
    "iter_records",
    "open_persistent",
    "rewrite_records",
]

AOF_FILENAME = "appendonly.aof"
"""The append-only file's name inside the data directory."""
LOCK_FILENAME = "engine.lock"
"""The lock file's name inside the data directory (holds the owner's pid)."""
_TEMP_SUFFIX = ".rewrite-tmp"

_log = logging.getLogger("streamworker.engine.aof")

_MULTI_RECORD = b"*1\r\n$5\r\nMULTI\r\n"
_EXEC_RECORD = b"*1\r\n$4\r\nEXEC\r\n"
_MULTI = b"#C:%08x\r\n%b" % (zlib.crc32(_MULTI_RECORD), _MULTI_RECORD)
_EXEC = b"#C:%08x\r\n%b" % (zlib.crc32(_EXEC_RECORD), _EXEC_RECORD)
_REWRITE_CHUNK = 1 << 20


class PersistenceError(Exception):
    """The data directory cannot be used (locked, unreadable, corrupt)."""


class AofCorruptError(PersistenceError):
    """The append-only file is malformed at :attr:`offset` (not a torn last record)."""

    def __init__(self, path: Path, offset: int, what: str) -> None:
        super().__init__(
            f"bad file format reading the append-only file {path} at offset {offset}: {what} "
            f"(make a backup, then truncate the file at that offset to keep what precedes it)"
        )
        self.path = path
        self.offset = offset


class DirectoryLockedError(PersistenceError):
    """Another process has the data directory open."""


class DamagedRecord:
    """What :func:`iter_records` yields for a record whose checksum does not match."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class CommandClock:
    """The engine clock under persistence: Unix milliseconds, fixed for a whole command.

    Redis reads the clock many times in one command (a group read stamps the consumer and
    each delivered entry); fixing it per command makes one ``#T`` annotation per record exact.
    :meth:`tick` advances it (before each top-level command and each housekeeping pass);
    while the file is replayed it follows the annotations instead.
    """

    __slots__ = ("now",)

    def __init__(self) -> None:
        self.now = _wall_ms()

    def __call__(self) -> int:
        return self.now

    def tick(self) -> None:
        """Read the wall clock."""
        self.now = _wall_ms()


# --- reading ---------------------------------------------------------------------------------


class _Torn(Exception):
    """The file ends inside the record that starts at ``offset``."""

    def __init__(self, offset: int) -> None:
        super().__init__(offset)
        self.offset = offset


def _read_count(data: bytes, pos: int, start: int, kind: int, path: Path) -> tuple[int, int]:
    # "<kind><digits>\r\n" at pos -> (value, position after the CRLF). A valid prefix of
    # that cut short by the end of the data is a torn record, anything else corruption.
    n = len(data)
    if pos >= n:
        raise _Torn(start)
    if data[pos] != kind:
        c = data[pos]
        got = chr(c) if 32 <= c < 127 else f"\\x{c:02x}"
        raise AofCorruptError(path, pos, f"expected {chr(kind)!r}, got {got!r}")
    cr = data.find(b"\r\n", pos + 1, pos + 23)
    if cr < 0:
        if pos + 23 > n:
            body = data[pos + 1 : n]
            if body.endswith(b"\r"):
                body = body[:-1]
            if not body or (body.isdigit() and len(body) <= 19):
                raise _Torn(start)
        raise AofCorruptError(path, pos, f"invalid {chr(kind)} count")
    digits = data[pos + 1 : cr]
    if not digits.isdigit() or len(digits) > 19:
        raise AofCorruptError(path, pos, f"invalid {chr(kind)} count")
    return int(digits), cr + 2


def _fast_records(data: bytes, pos: int) -> tuple[list[tuple[int, int, Any]], int]:
    # The records of the next few MB, read on the shared fast path (.resp). Stops at the first
    # record it cannot vouch for, which the strict reader then parses (and reports, if it is
    # malformed). Returns (records, end offset).
    # A "#C" checksum line is consumed with the record after it, or not at all: if that record
    # is not vouched for (or its checksum differs), the strict reader starts at the "#C" line.
    parts = data[pos : pos + FAST_WINDOW].split(b"\r\n")
    last = len(parts) - 1
    out: list[tuple[int, int, Any]] = []
    append = out.append
    one: list[list[bytes]] = []  # read_arrays' output, one record at a time
    off = pos
    i = 0
    crc = -1
    crc_off = -1
    view = memoryview(data)
    while i < last:
        head = parts[i]
        if head[:3] == b"#C:":
            value = head[3:]
            if crc >= 0 or len(value) != 8 or value.strip(b"0123456789abcdef"):
                break
            crc = int(value, 16)
            crc_off = off
            off += len(head) + 2
            i += 1
            continue
        if head[:3] == b"#T:":
            if crc >= 0:
                break
            value = head[3:]
            if not value.isdigit():
                break
            end = off + len(head) + 2
            append((off, end, int(value)))
            off = end
            i += 1
            continue
        j = read_arrays(parts, i, last, one, 1, last)
        if j == i:
            break
        args = one.pop()
        end = off + sum(map(len, parts[i:j])) + 2 * (j - i)
        rec_start = off
        if crc >= 0:
            if zlib.crc32(view[off:end]) != crc:
                break
            crc = -1
            rec_start = crc_off
        append((rec_start, end, args))
        off = end
        i = j
    if crc >= 0:
        off = crc_off
    view.release()
    return out, off


def iter_records(
    data: bytes, path: Path
) -> Iterator[tuple[int, int, list[bytes] | int | DamagedRecord]]:
    """Parse an append-only file: yields ``(offset, end, item)`` where item is an argv, for a
    ``#T:<ms>`` annotation the int clock value, or a :class:`DamagedRecord` for a record
    whose ``#C`` checksum does not match (its offset is the checksum line's). Other
    annotations are skipped.

    Raises :class:`AofCorruptError` on malformed input; a record cut short by the end of the
    data stops the iteration with ``_Torn``."""
    pos = 0
    n = len(data)
    crc = -1
    crc_start = -1
    while pos < n:
        if crc < 0:
            batch, after = _fast_records(data, pos)
            if batch:
                yield from batch
                pos = after
                continue
        start = pos
        c = data[pos]
        if c == 0x23:  # '#'
            nl = data.find(b"\n", pos)
            if nl < 0:
                raise _Torn(start)
            line = data[pos + 1 : nl].rstrip(b"\r")
            pos = nl + 1
            if line.startswith(b"C:"):
                value = line[2:]
                if crc >= 0 or len(value) != 8 or value.strip(b"0123456789abcdef"):
                    raise AofCorruptError(path, start, "invalid checksum annotation")
                crc = int(value, 16)
                crc_start = start
                continue
            if crc >= 0:
                raise AofCorruptError(
                    path, start, "an annotation between a checksum and its record"
                )
            if line.startswith(b"T:"):
                value = line[2:]
                if not value.isdigit():
                    raise AofCorruptError(path, start, "invalid time annotation")
                yield start, pos, int(value)
            continue
        if c != 0x2A:  # '*'
            if not data[pos:].strip(b"\0"):
                # Zeros after the last record: space the filesystem allocated for a write
                # that never completed (a machine crash). The same as a torn record.
                raise _Torn(start)
            got = chr(c) if 32 <= c < 127 else f"\\x{c:02x}"
            raise AofCorruptError(path, pos, f"expected '*' or '#', got {got!r}")
        # A torn record starts at its checksum line, if it has one.
        torn_at = crc_start if crc >= 0 else start
        argc, pos = _read_count(data, pos, torn_at, 0x2A, path)
        if argc == 0:
            raise AofCorruptError(path, start, "empty command")
        argv: list[bytes] = []
        for _ in range(argc):
            size, pos = _read_count(data, pos, torn_at, 0x24, path)
            end = pos + size
            if end + 2 > n:
                raise _Torn(torn_at)
            if data[end : end + 2] != b"\r\n":
                raise AofCorruptError(path, end, "bulk string not followed by CRLF")
            argv.append(data[pos:end])
            pos = end + 2
        if crc >= 0:
            expected, crc = crc, -1
            actual = zlib.crc32(memoryview(data)[start:pos])
            if actual != expected:
                yield (
                    crc_start,
                    pos,
                    DamagedRecord(
                        f"record checksum mismatch (CRC-32 {actual:08x}, {expected:08x} written)"
                    ),
                )
                continue
            start = crc_start
        yield start, pos, argv
    if crc >= 0:
        # A checksum line and nothing after it: the write of its record was cut short.
        raise _Torn(crc_start)


# --- the file ----------------------------------------------------------------------------------


class _Stats:
    __slots__ = (
        "last_rewrite_s",
        "last_rewrite_status",
        "last_write_errno",
        "load_errors",
        "loaded_records",
        "rewrites",
        "skipped_records",
        "truncated_bytes",
    )

    def __init__(self) -> None:
        self.rewrites = 0
        self.last_rewrite_s = -1
        self.last_rewrite_status = "ok"
        self.last_write_errno = 0
        self.loaded_records = 0
        self.load_errors = 0
        self.skipped_records = 0
        self.truncated_bytes = 0


class AppendOnlyFile:
    """The append-only file of one data directory, attached to an :class:`Engine` as its
    propagator. Create it with :func:`open_persistent`.

    ``auto_flush=True`` (in-process use) writes, and with ``always`` fsyncs, at the end of every
    ``Engine.execute``; a server passes False and calls :meth:`flush` itself once per event
    loop turn, before writing replies (group commit). All methods except :meth:`close` expect
    the engine lock to be held (the engine calls them so), or run before the engine is shared.
    """

    def __init__(
        self,
        directory: Path,
        engine: Engine,
        *,
        auto_flush: bool = True,
    ) -> None:
        self.dir = directory
        self.path = directory / AOF_FILENAME
        self.engine = engine
        self.auto_flush = auto_flush
        # Load past damaged records (logged loudly) instead of refusing to start.
        self.skip_damaged = False
        self.clock = CommandClock()
        # Propagator interface (see core.Propagator).
        self.depth = 0
        self.ops: list[tuple[int, Sequence[bytes]]] = []
        self.active = False
        self.write_error: str | None = None
        # Encoded records not yet written to the file.
        self.buf = bytearray()
        self.size = 0
        self.base_size = 0
        self.unsynced = False
        self._fd = -1
        self._lock_fd = -1
        self._db = -1
        self._last_ts = -1
        self._io_lock = threading.Lock()
        self._stop = threading.Event()
        self._fsync_thread: threading.Thread | None = None
        self._policy_version = -1
        self._policy = "everysec"
        self.stats = _Stats()
        self.closed = False
        # Background rewrites (fork); False runs them in the caller, start to end.
        self.background_rewrites = hasattr(os, "fork")
        self._child_pid = 0
        self._fork_offset = 0
        self._rewrite_started = 0.0

    # -- policy ------------------------------------------------------------------------------

    @property
    def policy(self) -> str:
        """The current ``appendfsync`` (CONFIG SET takes effect at once)."""
        cfg = self.engine.config
        if cfg.version != self._policy_version:
            self._policy = cfg.get("appendfsync") or "everysec"
            self._policy_version = cfg.version
        return self._policy

    @property
    def needs_sync(self) -> bool:
        """Whether replies must wait for :meth:`flush`: there are writes not yet on disk
        and the policy is ``always``."""
        return bool(self.buf or self.unsynced) and self.policy == "always"

    # -- Propagator ---------------------------------------------------------------------------

    def begin_call(self) -> None:
        """Fix the clock for the command about to run."""
        if self.active:
            self.clock.now = time.time_ns() // 1_000_000

    def tick(self) -> None:
        """Advance the clock for housekeeping; finish a rewrite whose child is done, start a
        due automatic one."""
        if self.active:
            self.clock.now = _wall_ms()
            if self._child_pid:
                self._wait_rewrite(block=False)
            elif not self.ops and self._rewrite_due():
                try:
                    self.start_rewrite()
                except OSError as exc:
                    _log.error("automatic AOF rewrite could not start: %s", exc)

    def end_call(self) -> None:
        """Encode the records of the call that just ended into the buffer."""
        ops = self.ops
        if not ops:
            return
        if not self.active:
            ops.clear()
            return
        out = self.buf
        now = self.clock.now
        if len(ops) == 1 and now == self._last_ts and ops[0][0] == self._db:
            # The common case: one record, same database, same millisecond.
            encode_record(out, ops[0][1])
            ops.clear()
            return
        if now != self._last_ts:
            out += b"#T:%d\r\n" % now
            self._last_ts = now
        self._db = encode_call(
            out,
            ops,
            self._db,
            encode=encode_record,
            select=select_record,
            multi=_MULTI,
            exec_=_EXEC,
        )
        ops.clear()

    def after_execute(self) -> None:
        """In-process: write (and for ``always``, fsync) what the execute call logged."""
        if self.auto_flush and (self.buf or (self.unsynced and self.policy == "always")):
            self.flush()

    # -- writing -------------------------------------------------------------------------------

    def flush(self) -> bool:
        """Write the buffered records; fsync them too under ``always``. True on success."""
        if self.buf:
            data = self.buf
            self.buf = bytearray()
            try:
                view = memoryview(data)
                written = 0
                while written < len(data):
                    written += os.write(self._fd, view[written:])
            except OSError as exc:
                # Keep what was not written: it goes out with the next flush, or the engine
                # refuses writes until it does (Redis's MISCONF).
                self.buf = bytearray(data[written:]) + self.buf
                self.size += written
                self._write_failed(exc)
                return False
            self.size += len(data)
            self.unsynced = True
            if self.write_error is not None:
                _log.warning("AOF write error cleared: the file is being written again")
                self.write_error = None
        if self.unsynced and self.policy == "always":
            return self.fsync()
        return True

    def fsync(self) -> bool:
        """fsync the file now (whatever the policy). True on success."""
        with self._io_lock:
            if self._fd < 0:
                return False
            self.unsynced = False
            try:
                os.fdatasync(self._fd)
            except OSError as exc:
                self.unsynced = True
                self._write_failed(exc)
                return False
        return True

    def _write_failed(self, exc: OSError) -> None:
        self.stats.last_write_errno = exc.errno or 0
        text = os.strerror(exc.errno) if exc.errno else str(exc)
        if self.write_error is None:
            _log.error("error writing to the append-only file %s: %s", self.path, text)
        self.write_error = text

    def _fsync_loop(self) -> None:
        while not self._stop.wait(1.0):
            if self.unsynced and self.policy == "everysec":
                self.fsync()

    # -- opening and loading -------------------------------------------------------------------

    def _lock_directory(self) -> None:
        lock_path = self.dir / LOCK_FILENAME
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                os.close(fd)
                raise
            try:
                holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "?"
            except OSError:
                holder = "?"
            os.close(fd)
            raise DirectoryLockedError(
                f"data directory {self.dir} is in use by another engine (pid {holder}); "
                "stop it first, or connect to it (streamworker engine serve) instead of "
                "opening the directory a second time"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd

    def _open(self, load_truncated: bool) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self._lock_directory()
        try:
            with contextlib.suppress(FileNotFoundError):
                (self.dir / (AOF_FILENAME + _TEMP_SUFFIX)).unlink()
            valid = self._load(load_truncated)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            size = os.fstat(self._fd).st_size
            if valid < size:
                os.ftruncate(self._fd, valid)
                os.fsync(self._fd)
                size = valid
            self.size = self.base_size = size
        except BaseException:
            self._release()
            raise

    def _load(self, load_truncated: bool) -> int:
        # Returns the length of the valid prefix of the file.
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return 0
        if not data:
            return 0
        engine = self.engine
        client = engine.connect()
        client.name = b"aof-loader"
        started = time.monotonic()
        # Replayed commands log nothing: detached, the engine takes its in-memory path.
        attached, engine.propagator = engine.propagator, None
        valid = 0
        multi_start = -1
        errors = 0
        records = 0
        try:
            try:
                for start, end, item in iter_records(data, self.path):
                    if type(item) is int:
                        self.clock.now = item
                        if multi_start < 0:
                            valid = end
                        continue
                    if type(item) is DamagedRecord:
                        errors += 1
                        self._damaged(start, item.reason)
                        if multi_start < 0:
                            valid = end
                        continue
                    argv: list[bytes] = item  # type: ignore[assignment]
                    name = argv[0].lower()
                    if name == b"multi":
                        multi_start = start
                    reply = engine.execute(client, argv)
                    records += 1
                    if isinstance(reply, CommandError):
                        # The engine logs only writes that succeeded: a record that fails
                        # now was changed after it was written (redis-server refuses an
                        # unknown command the same way).
                        errors += 1
                        cmd = argv[0].decode("utf-8", "backslashreplace")[:64]
                        self._damaged(start, f"the record ({cmd!r}) fails: {reply.text}")
                    if name == b"exec":
                        multi_start = -1
                    if multi_start < 0:
                        valid = end
            except _Torn as torn:
                if not load_truncated:
                    raise AofCorruptError(
                        self.path, torn.offset, "the last record is incomplete"
                    ) from None
                _log.warning(
                    "!!! Warning: short read while loading the AOF file %s: the last record, "
                    "at offset %d, is incomplete and is dropped (%d bytes); the file is "
                    "truncated there (aof-load-truncated yes) !!!",
                    self.path,
                    torn.offset,
                    len(data) - torn.offset,
                )
            if multi_start >= 0:
                _log.warning(
                    "Revert incomplete MULTI/EXEC transaction in AOF file %s at offset %d",
                    self.path,
                    multi_start,
                )
                engine.execute(client, [b"DISCARD"])
                valid = multi_start
        finally:
            engine.disconnect(client)
            engine.propagator = attached
        self.stats.loaded_records = records
        self.stats.load_errors = errors
        self.stats.truncated_bytes = len(data) - valid
        _log.info(
            "DB loaded from append only file %s: %d records in %.3f seconds",
            self.path,
            records,
            time.monotonic() - started,
        )
        return valid

    def _damaged(self, offset: int, reason: str) -> None:
        # A damaged record stops the load, unless the owner opted in to skipping them.
        if not self.skip_damaged:
            raise AofCorruptError(self.path, offset, reason)
        self.stats.skipped_records += 1
        _log.error(
            "!!! DAMAGED record in the append-only file %s at offset %d: %s; SKIPPED, its "
            "write is lost (--aof-skip-damaged) !!!",
            self.path,
            offset,
            reason,
        )

    # -- rewriting -----------------------------------------------------------------------------

    def _rewrite_due(self) -> bool:
        cfg = self.engine.config
        pct = int(cfg.get("auto-aof-rewrite-percentage") or 0)
        if not pct:
            return False
        if self.size < int(cfg.get("auto-aof-rewrite-min-size") or 0):
            return False
        base = self.base_size or 1
        return (self.size - base) * 100 // base >= pct

    @property
    def rewriting(self) -> bool:
        """Whether a background rewrite is in progress."""
        return self._child_pid != 0

    def start_rewrite(self) -> bool:
        """Start compacting the file (BGREWRITEAOF); False if a rewrite is in progress.

        Like Redis, in a forked child: it writes the state as of now to a temporary file and
        fsyncs it while the engine goes on; the writes made meanwhile still go to the old file
        (which stays complete), and :meth:`tick` finishes the job once the child is done:
        those writes are appended to the new file, which is fsynced and renamed over the old
        one, and the directory fsynced. Without ``os.fork`` it runs to completion here.
        Raises OSError if the rewrite cannot start (the old file stays in use)."""
        if self._child_pid:
            return False
        # What is buffered is part of the state being written: out with it first, so that
        # the old file is complete up to the snapshot.
        if not self.flush():
            raise OSError(self.stats.last_write_errno or 5, self.write_error or "write error")
        now = self.clock.now
        self._rewrite_started = time.monotonic()
        # The records written after the snapshot must stand on their own: the next one
        # states its database and clock again.
        self._db = -1
        self._last_ts = -1
        if not self.background_rewrites:
            try:
                self._snapshot(now)
            except OSError:
                with contextlib.suppress(OSError):
                    (self.dir / (AOF_FILENAME + _TEMP_SUFFIX)).unlink()
                self.stats.last_rewrite_status = "err"
                raise
            self._finish_rewrite(self.size)
            return True
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child; its exit status says how it went
            code = 1
            try:
                # Hold nothing of the parent's: should the parent be killed, its listening
                # socket, client sockets and directory lock must not outlive it in here.
                os.closerange(3, os.sysconf("SC_OPEN_MAX"))
                for sig in (signal.SIGTERM, signal.SIGINT):
                    with contextlib.suppress(ValueError, OSError):
                        signal.signal(sig, signal.SIG_DFL)
                with contextlib.suppress(ValueError, OSError):
                    signal.set_wakeup_fd(-1)
                self._snapshot(now)
                code = 0
            finally:
                os._exit(code)
        self._child_pid = pid
        self._fork_offset = self.size
        return True

    def rewrite(self) -> None:
        """Compact the file now and wait for it (see :meth:`start_rewrite`). Raises OSError
        when the rewrite fails (the old file stays in use)."""
        if not self._child_pid:
            self.start_rewrite()
        self._wait_rewrite(block=True)

    def wait_rewrite(self) -> None:
        """Wait for the rewrite in progress, if any, and finish it (OSError if it failed)."""
        self._wait_rewrite(block=True)

    def _wait_rewrite(self, block: bool) -> None:
        pid = self._child_pid
        if not pid:
            return
        try:
            done, status = os.waitpid(pid, 0 if block else os.WNOHANG)
        except ChildProcessError:
            done, status = pid, 1 << 8
        if not done:
            return
        self._child_pid = 0
        tmp = self.dir / (AOF_FILENAME + _TEMP_SUFFIX)
        if os.waitstatus_to_exitcode(status) != 0:
            self.stats.last_rewrite_status = "err"
            _log.error("AOF rewrite failed: the rewriting child exited with status %d", status)
            with contextlib.suppress(OSError):
                tmp.unlink()
            if block:
                raise OSError(5, "Background AOF rewrite failed (see the log)")
            return
        try:
            self._finish_rewrite(self._fork_offset)
        except OSError:
            if block:
                raise

    def _snapshot(self, now: int) -> None:
        # Writes the state (as this process sees it) to the temporary file and fsyncs it.
        # Runs in the forked child: no logging, no locks.
        tmp = self.dir / (AOF_FILENAME + _TEMP_SUFFIX)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            out = bytearray()
            last_annotation = b""
            for item in rewrite_records(self.engine, now):
                if type(item) is bytes:
                    if item.startswith(b"#"):
                        if item == last_annotation:
                            continue
                        last_annotation = item
                    out += item
                else:
                    encode_record(out, item)  # type: ignore[arg-type]
                if len(out) >= _REWRITE_CHUNK:
                    _write_all(fd, out)
                    out = bytearray()
            out += b"#T:%d\r\n" % now
            _write_all(fd, out)
            os.fsync(fd)
        finally:
            os.close(fd)

    def _finish_rewrite(self, offset: int) -> None:
        # The snapshot is in the temporary file: append what the old file got after it was
        # taken, fsync, rename over the old file, fsync the directory, switch to the new file.
        tmp = self.dir / (AOF_FILENAME + _TEMP_SUFFIX)
        try:
            self.flush()
            fd = os.open(tmp, os.O_WRONLY | os.O_APPEND)
            try:
                if self.size > offset:
                    with open(self.path, "rb") as old:
                        old.seek(offset)
                        while chunk := old.read(_REWRITE_CHUNK):
                            _write_all(fd, chunk)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
            _fsync_dir(self.dir)
        except OSError as exc:
            self.stats.last_rewrite_status = "err"
            _log.error("AOF rewrite failed: %s", exc)
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        newfd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        with self._io_lock:
            old_fd, self._fd = self._fd, newfd
            os.close(old_fd)
        self.size = self.base_size = os.fstat(newfd).st_size
        self.unsynced = False
        self.stats.rewrites += 1
        self.stats.last_rewrite_status = "ok"
        self.stats.last_rewrite_s = int(time.monotonic() - self._rewrite_started)
        _log.info("AOF rewritten: %s is %d bytes", self.path, self.size)

    # -- closing -------------------------------------------------------------------------------

    def close(self) -> None:
        """Finish a rewrite in progress, flush and fsync, stop the fsync thread, detach from
        the engine, release the lock."""
        with self.engine.lock:
            if self.closed:
                return
            self.closed = True
            if self._child_pid:
                with contextlib.suppress(OSError):
                    self._wait_rewrite(block=True)
            if self._fd >= 0:
                self.flush()
                self.fsync()
            if self.engine.propagator is self:
                self.engine.propagator = None
                self.engine.persistence = None
            elif self.engine.persistence is self:
                # Wrapped by the replication feed: replicas keep their stream without it.
                self.engine.replication.unwrap(self)
                self.engine.persistence = None
            self.active = False
        self._stop.set()
        if self._fsync_thread is not None:
            self._fsync_thread.join(5)
        self._release()

    def _release(self) -> None:
        with self._io_lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    # -- INFO ----------------------------------------------------------------------------------

    def info_lines(self) -> list[str]:
        """The ``aof_*`` fields of INFO persistence (Redis 7.0's names)."""
        st = self.stats
        return [
            "aof_enabled:1",
            f"aof_rewrite_in_progress:{1 if self._child_pid else 0}",
            "aof_rewrite_scheduled:0",
            f"aof_last_rewrite_time_sec:{st.last_rewrite_s}",
            "aof_current_rewrite_time_sec:"
            + (str(int(time.monotonic() - self._rewrite_started)) if self._child_pid else "-1"),
            f"aof_last_bgrewrite_status:{st.last_rewrite_status}",
            f"aof_rewrites:{st.rewrites}",
            f"aof_last_write_status:{'ok' if self.write_error is None else 'err'}",
            "aof_last_cow_size:0",
            "module_fork_in_progress:0",
            "module_fork_last_cow_size:0",
            f"aof_current_size:{self.size + len(self.buf)}",
            f"aof_base_size:{self.base_size}",
            "aof_pending_rewrite:0",
            f"aof_buffer_length:{len(self.buf)}",
            "aof_pending_bio_fsync:0",
            "aof_delayed_fsync:0",
        ]


def _write_all(fd: int, data: bytes | bytearray) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def open_persistent(
    directory: str | os.PathLike[str],
    engine: Engine | None = None,
    *,
    appendfsync: str = "everysec",
    auto_flush: bool = True,
    skip_damaged: bool = False,
) -> AppendOnlyFile:
    """Open the data directory ``directory`` (created if missing) for ``engine`` (a new
    Engine if None): lock it, replay its append-only file, and attach the file so that
    every write from now on is logged.

    Raises :class:`DirectoryLockedError` if another process has it open,
    :class:`AofCorruptError` if the file is damaged (a torn last record is dropped with a
    warning instead, unless ``aof-load-truncated`` is ``no``; damaged records are skipped
    with an error in the log if ``skip_damaged``), :class:`PersistenceError` naming the path
    and the reason when the directory or the file cannot be used (an ``OSError``: not a
    directory, permission denied, the file is a directory...), ValueError for a bad policy.
    The engine must not be in use by other threads yet.
    """
    if appendfsync not in ("always", "everysec", "no"):
        raise ValueError(f"appendfsync must be always, everysec or no, not {appendfsync!r}")
    if engine is None:
        engine = Engine()
    if engine.propagator is not None:
        raise ValueError("the engine already has an append-only file")
    path = Path(directory).resolve()
    aof = AppendOnlyFile(path, engine, auto_flush=auto_flush)
    aof.skip_damaged = skip_damaged
    with engine.lock:
        engine.set_clock(aof.clock)
        engine.propagator = aof
        engine.persistence = aof
        cfg = engine.config
        cfg.set("appendfsync", appendfsync)
        try:
            aof._open(cfg.get("aof-load-truncated") == "yes")
        except OSError as exc:
            engine.propagator = None
            engine.persistence = None
            where = exc.filename if exc.filename is not None else path
            raise PersistenceError(
                f"cannot use the data directory {path}: {where}: {exc.strerror or exc}"
            ) from exc
        except BaseException:
            engine.propagator = None
            engine.persistence = None
            raise
        cfg.set("appendonly", "yes")
        cfg.set("dir", str(path))
        aof.active = True
        aof.clock.tick()
    aof._fsync_thread = threading.Thread(
        target=aof._fsync_loop, name="streamworker-aof-fsync", daemon=True
    )
    aof._fsync_thread.start()
    return aof
