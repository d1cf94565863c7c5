"""redis-py clients that execute on an in-process :class:`~streamworker.engine.core.Engine`.

``engine://memory`` (one shared engine per process), ``engine://memory/NAME`` (one per name) and
``engine:///path/to/dir`` (persistent, see :mod:`.aof`) resolve through :func:`engine_from_url`. :func:`sync_client` and :func:`async_client` return a
``redis.Redis`` / ``redis.asyncio.Redis`` whose connection pool uses :class:`EngineConnection` /
:class:`AsyncEngineConnection`: no socket and no RESP bytes. Commands reach the engine as
``list[bytes]`` (redis-py's encoder turns the arguments to bytes) and replies are converted
straight to what redis-py's parser would have produced for the negotiated protocol (RESP3 by
default; HELLO is answered by the engine). Errors go through the parser's ``parse_error`` so
redis-py raises the same exception classes as over a socket.

Blocking commands (XREAD/XREADGROUP BLOCK) wait on the engine: a sync client's thread waits on
an event; an asyncio client awaits a future resolved with ``loop.call_soon_threadsafe``. A
``socket_timeout`` shorter than the BLOCK time behaves as over a socket: TimeoutError, and the
connection is closed (the engine forgets the waiter).

This is the only engine module that imports redis-py.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from operator import itemgetter
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

import redis
import redis.asyncio
import redis.asyncio.retry
import redis.retry
from redis.asyncio.connection import AbstractConnection as _AsyncAbstractConnection
from redis.backoff import ExponentialWithJitterBackoff
from redis.connection import AbstractConnection as _SyncAbstractConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from streamworker.engine.aof import open_persistent

try:
    from redis.maint_notifications import MaintNotificationsConfig
except ImportError:  # redis-py < 7
    MaintNotificationsConfig = None  # type: ignore[assignment,misc]
try:
    from redis._defaults import DEFAULT_RETRY_BASE, DEFAULT_RETRY_CAP, DEFAULT_RETRY_COUNT
except ImportError:  # redis-py < 8: the same values, spelled out
    DEFAULT_RETRY_BASE, DEFAULT_RETRY_CAP, DEFAULT_RETRY_COUNT = 1, 10, 3

from streamworker.engine.context import Blocked, ClientState
from streamworker.engine.core import Engine
from streamworker.engine.errors import CommandError
from streamworker.engine.protocol import RequestParser
from streamworker.engine.replies import (
    Double,
    Frames,
    Map,
    NullArray,
    NullBulk,
    Push,
    SetReply,
    Status,
    Verbatim,
    format_double,
)
from streamworker.engine.versions import DEFAULT_REDIS_VERSION, parse_redis_version

__all__ = [
    "AsyncEngineConnection",
    "EngineConnection",
    "async_client",
    "async_pool",
    "engine_from_url",
    "forget_engine",
    "sync_client",
    "sync_pool",
]

_REGISTRY: dict[str, Engine] = {}
_REGISTRY_LOCK = threading.Lock()
_SENTINEL: Any = object()


_FSYNC_POLICIES = ("always", "everysec", "no")


def _parse_engine_url(url: str) -> tuple[str, Path | None, str, str | None]:
    # -> (registry key, data directory or None, appendfsync, redis_version or None)
    parsed = urlparse(url)
    if parsed.scheme != "engine":
        raise ValueError(f"not an engine:// URL: {url!r}")
    query = parse_qs(parsed.query)
    unknown = set(query) - {"appendfsync", "redis_version"}
    if unknown:
        raise ValueError(f"{url!r}: unknown option(s) {', '.join(sorted(unknown))}")
    policy = query.get("appendfsync", ["everysec"])[-1]
    if policy not in _FSYNC_POLICIES:
        raise ValueError(f"{url!r}: appendfsync must be always, everysec or no, not {policy!r}")
    version: str | None = None
    if "redis_version" in query:
        try:
            version = parse_redis_version(query["redis_version"][-1]).text
        except ValueError as exc:
            raise ValueError(f"{url!r}: {exc}") from None
    if parsed.netloc == "" and parsed.path:
        directory = Path(unquote(parsed.path)).resolve()
        return f"\0dir:{directory}", directory, policy, version
    if parsed.netloc != "memory":
        raise ValueError(
            f"{url!r}: unknown engine location {parsed.netloc!r}; "
            "use engine://memory, engine://memory/NAME or engine:///path/to/dir"
        )
    name = unquote(parsed.path.strip("/"))
    if "/" in name:
        raise ValueError(f"{url!r}: an engine name cannot contain '/'")
    return name, None, policy, version


def _engine_key(url: str) -> str:
    return _parse_engine_url(url)[0]


def engine_from_url(url: str) -> Engine:
    """The process-wide Engine for ``url``: the same URL always gives the same Engine.

    ``engine://memory`` is the default in-memory engine; ``engine://memory/NAME`` is a separate
    named one. ``engine:///path/to/dir`` is persistent: the directory's append-only file
    (the same files as ``streamworker engine serve --dir``) is replayed on first use and every
    write is logged to it, fsynced as ``?appendfsync=always|everysec|no`` says (default
    everysec; ``always`` fsyncs before each command returns). A directory is locked by the
    process that opened it: another process gets
    :class:`~streamworker.engine.aof.DirectoryLockedError`.

    ``?redis_version=8.10`` (any 8.x up to 8.10, or 7.0) chooses the Redis version the engine
    answers as when the URL creates it (default 7.0.15; see :mod:`.versions`). A URL naming a
    version must agree with an engine already open under the same name or directory
    (ValueError otherwise); a URL without one takes the engine as it is. Thread-safe.
    """
    key, directory, policy, version = _parse_engine_url(url)
    with _REGISTRY_LOCK:
        engine = _REGISTRY.get(key)
        if engine is None:
            chosen = version or DEFAULT_REDIS_VERSION
            if directory is None:
                engine = Engine(redis_version=chosen)
            else:
                engine = open_persistent(
                    directory, Engine(redis_version=chosen), appendfsync=policy
                ).engine
            _REGISTRY[key] = engine
        elif version is not None and version != engine.redis_version:
            raise ValueError(
                f"{url!r}: this engine is already open as Redis {engine.redis_version}; "
                "one engine answers as one version"
            )
        return engine


def forget_engine(url: str) -> None:
    """Drop the registry's Engine for ``url`` (tests); clients still holding it keep it. A
    persistent engine's file is flushed and closed and its directory unlocked (the engine
    keeps working in memory)."""
    with _REGISTRY_LOCK:
        engine = _REGISTRY.pop(_engine_key(url), None)
    if engine is not None and engine.persistence is not None:
        engine.persistence.close()


# --- arguments and replies -----------------------------------------------------------------


class _Batch(list):  # type: ignore[type-arg]
    """Packed commands: a list of argv lists (what ``pack_command(s)`` returns here)."""

    __slots__ = ()


class _WithResp:
    """A reply produced under another protocol than the client's current one (HELLO/RESET
    in the middle of a pipeline)."""

    __slots__ = ("reply", "resp")

    def __init__(self, reply: Any, resp: int) -> None:
        self.reply = reply
        self.resp = resp


_RESP_SWITCHERS = frozenset({b"hello", b"reset"})
_FIRST = itemgetter(0)


def _may_switch_resp(cmds: list[list[bytes]]) -> bool:
    # Whether a pipeline has a HELLO or RESET: its distinct command names (few; one C-level
    # pass to collect them) are checked instead of every command.
    try:
        names = set(map(_FIRST, cmds))
    except IndexError:  # an empty command somewhere
        names = {argv[0] for argv in cmds if argv}
    return any(name.lower() in _RESP_SWITCHERS for name in names)


def _make_packer(encoder: Any) -> Callable[[Sequence[Any]], list[bytes]]:
    """argv builder equivalent to redis-py's packers + ``Encoder.encode``, minus the RESP."""
    encode = encoder.encode
    encoding = encoder.encoding
    errors = encoder.encoding_errors
    names: dict[Any, list[bytes]] = {}

    def to_argv(args: Sequence[Any]) -> list[bytes]:
        first = args[0]
        head = names.get(first)
        if head is None:
            # redis-py sends multi-word names ("CLIENT SETNAME") as one string and splits them.
            if type(first) is str:
                head = first.encode().split()
            elif type(first) is bytes:
                head = first.split() if b" " in first else [first]
            else:
                head = [bytes(encode(first))]
            if len(names) < 512 and type(first) in (str, bytes):
                names[first] = head
        out = head.copy()
        append = out.append
        it = iter(args)
        next(it)
        for a in it:
            t = type(a)
            if t is bytes:
                append(a)
            elif t is str:
                append(a.encode(encoding, errors))
            else:
                v = encode(a)
                append(v if type(v) is bytes else bytes(v))
        return out

    return to_argv


