"""DUMP, RESTORE, SAVE and BGSAVE (Redis 7.0's RDB format, :mod:`streamworker.engine.rdb`).

RESTORE follows ``restoreCommand``'s order of checks exactly: options (``REPLACE``,
``ABSTTL``, ``IDLETIME s`` / ``FREQ f``, mutually exclusive), then BUSYKEY, then the TTL, then
the payload's version and CRC-64, then its contents ("Bad data format"). A relative TTL is
logged to the append-only file as an absolute one (``ABSTTL``), as Redis propagates it. The
engine does not apply IDLETIME and FREQ (checked, then the key counts as accessed now).

BGSAVE forks, as Redis does: the child encodes and writes the data as of the fork
(copy-on-write) while the engine serves on, and a thread waits for it and records the outcome
(LASTSAVE, INFO ``rdb_*``). SAVE encodes and writes inline, holding the engine.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from streamworker.engine import msgs
from streamworker.engine.commands import command
from streamworker.engine.commands._args import to_int
from streamworker.engine.config import parse_save_points
from streamworker.engine.errors import CommandError
from streamworker.engine.notify import NOTIFY_GENERIC
from streamworker.engine.numbers import LLONG_MAX
from streamworker.engine.rdb import codec
from streamworker.engine.rdb.files import build_rdb, save_rdb, snapshot_state
from streamworker.engine.rdb.primitives import RdbFormatError
from streamworker.engine.replies import NULL_BULK, OK, Status

if TYPE_CHECKING:
    from streamworker.engine.context import Ctx
    from streamworker.engine.core import Engine
    from streamworker.engine.replies import Reply

_log = logging.getLogger(__name__)


@command("dump", arity=2, flags=("readonly",), first_key=1, last_key=1, step=1)
def dump(ctx: Ctx, args: list[bytes]) -> Reply:
    """DUMP key -> the value serialized as redis-server 7.0 does (type, RDB object, RDB
    version 10, CRC-64), or nil."""
    value = ctx.db.get(args[0])
    if value is None:
        return NULL_BULK
    limits = codec.EncodingLimits.from_config(ctx.engine.config.get)
    return codec.dump_payload(value, limits, ctx.db.is_big(args[0]))


@command("restore", arity=-4, flags=("write", "denyoom"), first_key=1, last_key=1, step=1)
def restore(ctx: Ctx, args: list[bytes]) -> Reply:
    """RESTORE key ttl serialized-value [REPLACE] [ABSTTL] [IDLETIME seconds] [FREQ frequency]
    -> OK (see the module docstring for the checks and their order)."""
    key = args[0]
    replace = absttl = False
    idle = freq = -1
    j = 3
    while j < len(args):
        opt = args[j].lower()
        more = len(args) - j - 1
        if opt == b"replace":
            replace = True
        elif opt == b"absttl":
            absttl = True
        elif opt == b"idletime" and more >= 1 and freq == -1:
            idle = to_int(args[j + 1])
            if idle < 0:
                raise CommandError(msgs.RESTORE_IDLETIME)
            j += 1
        elif opt == b"freq" and more >= 1 and idle == -1:
            freq = to_int(args[j + 1])
            if freq < 0 or freq > 255:
                raise CommandError(msgs.RESTORE_FREQ)
            j += 1
        else:
            raise CommandError(msgs.SYNTAX)
        j += 1
    db = ctx.db
    if not replace and db.get(key) is not None:
        raise CommandError(msgs.BUSYKEY)
    ttl = to_int(args[1])
    if ttl < 0:
        raise CommandError(msgs.RESTORE_TTL)
    payload = args[2]
    if not codec.payload_ok(payload):
        raise CommandError(msgs.DUMP_PAYLOAD)
    try:
        value = codec.parse_payload(payload)
    except RdbFormatError:
        raise CommandError(msgs.BAD_DATA_FORMAT) from None
    ctx.no_propagate()
    # dbDelete: an expired key not yet reclaimed counts as deleted (no "expired" event).
    deleted = db.discard(key) if replace else False
    now = ctx.now_ms()
    if ttl and not absttl:
        ttl += now
        if ttl > LLONG_MAX:  # C's signed overflow wraps: the key counts as expired
            ttl -= 1 << 64
    if ttl and ttl <= now:
        if deleted:
            ctx.propagate([b"DEL", key])
            ctx.notify(NOTIFY_GENERIC, b"del", key)
        else:
            ctx.changed(0)
        return OK
    db.set(key, value)
    if ttl:
        db.set_expire(key, ttl)
    ctx.signal_key_ready(key)
    # "new" came with the key's creation (even over a REPLACEd key: Redis deletes, then adds).
    ctx.notify(NOTIFY_GENERIC, b"restore", key)
    # As received (options and their spelling kept), a relative TTL made absolute (Redis appends
    # ABSTTL then; a client's own absttl stays as it wrote it).
    record = [b"RESTORE", *args]
    if ttl and not absttl:
        record[2] = b"%d" % ttl
        record.append(b"ABSTTL")
    ctx.propagate(record)
    return OK


# --- SAVE / BGSAVE -----------------------------------------------------------------------


def _target(engine: Engine) -> Path:
    cfg = engine.config
    return Path(cfg.get("dir") or ".") / (cfg.get("dbfilename") or "dump.rdb")


def _bgsave_running(engine: Engine) -> bool:
    t = snapshot_state(engine).bgsave_thread
    return t is not None and t.is_alive()


@command("save", arity=1, flags=("admin", "noscript", "no-async-loading", "no-multi"))
def save(ctx: Ctx, args: list[bytes]) -> Reply:
    """SAVE -> OK once dir/dbfilename holds the data; ``ERR`` if writing failed."""
    engine = ctx.engine
    if _bgsave_running(engine):
        raise CommandError(msgs.BGSAVE_IN_PROGRESS)
    try:
        save_now(engine, "SAVE")
    except OSError:
        raise CommandError("ERR") from None
    ctx.no_propagate()
    return OK


def save_now(engine: Engine, why: str) -> None:
    """Write the RDB file now (engine lock held), as SAVE and SHUTDOWN SAVE do; OSError (logged,
    ``rdb_last_bgsave_status`` err) if it cannot be written."""
    st = snapshot_state(engine)
    data = build_rdb(engine)
    try:
        save_rdb(data, _target(engine))
    except OSError as exc:
        _log.warning("%s: cannot write %s: %s", why, _target(engine), exc)
        st.last_status_ok = False
        engine.rdb_status_changed()
        raise
    st.last_status_ok = True
    st.saves += 1
    st.last_save_s = int(time.time())
    engine.dirty = 0
    engine.rdb_status_changed()


@command("bgsave", arity=-1, flags=("admin", "noscript", "no-async-loading"))
def bgsave(ctx: Ctx, args: list[bytes]) -> Reply:
    """BGSAVE [SCHEDULE] -> "Background saving started"; the file is written by a thread."""
    if args and not (len(args) == 1 and args[0].lower() == b"schedule"):
        raise CommandError(msgs.SYNTAX)
    engine = ctx.engine
    if _bgsave_running(engine):
        raise CommandError(msgs.BGSAVE_IN_PROGRESS)
    start_bgsave(engine)
    ctx.no_propagate()
    return Status("Background saving started")


def save_points(engine: Engine) -> list[tuple[int, int]]:
    """The ``save`` parameter's (seconds, changes) pairs; empty when automatic saves are off."""
    return parse_save_points(engine.config.get("save") or "")


