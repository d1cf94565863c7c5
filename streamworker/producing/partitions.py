"""Partitioned streams: one logical stream as N Redis streams, a message routed by its key.

Redis Streams have no partitions of their own. A partitioned stream ``orders`` with N partitions
is the N streams :func:`~streamworker.io.keys.partition_stream` names, ``{orders:p0}`` …
``{orders:p<N-1>}``. Each is its own hash tag, so on Redis Cluster the partitions spread over
the slots (and so over the masters) while each partition's dead-letter stream, lease and dedup
record stay in its slot. A producer picks the partition from a key with a stable hash
(CRC-32 of the key's UTF-8 bytes, modulo N): every message of one key goes to one partition, in
the order it was added. A handler registered with ``partitions=N`` consumes all N as one logical
stream (one consume loop per partition; see :meth:`streamworker.App.handler`).

Changing N moves keys: about ``1 - 1/N'`` of them hash to another partition. Entries already
added stay where they are, so for a while a key has messages in two partitions and the order
between the old and new partition is not kept. To change N safely, stop the producers, let the
workers drain every partition, then change N on both sides (see docs/scaling.md).
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
import redis.exceptions as rex

from streamworker.errors import ConfigError
from streamworker.io.keys import partition_stream
from streamworker.io.redisio import as_text, connection_errors, is_cluster_client

MAX_PARTITIONS = 1024
"""The largest partition count accepted (each partition is a consume loop in every worker)."""

FieldValue = str | bytes | int | float


def partition_of(key: str | bytes, partitions: int) -> int:
    """The partition of ``key`` among ``partitions``: CRC-32 of its UTF-8 bytes modulo N.

    Stable across processes, machines and Python versions (unlike ``hash()``).
    """
    data = key.encode("utf-8") if isinstance(key, str) else key
    return zlib.crc32(data) % partitions


def check_partitioned_name(stream: str, partitions: int) -> None:
    """Raise ConfigError unless ``stream`` and ``partitions`` can name a partitioned stream."""
    if not isinstance(stream, str) or not stream:
        raise ConfigError("a partitioned stream needs a non-empty name")
    if "{" in stream or "}" in stream:
        raise ConfigError(
            f"partitioned stream {stream!r}: the name must not contain '{{' or '}}' (each "
            f"partition gets its own hash tag, {partition_stream('NAME', 0)!r})"
        )
    if (
        not isinstance(partitions, int)
        or isinstance(partitions, bool)
        or not 1 <= partitions <= MAX_PARTITIONS
    ):
        raise ConfigError(
            f"partitions must be an integer from 1 to {MAX_PARTITIONS}, got {partitions!r}"
        )


@dataclass(frozen=True, slots=True)
class PartitionedStream:
    """A logical stream ``name`` of ``partitions`` Redis streams. Pure: no I/O."""

    name: str
    partitions: int

    def __post_init__(self) -> None:
        check_partitioned_name(self.name, self.partitions)

    def streams(self) -> list[str]:
        """Every partition's stream key, partition 0 first."""
        return [partition_stream(self.name, i) for i in range(self.partitions)]

    def stream_for(self, key: str | bytes) -> str:
        """The stream key of the partition that ``key`` routes to."""
        return partition_stream(self.name, partition_of(key, self.partitions))


@dataclass(frozen=True, slots=True)
class Published:
    """Where :meth:`PartitionedProducer.add` put a message, and how many replicas confirmed it
    (None when no ``wait_replicas`` was asked)."""

    stream: str
    id: str
    replicas: int | None = None


