"""Typed, retry-safe publishing: a model (or a mapping) in, one stream entry out.

:class:`Producer` (asyncio) and :class:`SyncProducer` encode a value exactly as the consumer's
``Message[Model]`` decodes it (:func:`streamworker.core.codec.encode`), route it to its partition when
the stream is partitioned, trim the stream by the stream's defaults, and add it with XADD::

    producer = Producer(client, streams={"orders": StreamOptions(maxlen=100_000, partitions=8)})
    receipt = await producer.publish("orders", Order(order_id=7, amount_cents=150),
                                     partition_key="customer-42", idempotency_key="order-7")

Retries. A plain XADD whose reply is lost (the connection dropped after Redis applied it) cannot
be told from one that never arrived; redis-py retries it and the entry is added twice. Two ways to
make a retry add nothing:

* ``idempotency_key=``: the XADD runs in ``publish_once.lua`` together with a marker for the key,
  kept ``idempotency_window_ms`` (default 24 h). Publishing the same key again within the window
  adds nothing and returns the first entry's id with ``duplicate=True``. The marker lives in the
  stream's hash tag, so this works on Redis Cluster. Costs one EVALSHA and one small string per
  key for the window (see benchmarks/publish_bench.py). On a server with ``XADD … IDMP`` (Redis
  8.6+) the server remembers the key instead, no marker is written, and the same receipts come
  back; its limits (10,000 keys per stream and window) are in :mod:`streamworker.producing.idmp`.
* ``id=``: an explicit entry id, for producers with a natural sequence. Redis refuses an id not
  above the stream's last; when the entry with exactly that id exists, the retry is reported as
  ``duplicate=True`` instead of an error.

Delayed delivery: ``delay_ms=`` / ``deliver_at=`` keep the entry in the stream's delayed set until
it is due; the workers that consume the stream move it in then (:mod:`streamworker.producing.delayed`). Its
receipt has ``id=None`` (the id is decided when it moves) and ``due_ms``.

Thread and task safety: a :class:`Producer` is used from one event loop; a :class:`SyncProducer`
is as thread-safe as its redis-py client (it is). Neither closes the client it was given.
"""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any, NamedTuple, Protocol, TypedDict, TypeVar, cast

import redis
import redis.asyncio as aioredis
import redis.exceptions as rex
from pydantic import BaseModel
from typing_extensions import Unpack

from streamworker.core.codec import FieldMap, encode
from streamworker.errors import ConfigError, ConnectionLost, PublishError
from streamworker.io.capabilities import paths_from_replies, probe_requests
from streamworker.io.keys import partition_stream, published_marker_key
from streamworker.io.redisio import (
    LuaScript,
    as_text,
    connection_errors,
    is_cluster_client,
    open_redis,
    open_sync_redis,
    sync_connection_errors,
)
from streamworker.io.replicawait import (
    DEFAULT_WAIT_TIMEOUT_MS,
    ReplicaWait,
    Stopwatch,
    WaitObserver,
    check_replicas,
    check_timeout,
    command_exists,
    refuse_waitaof,
)
from streamworker.producing import idmp as _idmp
from streamworker.producing.delayed import (
    due_time,
    encode_envelope,
    parse_marker,
    schedule_call,
)
from streamworker.producing.partitions import check_partitioned_name, partition_of

__all__ = [
    "DEFAULT_IDEMPOTENCY_WINDOW_MS",
    "DEFAULT_WAIT_TIMEOUT_MS",
    "Producer",
    "PublishError",
    "PublishOptions",
    "Receipt",
    "StreamOptions",
    "StreamsConfig",
    "SyncProducer",
    "Xadd",
    "batch_wait",
    "outcome_unknown",
    "plan_publish",
    "wait_terms",
]

DEFAULT_IDEMPOTENCY_WINDOW_MS = 24 * 3_600_000
"""How long an idempotency key is remembered by default (a day)."""

_EXPLICIT_ID = re.compile(r"^\d+-\d+$")
_TOO_SMALL = "equal or smaller than the target stream top item"

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class StreamOptions:
    """A stream's producer defaults; every field may be overridden per publish.

    Attributes:
        maxlen: trim to about (``approximate``) or exactly this many entries on each add.
        minid: trim entries with ids below this one on each add (exclusive with ``maxlen``).
        approximate: ``MAXLEN ~`` / ``MINID ~`` (cheap, whole macro nodes) instead of ``=``.
        partitions: the stream is partitioned (:mod:`streamworker.producing.partitions`) into this many
            streams; a publish then needs a ``partition_key``.
        body_field: encode the value as JSON in this one field (as the consumer's handler with
            ``body_field`` decodes it) instead of as flat fields.
        wait_replicas: a publish to this stream returns only once this many replicas have the
            entry (WAIT); None: the producer's ``wait_replicas``.
        wait_timeout_ms: how long such a publish waits before it raises ReplicaWaitTimeout;
            None: the producer's ``wait_timeout_ms``.
    """

    maxlen: int | None = None
    minid: str | None = None
    approximate: bool = True
    partitions: int | None = None
    body_field: str | None = None
    wait_replicas: int | None = None
    wait_timeout_ms: int | None = None

    def __post_init__(self) -> None:
        _check_trim(self.maxlen, self.minid)
        if self.wait_replicas is not None:
            check_replicas(self.wait_replicas)
        if self.wait_timeout_ms is not None:
            check_timeout(self.wait_timeout_ms)


