"""Per-client state, the command context (:class:`Ctx`) and blocked-command handles.

Kept apart from :mod:`.core` so that command modules can import :class:`Ctx` without a cycle;
:mod:`.core` and :mod:`.commands` re-export these names.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from streamworker.engine.keyspace import WatchedKey
from streamworker.engine.replies import NULL_ARRAY, Status

if TYPE_CHECKING:
    from streamworker.engine.core import Engine
    from streamworker.engine.keyspace import Database, Keyspace
    from streamworker.engine.replies import Reply
    from streamworker.engine.table import CommandSpec

__all__ = [
    "NO_REPLY",
    "RESUME",
    "Blocked",
    "ClientIO",
    "ClientState",
    "Ctx",
    "OnReady",
    "RawPush",
    "WatchedKey",
]

OnReady = Callable[["Ctx"], "Reply | None"]
"""Re-run by core when a key a client blocks on is signalled: a reply serves the client,
``None`` keeps it blocked. Raising CommandError serves the client with that error."""


class _Resume:
    """The reply of a command postponed by CLIENT PAUSE once the pause ends: not a reply to
    send but an order to run the command now (:attr:`Blocked.postponed`)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "RESUME"


RESUME: Any = _Resume()


class _NoReply(Status):
    """What a command returns when the client must get no reply at all (CLIENT REPLY OFF and
    SKIP, a successful SHUTDOWN): the transport sends nothing (it is never encoded: only
    network connections can get it)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NO_REPLY"


NO_REPLY: Status = _NoReply("")


class RawPush:
    """Out-of-band bytes for a connection, already in its protocol (a RESP3 invalidation
    push): the transport writes ``data`` as is."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


class ClientState:
    """One connection's state. Created by :meth:`Engine.connect`; mutated only under the
    engine lock."""

    __slots__ = (
        "addr",
        "authenticated",
        "blocked",
        "closed",
        "created_ms",
        "ctx",
        "db_index",
        "dirty_cas",
        "fd",
        "id",
        "in_multi",
        "io",
        "kill",
        "laddr",
        "last_cmd",
        "last_interaction_ms",
        "lib_name",
        "lib_ver",
        "monitor",
        "multi_error",
        "multi_queue",
        "name",
        "pubsub",
        "push",
        "push_out",
        "replica",
        "reply_off",
        "reply_skip",
        "reply_skip_next",
        "resp",
        "sub_channels",
        "sub_patterns",
        "sub_shard",
        "tracking",
        "user",
        "watched",
        "woff",
    )

    def __init__(self, client_id: int, created_ms: int) -> None:
        self.id = client_id
        self.name: bytes | None = None
        self.resp = 2
        self.db_index = 0
        self.in_multi = False
        # (spec, whole argv) of each queued command
        self.multi_queue: list[tuple[CommandSpec, Sequence[bytes]]] = []
        self.multi_error = False
        self.dirty_cas = False
        # (db, key, expired-when-watched); see Database.touch
        self.watched: list[WatchedKey] = []
        self.lib_name: bytes | None = None
        self.lib_ver: bytes | None = None
        self.created_ms = created_ms
        self.last_interaction_ms = created_ms
        self.last_cmd = "NULL"
        self.blocked: Blocked | None = None
        self.closed = False
        self.addr = "127.0.0.1:0"
        self.laddr = "127.0.0.1:0"
        # False until AUTH/HELLO AUTH succeeds on a server with requirepass (set by the
        # transport at connect); commands without the no-auth flag are refused meanwhile.
        self.authenticated = True
        # The ACL user (an acl.User) the connection runs as; Engine.connect sets the default.
        self.user: Any = None
        # The socket's file descriptor (CLIENT LIST), -1 for in-process clients.
        self.fd = -1
        # The transport's buffer sizes for CLIENT LIST (qbuf, obl, oll, omem), if any.
        self.io: ClientIO | None = None
        # Pub/Sub: the channels, patterns and shard channels this client listens to; pubsub
        # is Redis's CLIENT_PUBSUB flag (set by a (P|S)SUBSCRIBE, cleared when the last
        # subscription goes); push_out is set by a transport that can deliver messages.
        self.sub_channels: dict[bytes, None] = {}
        self.sub_patterns: dict[bytes, None] = {}
        self.sub_shard: dict[bytes, None] = {}
        self.pubsub = False
        self.push_out: Callable[[Reply], None] | None = None
        # Set by a network transport: ``push(line)`` sends an out-of-band reply (a MONITOR
        # line) to this connection; ``kill()`` closes it once the running command has been
        # answered (CLIENT KILL). None for in-process clients.
        self.push: Callable[[Reply | RawPush], None] | None = None
        self.kill: Callable[[], None] | None = None
        # MONITOR mode: the connection receives every other command (see commands/server_admin.py).
        self.monitor = False
        # A replica (SYNC/PSYNC): it receives the replication stream and no replies.
        self.replica = False
        # CLIENT REPLY: OFF drops every reply, SKIP drops the next command's (the transport
        # applies them; see server.py).
        self.reply_off = False
        self.reply_skip = False
        self.reply_skip_next = False
        # CLIENT TRACKING state (commands/connection.py), None while tracking is off.
        self.tracking: Any = None
        # The replication offset just past this client's last write streamed to replicas
        # (Redis's woff): what WAIT waits for.
        self.woff = 0
        self.ctx: Ctx

    def __repr__(self) -> str:
        return f"ClientState(id={self.id}, db={self.db_index}, resp={self.resp})"


