"""Redis I/O shared by the runtime and the strategies: Redis URLs (validation, cluster nodes,
redaction), clients by URL, stream replies and their values as text or bytes, Lua scripts.

redis-py's connection errors are converted into :class:`~streamworker.errors.ConnectionLost` here,
so the loops above handle one exception type. On Redis Cluster (``redis+cluster://`` URLs) the
errors of a cluster in transition count as connection errors too: CLUSTERDOWN, TRYAGAIN, a slot
not covered, a write that reached a replica (READONLY, a master demoted by a failover), and
redirections that did not settle within redis-py's own MOVED/ASK handling. The loops back off and
try again; redis-py re-reads the slot map on the next command.

A primary that changes is an outage too. ``redis+sentinel://`` URLs get redis-py's own Sentinel
clients, which ask the Sentinels for the primary on every new connection and drop a connection
whose server answers READONLY (it was demoted). Plain ``redis://`` clients do the same for a name
whose address moves to a new primary (managed services): a READONLY reply retires every connection
made before it, so the next ones resolve the name again. Either way the error reaches the loops as
ConnectionLost, and each client's :class:`PrimaryWatch` counts the changes it saw.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple, cast
from urllib.parse import parse_qs, quote, unquote, urlsplit

import redis
import redis.asyncio as aioredis
import redis.asyncio.cluster as aiocluster
import redis.asyncio.sentinel as aiosentinel
import redis.cluster as synccluster
import redis.exceptions as rex
import redis.sentinel as syncsentinel
from redis.backoff import ExponentialWithJitterBackoff, NoBackoff
from redis.connection import HiredisRespSerializer
from redis.retry import Retry as SyncRetry
from redis.utils import HIREDIS_AVAILABLE

from streamworker.errors import ConfigError, ConnectionLost
from streamworker.io.luasource import lua_source

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

REDIS_SCHEMES = (
    "redis",
    "rediss",
    "unix",
    "engine",
    "redis+cluster",
    "rediss+cluster",
    "redis+sentinel",
    "rediss+sentinel",
)
"""The URL schemes streamworker opens."""
CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
"""Redis Cluster: ``redis+cluster://[user:pass@]h1:p1[,h2:p2…]/``."""
SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
"""A primary managed by Sentinel: ``redis+sentinel://[user:pass@]h1:p1[,h2:p2…]/SERVICE[/DB]``."""

DEFAULT_SENTINEL_PORT = 26379
SENTINEL_PASSWORD_OPTION = "sentinel_password"
"""The query option of a sentinel URL that carries the Sentinels' own password (``requirepass``
of the Sentinels, which may differ from the data nodes' password in the URL's user part)."""


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
    if is_sentinel_url(url):
        parse_sentinel_url(url)
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
            f"invalid Redis URL {redact_url(url)!r}: {shown}; use redis://, rediss://, unix://, "
            f"engine://, redis+cluster:// or redis+sentinel://"
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
    Credentials without a ``:`` are redacted whole (some write a bare password there). The
    Sentinels' password in a sentinel URL's query (``?sentinel_password=…``) is redacted too.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    if SENTINEL_PASSWORD_OPTION in rest:
        rest = _redact_query_password(rest)
    if "@" not in rest:
        return f"{scheme}://{rest}"
    creds, _, host = rest.rpartition("@")
    user, colon, _ = creds.partition(":")
    return f"{scheme}://{user}:***@{host}" if colon else f"{scheme}://***@{host}"


def _redact_query_password(rest: str) -> str:
    # Everything after the option's '=' up to the next '&' is the password; '#' and '@' may be
    # part of it, so they do not end it.
    head, sep, query = rest.partition("?")
    if not sep:
        return rest
    shown = []
    for item in query.split("&"):
        name, eq, _ = item.partition("=")
        shown.append(f"{name}=***" if eq and name == SENTINEL_PASSWORD_OPTION else item)
    return f"{head}?{'&'.join(shown)}"


def is_sentinel_url(url: str) -> bool:
    """True for ``redis+sentinel://`` and ``rediss+sentinel://`` URLs (a Sentinel-managed primary)."""
    return url.split("://", 1)[0].lower() in SENTINEL_SCHEMES


class SentinelTarget(NamedTuple):
    """What a sentinel URL names: the Sentinels, the monitored service (its ``sentinel monitor``
    name), the database and the credentials of the data nodes and of the Sentinels."""

    sentinels: list[tuple[str, int]]
    service: str
    db: int
    username: str | None
    password: str | None
    sentinel_password: str | None
    tls: bool

    def sentinels_text(self) -> str:
        """``h1:p1, h2:p2`` for messages."""
        return ", ".join(f"{host}:{port}" for host, port in self.sentinels)


