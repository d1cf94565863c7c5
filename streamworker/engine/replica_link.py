"""The replica side of replication: the engine's server following a master (REPLICAOF).

A :class:`ReplicaLink` runs on the server's event loop, in the background: REPLICAOF returns
at once and the link connects, hands shakes and synchronizes while clients keep being served
(with READONLY / MASTERDOWN as :class:`~.replication.Replication` decides). What it does, as a
Redis 7.0 replica does:

1. Connect to the master (``repl-timeout`` bounds the connect and every later wait).
2. Handshake: ``PING``; ``AUTH [masteruser] masterauth`` when ``masterauth`` is set;
   ``REPLCONF listening-port <port>``; ``REPLCONF capa eof capa psync2``; ``PSYNC ? -1``.
3. Read ``+FULLRESYNC <replid> <offset>`` and the RDB, as a ``$<length>`` bulk or in the
   diskless form (``$EOF:<40-byte mark>``, the data, the mark); the newlines a master sends
   while it prepares the snapshot are skipped.
4. Replace the data with the snapshot (every database emptied, then loaded; with an
   append-only file it is rewritten from the result), adopt the master's replication ID and
   offset, disconnect the engine's own replicas (they resynchronize), send ``REPLCONF ACK``.
5. Apply the master's stream as the master's client: writes bypass READONLY and get no
   replies, ``REPLCONF GETACK`` is answered ``REPLCONF ACK <offset>``, the offset counts the
   bytes applied and ``REPLCONF ACK <offset>`` goes to the master every second. The engine's
   own replicas get the same bytes (Redis proxies its master's stream).
6. When the link breaks (EOF, an error, nothing within ``repl-timeout``), the link is down
   (INFO's ``master_link_status:down``) and it reconnects after 1 s, then 2, 4, at most 5 s
   between attempts, from step 1.

Partial resynchronization is not implemented: every (re)connection is a full one
(``PSYNC ? -1``), as a replica without a cached master does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from typing import TYPE_CHECKING

from streamworker.engine.context import Blocked
from streamworker.engine.errors import CommandError
from streamworker.engine.protocol import ProtocolError, RequestParser
from streamworker.engine.rdb.files import load_rdb_bytes
from streamworker.engine.rdb.primitives import RdbFormatError
from streamworker.engine.replication import (
    LINK_CONNECTING,
    LINK_HANDSHAKE,
    LINK_SYNC,
    encode_command,
)

if TYPE_CHECKING:
    from streamworker.engine.aof import AppendOnlyFile
    from streamworker.engine.context import ClientState
    from streamworker.engine.core import Engine
    from streamworker.engine.replication import Replication

__all__ = ["LinkError", "ReplicaLink"]

_log = logging.getLogger("streamworker.engine.replication")

_EOF_MARK_LEN = 40
_READ_CHUNK = 64 * 1024
_FIRST_RETRY_S = 1.0
_MAX_RETRY_S = 5.0
_ACK_PERIOD_S = 1.0
_QUICK_ACKS = 5
_QUICK_ACK_PERIOD_S = 0.05
_CONNECTING_AFTER_S = 0.5
# Replies to PING that still mean "go on" (Redis's syncWithMaster: the master wants AUTH).
_PING_OK_ERRORS = (b"-NOAUTH", b"-NOPERM", b"-ERR operation not permitted")


class LinkError(Exception):
    """The master answered something that ends this attempt (it is retried)."""


def _command(*argv: bytes) -> bytes:
    out = bytearray()
    encode_command(out, argv)
    return bytes(out)


class ReplicaLink:
    """The link to ``repl.master_host``:``repl.master_port`` (a
    :class:`~.replication.LinkHandle`). Created under the engine lock by REPLICAOF (through
    the starter the server installs); the work starts on ``loop`` at its next turn.

    ``listening_port`` is what REPLCONF listening-port announces; ``aof`` is the server's
    append-only file (rewritten after each full synchronization), None in memory.
    """

    def __init__(
        self,
        repl: Replication,
        loop: asyncio.AbstractEventLoop,
        listening_port: int,
        aof: AppendOnlyFile | None,
    ) -> None:
        assert repl.master_host is not None
        self.repl = repl
        self.engine: Engine = repl.engine
        self.host = repl.master_host
        self.port = repl.master_port
        self.loop = loop
        self.listening_port = listening_port
        self.aof = aof
        self.stopped = False
        self._task: asyncio.Task[None] | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._last_error_log = 0.0
        loop.call_soon_threadsafe(self._start)

    # -- LinkHandle ---------------------------------------------------------------------

    def stop(self) -> None:
        """Stop for good (REPLICAOF NO ONE, another master, the server closing)."""
        self.stopped = True
        task = self._task
        if task is not None:
            self.loop.call_soon_threadsafe(task.cancel)
        writer = self._writer
        if writer is not None:
            self.loop.call_soon_threadsafe(writer.transport.abort)

    async def wait_stopped(self) -> None:
        """Wait for the link's task to end after :meth:`stop` (the server's close)."""
        task = self._task
        if task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    # -- the loop -----------------------------------------------------------------------

    def _start(self) -> None:
        if not self.stopped:
            self._task = self.loop.create_task(self._run())

    async def _run(self) -> None:
        delay = _FIRST_RETRY_S
        while not self.stopped:
            synced = False
            try:
                synced = await self._session()
            except asyncio.CancelledError:
                raise
            except (
                OSError,
                EOFError,
                TimeoutError,
                ValueError,
                asyncio.IncompleteReadError,
                LinkError,
                ProtocolError,
                RdbFormatError,
            ) as exc:
                if not self.stopped:
                    _log.warning(
                        "replication link to master %s:%d: %s",
                        self.host,
                        self.port,
                        exc or type(exc).__name__,
                    )
            finally:
                self._close_writer()
                with self.engine.lock:
                    if not self.stopped:
                        self.repl.drop_master_client()
            if synced:
                delay = _FIRST_RETRY_S
            await asyncio.sleep(delay)
            delay = min(delay * 2, _MAX_RETRY_S)

    def _close_writer(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.transport.abort()

    def _timeout_s(self) -> float:
        return float(self.engine.config.get_int("repl-timeout") or 60)

    def _set_state(self, state: str) -> None:
        with self.engine.lock:
            if not self.stopped:
                self.repl.link_state = state

    async def _line(self, reader: asyncio.StreamReader, skip_empty: bool = False) -> bytes:
        # One reply line without its CRLF; the newlines a master sends to keep a replica
        # waiting for its snapshot are skipped when asked.
        while True:
            line = await asyncio.wait_for(reader.readline(), self._timeout_s())
            if not line:
                raise EOFError("the master closed the connection")
            line = line.rstrip(b"\r\n")
            if line or not skip_empty:
                return line

    async def _session(self) -> bool:
        """One connection: handshake, full synchronization, then the stream until it breaks.
        Returns True once the data was loaded (the next attempt starts with a short wait)."""
        timeout = self._timeout_s()
        # Redis tries a non-blocking connect at once: a refused one leaves the state at
        # "connect"; one still in progress is "connecting". The same, seen from outside (a
        # connect that takes more than half a second is "connecting": a refused one never,
        # however busy this loop is).
        # The name is resolved first (in a thread: that may take long on a busy machine and
        # is not the connect Redis times); the clock for "connecting" starts at the connect.
        infos = await asyncio.wait_for(
            self.loop.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM), timeout
        )
        family, _, _, _, address = infos[0]
        host, port = str(address[0]), int(address[1])
        pending = self.loop.call_later(_CONNECTING_AFTER_S, self._set_state, LINK_CONNECTING)
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(host, port, family=family, limit=_READ_CHUNK),
                timeout,
            )
        finally:
            pending.cancel()
        self._writer = writer
        if self.stopped:
            return False
        self._set_state(LINK_HANDSHAKE)
        await self._handshake(reader, writer)
        writer.write(_command(b"PSYNC", b"?", b"-1"))
        reply = await self._line(reader, skip_empty=True)
        if not reply.startswith(b"+FULLRESYNC"):
            # -NOMASTERLINK / -LOADING: the master cannot serve us yet; anything else too.
            raise LinkError(f"PSYNC answered {reply[:200]!r}")
        words = reply.split()
        if len(words) != 3:
            raise LinkError(f"malformed FULLRESYNC reply {reply[:200]!r}")
        replid = words[1].decode("ascii", "replace")
        offset = int(words[2])
        payload = await self._read_snapshot(reader)
        if not self._load(payload, replid, offset):
            return False
        _log.info(
            "replication: synchronized with master %s:%d (%d bytes of RDB, offset %d)",
            self.host,
            self.port,
            len(payload),
            offset,
        )
        writer.write(_command(b"REPLCONF", b"ACK", b"%d" % offset))
        acks = self.loop.create_task(self._ack_every_second(writer))
        try:
            await self._stream(reader, writer)
        finally:
            acks.cancel()
        return True

    async def _handshake(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(_command(b"PING"))
        pong = await self._line(reader)
        if pong.startswith(b"-") and not pong.startswith(_PING_OK_ERRORS):
            raise LinkError(f"PING answered {pong[:200]!r}")
        cfg = self.engine.config
        password = cfg.get("masterauth") or ""
        if password:
            user = cfg.get("masteruser") or ""
            args = (
                [b"AUTH", user.encode(), password.encode()]
                if user
                else [b"AUTH", password.encode()]
            )
            writer.write(_command(*args))
            answer = await self._line(reader)
            if answer.startswith(b"-"):
                raise LinkError(
                    f"unable to AUTH to the master: {answer[1:200].decode('utf-8', 'replace')}"
                )
        writer.write(_command(b"REPLCONF", b"listening-port", b"%d" % self.listening_port))
        await self._line(reader)  # an old master's error is not fatal (as in Redis)
        writer.write(_command(b"REPLCONF", b"capa", b"eof", b"capa", b"psync2"))
        await self._line(reader)

    async def _read_snapshot(self, reader: asyncio.StreamReader) -> bytes:
        self._set_state(LINK_SYNC)
        header = await self._line(reader, skip_empty=True)
        if header.startswith(b"-"):
            raise LinkError(f"the master sent an error instead of its data: {header[:200]!r}")
        if not header.startswith(b"$"):
            raise LinkError(f"bad protocol from the master: {header[:200]!r}")
        repl = self.repl
        timeout = self._timeout_s()
        data = bytearray()
        if header.startswith(b"$EOF:"):
            mark = header[5:]
            if len(mark) != _EOF_MARK_LEN:
                raise LinkError(f"bad EOF mark from the master: {header[:200]!r}")
            self._transfer(-1, 0)
            while not (len(data) >= _EOF_MARK_LEN and data.endswith(mark)):
                chunk = await asyncio.wait_for(reader.read(_READ_CHUNK), timeout)
                if not chunk:
                    raise EOFError("the master closed the connection during the transfer")
                data += chunk
                self._transfer(-1, len(data))
            del data[-_EOF_MARK_LEN:]
            return bytes(data)
        size = int(header[1:])
        if size < 0:
            raise LinkError(f"bad bulk length from the master: {header[:200]!r}")
        self._transfer(size, 0)
        while len(data) < size:
            chunk = await asyncio.wait_for(reader.read(min(_READ_CHUNK, size - len(data))), timeout)
            if not chunk:
                raise EOFError("the master closed the connection during the transfer")
            data += chunk
            self._transfer(size, len(data))
        with self.engine.lock:
            repl.transfer_read = len(data)
        return bytes(data)

    def _transfer(self, size: int, done: int) -> None:
        with self.engine.lock:
            repl = self.repl
            repl.transfer_size = size
            repl.transfer_read = done
            repl.transfer_last_io = time.monotonic()

    def _load(self, payload: bytes, replid: str, offset: int) -> bool:
        # Redis's readSyncBulkPayload: the engine's own replicas go (their history is not
        # the new one), the data is replaced, the master's client is created.

        engine = self.engine
        with engine.lock:
            if self.stopped:
                return False
            repl = self.repl
            repl.disconnect_replicas()
            engine.keyspace.flush_all()
            if engine.functions is not None:
                # The master's libraries replace the replica's, none if it has none (Redis).
                engine.functions.flush_all()
            try:
                load_rdb_bytes(engine, payload)
            finally:
                if self.aof is not None:
                    # From now on the file holds the master's data (or none, if it failed).
                    self.aof.rewrite()
            client = engine.connect()
            client.addr = f"{self.host}:{self.port}"
            # CLIENT KILL of the master's client closes the link (it reconnects, as Redis).
            client.kill = self._close_writer
            repl.synced(replid, offset, client)
        return True

    async def _ack_every_second(self, writer: asyncio.StreamWriter) -> None:
        # A redis-server master that sent its snapshot diskless starts the stream on the
        # first ACK it gets once it has seen its own transfer end, which may come after the
        # ACK sent at load: a few quick ones first start the stream without waiting a second.
        for _ in range(_QUICK_ACKS):
            await asyncio.sleep(_QUICK_ACK_PERIOD_S)
            with self.engine.lock:
                offset = self.repl.master_offset
            writer.write(_command(b"REPLCONF", b"ACK", b"%d" % offset))
        while True:
            await asyncio.sleep(_ACK_PERIOD_S)
            with self.engine.lock:
                offset = self.repl.master_offset
            writer.write(_command(b"REPLCONF", b"ACK", b"%d" % offset))

    async def _stream(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        parser = RequestParser()
        engine = self.engine
        repl = self.repl
        timeout = self._timeout_s()
        while True:
            data = await asyncio.wait_for(reader.read(_READ_CHUNK), timeout)
            if not data:
                raise EOFError("the master closed the connection")
            with engine.lock:
                if self.stopped:
                    return
                repl.last_io = time.monotonic()
                repl.master_read_offset += len(data)
                commands = parser.feed(data)
                client = repl.master_client
                assert client is not None
                client.last_interaction_ms = time.time_ns() // 1_000_000
                for argv in commands:
                    raw = _command(*argv)
                    if (
                        len(argv) >= 2
                        and argv[0].lower() == b"replconf"
                        and argv[1].lower() == b"getack"
                    ):
                        # The offset before this command, as Redis answers it.
                        writer.write(_command(b"REPLCONF", b"ACK", b"%d" % repl.master_offset))
                    else:
                        self._apply(client, argv)
                    repl.applied(raw)

    def _apply(self, client: ClientState, argv: list[bytes]) -> None:
        engine = self.engine
        repl = self.repl
        repl.applying = True
        try:
            reply = engine.execute(client, argv)
        finally:
            repl.applying = False
        if isinstance(reply, Blocked):
            # The master's stream holds effects, never a wait: do not keep one.
            engine.timeout_blocked(reply)
        elif isinstance(reply, CommandError):
            # The replica now differs from its master (a command the engine lacks or
            # refuses): said in the log, at most once a second, as Redis warns of errors it
            # would send its master.
            now = time.monotonic()
            if now - self._last_error_log >= 1.0:
                self._last_error_log = now
                _log.warning(
                    "replication: the master's %s failed on this replica: %s",
                    argv[0][:64].decode("utf-8", "replace").upper(),
                    reply.text,
                )
