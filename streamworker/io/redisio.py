"""Redis I/O shared by the runtime and the strategies: Redis URLs (validation, cluster nodes,
redaction), clients by URL, stream replies and their values as text or bytes, Lua scripts.

redis-py's connection errors are converted into :class:`~streamworker.errors.ConnectionLost` here,
so the loops above handle one exception type. On Redis Cluster (``redis+cluster://`` URLs) the
errors of a cluster in transition count as connection errors too: CLUSTERDOWN, TRYAGAIN, a slot
not covered, a write that reached a replica (READONLY, a master demoted by a failover), and
redirections that did not settle within redis-py's own MOVED/ASK handling. The loops back off and
try again; redis-py re-reads the slot map on the next command.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from importlib import resources
from typing import Any, NamedTuple, cast
from urllib.parse import unquote, urlsplit

import redis
import redis.asyncio as aioredis
import redis.asyncio.cluster as aiocluster
import redis.cluster as synccluster
import redis.exceptions as rex
from redis.backoff import ExponentialWithJitterBackoff
from redis.connection import HiredisRespSerializer
from redis.retry import Retry as SyncRetry
from redis.utils import HIREDIS_AVAILABLE

from streamworker.errors import ConfigError, ConnectionLost

# redis-py raises these (or subclasses) when the server goes away or does not answer in time.
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    rex.ConnectionError,
    rex.TimeoutError,
    ConnectionError,
    TimeoutError,
    OSError,
)

# A Redis Cluster in transition (failover, resharding, a node restarting) answers with these for a
# while; retrying later succeeds. Checked before ResponseError, of which most are subclasses.
CLUSTER_TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    rex.ClusterDownError,
    rex.TryAgainError,
    rex.AskError,  # and MovedError: redirections redis-py gave up following
    rex.SlotNotCoveredError,
    rex.ReadOnlyError,
    rex.RedisClusterException,
    rex.ClusterError,
)

# redis-py's text when a cluster client meets a server without cluster mode.
_NOT_A_CLUSTER = "cluster mode is not enabled"

# How often the cluster client itself retries a command on a node failure before the error
# reaches the loops (which then back off with their own, longer, capped delays).
_CLUSTER_RETRIES = 5
_CLUSTER_BACKOFF_BASE_S = 0.05
_CLUSTER_BACKOFF_CAP_S = 1.0


# --------------------------------------------------------------------------------------------
# URLs

REDIS_SCHEMES = ("redis", "rediss", "unix", "engine", "redis+cluster", "rediss+cluster")
CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
"""The URL schemes streamworker opens; the last two are Redis Cluster."""


def is_cluster_url(url: str) -> bool:
    """True for ``redis+cluster://`` and ``rediss+cluster://`` URLs (Redis Cluster)."""
    return url.split("://", 1)[0].lower() in CLUSTER_SCHEMES


def cluster_nodes(url: str) -> list[tuple[str, int]]:
    """The startup nodes of a cluster URL, ``redis+cluster://[user:pass@]h1:p1,h2:p2/``.

    Raises ConfigError naming what is wrong (no node, a bad port, a database other than 0).
    """
    rest = url.split("://", 1)[1] if "://" in url else ""
    netloc, _, tail = rest.partition("/")
    path, _, _query = tail.partition("?")
    hosts = netloc.rpartition("@")[2]
    if path not in ("", "0"):
        raise ConfigError(
            f"invalid Redis URL {redact_url(url)!r}: Redis Cluster has database 0 only"
        )
    nodes: list[tuple[str, int]] = []
    for item in hosts.split(","):
        if not item:
            raise ConfigError(f"invalid Redis URL {redact_url(url)!r}: empty node in the node list")
        host, sep, port_text = item.rpartition(":")
        if not sep:
            host, port_text = item, "6379"
        host = host.strip("[]")
        if not host:
            raise ConfigError(f"invalid Redis URL {redact_url(url)!r}: node {item!r} has no host")
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise ConfigError(
                f"invalid Redis URL {redact_url(url)!r}: node {item!r} has a bad port"
            )
        nodes.append((host, int(port_text)))
    return nodes