def _check_trim(maxlen: int | None, minid: str | None) -> None:
    if maxlen is not None and minid is not None:
        raise ConfigError("maxlen and minid are mutually exclusive")
    if maxlen is not None and (
        isinstance(maxlen, bool) or not isinstance(maxlen, int) or maxlen < 0
    ):
        raise ConfigError(f"maxlen must be an integer >= 0, not {maxlen!r}")
    if minid is not None and not (isinstance(minid, str) and re.match(r"^\d+(-\d+)?$", minid)):
        raise ConfigError(f"minid must be an entry id like '1700000000000-0', not {minid!r}")


@dataclass(frozen=True, slots=True)
class Receipt:
    """Where a publish put its entry: the stream key (the partition's, when partitioned), the
    entry id, and ``duplicate=True`` when nothing was added because the idempotency key (or the
    explicit id) had been published already: ``id`` is then the earlier entry's.

    A delayed publish (``delay_ms``/``deliver_at``) has ``id=None`` (the id is decided when the
    entry moves into the stream) and ``due_ms``, the epoch ms at which it is due; a duplicate of
    one reports the earlier publish's due time."""

    stream: str
    id: str | None
    duplicate: bool = False
    due_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Xadd:
    """One planned add (pure): what :func:`plan_publish` computes and the producers send."""

    stream: str
    fields: FieldMap
    id: str
    trim: str  # "", "MAXLEN" or "MINID"
    approximate: bool
    threshold: str
    marker: str | None  # the idempotency marker key, or None for a plain XADD
    window_ms: int
    # Replicas to wait for and how long; None: the producer's defaults.
    wait_replicas: int | None = None
    wait_timeout_ms: int | None = None
    # A delayed publish: when it is due (epoch ms); it is scheduled, not added.
    due_ms: int | None = None
    # A keyed add sent by XADD … IDMP (publish_idmp.lua) instead of the marker script: set by
    # the producer for a server that has IDMP (streamworker.producing.idmp.route); ``marker``
    # then only says that the add is keyed (no marker key is written).
    idmp: bool = False

    def script_args(self) -> list[str | bytes | int]:
        """ARGV of ``publish_once.lua``."""
        args: list[str | bytes | int] = [
            self.window_ms,
            self.id,
            self.trim,
            "~" if self.approximate else "=",
            self.threshold,
        ]
        for name, value in self.fields.items():
            args += [name, value]
        return args

    def xadd_kwargs(self) -> dict[str, Any]:
        """redis-py ``xadd`` keyword arguments for the plain path."""
        kwargs: dict[str, Any] = {"id": self.id}
        if self.trim == "MAXLEN":
            kwargs.update(maxlen=int(self.threshold), approximate=self.approximate)
        elif self.trim == "MINID":
            kwargs.update(minid=self.threshold, approximate=self.approximate)
        return kwargs


StreamsConfig = Mapping[str, StreamOptions] | Callable[[str], StreamOptions]


class PublishOptions(TypedDict, total=False):
    """The keyword arguments of one publish (``Producer.publish``, ``SyncProducer.publish``,
    ``plan``), as :func:`plan_publish` takes and documents them."""

    maxlen: int | None
    minid: str | None
    approximate: bool | None
    id: str | None
    partition_key: str | bytes | None
    idempotency_key: str | None
    body_field: str | None
    wait_replicas: int | None
    wait_timeout_ms: int | None
    delay_ms: int | None
    deliver_at: Any


