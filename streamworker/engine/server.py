"""The engine's RESP server: ``streamworker engine serve``.

An asyncio server (one thread, like Redis's event loop) that speaks RESP2 and RESP3 to any
Redis client: redis-cli, redis-py, redis-benchmark. Commands run on an :class:`Engine`
directly in the event loop (they are short; the engine lock is uncontended in a server
process). What it does as Redis does:

* **Pipelining**: the complete commands of a read run under one engine lock acquisition
  (``execute_each``); each reply is encoded as soon as its command has run, and handed to the
  socket whenever 64 KB have gathered, when the output buffer limit is checked too: a client
  that does not read is disconnected before its next command runs, so a pipeline of huge
  replies costs at most the limit plus one reply, as in Redis.
* **Blocking commands** (XREAD/XREADGROUP BLOCK): the client waits without blocking the loop;
  it is served in FIFO order by the engine's waiter queues, or answered with the null reply at
  its deadline. Commands it pipelined behind the blocking one wait for it; what it sends
  meanwhile is kept as raw bytes (parsed once it is served, one read at a time), as Redis
  keeps a blocked client's query buffer, and counts against ``client-query-buffer-limit``.
* **Persistence** (``--dir``): the engine logs writes to its append-only file (:mod:`.aof`).
  The file is written before any reply leaves; with ``appendfsync always`` the replies of one
  event-loop turn wait for one fsync (group commit), so no client is told about a write that
  is not on disk.
* **Limits**: malformed input gets Redis's protocol error and the connection is closed
  (others are unaffected); bulk and multibulk lengths are bounded (``proto-max-bulk-len``,
  the 10-argument / 16 KB bounds before AUTH); a client whose unread replies exceed
  ``client-output-buffer-limit`` (the pubsub class for a client with a subscription, else
  normal) or whose unparsed input exceeds ``client-query-buffer-limit`` is disconnected;
  ``maxclients``; idle ``timeout``.
* **Pub/Sub**: a message for a connection is encoded into its output buffer at once, under
  the engine lock of the PUBLISH that sent it (so it precedes the reply of a command the
  subscriber is running), checked against the output limit, and handed to the socket when
  the event loop turn ends.
* **Protected mode**: binding a non-loopback address without ``requirepass`` is refused.

* **Runaway scripts** (busy mode): a script that has run ``lua-time-limit`` ms (5000, CONFIG
  SET-able) makes the server answer every other client from the script's count hook (see
  :mod:`.scripting`): ``-BUSY`` to each command, SCRIPT KILL (OK before the script's first
  write, ``-UNKILLABLE`` after it), SHUTDOWN NOSAVE (exit without the script's writes; the
  file keeps every write before it). New connections are accepted and answered the same way.
  The server accepts on its own listening sockets rather than through ``loop.create_server``:
  asyncio hands an accepted socket to its protocol one or two loop turns later, and a script
  that starts in between would leave that socket unseen (its PING unanswered until the script
  ends); here each socket is on the server's list from the moment it is accepted.

Shut down with SIGTERM or SIGINT: the server stops accepting, flushes and fsyncs the file,
closes the connections and returns. The signal is taken by a Python handler, which runs
between any two bytecodes, not only when the event loop gets back control: during a script
it ends the process at the script's next count hook (as SHUTDOWN NOSAVE), and if the server
has not exited 10 s after it (a command that never returns), a watchdog thread fsyncs the
file and ends the process.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import select
import signal
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamworker.engine import msgs
from streamworker.engine.aof import AppendOnlyFile, PersistenceError, open_persistent
from streamworker.engine.commands.functions import stats_reply
from streamworker.engine.commands.rdb import save_now
from streamworker.engine.config import parse_client_output_buffer_limit
from streamworker.engine.context import NO_REPLY, RESUME, Blocked, RawPush
from streamworker.engine.core import Engine
from streamworker.engine.errors import CommandError
from streamworker.engine.keyspace import discard_transaction
from streamworker.engine.protocol import ProtocolError, RequestParser, encode, encode_into
from streamworker.engine.rdb.files import load_rdb
from streamworker.engine.replica_link import ReplicaLink
from streamworker.engine.replies import OK, Frames, Push
from streamworker.engine.versions import DEFAULT_REDIS_VERSION

if TYPE_CHECKING:
    from streamworker.engine.context import ClientState
    from streamworker.engine.replication import LinkHandle, Replication
    from streamworker.engine.replies import Reply

__all__ = [
    "EngineServer",
    "ListenError",
    "ProtectedModeError",
    "ServerOptions",
    "check_protected_mode",
    "run_server",
]

_log = logging.getLogger("streamworker.engine.server")

_CRON_INTERVAL_S = 0.1
# Replies are handed to the socket once this many bytes wait (and the output limit checked).
_WRITE_CHUNK = 64 * 1024
# An output buffer size no client reaches (a class without limits).
_NO_LIMIT = float("inf")
# After SIGTERM/SIGINT, a process still running this much later is ended by a watchdog.
_SHUTDOWN_WATCHDOG_S = 10.0


class ProtectedModeError(ValueError):
    """Refusal to listen on a non-loopback address without a password."""


class ListenError(Exception):
    """The server cannot listen on an address (port in use, address not available...)."""


@dataclass(frozen=True)
class ServerOptions:
    """What ``streamworker engine serve`` is started with.

    ``data_dir`` None keeps the data in memory only. ``port`` 0 picks a free port (see
    :attr:`EngineServer.port`).
    """

    bind: str = "127.0.0.1"
    port: int = 6390
    data_dir: Path | None = None
    appendfsync: str = "everysec"
    requirepass: str | None = None
    aof_skip_damaged: bool = False
    """Load past damaged append-only file records (each logged at error level) instead of
    refusing to start."""
    load_rdb: Path | None = None
    """An RDB file (redis-server 7.0's SAVE, or the engine's) to load at start. With a data
    directory, only into an empty one: the loaded data is then written to its append-only
    file, which is what later starts replay (the RDB file is not read again)."""
    replicaof: tuple[str, int] | None = None
    """Start as a replica of the master at (host, port) (REPLICAOF host port, once listening)."""
    masterauth: str | None = None
    """The password the replica gives its master (the ``masterauth`` parameter)."""
    redis_version: str = DEFAULT_REDIS_VERSION
    """The Redis version the engine answers as (see :mod:`streamworker.engine.versions`)."""


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def check_protected_mode(bind: str, requirepass: str | None) -> None:
    """Raise :class:`ProtectedModeError` when ``bind`` lists an address other clients could
    reach and no password is set (Redis's protected mode, made a start-up error)."""
    if requirepass:
        return
    exposed = [h for h in bind.split() if not _is_loopback(h)]
    if exposed:
        raise ProtectedModeError(
            f"refusing to listen on {', '.join(exposed)} without a password (protected mode): "
            "anyone who can reach that address could read and change the data. "
            "Set --requirepass, or bind a loopback address (--bind 127.0.0.1)"
        )


class _Connection(asyncio.Protocol):
    """One client connection: parses requests, runs them, buffers and writes replies."""

    __slots__ = (
        "_timer",
        "blocked",
        "client",
        "closing",
        "deferred",
        "held",
        "held_bytes",
        "kill_after_reply",
        "out",
        "parser",
        "proto_error",
        "push_scheduled",
        "queued",
        "queued_bytes",
        "server",
        "soft_since",
        "transport",
    )

    def __init__(self, server: EngineServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.client: ClientState | None = None
        self.parser = RequestParser()
        self.out = bytearray()
        self.blocked: Blocked | None = None
        # Commands parsed in the same read as a blocking one, behind it (run once it is
        # served): at most one read's worth.
        self.queued: deque[list[bytes]] = deque()
        self.queued_bytes = 0
        # Reads that arrived while the client was blocked, kept as raw bytes and parsed only
        # once it is served, as Redis leaves a blocked client's query buffer unparsed: a
        # parsed command costs several times its wire size.
        self.held: deque[bytes] = deque()
        self.held_bytes = 0
        self.proto_error: ProtocolError | None = None
        self.closing = False
        self.soft_since = 0.0
        self.push_scheduled = False
        self._timer: asyncio.TimerHandle | None = None
        # CLIENT KILL of this very connection: closed once the running commands are answered.
        self.kill_after_reply = False
        # Out-of-band replies produced while this connection's own command runs (a MONITOR
        # line for its own command): they go out after that command's reply, as in Redis.
        self.deferred: list[Reply | RawPush] = []

    # -- ClientIO (CLIENT LIST) -----------------------------------------------------------

    def query_buffer_bytes(self) -> int:
        return self.parser.pending + self.queued_bytes + self.held_bytes

    def output_buffer_bytes(self) -> int:
        size = len(self.out)
        if self.transport is not None:
            size += self.transport.get_write_buffer_size()
        return size

    # -- out-of-band replies and CLIENT KILL ------------------------------------------------

    def push_reply(self, reply: Reply | RawPush) -> None:
        """Queue ``reply`` for this connection outside the request/reply flow (a MONITOR
        line); it is sent at the end of this event-loop turn."""
        client = self.client
        if self.closing or client is None or client.closed:
            return
        if client.reply_off and not isinstance(reply, (RawPush, Push)):
            # A MONITOR line is a plain reply: CLIENT REPLY OFF silences it, as in Redis
            # (invalidations are pushes and still go).
            return
        if self.server.executing is self:
            self.deferred.append(reply)
            return
        _encode_push(self.out, reply, client.resp)
        if not self.push_scheduled:
            self.push_scheduled = True
            # Thread-safe: a replica's stream is pushed by whichever thread ran the write.
            with contextlib.suppress(RuntimeError):  # the loop is closing: nothing to flush
                self.server.loop.call_soon_threadsafe(self._flush_pushed)

    def kill(self) -> None:
        """CLIENT KILL: close now, or once the running commands are answered if this is the
        connection that asked."""
        blocked = self.blocked
        if self.server.executing is self or (blocked is not None and blocked.resolved):
            # Its reply is being written (or, for a blocked client just served, about to be:
            # Redis's close-after-reply for clients a new replica unblocks).
            self.kill_after_reply = True
            return
        self.closing = True
        if self.transport is not None:
            self.transport.close()

    # -- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        server = self.server
        engine = server.engine
        server.refresh_config()
        if len(server.connections) >= server.maxclients:
            engine.stats_rejected_connections += 1
            transport.write(b"-" + msgs.MAX_CLIENTS.encode() + b"\r\n")
            transport.close()
            self.closing = True
            return
        client = self.client
        if client is None:
            client = self.new_client(
                transport.get_extra_info("peername"), transport.get_extra_info("sockname")
            )
        # else: accepted while a script was busy, and given its client then (HELLO and AUTH
        # may have run on it already).
        sock = transport.get_extra_info("socket")
        if sock is not None:
            client.fd = sock.fileno()
        client.io = self
        client.push_out = self._push
        client.push = self.push_reply
        client.kill = self.kill
        server.connections.add(self)

    def new_client(self, peer: Any, local: Any) -> ClientState:
        """This connection's client (before its transport exists, for a connection accepted
        while a script is busy)."""
        server = self.server
        engine = server.engine
        client = engine.connect()
        self.client = client
        client.addr = _format_addr(peer)
        client.laddr = _format_addr(local)
        default = engine.acl.default
        client.authenticated = default.nopass and default.enabled
        self.parser.authenticated = client.authenticated
        self.parser.max_bulk_len = server.max_bulk_len
        return client

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        server = self.server
        server.connections.discard(self)
        if self.client is not None:
            server.engine.disconnect(self.client)
            self.client.io = None
        self.out = bytearray()
        self.queued.clear()
        self.held.clear()
        self.held_bytes = 0

    def data_received(self, data: bytes) -> None:
        if self.closing or self.proto_error is not None:
            # After a protocol error nothing more is read (the connection closes once the
            # commands before the error are answered).
            return
        client = self.client
        assert client is not None
        client.last_interaction_ms = time.time_ns() // 1_000_000
        server = self.server
        if server.engine.config.version != server.cfg_version:
            server.refresh_config()
        if self.blocked is not None or self.queued or self.held:
            self.held.append(data)
            self.held_bytes += len(data)
        else:
            self._consume(data)
        if self._gone():
            return
        err = self._due_proto_error()
        if err is not None:
            self._protocol_error(err)
            return
        if self.query_buffer_bytes() > server.query_buffer_limit:
            _log.warning(
                "closing client that reached max query buffer length: id=%d addr=%s (qbuf=%d)",
                client.id,
                client.addr,
                self.query_buffer_bytes(),
            )
            self._close_now()
            return
        if self.out:
            server.send(self)

    # -- Pub/Sub --------------------------------------------------------------------------

    def _push(self, reply: Reply) -> None:
        # A message for this client (engine lock held, usually while another client's PUBLISH
        # runs): it joins the output buffer at once, as in Redis, so it precedes the reply of
        # a command this client is running; the socket gets it when the loop turn ends. The
        # buffer is checked against the client's class limit on every message, so a
        # subscriber that does not read is dropped as soon as it passes the hard limit.
        if self.closing:
            return
        client = self.client
        assert client is not None
        if type(reply) is Push:
            resp = client.resp
            data = reply.wire.get(resp)
            if data is None:
                data = reply.wire[resp] = encode(reply, resp)
            self.out += data
        else:
            encode_into(self.out, reply, client.resp)
        server = self.server
        if server.executing is not self and not self.push_scheduled:
            self.push_scheduled = True
            with contextlib.suppress(RuntimeError):  # the loop is closing: nothing to flush
                server.loop.call_soon_threadsafe(self._flush_pushed)
        transport = self.transport
        if transport is not None:
            pending = len(self.out) + transport.get_write_buffer_size()
            if server.engine.config.version != server.cfg_version:
                server.refresh_config()
            # Below the lower of the class's limits nothing can be over: the full check (and
            # its bookkeeping) only runs past it.
            floor = server.obuf_floor.get("pubsub" if client.pubsub else "normal", _NO_LIMIT)
            if pending >= floor:
                server.check_output_limit(self, pending)
            else:
                self.soft_since = 0.0

    def _flush_pushed(self) -> None:
        self.push_scheduled = False
        if self.out and not self.closing and self.server.executing is not self:
            self.server.send(self)

    # -- running commands ---------------------------------------------------------------

    def _consume(self, data: bytes) -> None:
        # Parses one read and runs its commands (until one blocks).
        try:
            cmds = self.parser.feed(data)
        except ProtocolError as exc:
            cmds = exc.commands
            self.proto_error = exc
        if cmds:
            self._run(cmds)

    def _drain(self) -> None:
        # Runs what waited behind a blocking command: the commands of its read, then the
        # reads held meanwhile, one at a time (each one's replies are sent before the next
        # is parsed), until the client blocks again, errs or goes.
        while not self.closing and self.blocked is None:
            if self.queued:
                more = list(self.queued)
                self.queued.clear()
                self.queued_bytes = 0
                self._run(more)
            elif self.held and self.proto_error is None:
                data = self.held.popleft()
                self.held_bytes -= len(data)
                self._consume(data)
                if self.out and not self.closing:
                    self.server.send(self)
            else:
                break

    def _run(self, cmds: list[list[bytes]]) -> None:
        # Runs commands until one blocks, the client quits or goes over its output limit;
        # the commands after a blocking one are queued.
        server = self.server
        client = self.client
        assert client is not None
        server.executing = self
        try:
            done = server.engine.execute_each(client, cmds, self._sink)
        finally:
            server.executing = None
            if self.deferred:
                self._flush_deferred()
        self.parser.authenticated = client.authenticated
        if server.engine.shutdown_request is not None:
            server.request_shutdown()
            return
        if self.kill_after_reply and not self.closing:
            client.closed = True
        if client.closed and not self.closing:
            # QUIT: the reply goes out, nothing after it runs.
            self.closing = True
            server.send(self, force=True)
            if self.transport is not None:
                self.transport.close()
            return
        if done < len(cmds) and not self.closing:
            rest = cmds[done:]
            self.queued.extend(rest)
            self.queued_bytes += sum(sum(map(len, argv)) + 16 * len(argv) for argv in rest)

    def _sink(self, reply: Reply | Blocked) -> bool:
        # Each reply goes to the output buffer as soon as its command has run; a buffer past
        # _WRITE_CHUNK is handed to the socket at once (so a reading client gets its first
        # byte early) and the output limit is checked (so a client that does not read is
        # dropped before the next command runs, as Redis does). False stops the pipeline.
        out = self.out
        client = self.client
        assert client is not None
        if reply is NO_REPLY or client.reply_off or client.reply_skip or client.reply_skip_next:
            # CLIENT REPLY OFF/SKIP (and SHUTDOWN): nothing goes out for this command.
            if isinstance(reply, Blocked):
                self._block(reply)
                return False
            drop = reply is NO_REPLY or client.reply_off or client.reply_skip
            if drop and _is_push_frames(reply):
                # (P|S)(UN)SUBSCRIBE confirmations are pushes: Redis writes them whatever
                # CLIENT REPLY says, in both protocols, as it does the messages.
                drop = False
            client.reply_skip = client.reply_skip_next
            client.reply_skip_next = False
            if drop:
                self._flush_deferred()
                return not client.closed
        # Bulk strings and integers (XADD's ID, XACK's count) inline: the encoder's dispatch
        # would cost as much as the reply.
        if type(reply) is bytes:
            out += b"$%d\r\n%b\r\n" % (len(reply), reply)
        elif type(reply) is int:
            out += b":%d\r\n" % reply
        elif isinstance(reply, Blocked):
            self._block(reply)
            return False
        else:
            encode_into(out, reply, client.resp)
            if client.closed:
                self.deferred.clear()
                return False
        if self.deferred:
            self._flush_deferred()
        if len(out) >= _WRITE_CHUNK:
            self.server.push(self)
            return not self.closing
        return True

    def _flush_deferred(self) -> None:
        client = self.client
        if client is not None and not client.closed:
            for pushed in self.deferred:
                _encode_push(self.out, pushed, client.resp)
        self.deferred.clear()

    def _block(self, blocked: Blocked) -> None:
        self.blocked = blocked
        loop = self.server.loop
        engine = self.server.engine
        with engine.lock:
            blocked.add_done_callback(lambda b: loop.call_soon_threadsafe(self._unblocked, b))
        remaining = blocked.remaining_s()
        if remaining is not None and not blocked.resolved:
            self._timer = loop.call_later(remaining, self._deadline, blocked)

    def _deadline(self, blocked: Blocked) -> None:
        self._timer = None
        if not self.closing:
            self.server.engine.timeout_blocked(blocked)

    def _unblocked(self, blocked: Blocked) -> None:
        if self.closing or self.blocked is not blocked:
            return
        self.blocked = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        client = self.client
        assert client is not None
        assert blocked.reply is not None
        if blocked.reply is RESUME and blocked.postponed is not None:
            # CLIENT PAUSE ended: the postponed command runs now, before what came after it.
            self.queued.appendleft(list(blocked.postponed))
        elif not (client.reply_off or client.reply_skip):
            encode_into(self.out, blocked.reply, client.resp)
        if self.kill_after_reply:
            self.closing = True
            self.server.send(self, force=True)
            if self.transport is not None:
                self.transport.close()
            return
        self._drain()
        if self._gone():
            return
        err = self._due_proto_error()
        if err is not None:
            self._protocol_error(err)
            return
        self.server.send(self)

    def _due_proto_error(self) -> ProtocolError | None:
        # The protocol error to answer now: once every command before it has run.
        if self.blocked is None and not self.queued:
            return self.proto_error
        return None

    # -- writing and closing --------------------------------------------------------------

    def _gone(self) -> bool:
        # A method, not the attribute: running commands may close the connection (QUIT),
        # which a type checker's narrowing of ``self.closing`` would not see.
        return self.closing

    def _protocol_error(self, exc: ProtocolError) -> None:
        # Redis answers what came before, then the error, then closes the connection.
        client = self.client
        assert client is not None
        _log.info("protocol error from client id=%d addr=%s: %s", client.id, client.addr, exc.text)
        self.out += b"-" + exc.text.encode() + b"\r\n"
        self.closing = True
        self.server.send(self, force=True)
        if self.transport is not None:
            self.transport.close()

    def write_out(self) -> None:
        """Hand the buffered replies to the transport; enforce the output buffer limit."""
        transport = self.transport
        if transport is None or not self.out:
            return
        data = self.out
        self.out = bytearray()
        if transport.is_closing():
            return
        transport.write(data)
        pending = transport.get_write_buffer_size()
        if pending:
            self.server.check_output_limit(self, pending)

    def _close_now(self) -> None:
        self.closing = True
        if self.transport is not None:
            self.transport.abort()


def _is_push_frames(reply: object) -> bool:
    return type(reply) is Frames and all(type(item) is Push for item in reply.items)


def _busy_transaction(client: ClientState, name: bytes, nargs: int, busy: str) -> Reply:
    """MULTI / DISCARD / EXEC while a script is busy, as Redis's processCommand answers them:
    MULTI and DISCARD run (they carry allow-busy and touch only the client's state); EXEC is
    refused, and a refused EXEC discards the transaction (``EXECABORT ... because of: BUSY``)."""
    if name == b"exec":
        discard_transaction(client)
        why = busy if nargs == 1 else msgs.wrong_arity("exec").removeprefix("ERR ")
        return CommandError(msgs.execabort_because(why))
    if nargs != 1:
        client.multi_error = client.multi_error or client.in_multi
        return CommandError(msgs.wrong_arity(name.decode()))
    if name == b"multi":
        if client.in_multi:
            return CommandError(msgs.MULTI_NESTED)
        client.in_multi = True
        client.multi_queue = []
        client.multi_error = False
        return OK
    if not client.in_multi:
        return CommandError(msgs.DISCARD_WITHOUT_MULTI)
    discard_transaction(client)
    return OK


def _encode_push(out: bytearray, reply: Reply | RawPush, resp: int) -> None:
    if isinstance(reply, RawPush):
        out += reply.data
    else:
        encode_into(out, reply, resp)


def _listen(host: str, port: int) -> list[socket.socket]:
    """Listening sockets for every address ``host`` resolves to (as ``loop.create_server``
    binds them: SO_REUSEADDR, IPv6 sockets IPv6-only, backlog 511), non-blocking."""
    found = socket.getaddrinfo(
        host, port, socket.AF_UNSPEC, socket.SOCK_STREAM, 0, socket.AI_PASSIVE
    )
    made: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(found):
            lsock = socket.socket(family, kind, proto)
            made.append(lsock)
            lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                lsock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            lsock.bind(address)
            lsock.listen(511)
            lsock.setblocking(False)
            if port == 0:  # the other addresses of this host take the port the first got
                port = lsock.getsockname()[1]
    except OSError:
        for lsock in made:
            lsock.close()
        raise
    return made


def _format_addr(addr: Any) -> str:
    if isinstance(addr, tuple) and len(addr) >= 2:
        host = str(addr[0])
        return f"[{host}]:{addr[1]}" if ":" in host else f"{host}:{addr[1]}"
    return str(addr or "?:0")


class EngineServer:
    """A RESP server for an :class:`Engine` (and its append-only file, if any).

    Create it, ``await start()``, ``await serve_until(stop_event)`` or ``await close()``.
    Not thread-safe: use it from the event loop it was started on.
    """

    def __init__(
        self,
        engine: Engine,
        aof: AppendOnlyFile | None = None,
        *,
        bind: str = "127.0.0.1",
        port: int = 6390,
    ) -> None:
        self.engine = engine
        self.aof = aof
        self.bind = bind
        self.requested_port = port
        self.port = port
        self.connections: set[_Connection] = set()
        self._listeners: list[socket.socket] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: list[_Connection] = []
        self._flush_scheduled = False
        self._cron_task: asyncio.Task[None] | None = None
        self.cfg_version = -1
        self.maxclients = 10000
        self.max_bulk_len = 512 * 1024 * 1024
        self.query_buffer_limit = 1024 * 1024 * 1024
        # client-output-buffer-limit by class ("normal", "pubsub"): (hard, soft, soft s).
        self.obuf_limits: dict[str, tuple[int, int, int]] = {}
        # By class: the lower of its non-zero hard and soft limits (_NO_LIMIT without any).
        self.obuf_floor: dict[str, float] = {}
        self.idle_timeout_s = 0
        self.busy_after_s = 5.0
        # Busy mode (a script past lua-time-limit): the connection running it, the sockets
        # accepted but not yet given their transport (answered from the script's hook until
        # the event loop adopts them), when the sockets were last polled.
        self.executing: _Connection | None = None
        self._accepted: list[tuple[socket.socket, _Connection]] = []
        self._busy_polled = 0.0
        self._busy_logged = False
        # Set by the SIGTERM/SIGINT handler (see run_server).
        self.stop_requested = False
        # Set while serve_until runs: SHUTDOWN sets it.
        self._stop_event: asyncio.Event | None = None
        engine.script_tick = self._script_tick
        # REPLICAOF host port: the link to the master runs on this server's loop.
        engine.replication.link_starter = self._start_link
        self.refresh_config()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        assert self._loop is not None
        return self._loop

    def _start_link(self, repl: Replication) -> LinkHandle:
        # Called by REPLICAOF (engine lock held): the link starts at the loop's next turn.
        return ReplicaLink(repl, self.loop, self.port, self.aof)

    def refresh_config(self) -> None:
        """Re-read the limits from the engine's config (CONFIG SET changed it)."""
        cfg = self.engine.config
        if cfg.version == self.cfg_version:
            return
        self.cfg_version = cfg.version
        self.maxclients = int(cfg.get("maxclients") or 10000)
        self.max_bulk_len = int(cfg.get("proto-max-bulk-len") or 512 * 1024 * 1024)
        self.query_buffer_limit = int(cfg.get("client-query-buffer-limit") or 1 << 30)
        self.obuf_limits = parse_client_output_buffer_limit(
            cfg.get("client-output-buffer-limit") or ""
        )
        self.obuf_floor = {
            cls: min((n for n in (hard, soft) if n), default=_NO_LIMIT)
            for cls, (hard, soft, _) in self.obuf_limits.items()
        }
        self.idle_timeout_s = int(cfg.get("timeout") or 0)
        self.busy_after_s = int(cfg.get("lua-time-limit") or 0) / 1000
        for conn in self.connections:
            conn.parser.max_bulk_len = self.max_bulk_len

    async def start(self) -> None:
        """Listen on every address of ``bind``; sets :attr:`port` (useful with port 0)."""
        self._loop = asyncio.get_running_loop()
        hosts = self.bind.split() or ["127.0.0.1"]
        port = self.requested_port
        for host in hosts:
            try:
                listeners = _listen(host, port)
            except OSError as exc:
                self._stop_listening()
                reason = os.strerror(exc.errno) if exc.errno else str(exc)
                raise ListenError(f"cannot listen on {host} port {port}: {reason}") from exc
            for lsock in listeners:
                self._listeners.append(lsock)
                self._loop.add_reader(lsock.fileno(), self._accept, lsock)
            if port == 0:
                port = listeners[0].getsockname()[1]
        self.port = port
        self.engine.tcp_port = port
        cfg = self.engine.config
        with self.engine.lock:
            cfg.set("port", str(port))
            cfg.set("bind", " ".join(hosts))
        self._cron_task = self._loop.create_task(self._cron())

    async def serve_until(self, stop: asyncio.Event) -> None:
        """Serve until ``stop`` is set (or a client sends SHUTDOWN), then :meth:`close`."""
        self._stop_event = stop
        try:
            await stop.wait()
        finally:
            await self.close()

    def request_shutdown(self) -> None:
        """SHUTDOWN ran: stop accepting and reading now; :meth:`serve_until` returns after
        :meth:`close` (file flushed and fsynced, every connection closed)."""
        request = self.engine.shutdown_request
        _log.warning(
            "SHUTDOWN %s: shutting down%s",
            " ".join(request or ()).upper() or "(no options)",
            " (the engine writes no RDB snapshot: SAVE is NOSAVE; the append-only file has "
            "every write)"
            if request and "save" in request
            else "",
        )
        self._stop_listening()
        for conn in self.connections:
            conn.closing = True
        if self._stop_event is not None:
            self._stop_event.set()
        else:
            self.loop.create_task(self.close())

    async def close(self) -> None:
        """Stop listening, flush (and fsync) the file, close every connection."""
        self._stop_listening()
        with self.engine.lock:
            link = self.engine.replication.link
            if link is not None:
                link.stop()
        if isinstance(link, ReplicaLink):
            await link.wait_stopped()
        if self._cron_task is not None:
            self._cron_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._cron_task
            self._cron_task = None
        self._flush_all()
        aof = self.aof
        if aof is not None:
            with self.engine.lock:
                aof.flush()
                aof.fsync()
        for conn in list(self.connections):
            if conn.transport is not None:
                conn.transport.close()
        for sock, conn in self._accepted:
            if conn.transport is None:
                sock.close()
        self._accepted = []
        # Let the transports deliver their close.
        await asyncio.sleep(0)

    # -- output -----------------------------------------------------------------------------

    def send(self, conn: _Connection, force: bool = False) -> None:
        """Write ``conn``'s replies once the writes they depend on are safe: at once if
        nothing awaits an fsync, else after the group commit of this loop turn."""
        aof = self.aof
        if aof is not None:
            if aof.needs_sync:
                if conn not in self._pending:
                    self._pending.append(conn)
                if not self._flush_scheduled:
                    self._flush_scheduled = True
                    self.loop.call_soon(self._flush_all)
                if not force:
                    return
                self._flush_all()
                return
            if aof.buf:
                aof.flush()
        conn.write_out()

    def push(self, conn: _Connection) -> None:
        """Mid-pipeline (engine lock held): hand ``conn``'s replies to the socket if the
        writes they depend on allow it, then enforce its output buffer limit on everything
        unsent (what the socket has not taken and what still waits for an fsync)."""
        aof = self.aof
        transport = conn.transport
        if transport is None or transport.is_closing():
            return
        if aof is None or not aof.needs_sync:
            if aof is not None and aof.buf:
                aof.flush()
            data = conn.out
            conn.out = bytearray()
            transport.write(data)
        pending = len(conn.out) + transport.get_write_buffer_size()
        if pending:
            self.check_output_limit(conn, pending)

    def _flush_all(self) -> None:
        self._flush_scheduled = False
        aof = self.aof
        if aof is not None:
            with self.engine.lock:
                aof.flush()
        pending, self._pending = self._pending, []
        for conn in pending:
            conn.write_out()

    def check_output_limit(self, conn: _Connection, pending: int) -> None:
        """Disconnect ``conn`` when its unsent replies pass the limits of its class: pubsub
        for a client with a subscription (Redis's CLIENT_PUBSUB, either protocol), else
        normal. The hard limit closes at once, the soft one once it has been passed
        continuously for its seconds."""
        if self.engine.config.version != self.cfg_version:
            self.refresh_config()
        client = conn.client
        cls = "pubsub" if client is not None and client.pubsub else "normal"
        hard, soft, soft_s = self.obuf_limits.get(cls, (0, 0, 0))
        over = False
        if hard and pending >= hard:
            over = True
        elif soft and pending >= soft:
            now = time.monotonic()
            if not conn.soft_since:
                conn.soft_since = now
            elif now - conn.soft_since >= soft_s:
                over = True
        else:
            conn.soft_since = 0.0
        if over:
            _log.warning(
                "Client id=%d addr=%s closed for overcoming of output buffer limits (omem=%d)",
                client.id if client else -1,
                client.addr if client else "?",
                pending,
            )
            conn._close_now()

    # -- accepting ----------------------------------------------------------------------------

    def _accept(self, listener: socket.socket) -> None:
        # The listening socket is readable: every waiting connection goes on the list at once
        # (so a script that starts before the loop adopts it still answers it), then to the
        # event loop.
        for _ in range(511):
            try:
                sock, _ = listener.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError as exc:
                # Out of descriptors (or memory): the listener stays readable, so it is left
                # alone for a second rather than retried in a busy loop, as asyncio does.
                _log.warning("accept: %s", exc)
                loop = self.loop
                loop.remove_reader(listener.fileno())
                loop.call_later(1.0, self._listen_again, listener)
                return
            sock.setblocking(False)
            conn = _Connection(self)
            self._accepted.append((sock, conn))
            self.loop.create_task(self._adopt(sock, conn))

    def _listen_again(self, listener: socket.socket) -> None:
        if listener in self._listeners:
            self.loop.add_reader(listener.fileno(), self._accept, listener)

    def _stop_listening(self) -> None:
        loop = self._loop
        for lsock in self._listeners:
            if loop is not None and not loop.is_closed():
                loop.remove_reader(lsock.fileno())
            lsock.close()
        self._listeners = []

    async def _adopt(self, sock: socket.socket, conn: _Connection) -> None:
        # The socket becomes an ordinary connection; it leaves the list once its transport is
        # made (connection_made has put it on self.connections by then).
        try:
            if sock.fileno() < 0:  # the server closed while it waited
                return
            if conn.client is not None and conn.client.closed:  # it sent QUIT during a script
                self.engine.disconnect(conn.client)
                sock.close()
                return
            try:
                await self.loop.connect_accepted_socket(lambda: conn, sock)
            except OSError:
                sock.close()
                if conn.client is not None:
                    self.engine.disconnect(conn.client)
        finally:
            with contextlib.suppress(ValueError):
                self._accepted.remove((sock, conn))

    # -- busy mode (a runaway script) -------------------------------------------------------

    def _script_tick(self, running_s: float) -> None:
        # The running script's count hook (event loop thread, engine lock held).
        if self.stop_requested:
            self.exit_now("a shutdown signal arrived")
        if running_s < self.busy_after_s:
            self._busy_logged = False
            return
        now = time.monotonic()
        if now - self._busy_polled < 0.01:
            return
        self._busy_polled = now
        if not self._busy_logged:
            self._busy_logged = True
            _log.warning(
                "a script has run for %.1f s (lua-time-limit): answering other clients BUSY; "
                "SCRIPT KILL or SHUTDOWN NOSAVE stop it",
                running_s,
            )
        try:
            self._serve_busy()
        except OSError as exc:  # pragma: no cover - a socket error must not fail the script
            _log.warning("busy mode: %s", exc)

    def _serve_busy(self) -> None:
        # One non-blocking pass over the sockets: accept, read, answer.
        fds: dict[int, _Connection | socket.socket | None] = {}
        for conn in self.connections:
            transport = conn.transport
            if (
                conn is self.executing
                or conn.closing
                or transport is None
                or conn.blocked is not None
                or conn.held
                or conn.queued
            ):
                continue  # their input is answered in order once the script ends
            tsock = transport.get_extra_info("socket")
            if tsock is not None:
                fds[tsock.fileno()] = conn
        listeners = {lsock.fileno(): lsock for lsock in self._listeners}
        ready, _, _ = select.select(list(listeners), [], [], 0)
        for fd in ready:
            self._accept(listeners[fd])
        waiting = [(sock, conn) for sock, conn in self._accepted if conn.transport is None]
        clients = len(self.connections)
        for sock, conn in waiting:  # (adopted ones are on self.connections)
            fds[sock.fileno()] = None
            clients += 1
            if conn.client is None and clients <= self.maxclients:
                # A client now: HELLO and AUTH run during the script (redis-py opens every
                # new connection with HELLO 3, the one that would send SCRIPT KILL included).
                with contextlib.suppress(OSError):
                    conn.new_client(sock.getpeername(), sock.getsockname())
        ready, _, _ = select.select(list(fds), [], [], 0)
        for fd in ready:
            try:
                data = os.read(fd, 65536)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                data = b""
            target = fds[fd]
            if isinstance(target, _Connection):
                if data:
                    reply = self._busy_replies(target, data)
                    if reply and target.transport is not None:
                        target.transport.write(reply)
                    if target.client is not None and target.client.closed:
                        target.closing = True  # QUIT: closed after its reply
                        if target.transport is not None:
                            target.transport.close()
            else:
                for sock, conn in self._accepted:
                    if sock.fileno() == fd:
                        reply = self._busy_replies(conn, data) if data else b""
                        with contextlib.suppress(OSError):
                            sock.sendall(reply)
                        break

    def _busy_replies(self, conn: _Connection, data: bytes) -> bytes:
        # Redis's answers while a script is busy: BUSY for everything but the commands flagged
        # allow-busy in its command table (SCRIPT KILL, FUNCTION KILL/STATS, SHUTDOWN NOSAVE,
        # the transaction's MULTI/DISCARD, and HELLO, AUTH, WATCH, UNWATCH, QUIT, RESET,
        # REPLCONF, which run as usual).
        try:
            cmds = conn.parser.feed(data)
        except ProtocolError as exc:
            cmds = exc.commands
        out = bytearray()
        client = conn.client
        # EVAL's runtime or the functions' one runs (never both: FCALL is noscript).
        scripts = self.engine.scripting
        functions = self.engine.functions
        runtime = scripts if scripts is not None and scripts.running else functions
        is_eval = runtime is scripts
        busy = msgs.BUSY_SCRIPT if is_eval else msgs.BUSY_FUNCTION
        for argv in cmds:
            name = argv[0].lower()
            words = [a.lower() for a in argv[1:]]
            reply: Reply
            if runtime is None or not runtime.running:
                reply = CommandError(busy)
            elif name in (b"script", b"function") and words == [b"kill"]:
                if is_eval == (name == b"script"):
                    reply = runtime.request_kill()
                else:
                    # Redis's scriptKill: "has it written?" first, then "the other kind".
                    reply = CommandError(msgs.UNKILLABLE if runtime.written else busy)
            elif name == b"function" and words == [b"stats"]:
                reply = CommandError(busy) if is_eval else stats_reply(runtime)
            elif name == b"shutdown":
                if b"nosave" in words:
                    self.exit_now("SHUTDOWN NOSAVE during a busy script")
                # Redis's shutdownCommand: only NOSAVE while a script is busy.
                reply = CommandError(busy)
            elif client is not None and name in (b"multi", b"discard", b"exec"):
                reply = _busy_transaction(client, name, len(argv), busy)
            elif client is not None and not client.closed and self.engine.allows_busy(argv):
                ran = self.engine.execute_while_busy(client, argv)
                reply = CommandError(busy) if isinstance(ran, Blocked) else ran
                conn.parser.authenticated = client.authenticated
            else:
                reply = CommandError(busy)
                if client is not None and client.in_multi:
                    # Redis's rejectCommand flags the transaction: its EXEC then aborts.
                    client.multi_error = True
            # After the command: HELLO's own reply is in the protocol it switched to.
            encode_into(out, reply, client.resp if client is not None else 2)
            if client is not None and client.closed:
                break  # QUIT: nothing after it is read
        return bytes(out)

    def exit_now(self, why: str, status: int = 0) -> None:
        """End the process at once (SHUTDOWN NOSAVE, or a signal, during a script): the file
        gets every write logged before the running command, not that command's."""
        _log.warning("%s: exiting now, without the running command's writes", why)
        aof = self.aof
        if aof is not None:
            with contextlib.suppress(OSError):
                aof.flush()
                aof.fsync()
        logging.shutdown()
        os._exit(status)

    # -- housekeeping --------------------------------------------------------------------

    async def _cron(self) -> None:
        # Active expiry, automatic rewrites, config changes, idle and soft-limit checks.
        last_slow = 0.0
        while True:
            await asyncio.sleep(_CRON_INTERVAL_S)
            try:
                self.engine.run_cron()
                self.refresh_config()
                now = time.monotonic()
                if now - last_slow >= 1.0:
                    last_slow = now
                    self._slow_checks()
                if self._pending and not self._flush_scheduled:
                    self._flush_all()
            except Exception:  # pragma: no cover - housekeeping must not stop
                _log.exception("server cron failed")

    def _slow_checks(self) -> None:
        idle_s = self.idle_timeout_s
        now_ms = time.time_ns() // 1_000_000
        for conn in list(self.connections):
            client = conn.client
            if client is None or conn.transport is None:
                continue
            if (
                idle_s
                and conn.blocked is None
                and not client.in_multi
                and now_ms - client.last_interaction_ms > idle_s * 1000
            ):
                _log.info("closing idle client id=%d addr=%s", client.id, client.addr)
                conn.transport.close()
                continue
            pending = conn.transport.get_write_buffer_size()
            if pending:
                self.check_output_limit(conn, pending)
            else:
                conn.soft_since = 0.0


# --- the command --------------------------------------------------------------------------------


def open_engine(options: ServerOptions) -> tuple[Engine, AppendOnlyFile | None]:
    """The engine for ``options``: replayed from its data directory, or in memory."""
    engine = Engine(redis_version=options.redis_version)
    aof = None
    if options.data_dir is not None:
        aof = open_persistent(
            options.data_dir,
            engine,
            appendfsync=options.appendfsync,
            auto_flush=False,
            skip_damaged=options.aof_skip_damaged,
        )
    else:
        engine.config.set("appendfsync", options.appendfsync)
    if options.load_rdb is not None:
        _load_rdb_at_start(engine, aof, options.load_rdb)
    if options.requirepass:
        engine.config.set("requirepass", options.requirepass)
        engine.config_changed()
    if options.masterauth:
        engine.config.set("masterauth", options.masterauth)
    engine.config.set("protected-mode", "yes")
    return engine, aof


def _load_rdb_at_start(engine: Engine, aof: AppendOnlyFile | None, path: Path) -> None:
    # Raises RdbLoadError (file, offset, reason) or OSError (cannot read the file).

    with engine.lock:
        held = sum(len(db) for db in engine.keyspace.dbs)
        if held:
            where = aof.path if aof is not None else "memory"
            raise PersistenceError(
                f"--load-rdb {path}: the data directory already holds {held} keys ({where}); "
                "an RDB file is loaded only into an empty data directory"
            )
        stats = load_rdb(engine, path)
        _log.info(
            "loaded %d keys from RDB file %s (%d already expired, skipped)",
            stats.keys_loaded,
            path,
            stats.keys_expired,
        )
        if aof is not None:
            # From now on the append-only file is the data: write what was loaded into it.
            aof.rewrite()


async def run_server(
    options: ServerOptions,
    *,
    stop: asyncio.Event | None = None,
    ready: Any = None,
) -> int:
    """Run ``streamworker engine serve`` until SIGTERM/SIGINT (or ``stop``); returns 0.

    Raises :class:`ProtectedModeError`, :class:`~.aof.PersistenceError` (the data directory
    or its file cannot be used, or is damaged) or :class:`ListenError` before serving. ``ready``, if given, is called with the server once it listens.
    """
    check_protected_mode(options.bind, options.requirepass)
    engine, aof = open_engine(options)
    try:
        server = EngineServer(engine, aof, bind=options.bind, port=options.port)
        await server.start()
        if options.replicaof is not None:
            with engine.lock:
                engine.replication.become_replica(*options.replicaof)
        loop = asyncio.get_running_loop()
        stop = stop or asyncio.Event()
        stop_event = stop
        installed: list[tuple[signal.Signals, Any]] = []

        def on_signal(signum: int, frame: Any) -> None:
            # A Python handler runs between two bytecodes even while a command (a script)
            # holds the loop: the script's count hook sees stop_requested, the loop the event,
            # and the watchdog ends a process that is stuck anyway.
            if server.stop_requested:
                return
            server.stop_requested = True
            _log.warning("received signal %d: shutting down", signum)
            loop.call_soon_threadsafe(stop_event.set)
            watchdog = threading.Timer(_SHUTDOWN_WATCHDOG_S, server.exit_now, ("shutdown stuck", 1))
            watchdog.daemon = True
            watchdog.start()

        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(ValueError):  # not the main thread: no signals
                installed.append((sig, signal.signal(sig, on_signal)))
        where = f"data in {aof.dir}, appendfsync {aof.policy}" if aof else "in memory only"
        _log.info(
            "streamworker engine (Redis %s compatible) ready to accept connections on "
            "%s port %d (%s)",
            engine.redis_version,
            options.bind,
            server.port,
            where,
        )
        if ready is not None:
            ready(server)
        try:
            await server.serve_until(stop)
        finally:
            for sig, previous in installed:
                signal.signal(sig, previous)
        if server.stop_requested and engine.shutdown_request is None:
            _save_at_signal(engine)
        _log.warning(
            "streamworker engine: shut down (%d connections closed)", len(server.connections)
        )
    finally:
        if aof is not None:
            aof.close()
    return 0


def _save_at_signal(engine: Engine) -> None:
    # Redis's SIGTERM/SIGINT shutdown saves the RDB file while save points are set. Unlike
    # Redis, which then stays up when the save fails, the engine logs it and exits: its
    # append-only file, when it has one, holds every write anyway.

    with engine.lock:
        if not engine.config.get("save"):
            return
        try:
            save_now(engine, "shutdown")
        except OSError:
            _log.error("shutdown: the RDB file could not be saved (see the warning above)")


def serve(options: ServerOptions) -> int:
    """Blocking entry point of ``streamworker engine serve``."""
    return asyncio.run(run_server(options))


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that was free a moment ago (tests, benchmarks)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