def validate_redis_url(url: str) -> str:
    """Check that ``url`` names a backend streamworker can open; return it unchanged.

    Raises ConfigError with the reason (unknown scheme, no host, bad port, bad db number).
    """
    if is_cluster_url(url):
        cluster_nodes(url)
        return url
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"invalid Redis URL {redact_url(url)!r}: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in REDIS_SCHEMES:
        shown = f"scheme {scheme!r}" if scheme else "no scheme"
        raise ConfigError(
            f"invalid Redis URL {redact_url(url)!r}: {shown}; use redis://, rediss://, unix://, engine:// "
            f"or redis+cluster://"
        )
    if scheme in ("redis", "rediss"):
        if not parts.hostname:
            raise ConfigError(f"invalid Redis URL {redact_url(url)!r}: no host")
        if port == 0:
            raise ConfigError(f"invalid Redis URL {redact_url(url)!r}: port 0")
        db = parts.path.lstrip("/")
        if db and not db.isdigit():
            raise ConfigError(
                f"invalid Redis URL {redact_url(url)!r}: database {db!r} is not a number"
            )
    if scheme == "unix" and not parts.path:
        raise ConfigError(f"invalid Redis URL {redact_url(url)!r}: no socket path")
    return url


def redact_url(url: str) -> str:
    """``url`` with its password replaced by ``***`` (for messages, logs and pages); the user
    name stays.

    The credentials end at the *last* ``@``: a password with an unencoded ``@`` (or ``:``, ``/``)
    must not leak its tail. A URL whose query holds an ``@`` is over-redacted, which is safe.
    Credentials without a ``:`` are redacted whole (some write a bare password there).
    """
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    creds, _, host = rest.rpartition("@")
    user, colon, _ = creds.partition(":")
    return f"{scheme}://{user}:***@{host}" if colon else f"{scheme}://***@{host}"


# --------------------------------------------------------------------------------------------
# Clients