def plan_publish(
    stream: str,
    value: BaseModel | Mapping[str, Any],
    options: StreamOptions,
    *,
    maxlen: int | None = None,
    minid: str | None = None,
    approximate: bool | None = None,
    id: str | None = None,
    partition_key: str | bytes | None = None,
    idempotency_key: str | None = None,
    idempotency_window_ms: int = DEFAULT_IDEMPOTENCY_WINDOW_MS,
    body_field: str | None = None,
    wait_replicas: int | None = None,
    wait_timeout_ms: int | None = None,
    delay_ms: int | None = None,
    deliver_at: Any = None,
) -> Xadd:
    """Encode ``value`` and decide the stream key, id, trimming, marker, replica wait and (with
    ``delay_ms``/``deliver_at``, see :func:`streamworker.producing.delayed.due_time`) the due time. Pure
    but for reading the clock for a delay; ConfigError or EncodeError for bad arguments.
    Per-call ``maxlen``/``minid`` replace the stream's trimming; per-call
    ``wait_replicas``/``wait_timeout_ms`` the stream's wait."""
    if not isinstance(stream, str) or not stream:
        raise ConfigError(f"stream must be a non-empty str, not {stream!r}")
    due_ms = due_time(delay_ms, deliver_at)
    if due_ms is not None and id is not None:
        raise ConfigError(
            "id= cannot be combined with delay_ms/deliver_at: a delayed entry's id is decided "
            "when it enters the stream"
        )
    if maxlen is not None or minid is not None:
        _check_trim(maxlen, minid)
        options = replace(options, maxlen=maxlen, minid=minid)
    if approximate is not None:
        options = replace(options, approximate=approximate)
    fields = encode(value, body_field if body_field is not None else options.body_field)
    if options.partitions is not None:
        check_partitioned_name(stream, options.partitions)
        if partition_key is None:
            raise ConfigError(
                f"stream {stream!r} is partitioned ({options.partitions} partitions): publish "
                f"with partition_key="
            )
        key = partition_stream(stream, partition_of(partition_key, options.partitions))
    elif partition_key is not None:
        raise ConfigError(
            f"partition_key given but stream {stream!r} is not declared partitioned (declare "
            f"it with partitions=N, as its handler is)"
        )
    else:
        key = stream
    if id is None:
        entry_id = "*"
    elif isinstance(id, str) and _EXPLICIT_ID.match(id) and id != "0-0":
        entry_id = id
    else:
        raise ConfigError(f"id must be an explicit entry id like '1700000000000-1', not {id!r}")
    marker = None
    if idempotency_key is not None:
        if not isinstance(idempotency_key, str) or not idempotency_key:
            raise ConfigError(f"idempotency_key must be a non-empty str, not {idempotency_key!r}")
        if (
            isinstance(idempotency_window_ms, bool)
            or not isinstance(idempotency_window_ms, int)
            or idempotency_window_ms < 1
        ):
            raise ConfigError(
                f"idempotency_window_ms must be an integer >= 1, not {idempotency_window_ms!r}"
            )
        marker = published_marker_key(key, idempotency_key)
    trim, threshold = "", ""
    if options.maxlen is not None:
        trim, threshold = "MAXLEN", str(options.maxlen)
    elif options.minid is not None:
        trim, threshold = "MINID", options.minid
    replicas = options.wait_replicas if wait_replicas is None else check_replicas(wait_replicas)
    timeout = options.wait_timeout_ms if wait_timeout_ms is None else check_timeout(wait_timeout_ms)
    return Xadd(
        key,
        fields,
        entry_id,
        trim,
        options.approximate,
        threshold,
        marker,
        idempotency_window_ms,
        replicas,
        timeout,
        due_ms,
    )


_NO_OPTIONS = StreamOptions()


def _resolver(streams: StreamsConfig | None) -> Callable[[str], StreamOptions]:
    if streams is None:
        return lambda _stream: _NO_OPTIONS
    if callable(streams):
        return streams
    table = dict(streams)
    for name, opts in table.items():
        if not isinstance(opts, StreamOptions):
            raise ConfigError(f"streams[{name!r}] must be a StreamOptions, not {opts!r}")
    return lambda stream: table.get(stream, _NO_OPTIONS)


_PUBLISH_ONCE = LuaScript("publish_once")


def _producer_wait(replicas: int, timeout_ms: int, aof_local: bool) -> ReplicaWait:
    try:
        return ReplicaWait(replicas, timeout_ms, aof_local)
    except ConfigError as exc:
        raise ConfigError(f"Producer: {exc}") from None


def batch_wait(
    default: ReplicaWait,
    xadds: Sequence[Xadd],
    wait_replicas: int | None = None,
    wait_timeout_ms: int | None = None,
) -> ReplicaWait:
    """The one wait a pipeline of ``xadds`` sends: the strongest any of them asks for (their
    plans, else ``default``), or the call's ``wait_replicas``/``wait_timeout_ms``. Pure."""
    if (
        wait_replicas is None
        and wait_timeout_ms is None
        and all(x.wait_replicas is None and x.wait_timeout_ms is None for x in xadds)
    ):
        # Nothing asks otherwise (the common case, on every publish): the default as it is.
        return default
    asked = [
        ReplicaWait(
            default.replicas if x.wait_replicas is None else x.wait_replicas,
            default.timeout_ms if x.wait_timeout_ms is None else x.wait_timeout_ms,
            default.aof_local,
        )
        for x in xadds
    ]
    wait = functools.reduce(ReplicaWait.stronger, asked) if asked else default
    return replace(
        wait,
        replicas=wait.replicas if wait_replicas is None else check_replicas(wait_replicas),
        timeout_ms=wait.timeout_ms if wait_timeout_ms is None else check_timeout(wait_timeout_ms),
    )