class _Packer:
    """``command_packer`` for redis-py: packing is just encoding the arguments to bytes."""

    __slots__ = ("_argv",)

    def __init__(self, encoder: Any) -> None:
        self._argv = _make_packer(encoder)

    def pack(self, *args: Any) -> _Batch:
        return _Batch((self._argv(args),))


def _error_text(exc: CommandError) -> str:
    # The socket parsers decode error lines as UTF-8 with replacement.
    return exc.text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


class _Converter:
    """Engine reply -> the Python value redis-py's parsers produce."""

    __slots__ = ("convert",)

    def __init__(
        self,
        resp: int,
        decode: Callable[[bytes], Any] | None,
        parse_error: Callable[[str], Exception],
    ) -> None:
        resp3 = resp >= 3

        def error(exc: CommandError) -> Exception:
            err = parse_error(_error_text(exc))
            if isinstance(err, RedisConnectionError):
                raise err
            return err

        def text(b: bytes) -> Any:
            return decode(b) if decode is not None else b

        statuses: dict[str, Any] = {}

        def conv(v: Any) -> Any:
            t = type(v)
            if t is bytes:
                return v if decode is None else decode(v)
            if t is int:
                return v
            if t is list or t is tuple:
                # Leaves (bytes, ints) inline: stream replies are mostly flat lists of bytes,
                # and a call per field dominated the XREAD/XREADGROUP conversion.
                out: list[Any] = []
                append = out.append
                for x in v:
                    tx = type(x)
                    if tx is bytes:
                        append(x if decode is None else decode(x))
                    elif tx is int:
                        append(x)
                    else:
                        append(conv(x))
                return out
            if t is Status:
                r = statuses.get(v.text)
                if r is None:
                    r = statuses[v.text] = text(v.text.encode("utf-8", "surrogateescape"))
                return r
            if t is NullBulk or t is NullArray or v is None:
                return None
            if t is Map:
                if resp3:
                    if v.plain and decode is None:
                        # Fresh lists of bytes (XREAD/XREADGROUP entries): already what the
                        # parser would build; copying them was most of the conversion cost.
                        return dict(v.items)
                    return {conv(k): conv(x) for k, x in v.items}
                flat: list[Any] = []
                for k, x in v.items:
                    flat.append(conv(k))
                    flat.append(conv(x))
                return flat
            if t is Double:
                if resp3:
                    # What a client parses from the wire (the human text rounds tiny values).
                    return v.value if v.text is None else float(v.text)
                return text(v.text if v.text is not None else format_double(v.value))
            if t is SetReply:
                return [conv(x) for x in v.items]
            if t is Verbatim:
                return text(v.text)
            if t is Push or t is Frames:
                # Frames only get here nested (SUBSCRIBE inside EXEC): one list per command.
                return [conv(x) for x in v.items]
            if t is CommandError:
                return error(v)
            if t is bool:
                return v if resp3 else int(v)
            if t is str:
                return text(v.encode("utf-8", "surrogateescape"))
            if isinstance(v, CommandError):
                return error(v)
            if isinstance(v, int):
                return int(v)
            raise TypeError(f"cannot convert {t.__name__} reply")

        self.convert = conv