def parse_sentinel_url(url: str) -> SentinelTarget:
    """The parts of ``redis+sentinel://[user:pass@]h1:p1[,h2:p2…]/SERVICE[/DB][?sentinel_password=…]``.

    A Sentinel without a port listens on 26379. ``user:pass`` are the data nodes' credentials
    (percent-encoded where they hold ``@ : / ?``). Raises ConfigError naming what is wrong: no
    Sentinel, a bad port, no service name, a database that is not a number, an unknown option.
    """
    shown = redact_url(url)

    def bad(reason: str) -> ConfigError:
        return ConfigError(f"invalid Redis URL {shown!r}: {reason}")

    scheme, _, rest = url.partition("://")
    rest, _, query = rest.partition("?")
    creds, at, after = rest.rpartition("@")
    hosts, _, path = after.partition("/")
    username = password = None
    if at:
        user, colon, secret = creds.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if colon else unquote(user)
        if not colon:
            username = None
    sentinels: list[tuple[str, int]] = []
    for item in hosts.split(","):
        if not item:
            raise bad("empty Sentinel in the Sentinel list" if hosts else "no Sentinel")
        if item.endswith("]") or ":" not in item:  # no port (an IPv6 address in brackets)
            host, port_text = item, str(DEFAULT_SENTINEL_PORT)
        else:
            host, _, port_text = item.rpartition(":")
        host = host.strip("[]")
        if not host:
            raise bad(f"Sentinel {item!r} has no host")
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise bad(f"Sentinel {item!r} has a bad port")
        sentinels.append((host, int(port_text)))
    service, _, db_text = path.partition("/")
    service = unquote(service)
    if not service:
        raise bad("no service name; write redis+sentinel://HOST:PORT[,HOST:PORT…]/SERVICE[/DB]")
    if any(c.isspace() for c in service):
        raise bad(f"service name {service!r} contains white space")
    db_text = db_text.rstrip("/")
    if db_text and not db_text.isdigit():
        raise bad(f"database {db_text!r} is not a number")
    options = parse_qs(query, keep_blank_values=True) if query else {}
    unknown = sorted(set(options) - {SENTINEL_PASSWORD_OPTION})
    if unknown:
        raise bad(f"unknown option {unknown[0]!r}; a sentinel URL takes {SENTINEL_PASSWORD_OPTION}")
    given = options.get(SENTINEL_PASSWORD_OPTION, [])
    return SentinelTarget(
        sentinels=sentinels,
        service=service,
        db=int(db_text or 0),
        username=username,
        password=password,
        sentinel_password=given[-1] if given and given[-1] else None,
        tls=scheme.lower() == "rediss+sentinel",
    )


def with_sentinel_password(url: str, password: str | None) -> str:
    """``url`` with the Sentinels' password (the ``sentinel_password`` setting) as its query
    option, for a sentinel URL that does not carry one already; any other URL unchanged.

    The composition root folds the setting in here, so that every client made from the URL (in
    this process, in ``--processes`` children, on Spark executors) authenticates to the Sentinels.
    """
    if not password or not is_sentinel_url(url) or parse_sentinel_url(url).sentinel_password:
        return url
    sep = "&" if "?" in url else "?"
    return f"{url}{sep}{SENTINEL_PASSWORD_OPTION}={quote(password, safe='')}"


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

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # redis-py fixes the cluster's connection class (Connection, or SSLConnection with
        # ssl=True) and hands the same keyword dict to every node it meets later, startup nodes
        # included: streamworker's own classes go in there, before anything has connected, so
        # every node's sends are bounded without a Task per send (_TimedSends).
        ours = {aioredis.Connection: _Connection, aioredis.SSLConnection: _SSLConnection}
        shared: dict[str, Any] = self.nodes_manager.connection_kwargs
        chosen = shared.get("connection_class")
        if chosen in ours:
            shared["connection_class"] = ours[chosen]
        for node in self.nodes_manager.startup_nodes.values():
            node.connection_class = ours.get(node.connection_class, node.connection_class)

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
        synccluster.ClusterNode(host, port)  # type: ignore[no-untyped-call,unused-ignore]
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


if HIREDIS_AVAILABLE:  # (a dependency; without it there is no serializer to stand in for)
    from hiredis import pack_command as _hiredis_pack


class _HiredisPacking:
    """Commands packed by hiredis (in C), as redis-py's sync connections pack them when hiredis
    is installed (the same bytes, the same DataError for what cannot be sent); redis-py's
    asyncio connections pack in Python, about 0.4 µs per argument, and the consume loop's XACK
    has one argument per message of the batch."""

    _packer = HiredisRespSerializer() if HIREDIS_AVAILABLE else None  # type: ignore[no-untyped-call,unused-ignore]

    def pack_command(self, *args: Any) -> list[bytes]:
        packer = self._packer
        if packer is None:
            return super().pack_command(*args)  # type: ignore[misc,no-any-return]
        head = args[0]
        # A command named in one word (every command the worker sends): straight to hiredis. The
        # serializer would pass it the same arguments after a check of each (~0.1 µs apiece, and
        # the XACK has one per message); what hiredis refuses (a bytearray, which the serializer
        # converts, or a value that cannot be sent, a DataError there) goes the serializer's way.
        if (" " not in head) if type(head) is str else (type(head) is bytes and b" " not in head):
            try:
                return [_hiredis_pack(args)]
            except TypeError:
                pass
        return packer.pack(*args)  # type: ignore[no-any-return]