def wait_terms(xadds: Sequence[Xadd]) -> tuple[str, bool, str]:
    """What a ReplicaWaitTimeout of ``xadds`` says: the subject, whether publishing again is
    safe, and what it does. Pure."""
    streams = list(dict.fromkeys(x.stream for x in xadds))
    if len(xadds) == 1:
        subject = f"publish to {streams[0]!r}"
    else:
        shown = ", ".join(repr(s) for s in streams[:3]) + (", …" if len(streams) > 3 else "")
        subject = f"publish of {len(xadds)} entries to {shown}"
    if all(x.marker is not None for x in xadds):
        return (
            subject,
            True,
            "publishing again with the same idempotency_key is safe (it adds nothing twice, "
            "and waits again)",
        )
    if all(x.marker is not None or x.id != "*" for x in xadds):
        return (
            subject,
            False,
            "publishing again with the same id adds nothing twice, but its duplicate reply "
            "does not wait for the earlier entry (use idempotency_key= for a safe retry)",
        )
    return subject, False, "publishing again without idempotency_key= may add it twice"


def _scripted(x: Xadd) -> tuple[LuaScript, list[str], list[str | bytes | int]] | None:
    """The script call of a planned add that runs as a script (delayed or keyed), else None."""
    if x.due_ms is not None:
        envelope = encode_envelope(x.fields, x.trim, x.approximate, x.threshold)
        return schedule_call(x.stream, x.marker, x.due_ms, x.window_ms, envelope)
    if x.marker is not None:
        if x.idmp:
            return _idmp.script_call(x)
        return _PUBLISH_ONCE, [x.stream, x.marker], x.script_args()
    return None


def _scripts(xadds: Sequence[Xadd]) -> list[LuaScript]:
    """The scripts ``xadds`` need, to load before pipelining EVALSHAs (on a cluster: on every
    master)."""
    needed = [call[0] for call in map(_scripted, xadds) if call is not None]
    return list({script.sha: script for script in needed}.values())


def _too_small(x: Xadd, reply: Any) -> bool:
    """Whether ``reply`` refuses an explicit id that may be this entry's, added before."""
    return isinstance(reply, rex.ResponseError) and x.id != "*" and _TOO_SMALL in str(reply)


def _no_cluster_wait(client: object, wait: ReplicaWait) -> None:
    if wait.active and is_cluster_client(client):
        # WAIT counts the replicas of the node the connection is on; a cluster pipeline spreads
        # over nodes and connections, so one WAIT cannot vouch for it.
        raise ConfigError(
            "wait_replicas/wait_aof_local are not available on Redis Cluster clients yet"
        )


def outcome_unknown(xadd: Xadd, error: object) -> str:
    """The message of a ConnectionLost raised while ``xadd`` was sent: whether the entry was
    added is unknown, and whether sending it again is safe depends on how it was planned."""
    if xadd.marker is not None:
        retry = "publishing again with the same idempotency_key is safe (it adds nothing twice)"
    elif xadd.id != "*":
        retry = "publishing again with the same id is safe (it adds nothing twice)"
    else:
        retry = "without idempotency_key= or id=, publishing again may add it twice"
    return f"publish to {xadd.stream!r}: outcome unknown ({error}); {retry}"


def _receipt(x: Xadd, reply: Any) -> Receipt:
    if isinstance(reply, Exception):
        what = "scheduling" if x.due_ms is not None else "XADD"
        raise PublishError(f"{what} to {x.stream!r} refused: {reply}")
    if x.due_ms is not None or x.marker is not None:
        # publish_once.lua and schedule_delayed.lua: {1, id or due} added, {0, recorded}
        # a duplicate, whose marker records an entry id or "delayed:<due>".
        added, value = reply
        if int(added):
            if x.due_ms is not None:
                return Receipt(x.stream, None, due_ms=x.due_ms)
            return Receipt(x.stream, as_text(value))
        entry_id, due_ms = parse_marker(as_text(value))
        return Receipt(x.stream, entry_id, duplicate=True, due_ms=due_ms)
    return Receipt(x.stream, as_text(reply))


# --------------------------------------------------------------------------------------------
# Publishing, sans I/O
#
# What a publish sends, and what it makes of each reply, is written once, as a generator: it
# yields a request (one client call, or a pipeline of calls), is resumed with the reply, or has
# the call's error thrown in at the point of the yield (a refusal as redis-py's ResponseError, a
# lost connection as ConnectionLost). Producer and SyncProducer only run these flows, on an
# asyncio or a sync client: the two cannot drift apart, and each keeps redis-py's own calls (the
# same bytes on the wire as before).


class _Call(NamedTuple):
    """One redis-py call, ``client.<method>(*args, **kwargs)`` (or queued on a pipeline)."""

    method: str
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any] = MappingProxyType({})


class _Pipeline(NamedTuple):
    """Calls sent in one round trip (not a transaction). The reply is the list of their replies,
    in order, a refused command's error in its place (``raise_on_error=False``)."""

    calls: tuple[_Call, ...]


_Request = _Call | _Pipeline
_Flow = Generator[_Request, Any, _T]