def _stream_keys(args: Sequence[Any]) -> list[Any] | None:
    """The keys of an XREAD/XREADGROUP argument list (after the command name), or None."""
    for i, arg in enumerate(args):
        token = as_text(arg)
        if token.upper() == "STREAMS":
            rest = list(args[i + 1 :])
            if not rest or len(rest) % 2:
                return None
            return rest[: len(rest) // 2]
    return None


class _ClusterClient(aiocluster.RedisCluster):
    """redis-py's asyncio cluster client, routing XREAD/XREADGROUP without a round trip.

    redis-py finds the keys of commands with "movable keys" by asking a node (``COMMAND
    GETKEYS``) on every call; the consume loop's XREADGROUP is one of them, and the extra round
    trip would also fail while that node is down. The keys follow ``STREAMS``, so they are read
    here.
    """

    async def _determine_slot(self, command: str, *args: Any) -> int:
        if command.upper() in ("XREADGROUP", "XREAD"):
            keys = _stream_keys(args)
            if keys:
                slots = {self.keyslot(k) for k in keys}
                if len(slots) == 1:
                    return slots.pop()
        return await super()._determine_slot(command, *args)


def _cluster_kwargs(url: str) -> dict[str, Any]:
    parts = urlsplit(url.replace("+cluster", "", 1).split(",", 1)[0])
    kwargs: dict[str, Any] = {}
    if parts.username:
        kwargs["username"] = unquote(parts.username)
    if parts.password:
        kwargs["password"] = unquote(parts.password)
    if url.lower().startswith("rediss+cluster"):
        kwargs["ssl"] = True
    return kwargs


def open_cluster(url: str, *, socket_timeout_s: float | None = None) -> aioredis.Redis:
    """An asyncio client for the Redis Cluster of ``url`` (``redis+cluster://h1:p1,h2:p2``).

    It is redis-py's ``RedisCluster``: it follows MOVED/ASK, re-reads the slot map after a node
    failure and retries with exponential backoff and jitter. It offers the command methods of
    ``redis.asyncio.Redis`` that streamworker uses, hence the declared type. Commands and scripts
    must keep to one slot each (every key streamworker derives carries the stream's hash tag).
    """
    nodes = [aiocluster.ClusterNode(host, port) for host, port in cluster_nodes(url)]
    client = _ClusterClient(
        startup_nodes=nodes,
        decode_responses=False,
        socket_timeout=socket_timeout_s,
        socket_connect_timeout=5.0,
        socket_keepalive=True,
        retry=aioredis.retry.Retry(
            ExponentialWithJitterBackoff(base=_CLUSTER_BACKOFF_BASE_S, cap=_CLUSTER_BACKOFF_CAP_S),
            _CLUSTER_RETRIES,
        ),
        **_cluster_kwargs(url),
    )
    return cast("aioredis.Redis", client)


def open_sync_cluster(url: str, *, socket_timeout_s: float | None = 10.0) -> redis.Redis:
    """The sync counterpart of :func:`open_cluster`, for operator commands and probes.

    Unlike the asyncio client it reads the slot map at once: raises ConnectionLost when no node
    answers, ConfigError when the server is not a cluster node.
    """
    nodes = [
        synccluster.ClusterNode(host, port)  # type: ignore[no-untyped-call]
        for host, port in cluster_nodes(url)
    ]
    try:
        client = synccluster.RedisCluster(
            startup_nodes=nodes,
            decode_responses=False,
            socket_timeout=socket_timeout_s,
            socket_connect_timeout=5.0,
            retry=SyncRetry(
                ExponentialWithJitterBackoff(
                    base=_CLUSTER_BACKOFF_BASE_S, cap=_CLUSTER_BACKOFF_CAP_S
                ),
                _CLUSTER_RETRIES,
            ),
            **_cluster_kwargs(url),
        )
    except rex.RedisClusterException as exc:
        shown = redact_url(url)
        if _NOT_A_CLUSTER in str(exc).lower():
            raise ConfigError(
                f"{shown} names a server that is not a cluster node; use redis:// for it"
            ) from None
        raise ConnectionLost(f"cannot reach the Redis Cluster at {shown}: {exc}") from None
    return cast("redis.Redis", client)


def is_cluster_client(client: object) -> bool:
    """True when ``client`` is a Redis Cluster client (sync or asyncio)."""
    return isinstance(client, aiocluster.RedisCluster | synccluster.RedisCluster)


@contextlib.contextmanager
def _engine_errors(url: str) -> Iterator[None]:
    """An ``engine:///DIR`` whose directory cannot be opened (another process holds it, or its
    files are damaged) is a configuration to fix: ConfigError, in one line."""
    from streamworker.engine.aof import PersistenceError  # type: ignore[import-not-found,unused-ignore]

    try:
        yield
    except PersistenceError as exc:
        raise ConfigError(f"cannot open {redact_url(url)}: {exc}") from None


def open_redis(url: str, *, socket_timeout_s: float | None = None) -> aioredis.Redis:
    """An asyncio redis-py client for ``url``; bytes replies, no connection made yet.

    ``engine://`` URLs resolve to streamworker's embedded engine; everything else to redis-py's own
    ``from_url``. ``socket_timeout_s`` must exceed the longest BLOCK the caller will use.
    """
    validate_redis_url(url)
    if is_cluster_url(url):
        return open_cluster(url, socket_timeout_s=socket_timeout_s)
    if url.startswith("engine:"):
        from streamworker.engine.inproc import async_client  # type: ignore[import-not-found,unused-ignore]

        with _engine_errors(url):
            client: aioredis.Redis = async_client(url)
        return client
    try:
        # TCP keepalive has no meaning on a Unix socket, whose connection class refuses it.
        keepalive = {} if url.lower().startswith("unix:") else {"socket_keepalive": True}
        client = aioredis.Redis.from_url(
            url,
            decode_responses=False,
            socket_timeout=socket_timeout_s,
            socket_connect_timeout=5.0,
            health_check_interval=30,
            **keepalive,
        )
    except ValueError as exc:
        raise ConfigError(f"invalid Redis URL {redact_url(url)!r}: {exc}") from None
    pool = client.connection_pool
    pool.connection_class = _HIREDIS_PACKED.get(pool.connection_class, pool.connection_class)
    return client


class _HiredisPacking:
    """Commands packed by hiredis (in C), as redis-py's sync connections pack them when hiredis
    is installed (the same bytes, the same DataError for what cannot be sent); redis-py's
    asyncio connections pack in Python, about 0.4 µs per argument, and the consume loop's XACK
    has one argument per message of the batch."""

    _packer = HiredisRespSerializer() if HIREDIS_AVAILABLE else None

    def pack_command(self, *args: Any) -> list[bytes]:
        if self._packer is None:
            return super().pack_command(*args)  # type: ignore[misc,no-any-return]
        return self._packer.pack(*args)  # type: ignore[no-any-return]


class _Connection(_HiredisPacking, aioredis.Connection):
    pass


class _SSLConnection(_HiredisPacking, aioredis.SSLConnection):
    pass


class _UnixConnection(_HiredisPacking, aioredis.UnixDomainSocketConnection):
    pass


# The connection class from_url chose for the URL's scheme, and the same with hiredis packing.
_HIREDIS_PACKED: dict[type[Any], type[Any]] = {
    aioredis.Connection: _Connection,
    aioredis.SSLConnection: _SSLConnection,
    aioredis.UnixDomainSocketConnection: _UnixConnection,
}


def open_sync_redis(url: str, *, socket_timeout_s: float | None = 10.0) -> redis.Redis:
    """A sync redis-py client for ``url`` (bytes replies), for the operator commands."""
    validate_redis_url(url)
    if is_cluster_url(url):
        return open_sync_cluster(url, socket_timeout_s=socket_timeout_s)
    if url.startswith("engine:"):
        from streamworker.engine.inproc import sync_client  # type: ignore[import-not-found,unused-ignore]

        with _engine_errors(url):
            client: redis.Redis = sync_client(url)
        return client
    try:
        return redis.Redis.from_url(
            url, decode_responses=False, socket_timeout=socket_timeout_s, socket_connect_timeout=5.0
        )
    except ValueError as exc:
        raise ConfigError(f"invalid Redis URL {redact_url(url)!r}: {exc}") from None


@contextlib.asynccontextmanager
async def connection_errors() -> AsyncIterator[None]:
    """Convert redis-py connection failures raised inside the block into ConnectionLost."""
    try:
        yield
    except CLUSTER_TRANSIENT_ERRORS as exc:
        if _NOT_A_CLUSTER in str(exc).lower():
            raise ConfigError(
                f"a redis+cluster:// URL names a server that is not a cluster node ({exc}); use "
                f"redis:// for it"
            ) from None
        raise ConnectionLost(f"{type(exc).__name__}: {exc}") from exc
    except rex.ResponseError:
        raise
    except CONNECTION_ERRORS as exc:
        raise ConnectionLost(f"{type(exc).__name__}: {exc}") from exc
    except AttributeError as exc:
        # redis-py's asyncio connection, closed by another task in the middle of a command (seen
        # on a Redis Cluster during a failover), fails on its writer or reader, now None.
        if "'NoneType' object has no attribute" not in str(exc):
            raise
        raise ConnectionLost(f"connection closed under a command: {exc}") from exc


# --------------------------------------------------------------------------------------------
# Replies


def as_text(value: Any, *, errors: str = "strict") -> str:
    """A value from a Redis reply as text: bytes are decoded as UTF-8 (``errors`` as for
    :meth:`bytes.decode`: ``"replace"`` where a stray byte must not fail a listing), anything
    else (str with ``decode_responses``, ints) goes through :class:`str`."""
    if isinstance(value, bytes | bytearray):
        return value.decode("utf-8", errors)
    return str(value)


def as_bytes(value: Any) -> bytes:
    """A value from (or for) Redis as bytes: bytes as they are, anything else as the UTF-8 of its
    :class:`str`. The inverse of :func:`as_text` for the text and bytes redis-py returns."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    return str(value).encode("utf-8")


class Entry(NamedTuple):
    """One entry from a read: ``fields`` is None when the entry was deleted while pending, else
    its field names and values alternating, as Redis sends them (:func:`flat_fields` makes them
    from a mapping).

    A named tuple: the consume loop makes one per message, and a tuple is the cheapest to make.
    The fields stay a flat list because the decoder turns them into text pairs in one pass; a
    map of bytes made here would be thrown away at once.
    """

    id: bytes
    fields: list[bytes] | None


def flat_fields(fields: Mapping[bytes, bytes] | Sequence[bytes]) -> list[bytes]:
    """Entry fields as a flat ``[name, value, ...]`` list, from a mapping (redis-py's reply
    callbacks make one) or a sequence already flat."""
    if isinstance(fields, Mapping):
        return [part for pair in fields.items() for part in pair]
    return list(fields)


class NextRead:
    """The consume loop's next ``>`` read, offered to the last Redis call of the batch in hand.

    Each batch ends with one Redis call of its strategy (the XACK, or the apply script that acks),
    after which the loop reads the next batch: two round trips. A strategy that ends with
    :func:`xack_then_read` (or :meth:`LuaScript.then_read`) sends the offered read behind its
    call, in the same write on the same connection. Redis runs a connection's commands in order,
    so the read still happens after the ack, never before: this consumer never holds more than
    the batch in hand (at a crash, at most that batch is pending, as with two round trips), but
    the batch costs one round trip fewer.

    The loop offers it (:meth:`offer`) only for ``>`` reads of its own task, and only while it is
    not stopping; the reply (or the error the read met) waits here for :meth:`take`. Calls from
    other tasks (the reclaimer's batches) and other clients never take it. Use from one event loop.
    """

    __slots__ = ("_args", "_client", "_owner", "_reply", "_wanted", "sent_at")

    def __init__(
        self,
        client: aioredis.Redis,
        group: str,
        consumer: str,
        stream: str,
        *,
        count: int,
        wanted: Callable[[], bool],
    ) -> None:
        self._client = client
        self._args: tuple[Any, ...] = (
            _XREADGROUP,
            b"GROUP",
            group,
            consumer,
            b"COUNT",
            count,
            b"STREAMS",
            stream,
            b">",
        )
        self._wanted = wanted
        self._owner: asyncio.Task[Any] | None = None
        self._reply: Any = _NO_REPLY
        self.sent_at = 0.0
        """When the read went out (monotonic): the lease clock of the entries it returns."""

    @contextlib.contextmanager
    def offer(self) -> Iterator[None]:
        """Within the block, the current task's :func:`xack_then_read` (or
        :meth:`LuaScript.then_read`) may send the read. Redis Cluster and other client types
        never take it (a read of another slot's node could not share the connection)."""
        if type(self._client) is not aioredis.Redis:
            yield
            return
        self._owner = asyncio.current_task()
        token = _NEXT_READ.set(self)
        try:
            yield
        finally:
            _NEXT_READ.reset(token)
            self._owner = None

    def holding(self) -> bool:
        """True when a read was sent and its reply waits for :meth:`take`."""
        return self._reply is not _NO_REPLY

    def take(self) -> Any:
        """The waiting reply (for :func:`parse_read_reply`); raises the error the read met."""
        reply, self._reply = self._reply, _NO_REPLY
        if isinstance(reply, BaseException):
            raise reply
        return reply

    def discard(self) -> None:
        """Forget a waiting reply: its entries are in this consumer's PEL, and the backlog read
        that follows a restart of the loop returns them."""
        self._reply = _NO_REPLY

    def _claim(self, client: aioredis.Redis) -> bool:
        return (
            client is self._client
            and self._reply is _NO_REPLY
            and asyncio.current_task() is self._owner
            and self._wanted()
        )


_NO_REPLY: Any = object()
_NEXT_READ: contextvars.ContextVar[NextRead | None] = contextvars.ContextVar(
    "streamworker_next_read", default=None
)


def _offered(client: aioredis.Redis) -> NextRead | None:
    """The next read the consume loop offered to the current task for ``client``, if any."""
    slot = _NEXT_READ.get()
    return slot if slot is not None and slot._claim(client) else None


async def _then_read(slot: NextRead, client: aioredis.Redis, *args: Any) -> Any:
    """``args`` and the slot's read in one write; the command's reply (or error), the read's kept
    in the slot: Redis ran the read whatever the command's own reply was."""
    pipe = client.pipeline(transaction=False)
    pipe.execute_command(*args)
    pipe.execute_command(*slot._args)
    slot.sent_at = time.monotonic()
    first, read = await pipe.execute(raise_on_error=False)
    slot._reply = read
    if isinstance(first, BaseException):
        raise first
    return first


async def xack_then_read(
    client: aioredis.Redis, stream: str, group: str, ids: Sequence[str | bytes]
) -> int:
    """``XACK stream group *ids``, for a batch's last call: when the consume loop offered its
    next read (:class:`NextRead`) to this task for ``client``, the read goes out behind the XACK
    in one write and its reply is kept for the loop. Connection errors as redis-py raises them."""
    slot = _offered(client)
    if slot is None:
        return int(await client.xack(stream, group, *ids))
    return int(await _then_read(slot, client, "XACK", stream, group, *ids))


async def read_group(
    client: aioredis.Redis,
    group: str,
    consumer: str,
    stream: str,
    start: bytes,
    *,
    count: int,
    block_ms: int | None,
) -> Any:
    """``XREADGROUP GROUP group consumer COUNT count [BLOCK block_ms] STREAMS stream start``: the
    reply for :func:`parse_read_reply`.

    On a plain ``redis.asyncio.Redis`` the reply is taken as the parser gave it (nested lists,
    or a map on RESP3): redis-py applies its reply callbacks by the command's name given as
    text, and this one is sent as bytes. That callback builds a dict per entry and, on RESP3,
    reshapes the reply, all of which :func:`parse_read_reply` does itself; it was a fifth of the
    consume loop's time. Other clients (Redis Cluster, wrappers) go through ``xreadgroup``.
    """
    if type(client) is not aioredis.Redis:
        return await client.xreadgroup(
            group, consumer, {stream: start}, count=count, block=block_ms
        )
    args: list[Any] = [_XREADGROUP, b"GROUP", group, consumer, b"COUNT", count]
    if block_ms is not None:
        args += [b"BLOCK", block_ms]
    args += [b"STREAMS", stream, start]
    return await client.execute_command(*args)  # type: ignore[no-untyped-call]


_XREADGROUP = b"XREADGROUP"


_new_entry = tuple.__new__


def parse_read_reply(reply: Any, stream: bytes) -> list[Entry]:
    """Entries of ``stream`` from an XREAD/XREADGROUP reply, RESP2 or RESP3 shape, as redis-py parsed it.

    A null reply (nothing new) gives an empty list.
    """
    if not reply:
        return []
    if isinstance(reply, dict):  # RESP3: {stream: [entries]}
        items: Any = reply.get(stream)
        if items is None:
            items = reply.get(stream.decode("utf-8", "surrogateescape"), [])
        # redis-py's RESP3 callback wraps each stream's entries in one more list.
        if (
            len(items) == 1
            and isinstance(items[0], list)
            and (not items[0] or not isinstance(items[0][0], bytes))
        ):
            items = items[0]
    else:  # RESP2: [[stream, [entries]], ...]
        items = next((e for name, e in reply if name == stream), [])
    # This runs for every entry read: each Entry made by tuple.__new__ (the named tuple's own
    # __new__ is a Python function), the fields kept as the parser's list. A deleted entry comes
    # back with a nil body, which the parser or redis-py turns into None or {}; a live entry
    # always has at least one field (XADD requires one).
    out: list[Entry] = []
    append = out.append
    for entry_id, fields in items:
        if fields and type(fields) is not list:
            fields = flat_fields(fields)
        append(_new_entry(Entry, (entry_id, fields or None)))
    return out


def _lua_source(name: str) -> str:
    return resources.files("streamworker.lua").joinpath(f"{name}.lua").read_text("utf-8")


class LuaScript:
    """A script from ``streamworker/lua/``: loaded once, called by EVALSHA, reloaded on NOSCRIPT."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.source = _lua_source(name)
        self.sha = hashlib.sha1(self.source.encode("utf-8")).hexdigest()

    async def __call__(
        self, client: aioredis.Redis, keys: Sequence[str | bytes], args: Sequence[str | bytes | int]
    ) -> Any:
        """Run the script; a server that lost its script cache (restart, SCRIPT FLUSH) gets it again."""
        async with connection_errors():
            try:
                return await client.evalsha(self.sha, len(keys), *keys, *args)
            except rex.NoScriptError:
                await client.script_load(self.source)
                return await client.evalsha(self.sha, len(keys), *keys, *args)

    async def then_read(
        self, client: aioredis.Redis, keys: Sequence[str | bytes], args: Sequence[str | bytes | int]
    ) -> Any:
        """As a call, for a script that is a batch's last call: the consume loop's offered read
        (:class:`NextRead`) goes out behind it, as with :func:`xack_then_read`.
        Should the server have lost the script, the read (if it went out) has already run when the
        script is loaded and run again."""
        async with connection_errors():
            try:
                slot = _offered(client)
                if slot is None:
                    return await client.evalsha(self.sha, len(keys), *keys, *args)
                return await _then_read(slot, client, "EVALSHA", self.sha, len(keys), *keys, *args)
            except rex.NoScriptError:
                await client.script_load(self.source)
                return await client.evalsha(self.sha, len(keys), *keys, *args)