class _TimedSends:
    """A command's send bounded by ``socket_timeout`` through :func:`asyncio.timeout` on the
    caller's own task, instead of redis-py's :func:`asyncio.wait_for`, which on Python 3.11 runs
    every send as a Task of its own: three more turns of the event loop (each an ``epoll``
    call) per command, half a µs per message of a loop that reads and acks 100 entries at a
    time (``benchmarks/socket_timeout_cost.py``: 3.29 against 2.78 µs). The same bound and the same outcome when it passes:
    the connection dropped and redis-py's ``TimeoutError("Timeout writing to socket")``.

    redis-py is asked to send without its own bound (``socket_timeout`` is None for the call:
    its send is then awaited directly); everything else of the send (packing, errors, dropping
    the connection) stays redis-py's. The first send of a connection, which connects and reads
    the handshake's replies under ``socket_timeout``, goes redis-py's way unchanged.
    """

    socket_timeout: float | None

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        timeout = self.socket_timeout
        if not timeout or not self.is_connected:  # type: ignore[attr-defined]
            await super().send_packed_command(command, check_health)  # type: ignore[misc]
            return
        if check_health:
            # Its PING (every health_check_interval) is read under socket_timeout, as before.
            await self.check_health()  # type: ignore[attr-defined]
        self.socket_timeout = None
        try:
            async with asyncio.timeout(timeout):
                await super().send_packed_command(command, False)  # type: ignore[misc]
        except TimeoutError:
            # redis-py dropped the connection when the timeout cancelled its send.
            raise rex.TimeoutError("Timeout writing to socket") from None
        finally:
            self.socket_timeout = timeout


class _Connection(_TimedSends, _HiredisPacking, aioredis.Connection):
    pass


class _SSLConnection(_TimedSends, _HiredisPacking, aioredis.SSLConnection):
    pass


class _UnixConnection(_TimedSends, _HiredisPacking, aioredis.UnixDomainSocketConnection):
    pass


# --------------------------------------------------------------------------------------------
# The primary: Sentinel-managed, or a plain address that may move


REDEMOTION_WINDOW_S = 60.0
"""How long after a counted demotion another READONLY at the same address is the same failover."""


class PrimaryWatch:
    """What one client knows of the primary it writes to: its address and the changes it saw.

    A change is a Sentinel naming another primary than before, or (plain URLs, where the address
    is a name that a managed service moves) the primary at that address answering READONLY, i.e.
    demoted. Listeners are called with the old and the new address (None: not known yet) in the
    task or thread that noticed the change; they must not block. Thread-safe.
    """

    def __init__(self, address: str | None) -> None:
        self.address = address
        self.changes = 0
        self.generation = 0
        """Bumped by every change; connections made in an earlier generation are retired."""
        self._listeners: list[Callable[[str | None, str | None], None]] = []
        self._lock = threading.Lock()
        self._demoted_at: float | None = None

    def listen(self, listener: Callable[[str | None, str | None], None]) -> None:
        """Call ``listener(old, new)`` on every change from now on."""
        with self._lock:
            self._listeners.append(listener)

    def seen(self, address: str) -> None:
        """The primary is at ``address`` now (a Sentinel said so)."""
        with self._lock:
            old = self.address
            if old == address:
                return
            self.address = address
            if old is None:  # the first answer: not a change
                return
            listeners = self._change()
        for listener in listeners:
            listener(old, address)

    def demoted(self, generation: int) -> None:
        """A connection made in ``generation`` met READONLY: the server at the address is a
        replica now, and every connection of that generation is retired.

        Counted once per generation however many connections meet it, and not again within
        :data:`REDEMOTION_WINDOW_S` of the last count: a managed endpoint whose name moves to
        the new primary some seconds after the promotion sends the first new connections to the
        demoted server again, and that is still the same failover.
        """
        now = time.monotonic()
        with self._lock:
            if generation != self.generation:
                return
            if self._demoted_at is not None and now - self._demoted_at < REDEMOTION_WINDOW_S:
                self.generation += 1  # retire the connections; the failover is counted already
                return
            self._demoted_at = now
            listeners = self._change()
        for listener in listeners:
            listener(self.address, self.address)

    def _change(self) -> list[Callable[[str | None, str | None], None]]:
        self.changes += 1
        self.generation += 1
        return list(self._listeners)