def _load(script: LuaScript) -> _Call:
    # Loads on every master of a cluster client too (redis-py routes SCRIPT LOAD to all).
    return _Call("script_load", (script.source,))


def _add(x: Xadd) -> _Call:
    """The call that adds ``x``: its script (:func:`_scripted`) by EVALSHA, else XADD."""
    call = _scripted(x)
    if call is not None:
        script, keys, args = call
        return _Call("execute_command", ("EVALSHA", script.sha, len(keys), *keys, *args))
    return _Call("xadd", (x.stream, dict[Any, Any](x.fields)), x.xadd_kwargs())


def _send_flow(xadd: Xadd) -> _Flow[Receipt]:
    """One add, without a replica wait."""
    try:
        call = _scripted(xadd)
        if call is not None:
            try:
                reply = yield _add(xadd)
            except rex.NoScriptError:
                # The server lost its script cache (restart, SCRIPT FLUSH): load, run again.
                yield _load(call[0])
                reply = yield _add(xadd)
            return _receipt(xadd, reply)
        return _receipt(xadd, (yield _add(xadd)))
    except rex.ResponseError as exc:
        if xadd.id != "*" and _TOO_SMALL in str(exc):
            found = yield _Call("xrange", (xadd.stream, xadd.id, xadd.id))
            if found:
                return Receipt(xadd.stream, xadd.id, duplicate=True)
        raise PublishError(f"XADD to {xadd.stream!r} refused: {exc}") from None
    except ConnectionLost as exc:
        raise ConnectionLost(outcome_unknown(xadd, exc)) from exc


def _many_flow(xadds: Sequence[Xadd]) -> _Flow[list[Receipt]]:
    """Adds in one pipeline, without a replica wait."""
    # The scripts must be cached before EVALSHAs are pipelined.
    for script in _scripts(xadds):
        yield _load(script)
    replies = yield _Pipeline(tuple(_add(x) for x in xadds))
    out = []
    for x, reply in zip(xadds, replies, strict=True):
        # A node that lost its script cache (restart, failover) ran nothing of this one: send it
        # alone (which reloads the script).
        if isinstance(reply, rex.NoScriptError):
            out.append((yield from _send_flow(x)))
        else:
            out.append(_receipt(x, reply))
    return out


def _first(flow: _Flow[list[Receipt]]) -> _Flow[Receipt]:
    return (yield from flow)[0]


def _nothing() -> _Flow[list[Receipt]]:
    """The flow of an empty batch: it sends nothing."""
    yield from ()
    return []