# --- shared machinery ----------------------------------------------------------------------


class _EngineSession:
    """The engine side of one connection: its ClientState, pending replies, deferred
    commands (queued behind a blocked one) and the reply converter.

    Pub/Sub messages (pushed by other clients' PUBLISH, from any thread, engine lock held)
    join :attr:`replies` in arrival order, as they would join a socket's byte stream; a
    reader waiting for one waits on :attr:`arrived` (threads) or registers a waker in
    :attr:`wakers` (asyncio)."""

    __slots__ = (
        "arrived",
        "client",
        "conv",
        "conv_resp",
        "deferred",
        "engine",
        "replies",
        "wakers",
    )

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.client: ClientState = engine.connect()
        self.replies: deque[Any] = deque()
        self.deferred: list[list[bytes]] = []
        # Reply converter for the protocol ``conv_resp``; rebuilt when HELLO/RESET change it.
        self.conv: Callable[[Any], Any] | None = None
        self.conv_resp = 0
        self.arrived = threading.Condition()
        self.wakers: list[Callable[[], None]] = []
        self.client.push_out = self._push

    def _push(self, reply: Any) -> None:
        self.replies.append(reply)
        with self.arrived:
            self.arrived.notify_all()
        for wake in list(self.wakers):
            wake()

    def wait_for_reply(self, timeout_s: float | None) -> bool:
        """Wait (thread) until a reply or message is there, ``timeout_s`` at most (None:
        forever); True if one is. Only a subscribed client can receive anything unasked."""
        if self.replies:
            return True
        if not self.client.pubsub:
            return False
        with self.arrived:
            return self.arrived.wait_for(lambda: bool(self.replies), timeout_s)

    def _append(self, reply: Any) -> None:
        # A command answering several frames (SUBSCRIBE a b) answers several replies.
        if type(reply) is Frames:
            self.replies.extend(reply.items)
        elif type(reply) is list and self.client.pubsub:
            self.replies.append(self._lift_frames(reply))
        else:
            self.replies.append(reply)

    def _lift_frames(self, reply: list[Any]) -> list[Any]:
        # EXEC's array of a subscriber may hold several frames for one command (SUBSCRIBE
        # inside MULTI, a message it sent itself): on a socket redis-py hands the extra
        # pushes to its push handler while it reads the array. Here they go ahead of the
        # array, as messages, and the command's own reply stays in place.
        if not any(type(x) is Frames for x in reply):
            return reply
        out: list[Any] = []
        for item in reply:
            if type(item) is Frames and item.items:
                *extra, last = item.items
                self.replies.extend(extra)
                out.append(last)
            else:
                out.append(item)
        return out

    def close(self) -> None:
        self.replies.clear()
        self.deferred = []
        self.wakers.clear()
        self.engine.disconnect(self.client)

    def run(self, cmds: list[list[bytes]]) -> None:
        """Execute ``cmds`` (or queue them behind a blocked command)."""
        if self.deferred:
            self.deferred.extend(cmds)
            return
        engine = self.engine
        client = self.client
        replies = self.replies
        if len(cmds) == 1:
            reply = engine.execute(client, cmds[0])
            t = type(reply)
            if t is Frames or (t is list and client.pubsub):
                self._append(reply)
            else:
                replies.append(reply)
            return
        if _may_switch_resp(cmds):
            self._run_switching(cmds)
            return
        out = engine.execute_many(client, cmds)
        for reply in out:
            self._append(reply)
        if len(out) < len(cmds):
            self.deferred = cmds[len(out) :]

    def _run_switching(self, cmds: list[list[bytes]]) -> None:
        # Replies must be converted for the protocol in force when each was produced.
        produced: list[tuple[Any, int]] = []
        client = self.client
        for i, argv in enumerate(cmds):
            reply = self.engine.execute(client, argv)
            produced.append((reply, client.resp))
            if type(reply) is Blocked:
                self.deferred = cmds[i + 1 :]
                break
        final = client.resp
        for reply, resp in produced:
            items = reply.items if type(reply) is Frames else [reply]
            for item in items:
                self.replies.append(item if resp == final else _WithResp(item, resp))

    def after_blocked(self) -> None:
        """Run the commands that were queued behind a served blocked command."""
        cmds, self.deferred = self.deferred, []
        if cmds:
            self.run(cmds)

    def convert(
        self,
        item: Any,
        encoder: Any,
        parse_error: Callable[[str], Exception],
        disable_decoding: bool,
    ) -> Any:
        """A reply taken from :attr:`replies` (not a Blocked one) as redis-py's parser returns
        it, for the protocol it was produced in; an error reply comes back as the exception
        to raise. Shared by the sync and asyncio connections' ``read_response``."""
        t = type(item)
        if t is _WithResp or disable_decoding:
            resp = item.resp if t is _WithResp else self.client.resp
            if t is _WithResp:
                item = item.reply
            return self.converter_for(resp, encoder, parse_error, disable_decoding)(item)
        conv = self.conv
        if conv is None or self.conv_resp != self.client.resp:
            conv = self.converter(encoder, parse_error)
        return conv(item)

    def response(
        self,
        item: Any,
        kind: type,
        decode: bool,
        encoder: Any,
        parse_error: Callable[[str], Exception],
        disable_decoding: bool,
    ) -> Any:
        """``item`` (of type ``kind`` as it was taken from :attr:`replies`; a Blocked one already
        served) as redis-py's parser returns it; raises an error reply. Shared by the sync and
        asyncio connections' ``read_response``: raw bytes and integers, most replies of all,
        pass as they are."""
        if (kind is bytes and not decode) or kind is int:
            return item
        response = self.convert(item, encoder, parse_error, disable_decoding)
        if isinstance(response, Exception):
            raise response from None
        return response

    def converter(self, encoder: Any, parse_error: Callable[[str], Exception]) -> Any:
        """The converter for the client's current protocol (rebuilt when it changes)."""
        resp = self.client.resp
        self.conv = _Converter(resp, _decoder(encoder), parse_error).convert
        self.conv_resp = resp
        return self.conv

    def converter_for(
        self, resp: int, encoder: Any, parse_error: Callable[[str], Exception], raw: bool
    ) -> Any:
        """A one-off converter (another protocol, or no decoding)."""
        return _Converter(resp, None if raw else _decoder(encoder), parse_error).convert


