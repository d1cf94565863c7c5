"""The engine: executes commands for clients under one lock, with blocking waiter queues.

Redis is single-threaded: commands never interleave. :class:`Engine` reproduces that with one
``threading.RLock``; every public method takes it. Blocking commands return a
:class:`~.context.Blocked` that the transport waits on (see :meth:`Engine.wait`).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from streamworker.engine import msgs
from streamworker.engine.commands import CommandSpec, load_commands
from streamworker.engine.config import EngineConfig
from streamworker.engine.context import Blocked, ClientState, Ctx, OnReady
from streamworker.engine.errors import CommandError
from streamworker.engine.keyspace import Keyspace, unwatch_all
from streamworker.engine.replies import QUEUED

if TYPE_CHECKING:
    from streamworker.engine.replies import Reply

__all__ = ["Blocked", "ClientState", "Ctx", "Engine", "OnReady"]


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


_CRON_INTERVAL_S = 0.1  # Redis's default hz 10


def uses_wall_clock(engine: Engine) -> bool:
    """Whether ``engine`` runs on the real clock (no clock was injected)."""
    return engine.clock is _wall_clock_ms


class Engine:
    """An in-memory Redis 7.0-compatible engine.

    ``clock`` returns Unix milliseconds (default: the wall clock); tests inject a fake one.
    Every method is thread-safe. Command replies are :mod:`.replies` values or a
    :class:`~.context.Blocked`.
    """

    def __init__(self, clock: Callable[[], int] | None = None, *, databases: int = 16) -> None:
        self.lock = threading.RLock()
        self.clock: Callable[[], int] = clock if clock is not None else _wall_clock_ms
        self.keyspace = Keyspace(self.clock, self.signal_key_ready, databases)
        for db in self.keyspace.dbs:
            db.flush_event = self.signal_db_ready
        self.config = EngineConfig(databases=databases)
        self.table: dict[bytes, CommandSpec] = load_commands()
        self.clients: dict[int, ClientState] = {}
        self._next_client_id = 1
        self._waiters: dict[tuple[int, bytes], dict[Blocked, None]] = {}
        self._ready: dict[tuple[int, bytes], None] = {}
        self._next_cron = time.monotonic() + _CRON_INTERVAL_S
        self.started_monotonic = time.monotonic()
        self.started_ms = _wall_clock_ms()
        self.run_id = os.urandom(20).hex()
        self.stats_commands = 0
        self.stats_connections = 0
        self.stats_errors = 0
        self.stats_rejected = 0
        self.tcp_port = 0

    # -- clients -----------------------------------------------------------------------------

    def connect(self) -> ClientState:
        """A new client (connection) with a unique id, RESP2, db 0."""
        with self.lock:
            client = ClientState(self._next_client_id, _wall_clock_ms())
            self._next_client_id += 1
            client.ctx = Ctx(self, client)
            self.clients[client.id] = client
            self.stats_connections += 1
            return client

    def disconnect(self, client: ClientState) -> None:
        """Forget ``client``: drop its waiters, WATCHes and queued transaction."""
        with self.lock:
            client.closed = True
            if client.blocked is not None and not client.blocked.resolved:
                self._unblock(client.blocked)
            client.blocked = None
            unwatch_all(client)
            client.in_multi = False
            client.multi_queue = []
            self.clients.pop(client.id, None)

    # -- execution ---------------------------------------------------------------------------

    def execute(self, client: ClientState, argv: Sequence[bytes]) -> Reply | Blocked:
        """Run one command (``argv[0]`` is its name). Returns its reply or a Blocked."""
        with self.lock:
            reply = self._dispatch(client, argv)
            if self._ready:
                self._serve_ready()
            if time.monotonic() >= self._next_cron:
                self._cron()
            return reply

    def execute_many(
        self, client: ClientState, commands: Iterable[Sequence[bytes]]
    ) -> list[Reply | Blocked]:
        """Run a pipeline under one lock acquisition.

        Stops after a command that blocks: the last element is then a :class:`Blocked` and
        the commands after it were **not** run (resubmit them once it resolves), as Redis
        stops reading a client's pipeline while it is blocked.
        """
        out: list[Reply | Blocked] = []
        with self.lock:
            dispatch = self._dispatch
            for argv in commands:
                reply = dispatch(client, argv)
                out.append(reply)
                if self._ready:
                    self._serve_ready()
                if type(reply) is Blocked:
                    break
            if time.monotonic() >= self._next_cron:
                self._cron()
        return out

    def _dispatch(self, client: ClientState, argv: Sequence[bytes]) -> Reply | Blocked:
        # The hot path (a few hundred ns): no per-call dict building, one args slice.
        try:
            spec = self.table[argv[0].lower()]
        except (KeyError, IndexError):
            return self._reject(client, _unknown_command_text(argv))
        if spec.subcommands is not None and len(argv) >= 2:
            sub = spec.subcommands.get(argv[1].lower())
            if sub is None:
                return self._reject(
                    client,
                    msgs.unknown_subcommand(
                        _printable(argv[1], 128), argv[0].decode("utf-8", "replace").upper()
                    ),
                )
            spec = sub
        arity = spec.arity
        n = len(argv)
        if n != arity and (arity > 0 or n < -arity):
            if spec.name == "exec":
                return self._exec_abort(client, msgs.wrong_arity("exec"))
            return self._reject(client, msgs.wrong_arity(spec.name))
        ctx = client.ctx
        if client.in_multi:
            if spec.no_multi:
                return self._reject(client, msgs.NOT_ALLOWED_IN_MULTI)
            if spec.queueable:
                client.multi_queue.append((spec, argv))
                return QUEUED
        elif ctx.in_script and spec.noscript:
            return CommandError("ERR This Redis command is not allowed from script")
        self.stats_commands += 1
        client.last_cmd = spec.name
        func = spec.func
        if func is None:  # a container called without a subcommand is caught by arity
            return self._reject(client, msgs.wrong_arity(spec.name))
        args = argv[spec.skip :]
        ctx.argv = argv
        try:
            reply = func(ctx, args if type(args) is list else list(args))
        except CommandError as exc:
            self.stats_errors += 1
            return exc
        except Exception as exc:
            return self._internal_error(spec, exc)
        if type(reply) is Blocked:
            self._register(reply)
        return reply

    def run_queued(self, ctx: Ctx, spec: CommandSpec, argv: Sequence[bytes]) -> Reply:
        """Run one command queued by MULTI (EXEC's loop). Blocking commands don't block."""
        self.stats_commands += 1
        ctx.client.last_cmd = spec.name
        func = spec.func
        assert func is not None
        ctx.argv = argv
        try:
            reply = func(ctx, list(argv[spec.skip :]))
        except CommandError as exc:
            self.stats_errors += 1
            return exc
        except Exception as exc:
            return self._internal_error(spec, exc)
        if type(reply) is Blocked:  # ctx.block returns the timeout reply in MULTI
            return reply.on_timeout_reply
        return reply  # type: ignore[return-value]

    def _internal_error(self, spec: CommandSpec, exc: Exception) -> CommandError:
        # An engine bug must not take the caller (or the client that served a waiter) down with
        # it: it becomes an error reply naming the exception.
        self.stats_errors += 1
        return CommandError(
            f"ERR engine internal error in '{spec.name}': {type(exc).__name__}: {exc}"
        )

    def _exec_abort(self, client: ClientState, text: str) -> CommandError:
        # A rejected EXEC discards the transaction and says why (Redis's execCommandAbort).
        from streamworker.engine.commands.transactions import discard_transaction

        discard_transaction(client)
        self.stats_rejected += 1
        reason = text[4:] if text.startswith("ERR ") else text
        return CommandError(f"EXECABORT Transaction discarded because of: {reason}")

    def _reject(self, client: ClientState, text: str) -> CommandError:
        # Rejections inside MULTI abort the transaction at EXEC (Redis's flagTransaction).
        if client.in_multi:
            client.multi_error = True
        self.stats_rejected += 1
        return CommandError(text)

    # -- blocking ----------------------------------------------------------------------------

    def signal_key_ready(self, db_index: int, key: bytes) -> None:
        """Queue clients blocked on ``key`` for a retry after the current command."""
        k = (db_index, key)
        if k in self._waiters:
            self._ready[k] = None

    def signal_db_ready(self, db_index: int) -> None:
        """Queue every client blocked on a key of database ``db_index`` (after FLUSHDB)."""
        for k in self._waiters:
            if k[0] == db_index:
                self._ready[k] = None

    def _register(self, blocked: Blocked) -> None:
        blocked.ctx.client.blocked = blocked
        for key in blocked.keys:
            self._waiters.setdefault((blocked.db_index, key), {})[blocked] = None

    def _unblock(self, blocked: Blocked) -> None:
        for key in blocked.keys:
            k = (blocked.db_index, key)
            queue = self._waiters.get(k)
            if queue is not None:
                queue.pop(blocked, None)
                if not queue:
                    del self._waiters[k]
        if blocked.ctx.client.blocked is blocked:
            blocked.ctx.client.blocked = None

    def _serve_ready(self) -> None:
        # Served clients may signal more keys (or the same key again); loop until quiet.
        while self._ready:
            ready = list(self._ready)
            self._ready.clear()
            for k in ready:
                queue = self._waiters.get(k)
                if not queue:
                    continue
                # Only the clients queued now: one that blocks again goes to the back.
                for blocked in list(queue):
                    if blocked.resolved or blocked not in queue:
                        continue
                    try:
                        reply = blocked.on_ready(blocked.ctx)
                    except CommandError as exc:
                        reply = exc
                    except Exception as exc:
                        reply = CommandError(
                            f"ERR engine internal error while unblocking: "
                            f"{type(exc).__name__}: {exc}"
                        )
                    if reply is None:
                        continue
                    self._unblock(blocked)
                    blocked.resolve(reply)

    def unblock(self, blocked: Blocked, reply: Reply) -> bool:
        """Serve ``blocked`` with ``reply`` now (CLIENT UNBLOCK); False if already served."""
        with self.lock:
            if blocked.resolved:
                return False
            self._unblock(blocked)
            return blocked.resolve(reply)

    def timeout_blocked(self, blocked: Blocked) -> Reply:
        """Resolve ``blocked`` with its timeout reply unless it was served already; returns
        its final reply. Transports call this when its deadline passes."""
        with self.lock:
            if not blocked.resolved:
                self._unblock(blocked)
                blocked.resolve(blocked.on_timeout_reply)
            assert blocked.reply is not None
            return blocked.reply

    def wait(self, blocked: Blocked, timeout_s: float | None = None) -> Reply | None:
        """Block the calling thread until ``blocked`` is served or reaches its own deadline
        (then it is resolved with its timeout reply); returns the reply.

        ``timeout_s`` caps the wait: if it passes first, the command stays blocked and None is
        returned (a socket read timeout; the caller usually disconnects the client).
        """
        with self.lock:
            if blocked.resolved:
                return blocked.reply
            event = blocked._event_obj()
        remaining = blocked.remaining_s()
        capped = timeout_s is not None and (remaining is None or timeout_s < remaining)
        if event.wait(timeout_s if capped else remaining):
            return blocked.reply
        if capped:
            return None
        return self.timeout_blocked(blocked)

    # -- housekeeping ------------------------------------------------------------------------

    def _cron(self) -> None:
        self._next_cron = time.monotonic() + _CRON_INTERVAL_S
        self.keyspace.active_expire()
        if self._ready:
            self._serve_ready()

    def run_cron(self) -> None:
        """Run one housekeeping pass now (active expiry)."""
        with self.lock:
            self._cron()


def _printable(arg: bytes, limit: int) -> str:
    # printf("%.*s") stops at a NUL; Redis turns CR/LF into spaces in error texts. Bytes that
    # are not UTF-8 survive as surrogates (the encoder writes them back verbatim).
    raw = arg.split(b"\0", 1)[0][:limit].replace(b"\r", b" ").replace(b"\n", b" ")
    return raw.decode("utf-8", "surrogateescape")


def _unknown_command_text(argv: Sequence[bytes]) -> str:
    if not argv:
        return msgs.unknown_command("", "")
    out = bytearray()
    for arg in argv[1:]:
        if len(out) >= 128:
            break
        out += b"'" + arg.split(b"\0", 1)[0][: 128 - len(out)] + b"' "
    args_text = bytes(out).replace(b"\r", b" ").replace(b"\n", b" ")
    return msgs.unknown_command(
        _printable(argv[0], 128), args_text.decode("utf-8", "surrogateescape")
    )