class _Publisher:
    """What :class:`Producer` and :class:`SyncProducer` share: the configuration, the plans, and
    the flows with a replica wait (which remember whether the server has WAITAOF)."""

    def __init__(
        self,
        client: Any,
        *,
        streams: StreamsConfig | None = None,
        idempotency_window_ms: int = DEFAULT_IDEMPOTENCY_WINDOW_MS,
        wait_replicas: int = 0,
        wait_timeout_ms: int = DEFAULT_WAIT_TIMEOUT_MS,
        wait_aof_local: bool = False,
        wait_observer: WaitObserver | None = None,
        use_idmp: bool = False,
    ) -> None:
        self.client = client
        self._options = _resolver(streams)
        self.use_idmp = use_idmp
        self.keyed_path: str | None = None
        """How keyed publishes go: "idmp" or "marker", decided at the first one (None before)."""
        self.idempotency_window_ms = idempotency_window_ms
        self.wait = _producer_wait(wait_replicas, wait_timeout_ms, wait_aof_local)
        self.wait_observer = wait_observer
        self._has_waitaof: bool | None = None

    def plan(
        self, stream: str, value: BaseModel | Mapping[str, Any], **options: Unpack[PublishOptions]
    ) -> Xadd:
        """:func:`plan_publish` with this producer's stream defaults and idempotency window."""
        return plan_publish(
            stream,
            value,
            self._options(stream),
            idempotency_window_ms=self.idempotency_window_ms,
            **options,
        )

    def _routed(self, xadds: Sequence[Xadd], flow: Callable[[list[Xadd]], _Flow[_T]]) -> _Flow[_T]:
        """``flow`` of ``xadds`` as they are sent: keyed ones by IDMP where the server has it
        (asked at the first keyed publish, see :mod:`streamworker.producing.idmp`)."""
        keyed = [x for x in xadds if x.marker is not None]
        if self.keyed_path is None and keyed:
            try:
                self.keyed_path = yield from self._keyed_path()
            except ConnectionLost as exc:
                # Nothing was sent yet; said as every publish's lost connection is.
                raise ConnectionLost(outcome_unknown(keyed[0], exc)) from exc
        idmp = self.keyed_path == "idmp"
        return (yield from flow([_idmp.route(x, idmp) for x in xadds]))

    def _keyed_path(self) -> _Flow[str]:
        """The server's answer (streamworker.io.capabilities), once: "idmp" or "marker"."""
        if not self.use_idmp or is_cluster_client(self.client):
            return "marker"
        info_call, docs_call = probe_requests()
        try:
            info = yield _Call("execute_command", info_call)
            docs = yield _Call("execute_command", docs_call)
        except rex.ResponseError:
            return "marker"  # COMMAND renamed or denied: the path every server has
        return "idmp" if paths_from_replies(info, docs).idmp else "marker"

    def _send(self, xadd: Xadd) -> _Flow[Receipt]:
        """The flow that sends one planned add (and waits for its replicas, when it asks)."""
        return self._routed([xadd], lambda routed: self._send_routed(routed[0]))

    def _send_routed(self, xadd: Xadd) -> _Flow[Receipt]:
        wait = batch_wait(self.wait, [xadd])
        if wait.active:
            return _first(self._waiting_flow([xadd], wait, "publish"))
        return _send_flow(xadd)

    def _many(
        self, xadds: Sequence[Xadd], wait_replicas: int | None, wait_timeout_ms: int | None
    ) -> _Flow[list[Receipt]]:
        """The flow that sends planned adds in one pipeline (see :meth:`Producer.publish_many`)."""
        if not xadds:
            return _nothing()
        return self._routed(
            xadds, lambda routed: self._many_routed(routed, wait_replicas, wait_timeout_ms)
        )

    def _many_routed(
        self, xadds: Sequence[Xadd], wait_replicas: int | None, wait_timeout_ms: int | None
    ) -> _Flow[list[Receipt]]:
        wait = batch_wait(self.wait, xadds, wait_replicas, wait_timeout_ms)
        if wait.active:
            return self._waiting_flow(xadds, wait, "publish_many")
        return _many_flow(xadds)

    def _waiting_flow(
        self, xadds: Sequence[Xadd], wait: ReplicaWait, operation: str
    ) -> _Flow[list[Receipt]]:
        """The adds and one WAIT (WAITAOF) in one pipeline, so that the wait is on the writes'
        own connection; entries a node without the script ran not are sent again, with their
        own WAIT."""
        _no_cluster_wait(self.client, wait)
        if wait.aof_local and self._has_waitaof is None:
            # "COMMAND INFO" as one name keeps redis-py's COMMAND reply parser (which fails on
            # [None]) away; redis-py splits it into two words on the wire.
            info = yield _Call("execute_command", ("COMMAND INFO", "WAITAOF"))
            self._has_waitaof = command_exists(info)
        if wait.aof_local and not self._has_waitaof:
            raise refuse_waitaof()
        subject, retry_safe, retry = wait_terms(xadds)
        stopwatch = Stopwatch(self.wait_observer, operation)
        out: list[Receipt | None] = [None] * len(xadds)
        todo = list(range(len(xadds)))
        for attempt in (1, 2):
            try:
                for script in _scripts([xadds[i] for i in todo]):
                    yield _load(script)
                calls = [_add(xadds[i]) for i in todo]
                calls.append(_Call("execute_command", wait.command()))
                replies = list((yield _Pipeline(tuple(calls))))
            except ConnectionLost as exc:
                raise ConnectionLost(outcome_unknown(xadds[todo[0]], exc)) from exc
            waited = replies.pop()
            again = []
            for i, reply in zip(todo, replies, strict=True):
                x = xadds[i]
                if isinstance(reply, rex.NoScriptError) and attempt == 1:
                    again.append(i)
                elif _too_small(x, reply):
                    if not (yield _Call("xrange", (x.stream, x.id, x.id))):
                        raise PublishError(f"XADD to {x.stream!r} refused: {reply}")
                    out[i] = Receipt(x.stream, x.id, duplicate=True)
                else:
                    out[i] = _receipt(x, reply)
            wait.check(waited, subject, retry_safe=retry_safe, retry=retry, stopwatch=stopwatch)
            if not again:
                break
            todo = again
        return [r for r in out if r is not None]


class _Done(NamedTuple):
    """A flow's result: what it returned."""

    value: Any


def _resume(flow: _Flow[_T], reply: Any, error: BaseException | None) -> _Request | _Done:
    """Give ``flow`` the reply to its last request (or the error it raised); its next request,
    or :class:`_Done` when it has returned."""
    try:
        return flow.send(reply) if error is None else flow.throw(error)
    except StopIteration as done:
        return _Done(done.value)


def _issue(client: Any, request: _Request) -> Any:
    """Send ``request`` on ``client``: the reply from a sync client, an awaitable of it from an
    asyncio one (a pipeline's replies in order, errors among them as values)."""
    if isinstance(request, _Call):
        return getattr(client, request.method)(*request.args, **request.kwargs)
    pipe = client.pipeline(transaction=False)
    for call in request.calls:
        getattr(pipe, call.method)(*call.args, **call.kwargs)
    return pipe.execute(raise_on_error=False)