def scheduled_save(engine: Engine) -> bool:
    """Start a BGSAVE if a save point is reached (Redis's serverCron, engine lock held):
    at least ``changes`` changes and more than ``seconds`` since the last successful save,
    no save running, and the last attempt succeeded or is over 5 seconds old. True if one
    started."""
    st = snapshot_state(engine)
    if _bgsave_running(engine):
        return False
    now = int(time.time())
    if not st.last_status_ok and now - st.last_bgsave_try_s <= _BGSAVE_RETRY_DELAY_S:
        return False
    for seconds, changes in save_points(engine):
        if engine.dirty >= changes and now - st.last_save_s > seconds:
            _log.info("%d changes in %d seconds: saving", changes, seconds)
            start_bgsave(engine)
            return True
    return False


_BGSAVE_RETRY_DELAY_S = 5  # Redis's CONFIG_BGSAVE_RETRY_DELAY


def start_bgsave(engine: Engine) -> None:
    """Fork (or, without fork, encode now and write from a thread) a save of the data as of
    now; a thread records the outcome. On success the changes made before the fork are
    taken off the change counter (those made meanwhile still count). Engine lock held; the
    caller checked that no save is running."""
    st = snapshot_state(engine)
    path = _target(engine)
    started = time.monotonic()
    dirty_at_fork = engine.dirty
    st.last_bgsave_try_s = int(time.time())
    pid = _fork_writer(engine, path)
    data = build_rdb(engine) if pid is None else b""

    def write() -> None:
        ok = True
        if pid is not None:
            _, status = os.waitpid(pid, 0)
            ok = os.waitstatus_to_exitcode(status) == 0
            if not ok:
                _log.warning("BGSAVE: the child writing %s failed (status %d)", path, status)
        else:
            try:
                save_rdb(data, path)
            except OSError as exc:
                ok = False
                _log.warning("BGSAVE: cannot write %s: %s", path, exc)
        with engine.lock:
            st.last_status_ok = ok
            st.last_bgsave_time_s = int(time.monotonic() - started)
            st.bgsave_started = None
            if ok:
                st.saves += 1
                st.last_save_s = int(time.time())
                engine.dirty = max(0, engine.dirty - dirty_at_fork)
            engine.rdb_status_changed()

    st.bgsave_started = started
    thread = threading.Thread(target=write, name="streamworker-bgsave", daemon=True)
    st.bgsave_thread = thread
    thread.start()


def _fork_writer(engine: Engine, path: Path) -> int | None:
    """Fork a child that writes the RDB of the data as of now (copy-on-write, like Redis), so
    the engine serves on while the file is encoded and written; None where there is no fork
    (the caller then encodes under the lock and writes from a thread)."""
    if not hasattr(os, "fork"):
        return None
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child; its exit status says how it went
        code = 1
        try:
            # Hold nothing of the parent's (sockets, the data directory lock).
            os.closerange(3, os.sysconf("SC_OPEN_MAX"))
            for sig in (signal.SIGTERM, signal.SIGINT):
                with contextlib.suppress(ValueError, OSError):
                    signal.signal(sig, signal.SIG_DFL)
            with contextlib.suppress(ValueError, OSError):
                signal.set_wakeup_fd(-1)
            save_rdb(build_rdb(engine), path)
            code = 0
        finally:
            os._exit(code)
    return pid


def wait_bgsave(engine: Engine, timeout_s: float | None = None) -> None:
    """Wait for a running BGSAVE to finish (tests, shutdown)."""
    t = snapshot_state(engine).bgsave_thread
    if t is not None:
        t.join(timeout_s)