class ClientIO(Protocol):
    """What a network transport reports about a connection's buffers (CLIENT LIST)."""

    def query_buffer_bytes(self) -> int:
        """Bytes received and not yet parsed into a complete command (``qbuf``)."""
        ...

    def output_buffer_bytes(self) -> int:
        """Reply bytes not yet accepted by the socket (``omem``)."""
        ...


class Ctx:
    """What a command function sees. One per client, reused across its commands.

    Attributes: ``engine``, ``keyspace``, ``client`` (:class:`ClientState`), ``db`` (the
    client's current :class:`~.keyspace.Database`), ``in_multi`` (True while EXEC runs the
    queued commands), ``in_script`` (True inside EVAL), ``argv`` (the whole command being run
    as received, for error texts that echo the client's spelling of a subcommand).
    """

    __slots__ = (
        "argv",
        "client",
        "counted",
        "db",
        "engine",
        "in_multi",
        "in_script",
        "keyspace",
        "prop_custom",
    )

    def __init__(self, engine: Engine, client: ClientState) -> None:
        self.engine = engine
        self.keyspace: Keyspace = engine.keyspace
        self.client = client
        self.db: Database = engine.keyspace.dbs[client.db_index]
        self.in_multi = False
        self.in_script = False
        # The whole command being run, as received (argv[1] is a subcommand as typed).
        self.argv: Sequence[bytes] = ()
        # True once the running write command counted its changes itself (:meth:`changed`);
        # otherwise the engine counts one change for it when it succeeds.
        self.counted = False
        # True once the running command chose what it propagates (ctx.propagate /
        # ctx.no_propagate): the engine then does not log the command as received.
        self.prop_custom = False

    def now_ms(self) -> int:
        """The engine clock in Unix milliseconds (injectable via ``Engine(clock=...)``)."""
        return self.engine.clock()

    @property
    def propagating(self) -> bool:
        """Whether the engine logs writes (an append-only file is attached and not loading).

        Commands that log something else than what they received check this first, so that
        an in-memory engine never builds what nobody reads."""
        prop = self.engine.propagator
        return prop is not None and prop.active

    def propagate(self, argv: Sequence[bytes], *, replicas: bool = True) -> None:
        """Log ``argv`` (in the current db) *instead of* the running command; call it again to
        log more, in order. The effects must be deterministic: what the clock or randomness
        decided is spelled out (XADD's generated ID, an absolute expiry time).

        ``replicas=False``: for the append-only file only, a record Redis does not stream to
        its replicas but the engine's file needs to replay exactly.

        No-op without persistence. Calling it with nothing to log is :meth:`no_propagate`."""
        prop = self.engine.propagator
        if prop is not None:
            self.prop_custom = True
            if prop.active:
                if not replicas:
                    feed = self.engine.replication.feed
                    if feed is not None and prop is feed:
                        feed.file_only.append(len(feed.ops))
                prop.ops.append((self.db.index, argv))

    def propagate_to_replicas(self, argv: Sequence[bytes]) -> None:
        """Send ``argv`` (in the current db) to the replicas, if any, not to the append-only
        file, besides what the running command logs (PUBLISH, as Redis 7.0)."""
        engine = self.engine
        feed = engine.replication.feed
        if feed is not None and engine.propagator is feed and feed.active:
            feed.replicas_only(self.db.index, argv)

    def also_propagate(self, argv: Sequence[bytes]) -> None:
        """Log ``argv`` (in the current db) before the running command's own record (which is
        still logged as received unless :meth:`propagate` / :meth:`no_propagate` is called)."""
        prop = self.engine.propagator
        if prop is not None and prop.active:
            prop.ops.append((self.db.index, argv))

    def no_propagate(self) -> None:
        """Do not log the running command (it changed nothing, or logged its effects with
        :meth:`also_propagate`)."""
        self.prop_custom = True

    def changed(self, n: int = 1) -> None:
        """Count ``n`` changes to the dataset (Redis's ``server.dirty += n``: INFO
        ``rdb_changes_since_last_save`` and the ``save`` schedule read the total).

        A write command that succeeds without calling this counts as one change; one that
        changed nothing calls ``changed(0)``, one that changed several things (DEL of three
        keys, HSET of two fields) says how many. May be called several times in one call."""
        self.counted = True
        self.engine.dirty += n

    def notify(self, kind: int, event: bytes, key: bytes) -> None:
        """A keyspace event on ``key`` of the current db (Redis's notifyKeyspaceEvent):
        ``kind`` is a :mod:`.pubsub` ``NOTIFY_*`` class, ``event`` Redis's event name. Costs
        one AND when ``notify-keyspace-events`` leaves the class off."""
        if self.engine.config.notify_flags & kind:
            self.engine.pubsub.notify(kind, event, key, self.db.index)

    def signal_key_ready(self, key: bytes) -> None:
        """Mark ``key`` (in the current db) ready: after the current command, clients blocked on
        it get their ``on_ready`` re-run in FIFO order."""
        engine = self.engine
        if engine._waiters:
            engine.signal_key_ready(self.db.index, key)

    def touch(self, key: bytes) -> None:
        """Mark ``key`` (in the current db) modified, for WATCH. ``Database.set``/``delete``
        already do this; call it after modifying a value in place."""
        db = self.db
        if db.watchers or db.track_hook is not None:
            db.touch(key)

    def select(self, index: int) -> None:
        """Switch the client's current database (SELECT)."""
        self.client.db_index = index
        self.db = self.keyspace.dbs[index]

    def block(
        self,
        keys: list[bytes],
        timeout_ms: int,
        on_ready: OnReady | None = None,
        on_timeout_reply: Reply = NULL_ARRAY,
        *,
        retry: OnReady | None = None,
    ) -> Reply | Blocked:
        """Block the client on ``keys`` of the current db; return the result to the caller.

        ``timeout_ms`` is relative, 0 = forever. ``on_ready`` (alias ``retry``) is re-run after
        a command signals one of the keys. Inside MULTI or a script there is no blocking: the
        timeout reply is returned at once, as Redis does.
        """
        func = on_ready if on_ready is not None else retry
        if func is None:
            raise TypeError("block() needs on_ready")
        if self.in_multi or self.in_script:
            return on_timeout_reply
        return Blocked(self, list(keys), timeout_ms, func, on_timeout_reply)