def _decoder(encoder: Any) -> Callable[[bytes], Any] | None:
    if not encoder.decode_responses:
        return None
    encoding = encoder.encoding
    errors = encoder.encoding_errors

    def decode(b: bytes) -> str:
        return b.decode(encoding, errors)

    return decode


def _unpack_raw(command: Any) -> list[list[bytes]]:
    # Somebody packed RESP bytes themselves (send_packed_command with bytes): parse them.
    if isinstance(command, str):
        command = command.encode()
    if isinstance(command, bytes | bytearray | memoryview):
        command = [command]
    parser = RequestParser()
    cmds: list[list[bytes]] = []
    for chunk in command:
        cmds.extend(parser.feed(bytes(chunk)))
    return cmds


_CONN_KWARGS_IGNORED = (
    "host",
    "port",
    "socket_connect_timeout",
    "socket_keepalive",
    "socket_keepalive_options",
    "socket_type",
    "path",
    "ssl_context",
)


class _FakeSock:
    """Stands in for the socket redis-py expects to hold while connected."""

    __slots__ = ("_session",)

    def __init__(self, session: _EngineSession) -> None:
        self._session = session

    def shutdown(self, how: int) -> None:
        """No-op (there is no socket)."""

    def close(self) -> None:
        """Disconnect the engine client."""
        self._session.close()

    def settimeout(self, value: float | None) -> None:
        """No-op."""

    def fileno(self) -> int:
        return -1


