"""A fault-injecting TCP proxy for the Redis (RESP) and PostgreSQL wire protocols (test helper).

It sits between a worker and a server and knows where each request and each reply ends:

* **RESP**: every client frame is one command (arrays of bulk strings, or inline commands);
  every server frame is the reply to the oldest command still waiting (RESP answers in order,
  pipelined or not; a blocking XREADGROUP simply answers late). RESP2 and RESP3 frames parse;
  RESP3 push frames are not matched to commands (streamworker does not subscribe).
* **PostgreSQL**: the startup packet (and an SSLRequest/GSSENCRequest before it, answered by one
  raw byte) has no type byte; every later message is ``type, int32 length, body``. A *request*
  is the client's messages up to a Sync (extended protocol) or a Query (simple protocol); its
  *reply* is the server's messages up to the ReadyForQuery that answers it. Authentication,
  before the first ReadyForQuery, passes untouched. A reply holding CommandComplete ``COMMIT``
  is a *COMMIT reply*.

Faults, each logged (:attr:`FaultProxy.events`):

* ``request_loss``: the request is not forwarded, the connection is closed (the command never ran);
* ``reply_loss``: the request ran, its reply is dropped and the connection closed;
* ``hold``: the reply (and everything behind it on that connection) is delayed;
* ``commit_loss``: a COMMIT reply is dropped and the connection closed (the commit happened,
  the client cannot know);
* ``stall``: a long hold on an open connection (a silent peer: no RST, no reply).

Which request gets a fault is a pure function of the seed and the request's ordinal on this
proxy (:class:`FaultSchedule`), so a failing seed replays the same schedule (which command lands
on ordinal *n* still depends on timing). :class:`Rule` s target one kind of request instead (the
tests that reproduce one fault). The proxy runs its own event loop in a thread
(:meth:`FaultProxy.start`), so the worker's loop cannot delay it and vice versa.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import struct
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Literal

Protocol = Literal["redis", "postgres"]
FaultKind = Literal["request_loss", "reply_loss", "hold", "commit_loss", "stall"]


# --------------------------------------------------------------------------------------------
# RESP framing


def resp_frame_end(buf: bytes | bytearray, pos: int = 0) -> int | None:
    """Where the RESP frame starting at ``pos`` ends (exclusive), or None while it is incomplete.

    Raises ValueError for bytes that are not RESP. A client's inline command (no type byte) ends
    at its line's CRLF."""
    if pos >= len(buf):
        return None
    nl = buf.find(b"\r\n", pos)
    if nl < 0:
        return None
    kind = buf[pos : pos + 1]
    after = nl + 2
    if kind in (b"+", b"-", b":", b"_", b",", b"#", b"("):
        return after
    if kind in (b"$", b"!", b"="):
        n = _length(buf, pos, nl)
        if n < 0:
            return after
        end = after + n + 2
        return end if len(buf) >= end else None
    if kind in (b"*", b"~", b">", b"%", b"|"):
        n = _length(buf, pos, nl)
        if n < 0:
            return after
        if kind in (b"%", b"|"):
            n *= 2
        p: int | None = after
        for _ in range(n):
            assert p is not None
            p = resp_frame_end(buf, p)
            if p is None:
                return None
        if kind == b"|":  # an attribute map precedes the reply it annotates
            assert p is not None
            return resp_frame_end(buf, p)
        return p
    return after  # inline command


def _length(buf: bytes | bytearray, pos: int, nl: int) -> int:
    text = bytes(buf[pos + 1 : nl])
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"not RESP: bad length {text!r} at offset {pos}") from None


def parse_command(frame: bytes) -> list[bytes]:
    """The arguments of one complete client frame (an array of bulk strings, or inline)."""
    if not frame.startswith(b"*"):
        return frame.strip().split()
    nl = frame.index(b"\r\n")
    count = int(frame[1:nl])
    args: list[bytes] = []
    p = nl + 2
    for _ in range(max(count, 0)):
        if frame[p : p + 1] != b"$":
            raise ValueError(f"not a command: element at {p} is not a bulk string")
        nl = frame.index(b"\r\n", p)
        n = int(frame[p + 1 : nl])
        args.append(frame[nl + 2 : nl + 2 + n])
        p = nl + 2 + n + 2
    return args