class Blocked:
    """A command waiting for a key. Returned by ``execute`` instead of a reply.

    The transport waits for :attr:`reply`: synchronously with :meth:`Engine.wait`, or by
    registering a callback with :meth:`add_done_callback` (run under the engine lock, possibly
    from another thread: it must be quick and must not call into the engine; asyncio
    transports use ``loop.call_soon_threadsafe``). When its own deadline passes the transport
    calls :meth:`Engine.timeout_blocked`, which resolves it with the timeout reply unless it
    was served first. A Blocked resolves exactly once.
    """

    __slots__ = (
        "_callbacks",
        "_event",
        "argv",
        "ctx",
        "db_index",
        "deadline",
        "keys",
        "on_ready",
        "on_timeout_reply",
        "postponed",
        "reply",
        "resolved",
        "run_ns",
        "spec",
        "timeout_ms",
    )

    def __init__(
        self,
        ctx: Ctx,
        keys: list[bytes],
        timeout_ms: int,
        on_ready: OnReady,
        on_timeout_reply: Reply,
    ) -> None:
        self.ctx = ctx
        self.db_index = ctx.db.index
        self.keys = keys
        self.timeout_ms = timeout_ms
        # Monotonic deadline in seconds; None = block forever.
        # Timeouts beyond ~30 years overflow Redis's deadline arithmetic; treat as forever.
        self.deadline: float | None = (
            time.monotonic() + timeout_ms / 1000.0 if 0 < timeout_ms < 10**12 else None
        )
        self.on_ready = on_ready
        self.on_timeout_reply = on_timeout_reply
        self.reply: Reply | None = None
        self.resolved = False
        self._callbacks: list[Callable[[Blocked], Any]] = []
        self._event: threading.Event | None = None
        # CLIENT PAUSE: the command that waits for the pause to end (not run yet). Resolved
        # with :data:`RESUME`, it is to be submitted again by the transport.
        self.postponed: Sequence[bytes] | None = None
        # The blocked command, its argv and run time so far: the engine counts the call
        # (INFO commandstats, slow log) when it is served or times out, as Redis does.
        self.spec: CommandSpec | None = None
        self.argv: Sequence[bytes] = ()
        self.run_ns = 0

    @property
    def client(self) -> ClientState:
        """The blocked client."""
        return self.ctx.client

    def remaining_s(self) -> float | None:
        """Seconds until the deadline (>= 0), or None when blocking forever."""
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - time.monotonic())

    def add_done_callback(self, fn: Callable[[Blocked], Any]) -> None:
        """Call ``fn(self)`` once resolved (immediately if already resolved). Take the engine
        lock (``engine.lock``) around the call to avoid a race with resolution."""
        if self.resolved:
            fn(self)
        else:
            self._callbacks.append(fn)

    def _event_obj(self) -> threading.Event:
        if self._event is None:
            self._event = threading.Event()
            if self.resolved:
                self._event.set()
        return self._event

    def resolve(self, reply: Reply) -> bool:
        """Deliver ``reply`` (engine lock held). Returns False if already resolved."""
        if self.resolved:
            return False
        self.reply = reply
        self.resolved = True
        if self._event is not None:
            self._event.set()
        callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            try:
                fn(self)
            except Exception:
                # The waiting side is gone (e.g. its event loop closed); the command that
                # served it must not fail because of that.
                pass
        return True

    def __repr__(self) -> str:
        return f"Blocked(client={self.ctx.client.id}, keys={self.keys!r}, resolved={self.resolved})"