class _OnEngine:
    """What the sync and the asyncio connection share: which engine they run on, and how they
    name themselves in reprs and errors (by the engine URL: there is no host)."""

    _engine: Engine
    _engine_url: str
    _session: _EngineSession | None

    def _bind(self, engine: Engine | None, engine_url: str, kwargs: dict[str, Any]) -> None:
        """Take the engine arguments, and drop the TCP-only ones, before redis-py's __init__."""
        for name in _CONN_KWARGS_IGNORED:
            kwargs.pop(name, None)
        self._engine = engine if engine is not None else engine_from_url(engine_url)
        self._engine_url = engine_url
        self._session = None

    def repr_pieces(self) -> list[tuple[str, Any]]:
        conn: Any = self
        pieces: list[tuple[str, Any]] = [("engine", self._engine_url), ("db", conn.db)]
        if conn.client_name:
            pieces.append(("client_name", conn.client_name))
        return pieces

    def _host_error(self) -> str:
        return self._engine_url


# --- sync ----------------------------------------------------------------------------------


class EngineConnection(_OnEngine, _SyncAbstractConnection):
    """A redis-py ``Connection`` executing on an :class:`Engine` (no socket, no RESP).

    Extra keyword arguments: ``engine`` (an Engine) or ``engine_url`` (``engine://memory...``).
    TCP-only arguments (host, port, keepalive...) are accepted and ignored. One connection is
    used by one thread at a time (as redis-py does); the engine itself is thread-safe.
    """

    def __init__(
        self, *, engine: Engine | None = None, engine_url: str = "engine://memory", **kwargs: Any
    ) -> None:
        self._bind(engine, engine_url, kwargs)
        self._host = "engine"
        self.port = 0
        super().__init__(**kwargs)
        self._decode = bool(self.encoder.decode_responses)

    @property
    def host(self) -> str:
        return self._host

    @host.setter
    def host(self, value: str) -> None:
        self._host = value

    def _construct_command_packer(self, packer: Any) -> Any:
        return packer if packer is not None else _Packer(self.encoder)

    def _connect(self) -> _FakeSock:
        self._session = _EngineSession(self._engine)
        return _FakeSock(self._session)

    def pack_commands(self, commands: Iterable[Sequence[Any]]) -> _Batch:
        packer = self._command_packer
        if isinstance(packer, _Packer):
            to_argv = packer._argv
            return _Batch([to_argv(cmd) for cmd in commands])
        base: Any = super()
        return base.pack_commands(commands)  # type: ignore[no-any-return]

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        conn: Any = self
        if not self._sock:
            conn.connect_check_health(check_health=False)
        if check_health and self.health_check_interval:
            conn.check_health()
        session = self._session
        if session is None or session.client.closed:
            # After QUIT the server has closed the connection: fail like a dead socket so
            # redis-py disconnects (and reconnects on retry).
            conn.disconnect()
            raise RedisConnectionError(f"Error while writing to {self._engine_url}: closed")
        cmds = command if type(command) is _Batch else _unpack_raw(command)
        session.run(cmds)

    def can_read(self, timeout: float | None = 0) -> bool:
        if not self._sock:
            conn: Any = self
            conn.connect()
        session = self._session
        if session is None:
            return False
        if session.replies:
            return True
        # A subscriber waits for a message as a socket read would (PubSub.get_message).
        return bool(timeout != 0 and session.wait_for_reply(timeout))

    def read_response(
        self,
        disable_decoding: bool = False,
        *,
        timeout: Any = _SENTINEL,
        disconnect_on_error: bool = True,
        push_request: bool = False,
    ) -> Any:
        session = self._session
        while True:
            if session is None or not session.replies:
                if session is not None and session.client.pubsub:
                    # A subscriber's read waits for the next message (None: for ever).
                    wait_s = self.socket_timeout if timeout is _SENTINEL else timeout
                    if session.wait_for_reply(wait_s):
                        continue
                    if timeout is _SENTINEL:
                        raise RedisTimeoutError(f"Timeout reading from {self._engine_url}")
                if timeout is not _SENTINEL:
                    return None
                raise RedisConnectionError(f"Error while reading from {self._engine_url}: no reply")
            item = session.replies.popleft()
            kind = type(item)
            if kind is Blocked:
                item = self._await_blocked(item, timeout, disconnect_on_error)
                session.after_blocked()
            parser: Any = self._parser
            response = session.response(
                item, kind, self._decode, self.encoder, parser.parse_error, disable_decoding
            )
            if kind is Push and session.client.resp >= 3:
                # A RESP3 push goes to the parser's push handlers, as off a socket: a read that
                # did not ask for one goes on to the next reply.
                response = parser.handle_push_response(response)
                if not push_request:
                    continue
            break
        if self.health_check_interval:
            conn: Any = self
            conn.next_health_check = time.monotonic() + self.health_check_interval
        return response

    def _await_blocked(self, blocked: Blocked, timeout: Any, disconnect_on_error: bool) -> Any:
        limit = self.socket_timeout if timeout is _SENTINEL else timeout
        conn: Any = self
        try:
            reply = self._engine.wait(blocked, limit)
        except BaseException:
            if disconnect_on_error:
                conn.disconnect()
            raise
        if reply is None:
            # The read timed out before the command did: as over a socket, give up the
            # connection (the engine forgets the waiter).
            if disconnect_on_error:
                conn.disconnect()
            raise RedisTimeoutError(f"Timeout reading from {self._engine_url}")
        return reply