class PartitionedProducer:
    """Adds messages to a :class:`PartitionedStream` by key, optionally waiting for replicas.

    Works with a plain asyncio client and with a Redis Cluster client (``open_redis`` on a
    ``redis+cluster://`` URL). Use from one event loop; ``aclose()`` when done (the client
    passed in is not closed).

    ``wait_replicas`` (``WAIT``): Redis replicates asynchronously, so an entry a master
    acknowledged can be lost when that master fails before a replica has it. With
    ``wait_replicas=k`` the XADD is followed, on the same connection, by ``WAIT k timeout``, and
    :attr:`Published.replicas` says how many replicas had the entry when WAIT returned. That
    narrows the window, it does not close it (a replica that has the entry may still not be the
    one promoted); a caller that gets fewer than ``k`` may add the message again, and a handler
    with ``dedup_field`` recognises the duplicate.
    """

    def __init__(self, client: aioredis.Redis, stream: PartitionedStream) -> None:
        self._client = client
        self.stream = stream
        self._cluster = is_cluster_client(client)
        self._nodes: dict[tuple[str, int], aioredis.Redis] = {}
        self._auth: dict[str, Any] = {}

    async def add(
        self,
        key: str | bytes,
        fields: Mapping[str | bytes, FieldValue],
        *,
        wait_replicas: int = 0,
        wait_timeout_ms: int = 1_000,
        maxlen: int | None = None,
    ) -> Published:
        """XADD ``fields`` to the partition of ``key``. Raises ConnectionLost when Redis is away
        (the entry may or may not have been added), ConfigError for bad arguments."""
        if not fields:
            raise ConfigError("a message needs at least one field")
        if wait_replicas < 0:
            raise ConfigError("wait_replicas must be >= 0")
        if wait_replicas and wait_timeout_ms < 1:
            # WAIT's timeout 0 blocks until enough replicas come, possibly forever.
            raise ConfigError("wait_timeout_ms must be >= 1 (0 would wait forever)")
        stream = self.stream.stream_for(key)
        if wait_replicas == 0:
            async with connection_errors():
                entry_id = await self._client.xadd(stream, dict[Any, Any](fields), maxlen=maxlen)
            return Published(stream, as_text(entry_id))
        if not self._cluster:
            return await self._add_and_wait(
                self._client, stream, fields, wait_replicas, wait_timeout_ms, maxlen
            )
        # WAIT counts the writes of its own connection: send it to the stream's master, on the
        # connection that sent the XADD. Follow a MOVED (a failover or resharding) a few times.
        async with connection_errors():
            await self._client.initialize()  # reads the slot map once
            node = self._client.get_node_from_key(stream)  # type: ignore[attr-defined]
        address = (str(node.host), int(node.port))
        kwargs: dict[str, Any] = getattr(node, "connection_kwargs", {})
        if "SSL" in getattr(kwargs.get("connection_class"), "__name__", ""):
            raise ConfigError(
                "wait_replicas is not supported on a TLS cluster (rediss+cluster://) yet; add "
                "without it, or WAIT on a connection of your own"
            )
        self._auth = {k: kwargs[k] for k in ("username", "password") if kwargs.get(k)}
        for _ in range(3):
            try:
                return await self._add_and_wait(
                    self._node(address), stream, fields, wait_replicas, wait_timeout_ms, maxlen
                )
            except rex.MovedError as exc:
                address = (str(exc.host), int(exc.port))
        async with connection_errors():
            raise rex.ClusterError(f"the slot of {stream!r} kept moving")

    def _node(self, address: tuple[str, int]) -> aioredis.Redis:
        if address not in self._nodes:
            self._nodes[address] = aioredis.Redis(
                host=address[0], port=address[1], socket_timeout=10.0, **self._auth
            )
        return self._nodes[address]

    @staticmethod
    async def _add_and_wait(
        client: aioredis.Redis,
        stream: str,
        fields: Mapping[str | bytes, FieldValue],
        replicas: int,
        timeout_ms: int,
        maxlen: int | None,
    ) -> Published:
        pipe = client.pipeline(transaction=False)
        pipe.xadd(stream, dict[Any, Any](fields), maxlen=maxlen)
        pipe.execute_command("WAIT", replicas, timeout_ms)
        async with connection_errors():
            entry_id, acked = await pipe.execute()
        return Published(stream, as_text(entry_id), int(acked))

    async def aclose(self) -> None:
        """Close the per-node connections opened for WAIT."""
        for node in self._nodes.values():
            await node.aclose()
        self._nodes.clear()
