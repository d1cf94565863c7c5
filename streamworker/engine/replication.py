"""Redis's replication, both sides: SYNC / PSYNC clients and the stream they receive, and
the engine's own state as a replica (REPLICAOF host port).

A client that sends ``SYNC`` (or ``PSYNC ? -1``, answered ``+FULLRESYNC <replid> <offset>``
first) gets the RDB of the current data as a bulk without its trailing CRLF, as Redis sends a
disk-based snapshot, and from then on every write the engine executes in the form Redis
propagates it (the same records the append-only file gets: ``XADD *`` with its ID, relative
expiries as ``PEXPIREAT``, ``SPOP`` as ``SREM``...), as RESP arrays, with ``SELECT <db>``
whenever the database changes and ``MULTI``/``EXEC`` around the records of one command that
wrote more than one (EXEC, a script), as Redis 7.0 does; a key that expires reaches them as
``DEL`` (only them: the append-only file replays at the recorded times and needs none), and
``PUBLISH`` too. ``PING`` goes to the replicas every ``repl-ping-replica-period`` seconds. The connection is then a replica: it gets no replies to
what it sends (``REPLCONF ACK`` is accepted silently).

The replica side (REPLICAOF host port) keeps the state Redis 7.0 reports (ROLE, INFO
replication) and decides what normal clients may still run (READONLY, MASTERDOWN: see
:meth:`Replication.refusal`); the link to the master itself is network I/O, run by the server
(:mod:`.replica_link`), which installs :attr:`Replication.link_starter`. An engine without a
server (in-process) has none: REPLICAOF host port is refused there.

Cost: nothing while no replica is attached. The first replica wraps the engine's propagator
(the append-only file, or none) in a :class:`ReplicationFeed`; the last one to go unwraps it,
so an in-memory engine is back on its path that builds no propagated form.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from streamworker.engine import msgs
from streamworker.engine.context import RawPush
from streamworker.engine.errors import CommandError
from streamworker.engine.framing import encode_call

if TYPE_CHECKING:
    from streamworker.engine.context import Blocked, ClientState
    from streamworker.engine.core import Engine, Propagator

__all__ = ["LinkHandle", "Replication", "ReplicationFeed", "encode_command"]

_MULTI = b"*1\r\n$5\r\nMULTI\r\n"
_EXEC = b"*1\r\n$4\r\nEXEC\r\n"
_PING = b"*1\r\n$4\r\nPING\r\n"
_GETACK = b"*3\r\n$8\r\nREPLCONF\r\n$6\r\nGETACK\r\n$1\r\n*\r\n"


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
        # append-only file replays at the recorded time, so it needs none; PUBLISH).
        self.replica_only: list[int] = []
        # Positions in ops of the records for the append-only file only (what the engine's
        # file needs to replay exactly and Redis does not stream: see Ctx.propagate).
        self.file_only: list[int] = []
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
        rep = self.replication
        # A replica streams to its own replicas what its master sent (Redis's proxying of
        # the master's stream), never what it executes: a demotion inside EXEC drops the
        # whole transaction for the replicas, as Redis 7.0 does (the file still gets it).
        if self.active and rep.master_host is None:
            sent: Sequence[tuple[int, Sequence[bytes]]] = ops
            if self.file_only:
                hidden = set(self.file_only)
                sent = [op for i, op in enumerate(ops) if i not in hidden]
            rep.db = encode_call(
                self.buf,
                sent,
                rep.db,
                encode=encode_command,
                select=_select,
                multi=_MULTI,
                exec_=_EXEC,
            )
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
        self.file_only.clear()

    def forget_from(self, mark: int) -> None:
        """The records from position ``mark`` on were dropped (a script's unpropagated call):
        so are their replica-only / file-only marks."""
        self.replica_only = [i for i in self.replica_only if i < mark]
        self.file_only = [i for i in self.file_only if i < mark]

    def replicas_only(self, db: int, argv: Sequence[bytes]) -> None:
        """Record ``argv`` for the replicas alone (PUBLISH: Redis sends it to its replicas,
        never to its append-only file)."""
        self.replica_only.append(len(self.ops))
        self.ops.append((db, argv))

    def expired(self, db: int, key: bytes) -> None:
        """``key`` expired (lazily inside a command, or by the active cycle): the replicas get
        ``DEL key``, as Redis propagates an expiry, in the command's records if one runs."""
        if self.replication.master_host is not None:
            return  # a replica waits for its master's DEL
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


class LinkHandle(Protocol):
    """A running link to a master (:mod:`.replica_link`): stopped when the engine stops
    being that master's replica."""

    def stop(self) -> None:
        """Close the link now (engine lock held); it does not reconnect."""


# What REPLICAOF host port starts: the server's link for the master at host:port.
LinkStarter = Callable[["Replication"], LinkHandle]

# Redis's replication states as ROLE names them.
LINK_CONNECT = "connect"
LINK_CONNECTING = "connecting"
LINK_HANDSHAKE = "handshake"
LINK_SYNC = "sync"
LINK_CONNECTED = "connected"

_UNBLOCKED_BY_ROLE_CHANGE = (
    "UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)"
)


class Replication:
    """The engine's replication state: as a master, its replicas, the replication ID and
    offset; as a replica (:attr:`master_host` set), its master, the link's state and offsets.

    One per :class:`~.core.Engine` (``engine.replication``); every method expects the engine
    lock to be held.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.replicas: dict[int, ClientState] = {}
        # What each replica acknowledged (REPLCONF ACK <offset>), by client id.
        self.acked: dict[int, int] = {}
        # WAIT callers: (their blocked command, the offset they wait for, how many replicas).
        self.waiting: list[tuple[Blocked, int, int]] = []
        # When each replica last acknowledged (monotonic seconds), by client id.
        self.acked_at: dict[int, float] = {}
        # The port each replica listens on (REPLCONF listening-port), by client id.
        self.listening_ports: dict[int, int] = {}
        # Bytes of the replication stream so far (INFO's master_repl_offset).
        self.offset = 0
        # The database the replicas' stream is in (-1: the next write sends SELECT).
        self.db = -1
        self.feed: ReplicationFeed | None = None
        self._last_ping = time.monotonic()
        # The replication ID (40 hex digits), and the previous one with the offset up to
        # which it is valid + 1 (Redis's replid2 / second_replid_offset).
        self.replid = engine.run_id
        self.replid2 = "0" * 40
        self.second_offset = -1
        # --- the replica side -------------------------------------------------------------
        # The master (REPLICAOF host port), None while the engine is a master.
        self.master_host: str | None = None
        self.master_port = 0
        # The link's state (LINK_*), meaningful while master_host is set.
        self.link_state = LINK_CONNECT
        # The client that applies the master's stream while the link is up (it bypasses
        # READONLY and gets no replies), None otherwise.
        self.master_client: ClientState | None = None
        # The master's stream: bytes applied and bytes read (Redis's reploff /
        # read_reploff), kept while the link is down (Redis's cached master).
        self.master_offset = 0
        self.master_read_offset = 0
        # Monotonic time of the last bytes from the master; wall seconds the link went down
        # (0: it has not been up since REPLICAOF).
        self.last_io = 0.0
        self.down_since = 0
        # The full resynchronization in progress: bulk size (-1: diskless, unknown) and bytes
        # read so far, monotonic time of the last read.
        self.transfer_size = -1
        self.transfer_read = 0
        self.transfer_last_io = 0.0
        # True while the master's stream is being applied (scripts it runs obey it too).
        self.applying = False
        # Installed by the server: starts the link for REPLICAOF host port.
        self.link_starter: LinkStarter | None = None
        self.link: LinkHandle | None = None

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
        self.acked_at[client.id] = time.monotonic()
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
        self.acked_at.pop(client.id, None)
        self.listening_ports.pop(client.id, None)
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
            self.acked_at[client.id] = time.monotonic()
            if self.waiting:
                self._serve_waiting()

    def count_acks(self, offset: int) -> int:
        """Replicas that acknowledged ``offset`` or more (Redis's replicationCountAcksByOffset)."""
        return sum(1 for acked in self.acked.values() if acked >= offset)

    def wait_for(self, blocked: Blocked, offset: int, numreplicas: int) -> None:
        """WAIT blocked: served once ``numreplicas`` replicas acknowledged ``offset``; its
        timeout reply follows the count. The replicas are asked to acknowledge at once
        (``REPLCONF GETACK *`` after the records in flight)."""
        self.waiting.append((blocked, offset, numreplicas))
        feed = self.feed
        if feed is not None:
            feed.buf += _GETACK

    def _serve_waiting(self) -> None:
        engine = self.engine
        still = []
        for blocked, offset, numreplicas in self.waiting:
            if blocked.resolved:
                continue
            count = self.count_acks(offset)
            blocked.on_timeout_reply = count
            if count >= numreplicas:
                engine.unblock(blocked, count)
            else:
                still.append((blocked, offset, numreplicas))
        self.waiting = still

    def send(self, data: bytes) -> None:
        """Stream ``data`` to every replica."""
        self.offset += len(data)
        push = RawPush(data)
        for client in self.replicas.values():
            if client.push is not None and not client.closed:
                client.push(push)

    def ping_if_due(self) -> None:
        """Send PING to the replicas every ``repl-ping-replica-period`` seconds (a replica
        sends none of its own: its replicas get its master's)."""
        if not self.replicas or self.master_host is not None:
            return
        now = time.monotonic()
        period = self.engine.config.get_int("repl-ping-replica-period")
        if now - self._last_ping >= period:
            self._last_ping = now
            self.send(_PING)

    # -- the replica side -------------------------------------------------------------

    @property
    def stale(self) -> bool:
        """A replica whose link is down with ``replica-serve-stale-data no``: commands without
        the ``stale`` flag get MASTERDOWN."""
        return (
            self.master_host is not None
            and self.link_state != LINK_CONNECTED
            and self.engine.config.get("replica-serve-stale-data") == "no"
        )

    @property
    def read_only(self) -> bool:
        """A replica with ``replica-read-only yes``: writes from normal clients get READONLY."""
        return self.master_host is not None and self.engine.config.get("replica-read-only") == "yes"

    def become_replica(self, host: str, port: int) -> None:
        """REPLICAOF host port: forget the current master (if any) and start the link to the
        new one in the background (the command never waits for it). The engine's own replicas
        stay attached until the new master's data is loaded, as in Redis 7.0; clients blocked
        on keys are released with Redis's UNBLOCKED error and closed.

        Raises CommandError without a server to run the link (in-process)."""
        if self.link_starter is None:
            raise CommandError(msgs.ENGINE_REPLICA_NEEDS_SERVER)
        was_master = self.master_host is None
        self._stop_link()
        self._unblock_all()
        if was_master:
            # Redis caches "a master made of ourselves": the offsets start from our own.
            self.master_offset = self.master_read_offset = self.offset
        self.master_host = host
        self.master_port = port
        self._show_master(f"{host} {port}")
        self.link_state = LINK_CONNECT
        self.engine.admin_changed()
        self.link = self.link_starter(self)

    def become_master(self) -> None:
        """REPLICAOF NO ONE: stop the link, keep the data, start a new replication history
        (the old ID becomes the secondary one, valid up to the current offset) and disconnect
        the engine's own replicas (they resynchronize), as Redis 7.0 does."""
        if self.master_host is None:
            return
        self.master_host = None
        self._show_master("")
        self._stop_link()
        self.replid2 = self.replid
        self.second_offset = self.offset + 1
        self.replid = os.urandom(20).hex()
        self.disconnect_replicas()
        self.down_since = 0
        self.db = -1
        self.engine.admin_changed()

    def _show_master(self, value: str) -> None:
        # CONFIG GET replicaof / slaveof (immutable parameters that reflect the state).
        values = self.engine.config.values
        values["replicaof"] = values["slaveof"] = value

    def _stop_link(self) -> None:
        link, self.link = self.link, None
        if link is not None:
            link.stop()
        self.drop_master_client()

    def drop_master_client(self) -> None:
        """The link to the master is gone: its client goes, the link is down from now."""
        client, self.master_client = self.master_client, None
        if client is not None:
            self.engine.disconnect(client)
            if self.link_state == LINK_CONNECTED:
                self.down_since = int(time.time())
        if self.master_host is not None:
            self.link_state = LINK_CONNECT

    def disconnect_replicas(self) -> None:
        """Close every replica's connection (they reconnect and resynchronize)."""
        for client in list(self.replicas.values()):
            if client.kill is not None:
                client.kill()

    def _unblock_all(self) -> None:
        # Redis's disconnectAllBlockedClients: a client blocked on keys of a master that
        # becomes a replica is answered UNBLOCKED and closed (one postponed by CLIENT PAUSE
        # is not: its command has not started).
        engine = self.engine
        for client in list(engine.clients.values()):
            blocked = client.blocked
            if blocked is None or blocked.resolved or blocked.postponed is not None:
                continue
            engine.unblock(blocked, CommandError(_UNBLOCKED_BY_ROLE_CHANGE))
            if client.kill is not None:
                client.kill()

    def synced(self, replid: str, offset: int, client: ClientState) -> None:
        """The master's data is loaded (FULLRESYNC ``replid`` ``offset``): its history becomes
        the engine's and ``client`` applies its stream from now on."""
        self.replid = replid
        self.replid2 = "0" * 40
        self.second_offset = -1
        self.offset = self.master_offset = self.master_read_offset = offset
        self.master_client = client
        self.link_state = LINK_CONNECTED
        self.last_io = time.monotonic()
        self.db = -1

    def applied(self, raw: bytes) -> None:
        """One command of the master's stream (``raw``, as received) was applied: the offsets
        move on and the engine's replicas get the same bytes (Redis proxies the stream)."""
        self.master_offset += len(raw)
        self.master_read_offset = max(self.master_read_offset, self.master_offset)
        if self.replicas:
            self.send(raw)
        else:
            self.offset += len(raw)

    def good_replicas(self) -> int:
        """Replicas that acknowledged within ``min-replicas-max-lag`` seconds."""
        max_lag = self.engine.config.get_int("min-replicas-max-lag")
        now = time.monotonic()
        return sum(1 for when in self.acked_at.values() if int(now - when) <= max_lag)

    @property
    def too_few_replicas(self) -> bool:
        """A master with ``min-replicas-to-write`` and ``min-replicas-max-lag`` set and fewer
        good replicas than asked: writes get NOREPLICAS (Redis's checkGoodReplicasStatus)."""
        cfg = self.engine.config
        wanted = cfg.get_int("min-replicas-to-write")
        return (
            self.master_host is None
            and wanted > 0
            and cfg.get_int("min-replicas-max-lag") > 0
            and self.good_replicas() < wanted
        )

    def refusal(self, write: bool, deny_stale: bool) -> str | None:
        """The error a normal client's command gets for the replication state, or None:
        NOREPLICAS for a write on a master short of good replicas, READONLY for a write on a
        read-only replica, MASTERDOWN for a command without the ``stale`` flag while the link
        is down and ``replica-serve-stale-data`` is no (Redis's order)."""
        if write and self.too_few_replicas:
            return msgs.NOREPLICAS
        if write and self.read_only:
            return msgs.READONLY_REPLICA
        if deny_stale and self.stale:
            return msgs.MASTERDOWN
        return None

    def replica_info_lines(self) -> list[str]:
        """INFO replication's lines between ``role:slave`` and ``connected_slaves``."""
        now = time.monotonic()
        wall = int(time.time())
        state = self.link_state
        lines = [
            f"master_host:{self.master_host}",
            f"master_port:{self.master_port}",
            f"master_link_status:{'up' if state == LINK_CONNECTED else 'down'}",
            "master_last_io_seconds_ago:"
            + (str(int(now - self.last_io)) if self.master_client is not None else "-1"),
            f"master_sync_in_progress:{int(state == LINK_SYNC)}",
            f"slave_read_repl_offset:{self.master_read_offset}",
            f"slave_repl_offset:{self.master_offset}",
        ]
        if state == LINK_SYNC:
            size = self.transfer_size
            done = self.transfer_read
            perc = done / size * 100 if size > 0 else 0.0
            lines += [
                f"master_sync_total_bytes:{size}",
                f"master_sync_read_bytes:{done}",
                f"master_sync_left_bytes:{size - done}",
                f"master_sync_perc:{perc:.2f}",
                f"master_sync_last_io_seconds_ago:{int(now - self.transfer_last_io)}",
            ]
        if state != LINK_CONNECTED:
            down = wall - self.down_since if self.down_since else -1
            lines.append(f"master_link_down_since_seconds:{down}")
        cfg = self.engine.config
        lines += [
            f"slave_priority:{cfg.get('replica-priority')}",
            f"slave_read_only:{int(cfg.get('replica-read-only') == 'yes')}",
            f"replica_announced:{int(cfg.get('replica-announced') == 'yes')}",
        ]
        return lines

    def role_reply(self) -> list[object]:
        """ROLE: the master form, or ["slave", host, port, state, offset] (-1 while the link
        is down)."""
        if self.master_host is None:
            return [b"master", self.offset, self.role_entries()]
        offset = self.master_offset if self.master_client is not None else -1
        return [
            b"slave",
            self.master_host.encode("utf-8", "surrogateescape"),
            self.master_port,
            self.link_state.encode(),
            offset,
        ]

    def info_lines(self) -> list[str]:
        """INFO replication's replica lines (``connected_slaves``, ``min_slaves_good_slaves``
        when min-replicas-to-write is on, ``slaveN``)."""
        lines = [f"connected_slaves:{len(self.replicas)}"]
        cfg = self.engine.config
        if cfg.get_int("min-replicas-to-write") and cfg.get_int("min-replicas-max-lag"):
            lines.append(f"min_slaves_good_slaves:{self.good_replicas()}")
        now = time.monotonic()
        for i, client in enumerate(self.replicas.values()):
            ip = client.addr.rsplit(":", 1)[0] if client.addr else "?"
            acked = self.acked.get(client.id, 0)
            port = self.listening_ports.get(client.id, 0)
            lag = int(now - self.acked_at.get(client.id, now))
            lines.append(f"slave{i}:ip={ip},port={port},state=online,offset={acked},lag={lag}")
        return lines

    def role_entries(self) -> list[list[bytes]]:
        """ROLE's replica list: [ip, port, acknowledged offset] each."""
        out = []
        for client in self.replicas.values():
            ip = client.addr.rsplit(":", 1)[0] if client.addr else "?"
            port = self.listening_ports.get(client.id, 0)
            out.append([ip.encode(), b"%d" % port, b"%d" % self.acked.get(client.id, 0)])
        return out