# --- asyncio -------------------------------------------------------------------------------


class _FakeStream:
    """Stands in for the asyncio StreamReader/StreamWriter pair."""

    __slots__ = ("_buffer", "_session")

    def __init__(self, session: _EngineSession) -> None:
        self._session = session
        self._buffer = b""

    def close(self) -> None:
        self._session.close()

    async def wait_closed(self) -> None:
        return None

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


class AsyncEngineConnection(_OnEngine, _AsyncAbstractConnection):
    """A ``redis.asyncio`` connection executing on an :class:`Engine` (no socket, no RESP).

    Same keyword arguments as :class:`EngineConnection`. Blocked commands are awaited on a
    future the engine resolves through ``loop.call_soon_threadsafe``, so an XADD from another
    thread or another task of the same loop wakes them.
    """

    def __init__(
        self, *, engine: Engine | None = None, engine_url: str = "engine://memory", **kwargs: Any
    ) -> None:
        self._bind(engine, engine_url, kwargs)
        self.host = "engine"
        self.port = 0
        super().__init__(**kwargs)
        self._argv = _make_packer(self.encoder)
        self._decode = bool(self.encoder.decode_responses)

    async def _connect(self) -> None:
        session = _EngineSession(self._engine)
        self._session = session
        stream: Any = _FakeStream(session)
        self._reader = stream
        self._writer = stream

    def _close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None
        self._session = None

    async def disconnect(
        self,
        nowait: bool = False,
        error: Exception | None = None,
        failure_count: int | None = None,
        health_check_failed: bool = False,
    ) -> None:
        conn: Any = self
        conn._reset_himport_state()
        conn._parser.on_disconnect()
        conn.reset_should_reconnect()
        self._close()

    def pack_command(self, *args: Any) -> _Batch:
        return _Batch((self._argv(args),))

    def pack_commands(self, commands: Iterable[Iterable[Any]]) -> _Batch:
        to_argv: Any = self._argv
        return _Batch([to_argv(cmd) for cmd in commands])

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        conn: Any = self
        if not self.is_connected:
            await conn.connect_check_health(check_health=False)
        if check_health and self.health_check_interval:
            await conn.check_health()
        session = self._session
        if session is None or session.client.closed:
            await self.disconnect()
            raise RedisConnectionError(f"Error while writing to {self._engine_url}: closed")
        cmds = command if type(command) is _Batch else _unpack_raw(command)
        session.run(cmds)

    async def can_read_destructive(self) -> bool:
        session = self._session
        return bool(session is not None and session.replies)

    async def _wait_for_push(self, session: _EngineSession, timeout_s: float | None) -> bool:
        # A subscriber's read: wait for the next message (pushed from any thread) without
        # blocking the event loop; True once one is there, False at the timeout.
        if session.replies:
            return True
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()

        def wake() -> None:
            # Runs in the publisher's thread: a closed loop must not fail its PUBLISH.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_set_done, fut)

        session.wakers.append(wake)
        try:
            if session.replies:  # arrived between the check and the registration
                return True
            try:
                await asyncio.wait_for(fut, timeout_s)
            except TimeoutError:
                return bool(session.replies)
            return True
        finally:
            with contextlib.suppress(ValueError):
                session.wakers.remove(wake)

    async def can_read(self) -> bool:
        session = self._session
        return bool(session is not None and session.replies)

    async def read_response(
        self,
        disable_decoding: bool = False,
        timeout: float | None = None,  # noqa: ASYNC109 - redis-py's signature
        *,
        disconnect_on_error: bool = True,
        push_request: bool | None = False,
    ) -> Any:
        session = self._session
        while True:
            if session is None or not session.replies:
                # A subscriber's read waits for the next message, ``timeout`` at most.
                if (
                    session is not None
                    and session.client.pubsub
                    and await self._wait_for_push(session, timeout)
                ):
                    continue
                if timeout is not None:
                    return None
                raise RedisConnectionError(f"Error while reading from {self._engine_url}: no reply")
            item = session.replies.popleft()
            kind = type(item)
            if kind is Blocked:
                item = await self._await_blocked(session, item, timeout, disconnect_on_error)
                session.after_blocked()
            parser: Any = self._parser
            response = session.response(
                item, kind, self._decode, self.encoder, parser.parse_error, disable_decoding
            )
            if kind is Push and session.client.resp >= 3:
                # A RESP3 push goes to the parser's push handlers, as off a socket.
                response = await parser.handle_push_response(response)
                if not push_request:
                    continue
            break
        if self.health_check_interval:
            self.next_health_check = asyncio.get_running_loop().time() + self.health_check_interval
        return response

    async def _await_blocked(
        self,
        session: _EngineSession,
        blocked: Blocked,
        read_timeout_s: float | None,
        disconnect_on_error: bool,
    ) -> Any:
        engine = self._engine
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()

        def wake(_: Blocked) -> None:
            loop.call_soon_threadsafe(_set_done, fut)

        with engine.lock:
            blocked.add_done_callback(wake)
        read_limit = read_timeout_s if read_timeout_s is not None else self.socket_timeout
        try:
            while not fut.done():
                remaining = blocked.remaining_s()
                wait_s = remaining
                if read_limit is not None and (wait_s is None or read_limit < wait_s):
                    wait_s = read_limit
                try:
                    await asyncio.wait_for(asyncio.shield(fut), wait_s)
                except TimeoutError:
                    if blocked.resolved:
                        break
                    if remaining is not None and (read_limit is None or remaining <= read_limit):
                        engine.timeout_blocked(blocked)
                        break
                    if disconnect_on_error:
                        await self.disconnect(nowait=True)
                    raise RedisTimeoutError(f"Timeout reading from {self._engine_url}") from None
        except BaseException:
            if not blocked.resolved and disconnect_on_error:
                await self.disconnect(nowait=True)
            raise
        return blocked.reply