async def _run(client: aioredis.Redis, flow: _Flow[_T]) -> _T:
    """Run ``flow`` on an asyncio client; lost connections reach it as ConnectionLost."""
    reply: Any = None
    error: BaseException | None = None
    while not isinstance(request := _resume(flow, reply, error), _Done):
        reply, error = None, None
        try:
            async with connection_errors():
                reply = await _issue(client, request)
        except (rex.ResponseError, ConnectionLost) as exc:
            error = exc
    return cast(_T, request.value)


def _run_sync(client: redis.Redis, flow: _Flow[_T]) -> _T:
    """:func:`_run` on a sync client."""
    reply: Any = None
    error: BaseException | None = None
    while not isinstance(request := _resume(flow, reply, error), _Done):
        reply, error = None, None
        try:
            with sync_connection_errors():
                reply = _issue(client, request)
        except (rex.ResponseError, ConnectionLost) as exc:
            error = exc
    return cast(_T, request.value)


class Producer(_Publisher):
    """Publishes typed entries through an asyncio redis-py client (see the module docstring).

    Args:
        client: any asyncio client from :func:`streamworker.io.redisio.open_redis` (Redis, Redis
            Cluster, the embedded engine).
        streams: per-stream defaults, a mapping or a function of the stream name.
        idempotency_window_ms: how long an ``idempotency_key`` is remembered.
        wait_replicas: a publish returns only once this many replicas acknowledged its entry
            (``WAIT``, on the write's own connection; one per pipeline). 0 (the default) waits
            for none. Fewer within ``wait_timeout_ms`` raise ReplicaWaitTimeout: the entry is on
            the primary but a failover may lose it. Streams (``StreamOptions``) and calls may
            ask otherwise. Not on Redis Cluster clients (ConfigError).
        wait_timeout_ms: the longest a publish waits for its replicas (>= 1). Keep it below
            the client's socket timeout.
        wait_aof_local: also wait for the primary (and the counted replicas) to fsync the
            entry to the AOF: ``WAITAOF``, Redis 7.2+; ConfigError at the first publish on a
            server without it (checked by ``COMMAND INFO WAITAOF``).
        wait_observer: told how long each wait took and whether it timed out
            (``Metrics.observe_replica_wait``).
        use_idmp: opt in to ``XADD … IDMP`` for keyed publishes where the server has it (asked
            once, at the first keyed publish; ``keyed_path`` then says "idmp" or "marker").
            Off by default: the server keeps the last 10,000 keys per stream within the window,
            so a retry that comes after 10,000 other keyed publishes to its stream would add a
            second entry, where the marker script (the default) remembers every key for the
            whole window (:mod:`streamworker.producing.idmp`).
    """

    client: aioredis.Redis

    async def publish(
        self, stream: str, value: BaseModel | Mapping[str, Any], **options: Unpack[PublishOptions]
    ) -> Receipt:
        """Add ``value`` to ``stream``; returns where it went.

        Raises ConnectionLost when Redis is away (the entry may or may not have been added:
        publish again with the same ``idempotency_key`` or ``id`` to be sure it is there once),
        PublishError when Redis refuses the entry, ReplicaWaitTimeout (a PublishError) when
        fewer than ``wait_replicas`` replicas acknowledged it within ``wait_timeout_ms`` (added
        on the primary; its ``retry_safe`` says whether publishing again is safe),
        ConfigError/EncodeError for bad arguments. ``wait_replicas``/``wait_timeout_ms``
        replace the stream's and the producer's for this call.

        ``delay_ms`` (an integer >= 0) or ``deliver_at`` (a timezone-aware datetime) delays
        the entry: it is scheduled in the stream's delayed set and the consuming workers move
        it in when due (:mod:`streamworker.producing.delayed`); the receipt then has ``id=None`` and
        ``due_ms``. A replica wait then covers the schedule (the write a failover could lose).
        """
        return await _run(self.client, self._send(self.plan(stream, value, **options)))

    async def send(self, xadd: Xadd) -> Receipt:
        """Send one planned add (and wait for its replicas, when it asks)."""
        return await _run(self.client, self._send(xadd))

    async def publish_many(
        self,
        xadds: Sequence[Xadd],
        *,
        wait_replicas: int | None = None,
        wait_timeout_ms: int | None = None,
    ) -> list[Receipt]:
        """Send planned adds in one pipeline (one round trip; not a transaction: on
        ConnectionLost some may have been added, so plan them with idempotency keys or ids
        when a retry must not duplicate). Results in order; PublishError on the first refusal.

        With a replica wait (the strongest any plan asks for, or this call's), one WAIT ends
        the pipeline and covers every entry; ReplicaWaitTimeout as for :meth:`publish`.
        """
        return await _run(self.client, self._many(xadds, wait_replicas, wait_timeout_ms))


