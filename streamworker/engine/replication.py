"""The master side of Redis's replication: SYNC / PSYNC clients and the stream they receive.

A client that sends ``SYNC`` (or ``PSYNC ? -1``, answered ``+FULLRESYNC <replid> <offset>``
first) gets the RDB of the current data as a bulk without its trailing CRLF, as Redis sends a
disk-based snapshot, and from then on every write the engine executes in the form Redis
propagates it (the same records the append-only file gets: ``XADD *`` with its ID, relative
expiries as ``PEXPIREAT``, ``SPOP`` as ``SREM``...), as RESP arrays, with ``SELECT <db>``
whenever the database changes and ``MULTI``/``EXEC`` around the records of one command that
wrote more than one (EXEC, a script), as Redis 7.0 does; a key that expires reaches them as
``DEL`` (only them: the append-only file replays at the recorded times and needs none). ``PING`` goes to the replicas every
``repl-ping-replica-period`` seconds. The connection is then a replica: it gets no replies to
what it sends (``REPLCONF ACK`` is accepted silently).

Cost: nothing while no replica is attached. The first replica wraps the engine's propagator
(the append-only file, or none) in a :class:`ReplicationFeed`; the last one to go unwraps it,
so an in-memory engine is back on its path that builds no propagated form.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from streamworker.engine.context import RawPush

if TYPE_CHECKING:
    from streamworker.engine.context import ClientState
    from streamworker.engine.core import Engine, Propagator

__all__ = ["Replication", "ReplicationFeed", "encode_command"]

_MULTI = b"*1\r\n$5\r\nMULTI\r\n"
_EXEC = b"*1\r\n$4\r\nEXEC\r\n"
_PING = b"*1\r\n$4\r\nPING\r\n"


def encode_command(out: bytearray, argv: Sequence[bytes]) -> None:
    """Append ``argv`` as a RESP array of bulk strings (the replication stream's framing)."""
    out += b"*%d\r\n" % len(argv)
    for arg in argv:
        out += b"$%d\r\n%b\r\n" % (len(arg), arg)


def _select(db: int) -> bytes:
    n = b"%d" % db
    return b"*2\r\n$6\r\nSELECT\r\n$%d\r\n%b\r\n" % (len(n), n)


class ReplicationFeed:
    """A :class:`~.core.Propagator` that streams the engine's writes to its replicas and hands
    them on to the propagator it wraps (the append-only file), if any.

    It owns the nesting depth and the list of the call's writes; at the end of each top-level
    call it encodes them for the replicas, then gives them to the wrapped propagator, which
    logs them its own way. Runs under the engine lock, as every propagator.
    """

    def __init__(self, replication: Replication, inner: Propagator | None) -> None:
        self.replication = replication
        self.inner = inner
        self.depth = 0
        self.ops: list[tuple[int, Sequence[bytes]]] = []
        # Positions in ops of the records for the replicas only (expired keys' DEL: the
        # append-only file replays at the recorded time, so it needs none).
        self.replica_only: list[int] = []
        # Encoded records not yet handed to the replicas (sent at the end of each execute).
        self.buf = bytearray()

    @property
    def active(self) -> bool:
        """As the wrapped propagator (False while it loads its file); True without one."""
        return self.inner.active if self.inner is not None else True

    @active.setter
    def active(self, value: bool) -> None:
        if self.inner is not None:
            self.inner.active = value

    @property
    def write_error(self) -> str | None:
        """The wrapped append-only file's write error (writes are refused meanwhile)."""
        return self.inner.write_error if self.inner is not None else None

    @write_error.setter
    def write_error(self, value: str | None) -> None:
        if self.inner is not None:
            self.inner.write_error = value

    def begin_call(self) -> None:
        """A top-level command starts: the wrapped propagator fixes its clock."""
        if self.inner is not None:
            self.inner.begin_call()

    def end_call(self) -> None:
        """Encode the call's writes for the replicas, then let the wrapped propagator log them."""
        ops = self.ops
        if not ops:
            return
        if self.active:
            rep = self.replication
            out = self.buf
            wrap = len(ops) > 1
            if wrap:
                # Redis gives MULTI the first record's database, so its SELECT comes first.
                if ops[0][0] != rep.db:
                    out += _select(ops[0][0])
                    rep.db = ops[0][0]
                out += _MULTI
            for db, argv in ops:
                if db != rep.db:
                    out += _select(db)
                    rep.db = db
                encode_command(out, argv)
            if wrap:
                out += _EXEC
        inner = self.inner
        if inner is not None:
            if self.replica_only:
                skip = set(self.replica_only)
                inner.ops.extend(op for i, op in enumerate(ops) if i not in skip)
            else:
                inner.ops.extend(ops)
            if inner.ops:
                inner.end_call()
        ops.clear()
        self.replica_only.clear()

    def expired(self, db: int, key: bytes) -> None:
        """``key`` expired (lazily inside a command, or by the active cycle): the replicas get
        ``DEL key``, as Redis propagates an expiry, in the command's records if one runs."""
        self.replica_only.append(len(self.ops))
        self.ops.append((db, [b"DEL", key]))
        if self.depth == 0:
            self.end_call()

    def after_execute(self) -> None:
        """Send what the execute call wrote to the replicas; the wrapped propagator flushes."""
        if self.inner is not None:
            self.inner.after_execute()
        if self.buf:
            data = bytes(self.buf)
            self.buf.clear()
            self.replication.send(data)

    def tick(self) -> None:
        """Housekeeping: the wrapped propagator's, then a PING to the replicas when due."""
        if self.inner is not None:
            self.inner.tick()
        self.replication.ping_if_due()


class Replication:
    """The engine's master side: its replicas, the replication ID and offset.

    One per :class:`~.core.Engine` (``engine.replication``); every method expects the engine
    lock to be held.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.replicas: dict[int, ClientState] = {}
        # What each replica acknowledged (REPLCONF ACK <offset>), by client id.
        self.acked: dict[int, int] = {}
        # When each replica last acknowledged (monotonic seconds; attach counts as one).
        self.ack_time: dict[int, float] = {}
        # Bytes streamed since the engine started (INFO's master_repl_offset).
        self.offset = 0
        # The database the replicas' stream is in (-1: the next write sends SELECT).
        self.db = -1
        self.feed: ReplicationFeed | None = None
        self._last_ping = time.monotonic()

    @property
    def replid(self) -> str:
        """The replication ID (the engine's run ID, 40 hex digits)."""
        return self.engine.run_id

    def attach(self, client: ClientState, rdb: bytes, fullresync: bool) -> None:
        """Make ``client`` a replica: send it the snapshot (after ``+FULLRESYNC`` for PSYNC),
        then every write from now on. The first replica starts the feed."""
        head = b""
        if fullresync:
            head = b"+FULLRESYNC %s %d\r\n" % (self.replid.encode(), self.offset)
        assert client.push is not None
        client.push(RawPush(head + b"$%d\r\n" % len(rdb) + rdb))
        client.replica = True
        self.replicas[client.id] = client
        self.acked[client.id] = 0
        self.ack_time[client.id] = time.monotonic()
        # As Redis after a full sync: the next record is preceded by a SELECT.
        self.db = -1
        engine = self.engine
        if self.feed is None:
            self.feed = ReplicationFeed(self, engine.propagator)
            engine.propagator = self.feed

    def detach(self, client: ClientState) -> None:
        """``client`` is gone; the last replica to go removes the feed."""
        if self.replicas.pop(client.id, None) is None:
            return
        self.acked.pop(client.id, None)
        self.ack_time.pop(client.id, None)
        feed = self.feed
        if (
            not self.replicas
            and feed is not None
            and self.engine.propagator is feed
            and feed.depth == 0
        ):
            feed.after_execute()
            self.engine.propagator = feed.inner
            self.feed = None

    def unwrap(self, inner: Propagator) -> None:
        """The wrapped propagator ``inner`` is closing: the feed goes on without it."""
        if self.feed is not None and self.feed.inner is inner:
            self.feed.inner = None

    def ack(self, client: ClientState, offset: int) -> None:
        """REPLCONF ACK from ``client``: the offset it has processed."""
        if client.id in self.replicas:
            self.acked[client.id] = offset
            self.ack_time[client.id] = time.monotonic()

    def good_replicas(self, max_lag_s: int) -> int:
        """Replicas that acknowledged within ``max_lag_s`` seconds (Redis's
        repl_good_slaves_count, for min-replicas-to-write)."""
        now = time.monotonic()
        return sum(1 for t in self.ack_time.values() if int(now - t) <= max_lag_s)

    def send(self, data: bytes) -> None:
        """Stream ``data`` to every replica."""
        self.offset += len(data)
        push = RawPush(data)
        for client in self.replicas.values():
            if client.push is not None and not client.closed:
                client.push(push)

    def ping_if_due(self) -> None:
        """Send PING to the replicas every ``repl-ping-replica-period`` seconds."""
        if not self.replicas:
            return
        now = time.monotonic()
        period = self.engine.config.get_int("repl-ping-replica-period")
        if now - self._last_ping >= period:
            self._last_ping = now
            self.send(_PING)

    def info_lines(self) -> list[str]:
        """INFO replication's replica lines (``connected_slaves``, ``slaveN``)."""
        lines = [f"connected_slaves:{len(self.replicas)}"]
        for i, client in enumerate(self.replicas.values()):
            ip = client.addr.rsplit(":", 1)[0] if client.addr else "?"
            acked = self.acked.get(client.id, 0)
            lines.append(f"slave{i}:ip={ip},port=0,state=online,offset={acked},lag=0")
        return lines

    def role_entries(self) -> list[list[bytes]]:
        """ROLE's replica list: [ip, port, acknowledged offset] each."""
        out = []
        for client in self.replicas.values():
            ip = client.addr.rsplit(":", 1)[0] if client.addr else "?"
            out.append([ip.encode(), b"0", b"%d" % self.acked.get(client.id, 0)])
        return out