def is_empty_reply(frame: bytes) -> bool:
    """A null or empty reply (a read that found nothing)."""
    return frame in (b"*-1\r\n", b"$-1\r\n", b"_\r\n", b"*0\r\n")


# --------------------------------------------------------------------------------------------
# PostgreSQL framing

SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104
CANCEL_REQUEST = 80877102


@dataclass(frozen=True, slots=True)
class PgMessage:
    """One PostgreSQL message: ``kind`` is its type byte (``b""`` for the untyped startup-phase
    packets), ``raw`` the message as it went over the wire."""

    kind: bytes
    raw: bytes

    @property
    def body(self) -> bytes:
        return self.raw[5:] if self.kind else self.raw[4:]


class PgSplitter:
    """Splits one direction of a PostgreSQL connection into messages, incrementally.

    ``frontend=True`` for the client's side: it starts with untyped packets (SSLRequest,
    GSSENCRequest, then the startup packet). The backend side answers an SSLRequest or
    GSSENCRequest with one raw byte: :meth:`expect_raw_byte` tells it so.
    """

    def __init__(self, *, frontend: bool) -> None:
        self._buf = bytearray()
        self._untyped = frontend
        self._raw_bytes = 0

    def expect_raw_byte(self) -> None:
        self._raw_bytes += 1

    def feed(self, data: bytes) -> list[PgMessage]:
        self._buf += data
        out: list[PgMessage] = []
        buf = self._buf
        p = 0
        while True:
            if self._raw_bytes and p < len(buf):
                self._raw_bytes -= 1
                out.append(PgMessage(b"", bytes(buf[p : p + 1])))
                p += 1
                continue
            if self._untyped:
                if len(buf) - p < 8:
                    break
                (n,) = struct.unpack_from("!i", buf, p)
                if n < 8:
                    raise ValueError(f"not PostgreSQL: startup packet length {n}")
                if len(buf) - p < n:
                    break
                (code,) = struct.unpack_from("!i", buf, p + 4)
                out.append(PgMessage(b"", bytes(buf[p : p + n])))
                p += n
                # After an SSL/GSS request comes another untyped packet; else typed messages.
                self._untyped = code in (SSL_REQUEST, GSSENC_REQUEST)
                continue
            if len(buf) - p < 5:
                break
            (n,) = struct.unpack_from("!i", buf, p + 1)
            if n < 4:
                raise ValueError(f"not PostgreSQL: message length {n}")
            if len(buf) - p < n + 1:
                break
            out.append(PgMessage(bytes(buf[p : p + 1]), bytes(buf[p : p + 1 + n])))
            p += n + 1
        del buf[:p]
        return out


def startup_code(msg: PgMessage) -> int | None:
    """The request code of an untyped startup-phase packet (None for other messages)."""
    if msg.kind or len(msg.raw) < 8:
        return None
    code: int = struct.unpack_from("!i", msg.raw, 4)[0]
    return code


def command_tag(msg: PgMessage) -> bytes | None:
    """The tag of a CommandComplete message (``b"COMMIT"``, ``b"INSERT 0 1"``), else None."""
    if msg.kind != b"C":
        return None
    return msg.body.rstrip(b"\x00")


def is_commit_reply(messages: list[PgMessage]) -> bool:
    """True when a reply holds the CommandComplete of a COMMIT."""
    return any(command_tag(m) == b"COMMIT" for m in messages)


def is_commit_reply_bytes(raw: bytes) -> bool:
    """:func:`is_commit_reply` for one complete reply as it went over the wire."""
    return is_commit_reply(PgSplitter(frontend=False).feed(raw))


# --------------------------------------------------------------------------------------------
# Faults


@dataclass(frozen=True, slots=True)
class Fault:
    """One fault: ``seconds`` for ``hold`` and ``stall``."""

    kind: FaultKind
    seconds: float = 0.0

    def __str__(self) -> str:
        return f"{self.kind}({self.seconds:.2f}s)" if self.seconds else self.kind


@dataclass(frozen=True, slots=True)
class FaultRates:
    """Chances per request (and per COMMIT reply for ``commit_loss``)."""

    request_loss: float = 0.0
    reply_loss: float = 0.0
    hold: float = 0.0
    hold_s: tuple[float, float] = (0.3, 3.0)
    commit_loss: float = 0.0
    stall: float = 0.0
    stall_s: float = 120.0

    def total(self) -> float:
        return self.request_loss + self.reply_loss + self.hold + self.stall


