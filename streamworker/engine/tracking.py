"""Client-side caching support (CLIENT TRACKING): which keys each client read, and the RESP3
``invalidate`` pushes sent when they change.

As Redis 7.0: in the default mode the keys of every read-only command a tracking client runs
are remembered (in OPTIN mode only after ``CLIENT CACHING yes``, in OPTOUT mode unless
``CLIENT CACHING no``); the first modification of such a key sends ``invalidate [key]`` to the
client (or its REDIRECT client) and forgets the key. In BCAST mode every modified key that
starts with one of the client's prefixes is sent, the keys of one command together per prefix
(prefixes in byte order).
FLUSHDB/FLUSHALL send ``invalidate`` with a null to every tracking client. NOLOOP skips the
keys the client modified itself. A REDIRECT client that is gone gets the tracking client a
``tracking-redir-broken`` push, once.

Not done: RESP2 clients receive invalidations only as Pub/Sub messages on
``__redis__:invalidate`` (through REDIRECT), which needs Pub/Sub; they get none here. Keys read
by scripts are not tracked.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from streamworker.engine.context import RawPush

if TYPE_CHECKING:
    from streamworker.engine.context import ClientState
    from streamworker.engine.core import Engine
    from streamworker.engine.table import CommandSpec

__all__ = ["Tracker"]

_INVALIDATE = b">2\r\n$10\r\ninvalidate\r\n"


def _keys_frame(keys: Sequence[bytes] | None) -> bytes:
    if keys is None:
        return _INVALIDATE + b"_\r\n"
    out = bytearray(_INVALIDATE)
    out += b"*%d\r\n" % len(keys)
    for key in keys:
        out += b"$%d\r\n%b\r\n" % (len(key), key)
    return bytes(out)


class Tracker:
    """The engine's tracking table (engine lock held for every call)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        # key -> ids of the clients that read it (default mode); one table for all dbs, as
        # Redis's.
        self.table: dict[bytes, dict[int, None]] = {}
        # BCAST: client id -> prefix -> keys modified during the current command.
        self.pending: dict[int, dict[bytes, list[bytes]]] = {}
        # The client whose command is running (NOLOOP).
        self.current: ClientState | None = None

    def install(self) -> None:
        """Hook every database (idempotent)."""
        for db in self.engine.keyspace.dbs:
            db.track_hook = self.modified

    def after_command(self, client: ClientState, spec: CommandSpec, argv: Sequence[bytes]) -> None:
        """Remember the keys of a read-only command run by a tracking client."""
        tracking = client.tracking
        if tracking is None:
            return
        if "readonly" in spec.flags and not tracking.bcast:
            wanted = True
            if tracking.optin:
                wanted = tracking.caching
            elif tracking.optout:
                wanted = not tracking.caching
            if wanted:
                for pos in spec.key_positions(len(argv)):
                    self.table.setdefault(argv[pos], {})[client.id] = None
        if spec.name != "client|caching":
            tracking.caching = False

    def modified(self, db_index: int, key: bytes | None) -> None:
        """A key changed (``None``: a database was flushed)."""
        clients = self.engine.tracking_clients
        current = self.current
        if key is None:
            self.table.clear()
            for client in list(clients.values()):
                self._send(client, None)
            return
        readers = self.table.pop(key, None)
        if readers:
            for client_id in readers:
                reader = clients.get(client_id)
                if reader is None or reader.tracking is None or reader.tracking.bcast:
                    continue
                if reader.tracking.noloop and reader is current:
                    continue
                self._send(reader, [key])
        for client in clients.values():
            tracking = client.tracking
            if tracking is None or not tracking.bcast:
                continue
            if tracking.noloop and client is current:
                continue
            for prefix in tracking.prefixes:
                if key.startswith(prefix):
                    self.pending.setdefault(client.id, {}).setdefault(prefix, []).append(key)

    def flush_pending(self) -> None:
        """Send the BCAST invalidations gathered during a command."""
        pending, self.pending = self.pending, {}
        clients = self.engine.tracking_clients
        for client_id, by_prefix in pending.items():
            client = clients.get(client_id)
            if client is None or client.tracking is None:
                continue
            # Redis walks its prefix table in byte order.
            for _, keys in sorted(by_prefix.items()):
                self._send(client, keys)

    def _send(self, client: ClientState, keys: Sequence[bytes] | None) -> None:
        tracking = client.tracking
        assert tracking is not None
        target = client
        if tracking.redirect:
            found = self.engine.clients.get(tracking.redirect)
            if found is None:
                if not tracking.broken_redirect:
                    tracking.broken_redirect = True
                    if client.resp >= 3 and client.push is not None:
                        client.push(
                            RawPush(
                                b">2\r\n$21\r\ntracking-redir-broken\r\n:%d\r\n" % tracking.redirect
                            )
                        )
                return
            target = found
        if target.resp < 3 or target.push is None:
            # RESP2: only through Pub/Sub on __redis__:invalidate (not available here).
            return
        target.push(RawPush(_keys_frame(keys)))