def _set_done(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


# --- clients -------------------------------------------------------------------------------


def sync_pool(url: str = "engine://memory", **kwargs: Any) -> redis.ConnectionPool:
    """A redis-py ConnectionPool of :class:`EngineConnection` on ``engine_from_url(url)``."""
    engine = engine_from_url(url)
    if MaintNotificationsConfig is not None:
        # No maintenance-notification handshake: there is no server to move.
        kwargs.setdefault("maint_notifications_config", MaintNotificationsConfig(enabled=False))
    return redis.ConnectionPool(
        connection_class=EngineConnection, engine=engine, engine_url=url, **kwargs
    )


def async_pool(url: str = "engine://memory", **kwargs: Any) -> redis.asyncio.ConnectionPool:
    """A redis.asyncio ConnectionPool of :class:`AsyncEngineConnection`."""
    engine = engine_from_url(url)
    return redis.asyncio.ConnectionPool(
        connection_class=AsyncEngineConnection, engine=engine, engine_url=url, **kwargs
    )


def _default_backoff() -> ExponentialWithJitterBackoff:
    return ExponentialWithJitterBackoff(base=DEFAULT_RETRY_BASE, cap=DEFAULT_RETRY_CAP)


def sync_client(url: str = "engine://memory", **kwargs: Any) -> redis.Redis:
    """A ``redis.Redis`` on the in-process engine for ``url``.

    Keyword arguments are redis-py's (``decode_responses``, ``protocol``, ``db``,
    ``socket_timeout``, ``client_name``, ``single_connection_client``...). Closing the client
    closes its pool.
    """
    single = kwargs.pop("single_connection_client", False)
    # redis.Redis's own default retry policy (a pool built by hand would have none).
    kwargs.setdefault("retry", redis.retry.Retry(_default_backoff(), DEFAULT_RETRY_COUNT))
    client = redis.Redis(connection_pool=sync_pool(url, **kwargs), single_connection_client=single)
    client.auto_close_connection_pool = True
    return client


def async_client(url: str = "engine://memory", **kwargs: Any) -> redis.asyncio.Redis:
    """A ``redis.asyncio.Redis`` on the in-process engine for ``url`` (see
    :func:`sync_client`)."""
    single = kwargs.pop("single_connection_client", False)
    kwargs.setdefault("retry", redis.asyncio.retry.Retry(_default_backoff(), DEFAULT_RETRY_COUNT))
    client = redis.asyncio.Redis(
        connection_pool=async_pool(url, **kwargs), single_connection_client=single
    )
    client.auto_close_connection_pool = True
    return client