class _PrimaryAware:
    """Connection mixin for plain URLs: a READONLY reply means the server was demoted, so every
    connection made before it (this one and the pool's others) is closed before its next command
    and connects again, resolving the host name again (a managed endpoint moved to the new
    primary). The error itself still reaches the caller, as ConnectionLost through
    :func:`connection_errors`: the command did not run."""

    def __init__(self, *, primary_watch: PrimaryWatch | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._watch = primary_watch
        self._generation = primary_watch.generation if primary_watch is not None else 0

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        watch = self._watch
        if watch is not None:
            if self._generation != watch.generation and self.is_connected:  # type: ignore[attr-defined]
                await self.disconnect()  # type: ignore[attr-defined]
            if not self.is_connected:  # type: ignore[attr-defined]
                self._generation = watch.generation
        await super().send_packed_command(command, check_health)  # type: ignore[misc]

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().read_response(*args, **kwargs)  # type: ignore[misc]
        except rex.ReadOnlyError:
            if self._watch is not None:
                self._watch.demoted(self._generation)
            raise


class _WatchedConnection(_PrimaryAware, _Connection):
    pass


class _WatchedSSLConnection(_PrimaryAware, _SSLConnection):
    pass


# The connection class from_url chose for the URL's scheme, and the same with hiredis packing
# (and, over TCP, with the demotion check: a Unix socket's server cannot move).
_WATCHED: dict[type[Any], type[Any]] = {
    aioredis.Connection: _WatchedConnection,
    aioredis.SSLConnection: _WatchedSSLConnection,
    aioredis.UnixDomainSocketConnection: _UnixConnection,
}


class _PrimaryPool(aioredis.ConnectionPool):
    """The asyncio pool of a plain URL, with the :class:`PrimaryWatch` its connections share."""

    def __init__(self, *, shared_watch: PrimaryWatch | None = None, **kwargs: Any) -> None:
        cls = kwargs.get("connection_class", aioredis.Connection)
        kwargs["connection_class"] = _WATCHED.get(cls, cls)
        super().__init__(**kwargs)
        if "path" in self.connection_kwargs:
            address = str(self.connection_kwargs["path"])
        else:
            address = f"{self.connection_kwargs.get('host', 'localhost')}:{self.connection_kwargs.get('port', 6379)}"
        self.primary = shared_watch or PrimaryWatch(address)
        if self.primary.address is None:
            self.primary.address = address
        if issubclass(self.connection_class, _PrimaryAware):
            self.connection_kwargs["primary_watch"] = self.primary


def _pick_primary(target: SentinelTarget, answers: Sequence[Any]) -> tuple[str, int]:
    """The primary's address from each Sentinel's ``SENTINEL MASTERS`` (a dict, or the error the
    Sentinel met): the first healthy one any of them reports.

    Raises :class:`SentinelUnreachable` when none answered, :class:`UnknownService` when those that
    answered do not monitor the service, :class:`NoHealthyPrimary` otherwise (a failover under way).
    All are redis-py ConnectionErrors: at run time they are an outage like any other.
    """
    errors = [a for a in answers if isinstance(a, BaseException)]
    masters = [a for a in answers if not isinstance(a, BaseException)]
    if not masters:
        first = f": {errors[0]}" if errors else ""
        raise SentinelUnreachable(f"no Sentinel reachable at {target.sentinels_text()}{first}")
    known = [m[target.service] for m in masters if target.service in m]
    if not known:
        names = sorted({str(name) for m in masters for name in m})
        raise UnknownService(
            f"the Sentinels at {target.sentinels_text()} monitor no service named "
            f"{target.service!r} (they monitor: {', '.join(names) or 'nothing'})"
        )
    for state in known:
        if state["is_master"] and not state["is_sdown"] and not state["is_odown"]:
            return str(state["ip"]), int(state["port"])
    raise NoHealthyPrimary(
        f"the Sentinels at {target.sentinels_text()} know no healthy primary for "
        f"{target.service!r} now (a failover under way?)"
    )


class SentinelUnreachable(rex.ConnectionError):
    """No Sentinel of a sentinel URL answered."""


class UnknownService(rex.ConnectionError):
    """The Sentinels answered, and none monitors the URL's service name."""


class NoHealthyPrimary(rex.ConnectionError):
    """The Sentinels monitor the service but report no healthy primary (failing over)."""


class _AsyncSentinel(aiosentinel.Sentinel):
    """redis-py's asyncio Sentinel client, with discovery errors that say which case it is."""

    target: SentinelTarget

    async def discover_master(self, service_name: str) -> tuple[str, int]:
        async def ask(sentinel: aioredis.Redis) -> Any:
            try:
                return await sentinel.sentinel_masters()
            except (rex.ConnectionError, rex.TimeoutError, OSError) as exc:
                return exc

        answers = await asyncio.gather(*(ask(s) for s in self.sentinels))
        return _pick_primary(self.target, answers)


class _SyncSentinel(syncsentinel.Sentinel):
    """redis-py's sync Sentinel client, with discovery errors that say which case it is."""

    target: SentinelTarget

    def discover_master(self, service_name: str) -> tuple[str, int]:
        answers: list[Any] = []
        for sentinel in self.sentinels:
            try:
                answers.append(sentinel.sentinel_masters())
            except (rex.ConnectionError, rex.TimeoutError, OSError) as exc:
                answers.append(exc)
        return _pick_primary(self.target, answers)


class _SentinelPool(aiosentinel.SentinelConnectionPool):
    """redis-py's Sentinel pool; tells its :class:`PrimaryWatch` each primary it is given, and
    closes the Sentinel clients with the pool."""

    def __init__(
        self,
        service_name: str,
        sentinel_manager: _AsyncSentinel,
        *,
        shared_watch: PrimaryWatch | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(service_name, sentinel_manager, **kwargs)  # type: ignore[no-untyped-call,unused-ignore]
        self.primary = shared_watch or PrimaryWatch(None)

    async def get_master_address(self) -> tuple[str, int]:
        host, port = await super().get_master_address()  # type: ignore[no-untyped-call,unused-ignore]
        self.primary.seen(f"{host}:{port}")
        return host, port

    async def disconnect(self, inuse_connections: bool = True) -> None:
        await super().disconnect(inuse_connections)
        if inuse_connections:  # the client is closing
            with contextlib.suppress(Exception):
                await self.sentinel_manager.aclose()


class _SentinelConnection(_TimedSends, _HiredisPacking, aiosentinel.SentinelManagedConnection):
    pass


class _SentinelSSLConnection(
    _TimedSends, _HiredisPacking, aiosentinel.SentinelManagedSSLConnection
):
    pass


def _sentinel_kwargs(target: SentinelTarget) -> dict[str, Any]:
    # Sentinels answer at once or not at all: no retries (the next one is asked), short timeouts.
    kwargs: dict[str, Any] = {
        "socket_timeout": 2.0,
        "socket_connect_timeout": 2.0,
        "password": target.sentinel_password,
        "ssl": target.tls,
    }
    return kwargs


def _data_kwargs(target: SentinelTarget) -> dict[str, Any]:
    return {"db": target.db, "username": target.username, "password": target.password}


def open_sentinel(
    url: str, *, socket_timeout_s: float | None = None, watch: PrimaryWatch | None = None
) -> aioredis.Redis:
    """An asyncio client for the primary of a sentinel URL, no connection made yet.

    redis-py's own ``Sentinel.master_for``: each new connection asks the Sentinels for the
    primary, idle connections to a former primary are closed when the answer changes, and a
    connection that meets READONLY (its server was demoted) is closed and reported as a
    connection error. The client's :class:`PrimaryWatch` (:func:`primary_watch`) sees every
    change of primary.
    """
    target = parse_sentinel_url(url)
    sentinel = _AsyncSentinel(  # type: ignore[no-untyped-call,unused-ignore]
        target.sentinels,
        sentinel_kwargs={**_sentinel_kwargs(target), "retry": aioredis.retry.Retry(NoBackoff(), 0)},
    )
    sentinel.target = target
    client: aioredis.Redis = sentinel.master_for(
        target.service,
        connection_pool_class=_SentinelPool,
        shared_watch=watch,
        connection_class=_SentinelSSLConnection if target.tls else _SentinelConnection,
        decode_responses=False,
        socket_timeout=socket_timeout_s,
        socket_connect_timeout=5.0,
        socket_keepalive=True,
        health_check_interval=30,
        **_data_kwargs(target),
    )
    return client


def open_sync_sentinel(url: str, *, socket_timeout_s: float | None = 10.0) -> redis.Redis:
    """The sync counterpart of :func:`open_sentinel`, for operator commands and probes.

    Like the sync cluster client it asks the Sentinels at once: raises ConnectionLost when none
    answers or none knows a healthy primary, ConfigError when they monitor no such service.
    """
    target = parse_sentinel_url(url)
    sentinel = _SyncSentinel(  # type: ignore[no-untyped-call,unused-ignore]
        target.sentinels,
        sentinel_kwargs={**_sentinel_kwargs(target), "retry": SyncRetry(NoBackoff(), 0)},
    )
    sentinel.target = target
    try:
        sentinel.discover_master(target.service)
    except UnknownService as exc:
        sentinel.close()
        raise ConfigError(f"{redact_url(url)}: {exc}") from None
    except rex.ConnectionError as exc:
        sentinel.close()
        raise ConnectionLost(str(exc)) from None
    client: redis.Redis = sentinel.master_for(  # type: ignore[no-untyped-call,unused-ignore]
        target.service,
        ssl=target.tls,
        decode_responses=False,
        socket_timeout=socket_timeout_s,
        socket_connect_timeout=5.0,
        **_data_kwargs(target),
    )
    return client


def primary_watch(client: object) -> PrimaryWatch | None:
    """The :class:`PrimaryWatch` of an asyncio client from :func:`open_redis` (None for Redis
    Cluster, Unix sockets and the embedded engine, which have no primary to follow)."""
    pool = getattr(client, "connection_pool", None)
    watch = getattr(pool, "primary", None)
    return watch if isinstance(watch, PrimaryWatch) else None


async def discover_primary(client: aioredis.Redis) -> str | None:
    """``host:port`` of the primary ``client`` writes to now, asking the Sentinels for a sentinel
    client; None for Redis Cluster and the engine. Raises ConnectionLost when the Sentinels name
    none, ConfigError when they do not monitor the service (a misspelt service name)."""
    pool = getattr(client, "connection_pool", None)
    if isinstance(pool, _SentinelPool):
        try:
            host, port = await pool.get_master_address()
        except UnknownService as exc:
            raise ConfigError(str(exc)) from None
        except (rex.ConnectionError, rex.TimeoutError) as exc:
            raise ConnectionLost(str(exc)) from None
        return f"{host}:{port}"
    watch = primary_watch(client)
    return watch.address if watch is not None else None


def sync_primary_address(client: redis.Redis) -> str | None:
    """``host:port`` of the primary a sync client from :func:`open_sync_redis` last used (a
    sentinel client asks the Sentinels when it has not connected yet); None for Redis Cluster and
    the engine. Raises redis-py's errors as they come."""
    pool = getattr(client, "connection_pool", None)
    if isinstance(pool, syncsentinel.SentinelConnectionPool):
        host, port = pool.master_address or pool.get_master_address()  # type: ignore[no-untyped-call,unused-ignore]
        return f"{host}:{port}"
    if is_cluster_client(client) or not isinstance(pool, redis.ConnectionPool):
        return None
    kwargs = pool.connection_kwargs
    if "path" in kwargs:
        return str(kwargs["path"])
    if "host" not in kwargs:
        return None
    return f"{kwargs['host']}:{kwargs.get('port', 6379)}"


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


def open_redis(
    url: str, *, socket_timeout_s: float | None = None, watch: PrimaryWatch | None = None
) -> aioredis.Redis:
    """An asyncio redis-py client for ``url``; bytes replies, no connection made yet.

    ``engine://`` URLs resolve to streamworker's embedded engine, ``redis+cluster://`` to
    redis-py's cluster client, ``redis+sentinel://`` to its Sentinel client; everything else to
    redis-py's own ``from_url``. ``socket_timeout_s`` must exceed the longest BLOCK the caller
    will use. Clients given the same ``watch`` share it (one count of primary changes for all of
    a worker's clients); see :func:`primary_watch`.
    """
    validate_redis_url(url)
    if is_cluster_url(url):
        return open_cluster(url, socket_timeout_s=socket_timeout_s)
    if is_sentinel_url(url):
        return open_sentinel(url, socket_timeout_s=socket_timeout_s, watch=watch)
    if url.startswith("engine:"):
        from streamworker.engine.inproc import async_client  # type: ignore[import-not-found,unused-ignore]

        with _engine_errors(url):
            client: aioredis.Redis = async_client(url)
        return client
    try:
        # TCP keepalive has no meaning on a Unix socket, whose connection class refuses it.
        keepalive = {} if url.lower().startswith("unix:") else {"socket_keepalive": True}
        pool = _PrimaryPool.from_url(
            url,
            shared_watch=watch,
            decode_responses=False,
            socket_timeout=socket_timeout_s,
            socket_connect_timeout=5.0,
            health_check_interval=30,
            **keepalive,
        )
    except ValueError as exc:
        raise ConfigError(f"invalid Redis URL {redact_url(url)!r}: {exc}") from None
    return aioredis.Redis.from_pool(pool)


def open_sync_redis(url: str, *, socket_timeout_s: float | None = 10.0) -> redis.Redis:
    """A sync redis-py client for ``url`` (bytes replies), for the operator commands."""
    validate_redis_url(url)
    if is_cluster_url(url):
        return open_sync_cluster(url, socket_timeout_s=socket_timeout_s)
    if is_sentinel_url(url):
        return open_sync_sentinel(url, socket_timeout_s=socket_timeout_s)
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


async def drop_idle_connections(client: aioredis.Redis) -> None:
    """Close the idle connections in ``client``'s pool (those in use are left to their tasks).

    After a lost connection the others in the pool were very likely cut by the same outage (a
    restart, a failover, a network fault) without knowing it yet; taken for the first command
    after the recovery, each would fail once more and look like a new outage. Closed now, they
    are opened afresh when needed. A client without a pool of its own (Redis Cluster, the
    in-process engine) is left alone.
    """
    pool = getattr(client, "connection_pool", None)
    disconnect = getattr(pool, "disconnect", None)
    if disconnect is None or is_cluster_client(client):
        return
    with contextlib.suppress(Exception):
        await disconnect(inuse_connections=False)


def _raise_as_lost(exc: Exception) -> None:
    """Raise what the redis-py failure ``exc`` means to streamworker when it is an outage
    (ConnectionLost) or a misconfiguration (ConfigError); return when it is neither (a refusal,
    a bug), for the caller to re-raise ``exc`` as it is."""
    if isinstance(exc, CLUSTER_TRANSIENT_ERRORS):
        if _NOT_A_CLUSTER in str(exc).lower():
            raise ConfigError(
                f"a redis+cluster:// URL names a server that is not a cluster node ({exc}); use "
                f"redis:// for it"
            ) from None
        raise ConnectionLost(f"{type(exc).__name__}: {exc}") from exc
    if isinstance(exc, CONNECTION_ERRORS) and not isinstance(exc, rex.ResponseError):
        raise ConnectionLost(f"{type(exc).__name__}: {exc}") from exc


@contextlib.asynccontextmanager
async def connection_errors() -> AsyncIterator[None]:
    """Convert redis-py connection failures raised inside the block into ConnectionLost."""
    try:
        yield
    except Exception as exc:
        _raise_as_lost(exc)
        # redis-py's asyncio connection, closed by another task in the middle of a command (seen
        # on a Redis Cluster during a failover), fails on its writer or reader, now None.
        if isinstance(exc, AttributeError) and "'NoneType' object has no attribute" in str(exc):
            raise ConnectionLost(f"connection closed under a command: {exc}") from exc
        raise


@contextlib.contextmanager
def sync_connection_errors() -> Iterator[None]:
    """:func:`connection_errors` for sync clients: the same failures become the same errors."""
    try:
        yield
    except Exception as exc:
        _raise_as_lost(exc)
        raise


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
    """The consume loop's next ``>`` read, handed down with the batch in hand
    (:attr:`~streamworker.idempotency.base.Batch.next_read`) for its last Redis call to send.

    Each batch ends with one Redis call of its strategy (the XACK, or the apply script that acks),
    after which the loop reads the next batch: two round trips. A strategy that ends with
    :func:`xack_then_read` (or :meth:`LuaScript.then_read`) and passes this read sends it behind
    its call, in the same write on the same connection. Redis runs a connection's commands in
    order, so the read still happens after the ack, never before: this consumer never holds more
    than the batch in hand (at a crash, at most that batch is pending, as with two round trips),
    but the batch costs one round trip fewer. (A handler with ``read_ahead=True`` trades that
    bound for overlap: its loop sends the next read as soon as a full batch arrives and offers
    none here; see :meth:`streamworker.runtime.consumer.Consumer._reads_ahead`.)

    The read goes out at most once per batch, only on the loop's own client (a plain
    ``redis.asyncio.Redis``: a Redis Cluster read of another slot's node could not share the
    connection), and only while the loop wants it (it is not stopping); the reply (or the error
    the read met) waits here for :meth:`take`. Use from one event loop.
    """

    __slots__ = ("_also", "_also_reply", "_args", "_client", "_reply", "_wanted", "sent_at")

    def __init__(
        self,
        client: aioredis.Redis,
        group: str,
        consumer: str,
        stream: str,
        *,
        count: int,
        wanted: Callable[[], bool],
        claim_ms: int | None = None,
    ) -> None:
        self._client = client
        self._args = tuple(
            read_group_args(group, consumer, stream, b">", count=count, claim_ms=claim_ms)
        )
        self._wanted = wanted
        self._reply: Any = _NO_REPLY
        self._also: tuple[Any, ...] | None = None
        self._also_reply: Any = None
        self.sent_at = 0.0
        """When the read went out (monotonic): the lease clock of the entries it returns."""

    def set_count(self, count: int) -> None:
        """The COUNT of the read from now on (a rate-limited loop sizes it by the permits it
        was granted)."""
        if self._args[5] != count:
            args = list(self._args)
            args[5] = count
            self._args = tuple(args)

    def also(self, *args: Any) -> None:
        """A command to send right behind the read, in the same write, each time it goes out
        (a rate-limited loop asks for the next read's permits); its reply (or error) waits for
        :meth:`take_also`. Give its name as bytes to get the reply as parsed."""
        self._also = args or None

    def take_also(self) -> Any:
        """The reply (or the error) of the :meth:`also` command sent with the last read; None
        when none was sent."""
        reply, self._also_reply = self._also_reply, None
        return reply

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
        self._also_reply = None

    def ready_for(self, client: aioredis.Redis) -> bool:
        """True when a call on ``client`` may send this read now."""
        return (
            client is self._client
            and type(client) is aioredis.Redis
            and self._reply is _NO_REPLY
            and self._wanted()
        )


_NO_REPLY: Any = object()


async def _then_read(slot: NextRead, client: aioredis.Redis, *args: Any) -> Any:
    """``args`` and the slot's read in one write; the command's reply (or error), the read's kept
    in the slot: Redis ran the read whatever the command's own reply was."""
    pipe = client.pipeline(transaction=False)
    pipe.execute_command(*args)
    pipe.execute_command(*slot._args)
    if slot._also is not None:
        pipe.execute_command(*slot._also)
    slot.sent_at = time.monotonic()
    first, read, *also = await pipe.execute(raise_on_error=False)
    slot._reply = read
    slot._also_reply = also[0] if also else None
    if isinstance(first, BaseException):
        raise first
    return first


async def xack_then_read(
    client: aioredis.Redis,
    stream: str,
    group: str,
    ids: Sequence[str | bytes],
    next_read: NextRead | None,
) -> int:
    """``XACK stream group *ids``, for a batch's last call: ``next_read`` (the batch's
    :attr:`~streamworker.idempotency.base.Batch.next_read`), when given and ready for ``client``,
    goes out behind the XACK in one write and its reply is kept for the loop. Connection errors
    as redis-py raises them."""
    if next_read is None or not next_read.ready_for(client):
        return int(await client.xack(stream, group, *ids))
    return int(await _then_read(next_read, client, "XACK", stream, group, *ids))


async def read_group(
    client: aioredis.Redis,
    group: str,
    consumer: str,
    stream: str,
    start: bytes,
    *,
    count: int,
    block_ms: int | None,
    claim_ms: int | None = None,
) -> Any:
    """``XREADGROUP GROUP group consumer COUNT count [BLOCK block_ms] [CLAIM claim_ms] STREAMS
    stream start``: the reply for :func:`parse_read_reply` (:func:`parse_claim_reply` with
    ``claim_ms``).

    On a plain ``redis.asyncio.Redis`` the reply is taken as the parser gave it (nested lists,
    or a map on RESP3): redis-py applies its reply callbacks by the command's name given as
    text, and this one is sent as bytes. That callback builds a dict per entry and, on RESP3,
    reshapes the reply, all of which :func:`parse_read_reply` does itself; it was a fifth of the
    consume loop's time. Other clients (Redis Cluster, wrappers) go through ``xreadgroup``.
    """
    if type(client) is not aioredis.Redis:
        if claim_ms is not None:
            return await client.xreadgroup(
                group,
                consumer,
                {stream: start},
                count=count,
                block=block_ms,
                claim_min_idle_time=claim_ms,
            )
        return await client.xreadgroup(
            group, consumer, {stream: start}, count=count, block=block_ms
        )
    args = read_group_args(
        group, consumer, stream, start, count=count, block_ms=block_ms, claim_ms=claim_ms
    )
    return await client.execute_command(*args)  # type: ignore[no-untyped-call,unused-ignore]


def read_group_args(
    group: str,
    consumer: str,
    stream: str,
    start: bytes,
    *,
    count: int,
    block_ms: int | None = None,
    claim_ms: int | None = None,
) -> list[Any]:
    """The words of ``XREADGROUP GROUP group consumer COUNT count [BLOCK block_ms] [CLAIM
    claim_ms] STREAMS stream start``, the command name as bytes (:func:`read_group`)."""
    args: list[Any] = [_XREADGROUP, b"GROUP", group, consumer, b"COUNT", count]
    if block_ms is not None:
        args += [b"BLOCK", block_ms]
    if claim_ms is not None:
        args += [b"CLAIM", claim_ms]
    args += [b"STREAMS", stream, start]
    return args


_XREADGROUP = b"XREADGROUP"


_new_entry = tuple.__new__


def _stream_items(reply: Any, stream: bytes) -> Any:
    # The entries of ``stream`` in an XREAD/XREADGROUP reply, RESP2 or RESP3 shape.
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
        return items
    # RESP2: [[stream, [entries]], ...]
    return next((e for name, e in reply if name == stream), [])


def parse_read_reply(reply: Any, stream: bytes) -> list[Entry]:
    """Entries of ``stream`` from an XREAD/XREADGROUP reply, RESP2 or RESP3 shape, as redis-py parsed it.

    A null reply (nothing new) gives an empty list.
    """
    if not reply:
        return []
    items = _stream_items(reply, stream)
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


class GroupRead(NamedTuple):
    """What one XREADGROUP returned for a stream: a history read has no ``counts`` (XPENDING
    gives them), a plain ``>`` read None (1 for each entry), a ``CLAIM`` read what its reply
    says."""

    entries: list[Entry]
    counts: dict[bytes, int] | None
    """Each entry's delivery counter including this read (what XPENDING says after it); None
    when every entry is a first delivery (counter 1), as the batch processor takes it."""
    claimed: int
    """How many of ``entries`` were claimed from the group's idle pending entries (they come
    first); the rest were new."""


def parse_claim_reply(reply: Any, stream: bytes) -> GroupRead:
    """A ``CLAIM`` read's reply: entries as ``[id, fields, idle-ms, deliveries]``, where a new
    entry has ``0, 0`` and a claimed one the deliveries before this read
    (https://redis.io/docs/latest/commands/xreadgroup/). An entry without the two numbers (a
    server that ignored CLAIM) counts as new."""
    if not reply:
        return GroupRead([], {}, 0)
    entries: list[Entry] = []
    counts: dict[bytes, int] = {}
    claimed = 0
    for item in _stream_items(reply, stream):
        entry_id = as_bytes(item[0])
        fields = item[1]
        if fields and type(fields) is not list:
            fields = flat_fields(fields)
        before = int(item[3]) if len(item) > 3 else 0
        idle = int(item[2]) if len(item) > 3 else 0
        if before or idle:
            claimed += 1
        entries.append(_new_entry(Entry, (entry_id, fields or None)))
        counts[entry_id] = before + 1
    return GroupRead(entries, counts, claimed)


class LuaScript:
    """A script from ``streamworker/lua/``, its includes composed (:mod:`.luasource`): loaded
    once, called by EVALSHA, reloaded on NOSCRIPT."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.source = lua_source(name)
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
        self,
        client: aioredis.Redis,
        keys: Sequence[str | bytes],
        args: Sequence[str | bytes | int],
        next_read: NextRead | None,
    ) -> Any:
        """As a call, for a script that is a batch's last call: ``next_read`` goes out behind it,
        as with :func:`xack_then_read`. Should the server have lost the script, the read (if it
        went out) has already run when the script is loaded and run again."""
        async with connection_errors():
            try:
                if next_read is None or not next_read.ready_for(client):
                    return await client.evalsha(self.sha, len(keys), *keys, *args)
                return await _then_read(
                    next_read, client, "EVALSHA", self.sha, len(keys), *keys, *args
                )
            except rex.NoScriptError:
                await client.script_load(self.source)
                return await client.evalsha(self.sha, len(keys), *keys, *args)
