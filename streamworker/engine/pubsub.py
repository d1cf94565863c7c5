"""Pub/Sub: the subscription registry, message delivery and keyspace notifications.

Delivery is push-based: a transport sets :attr:`ClientState.push_out` on its connections, a
function that appends one reply to the client's output *now* (under the engine lock), as
Redis appends a message to the subscriber's output buffer inside PUBLISH. A message to the
publishing client itself therefore precedes the PUBLISH reply, as in Redis. A client without
``push_out`` cannot subscribe (see :mod:`.commands.pubsub`).

Channels, patterns and shard channels are three separate namespaces (single node: shard
channels are never matched by patterns). Everything here runs under the engine lock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamworker.engine.keyspace import glob_match
from streamworker.engine.notify import NOTIFY_KEYEVENT, NOTIFY_KEYSPACE
from streamworker.engine.replies import Push

if TYPE_CHECKING:
    from streamworker.engine.config import EngineConfig
    from streamworker.engine.context import ClientState

__all__ = ["PubSub", "stringmatch"]

_MESSAGE = b"message"
_PMESSAGE = b"pmessage"
_SMESSAGE = b"smessage"


def stringmatch(pattern: bytes, channel: bytes) -> bool:
    """Redis's ``stringmatchlen`` as Pub/Sub uses it: :func:`glob_match` without the ``*``
    shortcut of KEYS and SCAN, so that no non-empty pattern matches the empty channel."""
    if not channel:
        return not pattern
    return glob_match(pattern, channel)


class PubSub:
    """Who listens to what: channel -> subscribers, pattern -> subscribers, shard channel ->
    subscribers (dicts used as insertion-ordered sets). Each client keeps the mirror image
    (``sub_channels``, ``sub_patterns``, ``sub_shard``)."""

    __slots__ = ("channels", "config", "patterns", "shard")

    def __init__(self, config: EngineConfig) -> None:
        self.channels: dict[bytes, dict[ClientState, None]] = {}
        self.patterns: dict[bytes, dict[ClientState, None]] = {}
        self.shard: dict[bytes, dict[ClientState, None]] = {}
        # notify-keyspace-events is read from here (config.notify_flags, kept by CONFIG SET).
        self.config = config

    # -- subscriptions ---------------------------------------------------------------------

    def subscribe(self, client: ClientState, channel: bytes, shard: bool = False) -> None:
        """Add ``client`` to ``channel`` (idempotent)."""
        mine = client.sub_shard if shard else client.sub_channels
        if channel in mine:
            return
        mine[channel] = None
        table = self.shard if shard else self.channels
        table.setdefault(channel, {})[client] = None

    def unsubscribe(self, client: ClientState, channel: bytes, shard: bool = False) -> bool:
        """Remove ``client`` from ``channel``; False if it was not subscribed."""
        mine = client.sub_shard if shard else client.sub_channels
        if channel not in mine:
            return False
        del mine[channel]
        table = self.shard if shard else self.channels
        subs = table.get(channel)
        if subs is not None:
            subs.pop(client, None)
            if not subs:
                # An empty channel is forgotten: PUBSUB CHANNELS never lists it.
                del table[channel]
        return True

    def psubscribe(self, client: ClientState, pattern: bytes) -> None:
        """Add ``client`` to ``pattern`` (idempotent)."""
        if pattern in client.sub_patterns:
            return
        client.sub_patterns[pattern] = None
        self.patterns.setdefault(pattern, {})[client] = None

    def punsubscribe(self, client: ClientState, pattern: bytes) -> bool:
        """Remove ``client`` from ``pattern``; False if it was not subscribed."""
        if pattern not in client.sub_patterns:
            return False
        del client.sub_patterns[pattern]
        subs = self.patterns.get(pattern)
        if subs is not None:
            subs.pop(client, None)
            if not subs:
                del self.patterns[pattern]
        return True

    def drop_client(self, client: ClientState) -> None:
        """Forget every subscription of ``client`` (disconnect, RESET) without telling it."""
        for channel in list(client.sub_channels):
            self.unsubscribe(client, channel)
        for channel in list(client.sub_shard):
            self.unsubscribe(client, channel, shard=True)
        for pattern in list(client.sub_patterns):
            self.punsubscribe(client, pattern)
        client.pubsub = False

    # -- publishing ------------------------------------------------------------------------

    def publish(self, channel: bytes, message: bytes) -> int:
        """Deliver ``message`` to the subscribers of ``channel`` and of every pattern that
        matches it; returns how many deliveries were made (a client subscribed to the channel
        and to two matching patterns counts three times, as in Redis)."""
        receivers = 0
        subs = self.channels.get(channel)
        if subs:
            frame = Push([_MESSAGE, channel, message])
            receivers = len(subs)
            # A copy: a push may close a subscriber (output limit), which leaves the dict.
            for client in list(subs):
                push = client.push_out
                if push is not None and not client.closed:
                    push(frame)
        if self.patterns:
            for pattern, psubs in list(self.patterns.items()):
                if not stringmatch(pattern, channel):
                    continue
                frame = Push([_PMESSAGE, pattern, channel, message])
                for client in list(psubs):
                    _deliver(client, frame)
                    receivers += 1
        return receivers

    def spublish(self, channel: bytes, message: bytes) -> int:
        """Deliver ``message`` to the subscribers of shard channel ``channel``."""
        subs = self.shard.get(channel)
        if not subs:
            return 0
        frame = Push([_SMESSAGE, channel, message])
        for client in list(subs):
            _deliver(client, frame)
        return len(subs)

    # -- keyspace notifications ------------------------------------------------------------

    def notify(self, kind: int, event: bytes, key: bytes, db_index: int) -> None:
        """Redis's ``notifyKeyspaceEvent``: publish ``__keyspace@<db>__:<key>`` with the event
        name and ``__keyevent@<db>__:<event>`` with the key, as the configured classes say.

        Cheap when notifications are off (the common case): one AND."""
        flags = self.config.notify_flags
        if not flags & kind:
            return
        if flags & NOTIFY_KEYSPACE:
            self.publish(b"__keyspace@%d__:%b" % (db_index, key), event)
        if flags & NOTIFY_KEYEVENT:
            self.publish(b"__keyevent@%d__:%b" % (db_index, event), key)


def _deliver(client: ClientState, frame: Push) -> None:
    push = client.push_out
    if push is not None and not client.closed:
        push(frame)