class FaultSchedule:
    """Which request gets which fault: a pure function of (seed, protocol, ordinal).

    Each decision draws from its own ``random.Random`` seeded with the seed, the protocol, the
    kind of decision and the ordinal (string seeds hash deterministically), so a decision does
    not depend on how many were taken before it, nor on which connection asked.
    """

    def __init__(self, seed: int, rates: FaultRates, *, protocol: Protocol) -> None:
        if rates.total() > 1:
            raise ValueError("fault rates add up to more than 1")
        self.seed = seed
        self.rates = rates
        self.protocol = protocol

    def request_fault(self, ordinal: int) -> Fault | None:
        """The fault for the ``ordinal``-th request (0-based), or None."""
        r = self.rates
        rng = random.Random(f"{self.seed}/{self.protocol}/request/{ordinal}")
        x = rng.random()
        for kind, rate in (
            ("request_loss", r.request_loss),
            ("reply_loss", r.reply_loss),
            ("hold", r.hold),
            ("stall", r.stall),
        ):
            if x < rate:
                if kind == "hold":
                    return Fault("hold", round(rng.uniform(*r.hold_s), 3))
                if kind == "stall":
                    return Fault("stall", r.stall_s)
                return Fault(kind)  # type: ignore[arg-type]
            x -= rate
        return None

    def commit_fault(self, ordinal: int) -> Fault | None:
        """The fault for the ``ordinal``-th COMMIT reply, or None."""
        rng = random.Random(f"{self.seed}/{self.protocol}/commit/{ordinal}")
        return Fault("commit_loss") if rng.random() < self.rates.commit_loss else None

    def plan(self, requests: int) -> list[tuple[int, Fault]]:
        """The faults of the first ``requests`` requests (to print, and to compare two runs)."""
        out = []
        for i in range(requests):
            fault = self.request_fault(i)
            if fault is not None:
                out.append((i, fault))
        return out


@dataclass
class Rule:
    """A targeted fault: applied to the replies of requests ``match`` accepts (and, when given,
    whose reply ``reply_match`` accepts), at most ``times`` times. ``match`` gets the command's
    arguments (RESP) or the request's messages as sent (PostgreSQL: each starts with its type
    byte, e.g. Parse, Bind, Describe, Execute, Sync)."""

    fault: Fault
    match: Callable[[list[bytes]], bool]
    reply_match: Callable[[bytes], bool] | None = None
    times: int = 1
    skip: int = 0
    """Let this many matching replies pass first."""
    used: int = 0
    seen: int = 0


@dataclass(frozen=True, slots=True)
class FaultEvent:
    """One fault as performed."""

    at: float  # monotonic
    conn: int
    ordinal: int
    request: str
    fault: Fault

    def __str__(self) -> str:
        return f"conn {self.conn} #{self.ordinal} {self.request}: {self.fault}"


@dataclass
class _Pending:
    ordinal: int
    args: list[bytes]
    fault: Fault | None


@dataclass(eq=False)
class _Conn:
    ident: int
    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter
    pending: deque[_Pending] = field(default_factory=deque)
    closed: bool = False
    ready: bool = False  # PostgreSQL: start-up done (first ReadyForQuery seen)