class SyncProducer(_Publisher):
    """The blocking counterpart of :class:`Producer`, on a sync redis-py client (scripts,
    web handlers, the CLI). Same arguments, same results: both run the same flows."""

    client: redis.Redis

    def publish(
        self, stream: str, value: BaseModel | Mapping[str, Any], **options: Unpack[PublishOptions]
    ) -> Receipt:
        """See :meth:`Producer.publish`."""
        return _run_sync(self.client, self._send(self.plan(stream, value, **options)))

    def send(self, xadd: Xadd) -> Receipt:
        """Send one planned add (and wait for its replicas, when it asks)."""
        return _run_sync(self.client, self._send(xadd))

    def publish_many(
        self,
        xadds: Sequence[Xadd],
        *,
        wait_replicas: int | None = None,
        wait_timeout_ms: int | None = None,
    ) -> list[Receipt]:
        """See :meth:`Producer.publish_many`."""
        return _run_sync(self.client, self._many(xadds, wait_replicas, wait_timeout_ms))


class _Subscription(Protocol):
    """What the producers read of a registered handler (a HandlerSpec)."""

    @property
    def stream(self) -> str: ...
    @property
    def partition_of(self) -> str | None: ...
    @property
    def body_field(self) -> str | None: ...


class _PublishingApp(Protocol):
    """What the producers read of their App."""

    name: str
    redis_url: str | None

    @property
    def handlers(self) -> Sequence[_Subscription]: ...


class AppProducers:
    """An App's stream declarations and the producers behind ``app.publish`` (internal)."""

    def __init__(self, app: _PublishingApp) -> None:
        self._app = app
        self._bound_url: str | None = None
        self._declared: dict[str, StreamOptions] = {}
        self._sync: SyncProducer | None = None
        self._async: tuple[Any, Producer] | None = None
        self._wait = ReplicaWait()
        self._wait_observer: WaitObserver | None = None

    def configure(
        self,
        wait_replicas: int | None,
        wait_timeout_ms: int | None,
        wait_observer: WaitObserver | None,
    ) -> None:
        wait = replace(
            self._wait,
            replicas=self._wait.replicas if wait_replicas is None else wait_replicas,
            timeout_ms=self._wait.timeout_ms if wait_timeout_ms is None else wait_timeout_ms,
        )
        self._wait = wait
        if wait_observer is not None:
            self._wait_observer = wait_observer
        # Producers made so far were built with the old defaults.
        for producer in (self._sync, self._async[1] if self._async else None):
            if producer is not None:
                producer.wait = wait
                producer.wait_observer = self._wait_observer

    def _kwargs(self) -> dict[str, Any]:
        return {
            "streams": self.options,
            "wait_replicas": self._wait.replicas,
            "wait_timeout_ms": self._wait.timeout_ms,
            "wait_observer": self._wait_observer,
        }

    def declare(self, name: str, options: StreamOptions) -> None:
        if not isinstance(name, str) or not name:
            raise ConfigError(f"stream must be a non-empty str, not {name!r}")
        if options.partitions is not None:
            check_partitioned_name(name, options.partitions)
        self._declared[name] = options

    def options(self, name: str) -> StreamOptions:
        if name in self._declared:
            return self._declared[name]
        partitions = [h for h in self._app.handlers if h.partition_of == name]
        plain = [h for h in self._app.handlers if h.stream == name]
        specs = partitions or plain
        body_fields = {h.body_field for h in specs}
        return StreamOptions(
            partitions=len({h.stream for h in partitions}) or None,
            # Handlers of one stream that disagree on the body field: none is the safe default.
            body_field=body_fields.pop() if len(body_fields) == 1 else None,
        )

    def bind(self, url: str) -> None:
        """Publish to ``url`` from now on (the CLI's resolved URL, flag included); producers
        already opened on another URL are dropped."""
        if url != self._bound_url:
            self._bound_url = url
            self._sync = None
            self._async = None

    def _url(self) -> str:
        """The URL the CLI would give a worker of this app: the bound one, else
        ``STREAMWORKER_REDIS_URL`` (through Settings, read now, at the first publish), else the
        App's ``redis_url``."""
        if self._bound_url is not None:
            return self._bound_url
        from streamworker.settings import load_settings

        settings = load_settings()
        url = settings.redis_url or self._app.redis_url
        if url:  # with the Sentinels' password folded in, as the CLI does
            url = settings.redis_url_or(url)
        if not url:
            raise ConfigError(
                f"App({self._app.name!r}) has no redis_url: pass App(..., redis_url=...) or set "
                f"STREAMWORKER_REDIS_URL to use app.publish, or build a Producer on a client of "
                f"your own"
            )
        return url

    def sync_producer(self) -> SyncProducer:
        if self._sync is None:
            self._sync = SyncProducer(open_sync_redis(self._url()), **self._kwargs())
        return self._sync

    def async_producer(self) -> Producer:
        loop = asyncio.get_running_loop()
        # An asyncio client belongs to the loop it first ran on: one per loop.
        if self._async is None or self._async[0] is not loop:
            self._async = (loop, Producer(open_redis(self._url()), **self._kwargs()))
        return self._async[1]
