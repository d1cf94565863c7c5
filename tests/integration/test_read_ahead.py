"""``read_ahead=True``: a full batch's successor is read while the batch is handled, so Redis
prepares the next batch while the handlers run. The price is a second batch pending; these tests
pin that it is only that: nothing is lost at a crash or a stop, an in-flight bound still holds,
and an early batch that waited too long is checked before its handlers run. On a real
redis-server (and ``streamworker run`` processes where a user would see it)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis

from streamworker import App, ConfigError, Effects, Message
from streamworker.core.deps import Resolver
from streamworker.idempotency.base import Strategy
from streamworker.idempotency.lua import LuaStrategy
from streamworker.idempotency.none import AtLeastOnce
from streamworker.observability.metrics import Metrics
from streamworker.runtime.backoff import Backoff
from streamworker.runtime.consumer import Consumer
from streamworker.runtime.release import XCLAIM
from streamworker.runtime.threads import HandlerThreads
from tests.support.engine_server import EngineServerProcess
from tests.support.faultproxy import Fault, FaultProxy, Rule, is_empty_reply
from tests.support.proc import read_lines, stop_process, streamworker, wait_for
from tests.support.servers import RedisServer
from tests.support.worker import eventually

STREAM, GROUP, NAME = "early", "g", "c1"
BATCH = 5


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    c = aioredis.Redis.from_url(redis_url)
    yield c
    await c.aclose()


def _publish(sync: redis.Redis, n: int) -> list[str]:
    sync.xgroup_create(STREAM, GROUP, id="0", mkstream=True)
    return [sync.xadd(STREAM, {"n": str(i)}).decode() for i in range(n)]


def _pending(sync: redis.Redis, consumer: str | None = None) -> list[str]:
    rows = sync.xpending_range(STREAM, GROUP, "-", "+", 1000, consumername=consumer)
    return [r["message_id"].decode() for r in rows]


def _consumer(
    client: aioredis.Redis,
    handle: Any,
    *,
    idempotency: str = "none",
    **options: Any,
) -> Consumer:
    app = App("t")
    app.handler(
        STREAM,
        group=GROUP,
        block_ms=50,
        batch_size=BATCH,
        idempotency=idempotency,
        read_ahead=True,
        **options,
    )(handle)
    spec = app.handlers[0]
    strategy: Strategy = (
        LuaStrategy(client, stream=STREAM, group=GROUP, consumer=NAME)
        if idempotency == "lua"
        else AtLeastOnce(client, STREAM, GROUP, 1)
    )
    return Consumer(
        spec,
        client=client,
        name=NAME,
        strategy=strategy,
        resolver=Resolver(),
        metrics=Metrics(),
        threads=HandlerThreads(1),
        backoff=Backoff(0.05, 0.5),
    )


class _Gate:
    """A handler that records what it handles; the first call waits until :meth:`open`."""

    def __init__(self, sync: redis.Redis | None = None) -> None:
        self.handled: list[str] = []
        self.started = asyncio.Event()
        self._open = asyncio.Event()
        self._sync = sync
        self.pending_seen: list[int] = []

    def open(self) -> None:
        self._open.set()

    async def handle(self, msg: Message) -> None:
        if self._sync is not None:
            self.pending_seen.append(len(_pending(self._sync)))
        self.handled.append(msg.id)
        self.started.set()
        await self._open.wait()


@contextlib.asynccontextmanager
async def _running(
    consumer: Consumer, gate: _Gate | None = None
) -> AsyncIterator[asyncio.Task[None]]:
    """``consumer`` runs inside the block; after it (a failure included) the gate opens and the
    consumer stops and returns."""
    task = asyncio.ensure_future(consumer.run())
    try:
        yield task
    finally:
        if gate is not None:
            gate.open()
        consumer.stop()
        await asyncio.wait_for(task, 10)


async def test_a_full_batch_has_its_successor_read_while_it_is_handled(
    client: aioredis.Redis, redis_client: redis.Redis
) -> None:
    ids = _publish(redis_client, 12)
    gate = _Gate()
    async with _running(_consumer(client, gate.handle), gate):
        await eventually(lambda: gate.started.is_set())
        # The first batch's first handler has not returned, and the second batch is read.
        await eventually(lambda: _pending(redis_client) == ids[:10])
        assert gate.handled == ids[:1]
        gate.open()
        await eventually(lambda: gate.handled == ids and not _pending(redis_client))
    # Each handled once, in stream order.
    assert gate.handled == ids


async def test_an_in_flight_bound_holds_with_read_ahead(
    client: aioredis.Redis, redis_client: redis.Redis
) -> None:
    """The early read waits for room: with ``max_in_flight=batch_size`` no handler ever sees more
    than one batch pending."""
    ids = _publish(redis_client, 17)
    gate = _Gate(redis_client)
    gate.open()
    async with _running(_consumer(client, gate.handle, max_in_flight=BATCH)):
        await eventually(lambda: gate.handled == ids and not _pending(redis_client))
    assert max(gate.pending_seen) <= BATCH


async def test_a_stop_hands_the_early_batch_back_with_the_unstarted_rest(
    client: aioredis.Redis, redis_client: redis.Redis
) -> None:
    ids = _publish(redis_client, 10)
    gate = _Gate()
    consumer = _consumer(client, gate.handle)
    async with _running(consumer, gate) as task:
        await eventually(lambda: _pending(redis_client) == ids)
        consumer.stop()
        gate.open()
        await asyncio.wait_for(task, 10)
    assert gate.handled == ids[:1]
    # The first batch's four unstarted messages and the five read early.
    assert await consumer.release_unstarted(XCLAIM) == 9
    assert _pending(redis_client) == ids[1:]
    # Released as never delivered: the read that took them does not count (the XCLAIM path
    # sets the counter back).
    rows = redis_client.xpending_range(STREAM, GROUP, "-", "+", 100)
    assert {int(r["times_delivered"]) for r in rows} == {0}


async def test_an_early_batch_claimed_away_while_it_waited_is_dropped_unhandled(
    client: aioredis.Redis, redis_client: redis.Redis
) -> None:
    """The batch in hand outlasts ``claim_idle_ms``; meanwhile another consumer claims the
    entries read early (idle past ``claim_idle_ms``, as its reclaimer would). The early batch's
    lease started when its read was sent, so the loop checks it before its handlers run: the
    claimed entries are left to their new owner, their handler never runs here, and nothing of
    them is acked here (``idempotency="lua"``)."""
    claim_idle_ms = 300
    ids = _publish(redis_client, 10)
    gate = _Gate()
    consumer = _consumer(client, gate.handle, idempotency="lua", claim_idle_ms=claim_idle_ms)
    async with _running(consumer, gate):
        await eventually(lambda: _pending(redis_client) == ids)
        claimed: list[str] = []

        def claim_early() -> bool:
            got = redis_client.xclaim(STREAM, GROUP, "c2", claim_idle_ms, ids[5:], justid=True)
            claimed.extend(i.decode() for i in got)
            return set(claimed) == set(ids[5:])

        await eventually(claim_early)
        gate.open()
        await eventually(lambda: _pending(redis_client, NAME) == [])
    assert gate.handled == ids[:5]
    assert _pending(redis_client) == ids[5:]
    assert _pending(redis_client, "c2") == ids[5:]


@pytest.mark.parametrize("fault", ["reply_loss", "hold"])
@pytest.mark.parametrize("idempotency", ["none", "lua"])
async def test_an_early_read_whose_reply_is_lost_is_handled_after_the_reconnect(
    redis_url: str,
    redis_server: RedisServer,
    redis_client: redis.Redis,
    idempotency: str,
    fault: str,
) -> None:
    """Through a fault proxy: the early read runs in Redis (its entries now pending for this
    consumer) but its reply is lost and the connection closed, or held past the socket timeout
    (0.5 s; held 2 s). The loop reconnects and its backlog read returns those entries: every
    message handled once, every effect applied once, nothing left pending."""
    ids = _publish(redis_client, 12)
    handled: list[str] = []
    counts: dict[str, int] = {}

    async def plain(msg: Message) -> None:
        handled.append(msg.id)
        counts[msg.id] = msg.delivery_count

    async def counting(msg: Message) -> Effects:
        await plain(msg)
        return Effects().hincrby("applied", msg.id, 1)

    with FaultProxy(redis_server.port, protocol="redis") as proxy:
        lost = proxy.add_rule(
            Rule(
                Fault("reply_loss") if fault == "reply_loss" else Fault("hold", 2.0),
                lambda args: args[0].upper() == b"XREADGROUP" and args[-1] == b">",
                lambda reply: not is_empty_reply(reply),
                skip=1,  # the first '>' read brings batch 1; the second is the early one
            )
        )
        client = aioredis.Redis.from_url(proxy.url, socket_timeout=0.5)
        handle = counting if idempotency == "lua" else plain
        try:
            async with _running(_consumer(client, handle, idempotency=idempotency)):
                await eventually(lambda: set(handled) == set(ids) and not _pending(redis_client))
        finally:
            await client.aclose()
        assert lost.used == 1
    # Each once; the early batch's entries came back through the backlog read after the
    # reconnect (their second delivery), not through the reply that was lost or came too late.
    assert sorted(handled) == sorted(ids)
    assert {counts[i] for i in ids[5:10]} == {2}
    assert {counts[i] for i in ids[:5] + ids[10:]} == {1}
    if idempotency == "lua":
        applied = redis_client.hgetall("applied")
        assert {k.decode(): int(v) for k, v in applied.items()} == dict.fromkeys(ids, 1)


# -------------------------------------------------------------------------------------------
# Options


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"ordered": True}, "read_ahead does not combine with ordered=True"),
        ({"rate_limit": "10/s"}, "read_ahead does not combine with rate_limit"),
    ],
)
def test_read_ahead_refuses_what_it_cannot_serve(options: dict[str, Any], message: str) -> None:
    app = App("t")
    with pytest.raises(ConfigError, match=message):
        app.handler("s", group="g", read_ahead=True, **options)


def test_read_ahead_is_true_or_false() -> None:
    with pytest.raises(ConfigError, match="read_ahead must be True or False"):
        App("t").handler("s", group="g", read_ahead="yes")  # type: ignore[arg-type]


def test_read_ahead_is_off_by_default() -> None:
    app = App("t")

    @app.handler("s", group="g")
    async def handle(msg: Message) -> None:
        return None

    assert app.handlers[0].read_ahead is False


# -------------------------------------------------------------------------------------------
# streamworker run

APP = "tests/apps/recorder.py:app"


def _worker(url: str, log: Path, **env: str) -> subprocess.Popen[bytes]:
    return streamworker(
        "run",
        APP,
        "--redis-url",
        url,
        "--consumer",
        "a",
        env={
            "SW_TEST_STREAM": STREAM,
            "SW_TEST_GROUP": GROUP,
            "SW_TEST_LOG": str(log),
            "SW_TEST_BATCH": str(BATCH),
            "SW_TEST_READ_AHEAD": "1",
            **env,
        },
    )


@pytest.fixture(params=["redis-server-7.0", "engine-8.10"])
def server(request: pytest.FixtureRequest) -> Iterator[tuple[str, bool]]:
    """(url, whether the worker's '>' reads also claim idle entries there): redis-server 7.0,
    and the engine in Redis 8.10 mode (``XREADGROUP … CLAIM``: the early read is one of those)."""
    if request.param == "redis-server-7.0":
        yield request.getfixturevalue("redis_url"), False
        return
    engine = EngineServerProcess(extra=("--redis-version", "8.10")).start()
    try:
        yield engine.url, True
    finally:
        engine.stop()


def test_a_kill_with_a_batch_read_early_loses_nothing(
    server: tuple[str, bool], tmp_path: Path
) -> None:
    """SIGKILL while the first batch is handled and the second is read: both are pending, and
    the restarted worker's backlog read handles them; every message is handled, none lost."""
    redis_url, claims = server
    client = redis.Redis.from_url(redis_url)
    ids = _publish(client, 23)
    log = tmp_path / "handled.log"
    hold = tmp_path / "hold"
    proc = _worker(redis_url, log, SW_TEST_HOLD=str(hold))
    try:
        wait_for(lambda: _pending(client) == ids[:10], 30, "two batches pending")
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        err = stop_process(proc)
    assert f'"claim": {str(claims).lower()}' in err, err[-3000:]
    lines = read_lines(log)
    assert [line[1] for line in lines if line[0] == "start"] == ids[:1]
    again = _worker(redis_url, log)
    try:
        wait_for(
            lambda: {line[1] for line in read_lines(log) if line[0] == "done"} == set(ids),
            30,
            "every message handled after the restart",
        )
        wait_for(lambda: not _pending(client), 30, "every message acked")
    finally:
        stop_process(again)
    starts = [line for line in read_lines(log) if line[0] == "start"]
    # The first message ran twice (killed mid-run: at-least-once); the rest of both batches
    # once, on their second delivery (the killed worker's read counted); the rest once, first.
    assert [line[1] for line in starts].count(ids[0]) == 2
    assert {line[1]: int(line[3]) for line in starts[1:] if line[1] in ids[1:10]} == dict.fromkeys(
        ids[1:10], 2
    )
    assert sorted(line[1] for line in starts[1:]) == sorted(ids)


LUA_APP = "tests/apps/lua_counters.py:app"


@pytest.mark.parametrize(
    ("kill", "pending"),
    [
        # Order 7 is the third message of batch 2: batch 3 was read when batch 2 arrived.
        ("handler:7", slice(5, 15)),
        # Batch 2 applied and acked by its script; batch 3, read early, is still pending.
        ("after_script:2", slice(10, 15)),
    ],
)
def test_lua_sigkill_with_a_batch_read_early_applies_every_order_once(
    redis_url: str, tmp_path: Path, kill: str, pending: slice
) -> None:
    """``idempotency="lua"`` with ``read_ahead=True`` under SIGKILL: the batch in hand and the
    one read early are both pending; the restarted worker applies every order exactly once."""
    client = redis.Redis.from_url(redis_url)
    client.xgroup_create("orders", "billing", id="0", mkstream=True)
    ids = [client.xadd("orders", {"n": str(i)}).decode() for i in range(22)]
    env = {"SW_TEST_READ_AHEAD": "1", "SW_TEST_BATCH": str(BATCH)}

    def run(log: Path, **more: str) -> subprocess.Popen[bytes]:
        return streamworker(
            "run",
            LUA_APP,
            "--redis-url",
            redis_url,
            "--consumer",
            "pod-0",
            env={"SW_TEST_LOG": str(log), **env, **more},
        )

    def pending_ids() -> list[str]:
        rows = client.xpending_range("orders", "billing", "-", "+", 1000)
        return [r["message_id"].decode() for r in rows]

    def applied() -> dict[str, int]:
        return {k.decode(): int(v) for k, v in client.hgetall("{orders}:applied").items()}

    first = run(tmp_path / "run1.log", SW_TEST_KILL=kill)
    try:
        assert first.wait(60) == -signal.SIGKILL
    finally:
        stop_process(first)
    assert pending_ids() == ids[pending]
    again = run(tmp_path / "run2.log")
    try:
        wait_for(lambda: len(applied()) == len(ids), 30, "every order applied")
        wait_for(lambda: not pending_ids(), 30, "an empty PEL")
    finally:
        stop_process(again)
    assert applied() == dict.fromkeys(ids, 1)
    assert client.get("{orders}:total") == str(len(ids)).encode()
    assert sorted(f[b"id"].decode() for _, f in client.xrange("{orders}:ledger")) == sorted(ids)