class FaultProxy:
    """A proxy to ``upstream_port`` on 127.0.0.1, listening on :attr:`port` once started.

    Thread-safe to configure from the test's thread (:meth:`add_rule`, :meth:`set_schedule`,
    :meth:`pause_faults`). Use as a context manager, or :meth:`start` / :meth:`close`.
    """

    def __init__(
        self,
        upstream_port: int,
        *,
        protocol: Protocol,
        schedule: FaultSchedule | None = None,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.upstream_port = upstream_port
        self.protocol = protocol
        self.schedule = schedule
        self.rules: list[Rule] = []
        self.events: list[FaultEvent] = []
        self.requests = 0
        self.commits = 0
        self.port = 0
        self._log = log
        self._lock = threading.Lock()
        self._faults_on = True
        self._ordinals = itertools.count()
        self._commit_ordinals = itertools.count()
        self._conn_ids = itertools.count(1)
        self._conns: set[_Conn] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None

    # -- control, from any thread

    def add_rule(self, rule: Rule) -> Rule:
        with self._lock:
            self.rules.append(rule)
        return rule

    def set_schedule(self, schedule: FaultSchedule | None) -> None:
        with self._lock:
            self.schedule = schedule

    def pause_faults(self, paused: bool = True) -> None:
        """Stop (or resume) injecting faults; requests keep being counted."""
        with self._lock:
            self._faults_on = not paused

    def counts(self) -> Counter[str]:
        """How many faults of each kind were injected so far."""
        with self._lock:
            return Counter(e.fault.kind for e in self.events)

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:PORT/0`` for a Redis proxy (PostgreSQL: build your own URL)."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> FaultProxy:
        ready = threading.Event()

        def _run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            self._server = loop.run_until_complete(
                asyncio.start_server(self._handle, "127.0.0.1", 0)
            )
            self.port = self._server.sockets[0].getsockname()[1]
            ready.set()
            loop.run_forever()
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

        self._thread = threading.Thread(target=_run, name="fault-proxy", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the fault proxy did not start")
        return self

    def close(self) -> None:
        loop = self._loop
        if loop is None:
            return

        async def _stop() -> None:
            assert self._server is not None
            self._server.close()
            for conn in list(self._conns):
                self._abort(conn)
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(_stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)
        self._loop = None

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the proxy

    def _record(self, conn: _Conn, ordinal: int, args: list[bytes], fault: Fault) -> None:
        if self.protocol == "postgres":
            shown = "".join(chr(a[0]) for a in args if a)  # the request's message types
        else:
            shown = b" ".join(a[:24] for a in args[:3]).decode("utf-8", "replace")
        event = FaultEvent(time.monotonic(), conn.ident, ordinal, shown, fault)
        with self._lock:
            self.events.append(event)
        if self._log is not None:
            self._log(f"proxy[{self.protocol}] {event}")

    def _abort(self, conn: _Conn) -> None:
        conn.closed = True
        for writer in (conn.client, conn.upstream):
            with contextlib.suppress(Exception):
                writer.transport.abort()
        self._conns.discard(conn)

    def _request_fault(self) -> tuple[int, Fault | None]:
        with self._lock:
            ordinal = next(self._ordinals)
            self.requests += 1
            schedule = self.schedule if self._faults_on else None
        return ordinal, schedule.request_fault(ordinal) if schedule is not None else None

    def _reply_fault(self, pending: _Pending | None, reply: bytes, commit: bool) -> Fault | None:
        if pending is not None and pending.fault is not None:
            return pending.fault
        with self._lock:
            if not self._faults_on:
                return None
            for rule in self.rules:
                if rule.used >= rule.times or pending is None or not rule.match(pending.args):
                    continue
                if rule.reply_match is not None and not rule.reply_match(reply):
                    continue
                rule.seen += 1
                if rule.seen <= rule.skip:
                    continue
                rule.used += 1
                return rule.fault
            schedule = self.schedule
        if commit:
            with self._lock:
                ordinal = next(self._commit_ordinals)
                self.commits += 1
            if schedule is not None:
                return schedule.commit_fault(ordinal)
        return None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.CancelledError):  # the proxy closing
            await self._serve(reader, writer)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            writer.transport.abort()
            return
        conn = _Conn(next(self._conn_ids), writer, up_writer)
        self._conns.add(conn)
        pumps = (
            (self._redis_requests(conn, reader), self._redis_replies(conn, up_reader))
            if self.protocol == "redis"
            else self._pg_pumps(conn, reader, up_reader)
        )
        tasks = [asyncio.ensure_future(p) for p in pumps]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._abort(conn)

    async def _redis_requests(self, conn: _Conn, reader: asyncio.StreamReader) -> None:
        buf = bytearray()
        while not conn.closed:
            data = await reader.read(65536)
            if not data:
                return
            buf += data
            out = bytearray()
            while True:
                end = resp_frame_end(buf)
                if end is None:
                    break
                frame = bytes(buf[:end])
                del buf[:end]
                args = parse_command(frame)
                ordinal, fault = self._request_fault()
                if fault is not None and fault.kind == "request_loss":
                    conn.upstream.write(bytes(out))  # what came before it was sent
                    self._record(conn, ordinal, args, fault)
                    self._abort(conn)
                    return
                conn.pending.append(_Pending(ordinal, args, fault))
                out += frame
            if out:
                conn.upstream.write(bytes(out))
                await conn.upstream.drain()

    async def _redis_replies(self, conn: _Conn, reader: asyncio.StreamReader) -> None:
        buf = bytearray()
        while not conn.closed:
            data = await reader.read(65536)
            if not data:
                return
            buf += data
            while True:
                end = resp_frame_end(buf)
                if end is None:
                    break
                frame = bytes(buf[:end])
                del buf[:end]
                push = frame.startswith(b">")
                pending = None if push or not conn.pending else conn.pending.popleft()
                fault = self._reply_fault(pending, frame, commit=False)
                if not await self._deliver(conn, pending, fault, frame):
                    return

    async def _deliver(
        self, conn: _Conn, pending: _Pending | None, fault: Fault | None, data: bytes
    ) -> bool:
        """Write one reply after its fault; False when the connection is gone."""
        if fault is not None:
            args = pending.args if pending is not None else []
            self._record(conn, pending.ordinal if pending else -1, args, fault)
            if fault.kind in ("reply_loss", "commit_loss", "request_loss"):
                self._abort(conn)
                return False
            await asyncio.sleep(fault.seconds)
            if conn.closed:
                return False
        conn.client.write(data)
        await conn.client.drain()
        return True

    def _pg_pumps(
        self, conn: _Conn, reader: asyncio.StreamReader, up_reader: asyncio.StreamReader
    ) -> tuple[Coroutine[None, None, None], Coroutine[None, None, None]]:
        backend = PgSplitter(frontend=False)
        return (
            self._pg_requests(conn, reader, backend),
            self._pg_replies(conn, up_reader, backend),
        )

    async def _pg_requests(
        self, conn: _Conn, reader: asyncio.StreamReader, backend: PgSplitter
    ) -> None:
        frontend = PgSplitter(frontend=True)
        unit: list[bytes] = []
        unit_raw = bytearray()
        while not conn.closed:
            data = await reader.read(65536)
            if not data:
                return
            out = bytearray()
            for msg in frontend.feed(data):
                code = startup_code(msg)
                if code in (SSL_REQUEST, GSSENC_REQUEST):
                    backend.expect_raw_byte()
                if not msg.kind or not conn.ready:
                    out += msg.raw  # start-up and authentication pass untouched
                    continue
                unit.append(msg.raw)
                unit_raw += msg.raw
                if msg.kind in (b"H", b"X"):
                    # Flush asks for replies without a Sync, Terminate expects none: forward
                    # them now, as part of no request.
                    out += unit_raw
                    unit, unit_raw = [], bytearray()
                    continue
                if msg.kind not in (b"S", b"Q"):
                    continue
                ordinal, fault = self._request_fault()
                kinds, raw = unit, bytes(unit_raw)
                unit, unit_raw = [], bytearray()
                if fault is not None and fault.kind == "request_loss":
                    conn.upstream.write(bytes(out))
                    self._record(conn, ordinal, kinds, fault)
                    self._abort(conn)
                    return
                conn.pending.append(_Pending(ordinal, kinds, fault))
                out += raw
            if out:
                conn.upstream.write(bytes(out))
                await conn.upstream.drain()

    async def _pg_replies(
        self, conn: _Conn, reader: asyncio.StreamReader, backend: PgSplitter
    ) -> None:
        reply: list[PgMessage] = []
        while not conn.closed:
            data = await reader.read(65536)
            if not data:
                return
            for msg in backend.feed(data):
                reply.append(msg)
                if msg.kind != b"Z":
                    continue
                raw = b"".join(m.raw for m in reply)
                if not conn.ready:
                    conn.ready = True  # authentication done: later replies answer requests
                    conn.client.write(raw)
                    reply = []
                    continue
                pending = conn.pending.popleft() if conn.pending else None
                fault = self._reply_fault(pending, raw, commit=is_commit_reply(reply))
                reply = []
                if not await self._deliver(conn, pending, fault, raw):
                    return
            if reply and not conn.ready:
                # Authentication exchanges (no ReadyForQuery yet) go through as they come.
                conn.client.write(b"".join(m.raw for m in reply))
                reply = []
            await conn.client.drain()
