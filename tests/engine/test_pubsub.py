"""Pub/Sub on the engine, side by side with redis-server 7.0.15 over real sockets.

Scripted steps run on named connections of both servers; after each step every connection's
received bytes (replies and messages, in order) must be identical (:mod:`.pubsub_support`).
Where Redis's order is its hash tables' (UNSUBSCRIBE with no argument over several channels,
PUBSUB CHANNELS), the comparison is of the sets. redis-py's PubSub objects are run against
both servers too, and against the in-process client (``engine://``).
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio

from streamworker.engine.aof import open_persistent
from streamworker.engine.inproc import async_client, forget_engine, sync_client
from tests.engine.aof_support import Session
from tests.engine.pubsub_support import Pair, Side, engine_server, pair, steps
from tests.engine.test_aof import records
from tests.support.engine_server import ThreadedServer
from tests.support.servers import RedisServer

pytestmark = pytest.mark.redis

__all__ = ["engine_server", "pair"]

RESPS = pytest.mark.parametrize("resp", [2, 3], ids=["resp2", "resp3"])


def _hello(p: Pair, resp: int, *names: str) -> None:
    # HELLO's reply holds the connection id, which differs: switched without comparing.
    if resp == 3:
        for name in names:
            for side in (p.real, p.fake):
                side.send(name, ("HELLO", "3"))
                side.collect(name)


# --- frames -----------------------------------------------------------------------------


@RESPS
def test_subscribe_answers_one_frame_per_channel_with_the_running_count(
    pair: Pair, resp: int
) -> None:
    _hello(pair, resp, "a")
    pair.run(steps("a: SUBSCRIBE ps1:x ps1:y ps1:x\na: SUBSCRIBE ps1:z"))


@RESPS
def test_published_messages_reach_every_subscriber_and_publish_counts_them(
    pair: Pair, resp: int
) -> None:
    _hello(pair, resp, "a", "b", "c")
    pair.run(
        steps(
            """
            a: SUBSCRIBE ps2:news
            b: SUBSCRIBE ps2:news ps2:other
            c: PUBLISH ps2:news hello
            c: PUBLISH ps2:other world
            c: PUBLISH ps2:nobody lost
            """
        )
    )


@RESPS
def test_pattern_subscribers_get_pmessage_with_the_pattern(pair: Pair, resp: int) -> None:
    _hello(pair, resp, "a", "b", "p")
    pair.run(
        steps(
            """
            a: PSUBSCRIBE ps3:h*
            b: SUBSCRIBE ps3:hello
            b: PSUBSCRIBE ps3:h?llo
            p: PUBLISH ps3:hello hi
            p: PUBLISH ps3:hallo ha
            p: PUBLISH ps3:other no
            """
        )
    )


# Redis's stringmatch rules: classes, negation, ranges (either order), escapes, an
# unclosed '[' and '*' runs.
GLOB_CASES = [
    ("ps4:[ae]x", ["ps4:ax", "ps4:ex", "ps4:ix"]),
    ("ps4:[^ae]x", ["ps4:ax", "ps4:ix"]),
    ("ps4:[z-a]x", ["ps4:mx", "ps4:Mx"]),
    ("ps4:\\*", ["ps4:*", "ps4:a"]),
    ("ps4:[a-", ["ps4:a", "ps4:[a-", "ps4:-"]),
    ("ps4:**a*", ["ps4:a", "ps4:xxa", "ps4:b"]),
    ("ps4:?", ["ps4:", "ps4:a", "ps4:ab"]),
    ("ps4:[\\]]", ["ps4:]", "ps4:\\"]),
]


@pytest.mark.parametrize(("pattern", "channels"), GLOB_CASES)
def test_patterns_match_channels_with_redis_glob_rules(
    pair: Pair, pattern: str, channels: list[str]
) -> None:
    pair.step("s", "PSUBSCRIBE", pattern)
    for channel in channels:
        pair.step("p", "PUBLISH", channel, "m")


def test_pubsub_channels_filters_with_a_glob_pattern(pair: Pair) -> None:
    pair.step("a", "SUBSCRIBE", "ps5:one", "ps5:two", "ps5:three", "")
    for args in (
        ("CHANNELS", "ps5:*"),
        ("CHANNELS", "ps5:t*"),
        ("CHANNELS", "ps5:[o]*"),
        # '*' does not match the empty channel in Redis's stringmatch (KEYS * does).
        ("CHANNELS", "*"),
        ("CHANNELS", ""),
    ):
        real = _bulk_set(_call(pair.real, "q", "PUBSUB", *args))
        fake = _bulk_set(_call(pair.fake, "q", "PUBSUB", *args))
        assert fake == real, args


def _call(side: Side, name: str, *args: Any) -> bytes:
    side.send(name, args)
    return side.collect(name)


def _bulk_set(raw: bytes) -> set[bytes]:
    # The bulk strings of a flat array reply (order left out: Redis's is its hash table's),
    # restricted to this test's channels (the session's redis-server is shared).
    parts = raw.split(b"\r\n")
    found = {parts[i + 1] for i in range(1, len(parts) - 1, 2) if parts[i].startswith(b"$")}
    return {c for c in found if c.startswith(b"ps5:") or c == b""}


def test_pubsub_numsub_numpat_and_shard_introspection_match_redis(pair: Pair) -> None:
    pair.run(
        steps(
            """
            a: SUBSCRIBE ps6:x ps6:y
            b: SUBSCRIBE ps6:x
            b: PSUBSCRIBE ps6:* ps6:?
            c: PSUBSCRIBE ps6:*
            d: SSUBSCRIBE ps6:x ps6:s
            q: PUBSUB NUMSUB ps6:x ps6:y ps6:z
            q: PUBSUB NUMSUB
            q: PUBSUB SHARDNUMSUB ps6:x ps6:s ps6:y
            q: PUBSUB SHARDCHANNELS ps6:s*
            q: PUBSUB CHANNELS ps6:y
            q: PUBSUB CHANNELS a b
            q: PUBSUB SHARDCHANNELS a b
            q: PUBSUB NUMPAT x
            q: PUBSUB HELP
            q: PUBSUB HELP x
            q: PUBSUB NOPE
            q: PUBSUB
            """
        )
    )


def test_command_getkeys_finds_no_key_in_pubsub_commands(pair: Pair) -> None:
    pair.run(
        steps(
            """
            q: COMMAND GETKEYS SPUBLISH s m
            q: COMMAND GETKEYS SSUBSCRIBE s t
            q: COMMAND GETKEYS SUNSUBSCRIBE s
            q: COMMAND GETKEYS PUBLISH c m
            q: COMMAND GETKEYS SUBSCRIBE c
            """
        )
    )


def test_pubsub_numpat_counts_distinct_patterns(pair: Pair) -> None:
    before = _call(pair.real, "q", "PUBSUB", "NUMPAT")
    _call(pair.fake, "q", "PUBSUB", "NUMPAT")
    pair.run(steps("b: PSUBSCRIBE ps7:* ps7:?\nc: PSUBSCRIBE ps7:*"))
    # The session's redis-server may hold other tests' patterns: compare the increase.
    after_real = _call(pair.real, "q", "PUBSUB", "NUMPAT")
    after_fake = _call(pair.fake, "q", "PUBSUB", "NUMPAT")
    assert int(after_real[1:-2]) - int(before[1:-2]) == 2
    assert after_fake == b":2\r\n"


@RESPS
def test_unsubscribing_with_nothing_subscribed_answers_a_null_channel(
    pair: Pair, resp: int
) -> None:
    _hello(pair, resp, "a")
    pair.run(steps("a: UNSUBSCRIBE\na: PUNSUBSCRIBE\na: SUNSUBSCRIBE\na: UNSUBSCRIBE ps8:never"))


@RESPS
def test_unsubscribe_counts_down_channels_and_patterns_together(pair: Pair, resp: int) -> None:
    _hello(pair, resp, "a")
    pair.run(
        steps(
            """
            a: SUBSCRIBE ps9:a ps9:b
            a: PSUBSCRIBE ps9:*
            a: SSUBSCRIBE ps9:s
            a: UNSUBSCRIBE ps9:a
            a: PUNSUBSCRIBE ps9:* ps9:nope
            a: UNSUBSCRIBE ps9:b
            a: SUNSUBSCRIBE ps9:s
            a: UNSUBSCRIBE
            """
        )
    )


@pytest.mark.parametrize("command", ["UNSUBSCRIBE", "PUNSUBSCRIBE", "SUNSUBSCRIBE"])
def test_unsubscribe_all_answers_one_frame_per_subscription_down_to_zero(
    pair: Pair, command: str
) -> None:
    # Redis answers in its hash table's order: the set of channels and the counts are what
    # must match (the engine's order is subscription order).
    subscribe = {"UNSUBSCRIBE": "SUBSCRIBE", "PUNSUBSCRIBE": "PSUBSCRIBE"}.get(
        command, "SSUBSCRIBE"
    )
    names = [f"ps10:{i}" for i in range(5)]
    frames = {}
    for label, side in (("redis", pair.real), ("engine", pair.fake)):
        side.send("a", (subscribe, *names))
        side.collect("a")
        side.send("a", (command,))
        raw = side.collect("a")
        parts = raw.split(b"\r\n")
        # Each frame: *3 $n kind $n channel :count -> 6 lines.
        got = [(parts[i + 4], parts[i + 5]) for i in range(0, len(parts) - 1, 6)]
        frames[label] = got
    for label in frames:
        assert sorted(c for c, _ in frames[label]) == sorted(n.encode() for n in names), label
        assert [n for _, n in frames[label]] == [b":4", b":3", b":2", b":1", b":0"], label


# --- the subscribed context -------------------------------------------------------------


def test_a_resp2_subscriber_may_only_subscribe_ping_quit_and_reset(pair: Pair) -> None:
    pair.run(
        steps(
            """
            a: SUBSCRIBE ps11:x
            a: GET k
            a: CLIENT LIST
            a: EVAL return 1 0
            a: HELLO 3
            a: MULTI
            a: NOSUCHCOMMAND x
            a: SUBSCRIBE
            a: PING
            a: PING hello
            a: PING a b
            a: PSUBSCRIBE ps11:*
            a: PUNSUBSCRIBE
            a: UNSUBSCRIBE
            a: GET k
            a: PING
            """
        )
    )


def test_a_resp3_subscriber_may_run_any_command(pair: Pair) -> None:
    _hello(pair, 3, "a")
    pair.run(
        steps(
            """
            a: SUBSCRIBE ps12:x
            a: SET ps12:k v
            a: GET ps12:k
            a: PING
            a: DEL ps12:k
            a: PUBLISH ps12:x to-myself
            """
        )
    )


def test_a_shard_subscription_alone_puts_a_resp2_client_in_subscribed_mode(pair: Pair) -> None:
    pair.run(steps("a: SSUBSCRIBE ps13:s\na: GET k\na: SUNSUBSCRIBE ps13:s\na: GET ps13:k"))


def test_reset_drops_the_subscriptions_and_returns_to_resp2(pair: Pair) -> None:
    _hello(pair, 3, "a")
    pair.run(
        steps(
            """
            a: SUBSCRIBE ps14:x
            a: PSUBSCRIBE ps14:*
            a: SSUBSCRIBE ps14:s
            a: RESET
            q: PUBSUB NUMSUB ps14:x
            q: PUBSUB SHARDNUMSUB ps14:s
            q: PUBLISH ps14:x gone
            a: GET ps14:k
            """
        )
    )


def test_quit_from_subscribed_mode_closes_and_forgets_the_subscriber(pair: Pair) -> None:
    pair.run(steps("a: SUBSCRIBE ps15:x\na: QUIT\nq: PUBSUB NUMSUB ps15:x\nq: PUBLISH ps15:x m"))


def test_a_closed_subscriber_is_forgotten(pair: Pair) -> None:
    pair.step("a", "SUBSCRIBE", "ps16:x")
    for side in (pair.real, pair.fake):
        side.conns.pop("a").close()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        real = _call(pair.real, "q", "PUBSUB", "NUMSUB", "ps16:x")
        fake = _call(pair.fake, "q", "PUBSUB", "NUMSUB", "ps16:x")
        if real == fake:
            break
        time.sleep(0.05)
    assert fake == real == b"*2\r\n$6\r\nps16:x\r\n:0\r\n"


# --- shard channels -----------------------------------------------------------------------


@RESPS
def test_shard_channels_are_a_separate_namespace(pair: Pair, resp: int) -> None:
    _hello(pair, resp, "a", "b")
    pair.run(
        steps(
            """
            a: SSUBSCRIBE ps17:s
            b: PSUBSCRIBE ps17:*
            b: SUBSCRIBE ps17:s
            p: SPUBLISH ps17:s shard-only
            p: PUBLISH ps17:s plain
            p: SPUBLISH ps17:none x
            """
        )
    )


# --- transactions and scripts -------------------------------------------------------------


def test_publish_inside_multi_delivers_at_exec(pair: Pair) -> None:
    pair.run(
        steps(
            """
            a: SUBSCRIBE ps18:x
            p: MULTI
            p: PUBLISH ps18:x one
            p: PUBLISH ps18:x two
            p: EXEC
            """
        )
    )


def test_subscribe_inside_multi_runs_and_ssubscribe_is_refused(pair: Pair) -> None:
    pair.run(
        steps(
            """
            a: MULTI
            a: SUBSCRIBE ps19:x
            a: SSUBSCRIBE ps19:s
            a: EXEC
            p: PUBLISH ps19:x m
            """
        )
    )


def test_a_message_to_itself_inside_exec_lands_in_the_exec_array(pair: Pair) -> None:
    # Redis 7.0 writes EXEC's array header first: the push precedes PUBLISH's reply inside it.
    _hello(pair, 3, "a")
    pair.run(
        steps(
            """
            a: SUBSCRIBE ps26:x
            a: MULTI
            a: SET ps26:k v
            a: PUBLISH ps26:x m
            a: SUBSCRIBE ps26:y ps26:z
            a: PUBLISH ps26:z n
            a: EXEC
            """
        )
    )
    pair.step("a", "EVAL", "return redis.call('publish', 'ps26:x', 'lua')", 0)


def test_publish_from_a_script_reaches_subscribers(pair: Pair) -> None:
    pair.step("a", "SUBSCRIBE", "ps20:x")
    pair.step("p", "EVAL", "return redis.call('publish', KEYS[1], ARGV[1])", 1, "ps20:x", "lua")
    pair.step("p", "EVAL", "return redis.call('spublish', KEYS[1], ARGV[1])", 1, "ps20:x", "s")


@pytest.mark.parametrize("command", ["subscribe", "psubscribe", "ssubscribe", "unsubscribe"])
def test_subscribing_from_a_script_is_refused(pair: Pair, command: str) -> None:
    pair.step("p", "EVAL", f"return redis.call('{command}', 'ps21:x')", 0)
    pair.step("p", "EVAL", f"return redis.pcall('{command}', 'ps21:x')", 0)


# --- odd channel names and messages -------------------------------------------------------


@pytest.mark.parametrize(
    "channel",
    [
        b"",
        b"ps22:\r\n\x00\xff",
        b"-9223372036854775808",
        b"18446744073709551616",
        b"ps22:" + b"x" * 70_000,
    ],
    ids=["empty", "binary", "int64-min", "2^64", "70KB"],
)
def test_odd_channel_names_and_messages_travel_unchanged(pair: Pair, channel: bytes) -> None:
    pair.step("a", "SUBSCRIBE", channel)
    pair.step("b", "PSUBSCRIBE", b"*")
    pair.step("p", "PUBLISH", channel, channel + b"\r\n")
    pair.step("q", "PUBSUB", "NUMSUB", channel)
    pair.step("a", "UNSUBSCRIBE", channel)


def test_many_subscriptions_in_one_command(pair: Pair) -> None:
    names = [f"ps23:{i}" for i in range(2000)]
    pair.step("a", "SUBSCRIBE", *names)
    pair.step("p", "PUBLISH", "ps23:1999", "last")
    pair.step("a", "UNSUBSCRIBE", *names)


def test_a_burst_of_messages_arrives_complete_and_in_order(pair: Pair) -> None:
    pair.step("a", "SUBSCRIBE", "ps24:x")
    script = "for i = 1, 5000 do redis.call('publish', KEYS[1], i) end return 5000"
    pair.step("p", "EVAL", script, 1, "ps24:x")


# --- introspection ------------------------------------------------------------------------


def test_client_list_shows_the_subscription_counts_and_the_pubsub_flag(
    engine_server: ThreadedServer,
) -> None:
    sub = Side(engine_server.port)
    sub.send("a", ("SUBSCRIBE", "x", "y"))
    sub.send("a", ("PSUBSCRIBE", "p*"))
    sub.send("a", ("SSUBSCRIBE", "s"))
    sub.collect("a")
    r = engine_server.client()
    (line,) = r.client_list(_type="pubsub")
    assert (line["flags"], line["sub"], line["psub"], line["ssub"]) == ("P", "2", "1", "1")
    assert all(c["flags"] != "P" for c in r.client_list(_type="normal"))
    sub.close()


def test_info_counts_channels_patterns_and_shard_channels(
    engine_server: ThreadedServer,
) -> None:
    sub = Side(engine_server.port)
    sub.send("a", ("SUBSCRIBE", "x", "y"))
    sub.send("b", ("SUBSCRIBE", "x"))
    sub.send("b", ("PSUBSCRIBE", "p*"))
    sub.send("b", ("SSUBSCRIBE", "s"))
    sub.collect("a")
    sub.collect("b")
    info = engine_server.client().info("stats")
    counts = (info["pubsub_channels"], info["pubsub_patterns"], info["pubsubshard_channels"])
    assert counts == (2, 1, 1)
    sub.close()


# --- redis-py ---------------------------------------------------------------------------


def _pubsub_session(client: redis.Redis) -> list[Any]:
    p = client.pubsub()
    p.subscribe("ps25:a", "ps25:b")
    p.psubscribe("ps25:*")
    out: list[Any] = []
    for _ in range(3):
        out.append(p.get_message(timeout=2))
    client.publish("ps25:a", "one")
    client.publish("ps25:zzz", "two")
    for _ in range(3):
        out.append(p.get_message(timeout=2))
    out.append(p.get_message(timeout=0.05))
    p.unsubscribe("ps25:a")
    out.append(p.get_message(timeout=2))
    p.close()
    return out


@RESPS
def test_redis_py_pubsub_sees_the_same_messages_from_both_servers(
    redis_server: RedisServer, engine_server: ThreadedServer, resp: int
) -> None:
    real = redis.Redis(port=redis_server.port, protocol=resp, socket_timeout=10)
    fake = engine_server.client(protocol=resp)
    assert _pubsub_session(fake) == _pubsub_session(real)
    real.close()
    fake.close()


# --- in-process ---------------------------------------------------------------------------


@pytest.fixture
def inproc_url() -> Any:
    url = "engine://memory/test-pubsub"
    yield url
    forget_engine(url)


@RESPS
def test_in_process_pubsub_matches_redis(
    redis_server: RedisServer, inproc_url: str, resp: int
) -> None:
    real = redis.Redis(port=redis_server.port, protocol=resp, socket_timeout=10)
    fake = sync_client(inproc_url, protocol=resp)
    assert _pubsub_session(fake) == _pubsub_session(real)
    real.close()
    fake.close()


def test_in_process_get_message_waits_for_a_message_from_another_thread(
    inproc_url: str,
) -> None:
    r = sync_client(inproc_url)
    p = r.pubsub(ignore_subscribe_messages=True)
    p.subscribe("late")
    assert p.get_message(timeout=0.05) is None
    timer = threading.Timer(0.1, r.publish, ("late", "hello"))
    timer.start()
    message = p.get_message(timeout=5)
    timer.join()
    assert message is not None
    assert message["data"] == b"hello"
    p.close()


def test_in_process_run_in_thread_calls_the_handlers(inproc_url: str) -> None:
    r = sync_client(inproc_url)
    got: list[bytes] = []
    p = r.pubsub()
    p.subscribe(**{"jobs": lambda m: got.append(m["data"])})
    worker = p.run_in_thread(sleep_time=0.01)
    try:
        for i in range(3):
            r.publish("jobs", str(i))
        deadline = time.monotonic() + 5
        while len(got) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        worker.stop()
        worker.join(5)
    assert got == [b"0", b"1", b"2"]


@RESPS
def test_in_process_asyncio_pubsub_waits_for_messages(inproc_url: str, resp: int) -> None:
    async def scenario() -> list[Any]:
        r = async_client(inproc_url, protocol=resp)
        p = r.pubsub()
        await p.subscribe("ch")
        first = await p.get_message(timeout=2)

        async def later() -> None:
            await asyncio.sleep(0.05)  # published while get_message() is waiting
            await r.publish("ch", "late")

        task = asyncio.create_task(later())
        second = await p.get_message(timeout=5)
        await task
        await p.aclose()
        await r.aclose()
        return [first, second]

    first, second = asyncio.run(scenario())
    assert first["type"] == "subscribe"
    assert (second["type"], second["data"]) == ("message", b"late")


def test_in_process_unsubscribed_pubsub_connection_is_forgotten(inproc_url: str) -> None:
    r = sync_client(inproc_url)
    p = r.pubsub()
    p.subscribe("gone")
    p.get_message(timeout=1)
    assert r.pubsub_numsub("gone") == [(b"gone", 1)]
    p.close()
    assert r.pubsub_numsub("gone") == [(b"gone", 0)]


# --- persistence --------------------------------------------------------------------------


def test_pubsub_commands_are_not_logged_and_a_reload_starts_unsubscribed(tmp_path: Path) -> None:
    server = ThreadedServer.persistent(tmp_path / "data")
    try:
        side = Side(server.port)
        side.send("a", ("SUBSCRIBE", "x"))
        side.send("a", ("SSUBSCRIBE", "s"))
        side.collect("a")
        for args in (
            ("CONFIG", "SET", "notify-keyspace-events", "KEA"),
            ("PUBLISH", "x", "m"),
            ("SPUBLISH", "s", "m"),
            ("SET", "k", "v"),
            ("EVAL", "return redis.call('publish', 'x', 'lua')", 0),
        ):
            side.send("p", args)
            side.collect("p")
        side.close()
        assert server.aof is not None
        path = server.aof.path
    finally:
        server.close()
    logged = [argv[0].upper() for argv in records(path)]
    assert b"SET" in logged
    assert not {b"PUBLISH", b"SPUBLISH", b"SUBSCRIBE", b"SSUBSCRIBE", b"EVAL"} & set(logged)
    reloaded = open_persistent(tmp_path / "data", appendfsync="always")
    try:
        s = Session(reloaded.engine)
        assert s("GET", "k") == b"v"
        assert s("PUBSUB", "NUMSUB", "x") == [b"x", 0]
        assert s("PUBSUB", "SHARDNUMSUB", "s") == [b"s", 0]
    finally:
        reloaded.close()


# --- random programs ----------------------------------------------------------------------

# Each channel matches at most one pattern, so a client's pmessages never depend on the
# order Redis keeps its patterns in.
_CHANNELS = ["r:a1", "r:a2", "r:b2", "r:cx", "r:dx", "r:zz"]
_PATTERNS = ["r:a*", "r:b?", "r:[cd]x", "r:q*"]


def _random_program(rng: random.Random, length: int) -> list[tuple[str, tuple[str, ...]]]:
    program: list[tuple[str, tuple[str, ...]]] = []
    for _ in range(length):
        conn = rng.choice("abc")
        roll = rng.random()
        if roll < 0.2:
            step = ("SUBSCRIBE", rng.choice(_CHANNELS))
        elif roll < 0.3:
            step = ("PSUBSCRIBE", rng.choice(_PATTERNS))
        elif roll < 0.38:
            step = ("SSUBSCRIBE", rng.choice(_CHANNELS))
        elif roll < 0.48:
            step = ("UNSUBSCRIBE", rng.choice(_CHANNELS))
        elif roll < 0.53:
            step = ("PUNSUBSCRIBE", rng.choice(_PATTERNS))
        elif roll < 0.57:
            step = ("SUNSUBSCRIBE", rng.choice(_CHANNELS))
        elif roll < 0.8:
            conn = "p"
            step = ("PUBLISH", rng.choice(_CHANNELS), f"m{len(program)}")
        elif roll < 0.86:
            conn = "p"
            step = ("SPUBLISH", rng.choice(_CHANNELS), f"s{len(program)}")
        elif roll < 0.9:
            step = ("PING",)
        elif roll < 0.94:
            step = ("GET", "r:key")
        else:
            conn = "p"
            step = ("PUBSUB", "NUMSUB", *rng.sample(_CHANNELS, 2))
        program.append((conn, step))
    return program


@pytest.mark.parametrize("seed", range(6))
def test_random_subscription_programs_match_redis(pair: Pair, seed: int) -> None:
    rng = random.Random(seed)
    # Connections a, b, c in RESP2 or RESP3 as the seed says; p publishes.
    _hello(pair, 3, *[name for name in "abc" if rng.random() < 0.5])
    for conn, step in _random_program(rng, 150):
        pair.step(conn, *step)


# --- CLIENT REPLY OFF / SKIP --------------------------------------------------------------


def _silenced_session(p: Pair, resp: int, mode: str, script: str) -> None:
    # ``a`` answers nothing while silenced, so its commands are sent without collecting; what
    # it received is compared once CLIENT REPLY ON has answered.
    _hello(p, resp, "a", "b")
    for side in (p.real, p.fake):
        side.send("a", ("CLIENT", "REPLY", mode))
    for name, args in steps(script):
        for side in (p.real, p.fake):
            side.send(name, args)
        if name == "b":
            assert p.fake.collect("b") == p.real.collect("b")
    for side in (p.real, p.fake):
        side.send("a", ("CLIENT", "REPLY", "ON"))
    real, fake = p.real.collect("a"), p.fake.collect("a")
    assert fake == real, f"redis:  {real!r}\nengine: {fake!r}"


@RESPS
@pytest.mark.parametrize("mode", ["OFF", "SKIP"])
def test_subscribe_confirmations_and_messages_go_out_whatever_client_reply_says(
    pair: Pair, resp: int, mode: str
) -> None:
    _silenced_session(
        pair,
        resp,
        mode,
        """
        a: SUBSCRIBE psro:ch
        a: PSUBSCRIBE psro:*
        a: SSUBSCRIBE psro:sh
        b: PUBLISH psro:ch hi
        b: SPUBLISH psro:sh there
        a: UNSUBSCRIBE psro:ch
        a: PUNSUBSCRIBE
        a: SUNSUBSCRIBE
        a: PING
        """,
    )


@pytest.mark.parametrize("mode", ["OFF", "SKIP"])
def test_tracking_invalidations_go_out_under_client_reply_off(pair: Pair, mode: str) -> None:
    _hello(pair, 3, "a")
    key = f"psro:key:{mode}"
    pair.run(steps(f"a: CLIENT TRACKING ON\na: GET {key}"))
    _silenced_session(pair, 3, mode, f"a: PING\nb: SET {key} v\na: PING")


def test_lowering_maxmemory_evicts_at_once_and_publishes_the_evicted_event(pair: Pair) -> None:
    # Redis evicts inside CONFIG SET maxmemory: the subscriber gets the event before any
    # other command runs (the Tcl unit reads it without sending anything).
    got = {}
    for label, side in (("redis", pair.real), ("engine", pair.fake)):
        side.send("b", ("FLUSHALL",))
        side.send("b", ("CONFIG", "SET", "notify-keyspace-events", "Ee"))
        side.send("b", ("CONFIG", "SET", "maxmemory-policy", "allkeys-lru"))
        side.send("b", ("SET", "psev:foo", "bar"))
        side.collect("b")
        side.send("a", ("PSUBSCRIBE", "*"))
        side.collect("a")
        side.send("b", ("CONFIG", "SET", "maxmemory", "1"))
        sock = side.conn("a")
        sock.settimeout(2)
        received = b""
        try:
            while not received.endswith(b"psev:foo\r\n"):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                received += chunk
        except TimeoutError:
            pass
        got[label] = received
        side.send("b", ("CONFIG", "SET", "maxmemory", "0"))
        side.send("b", ("CONFIG", "SET", "maxmemory-policy", "noeviction"))
        side.send("b", ("CONFIG", "SET", "notify-keyspace-events", ""))
        side.collect("b")
    assert got["redis"].endswith(b"psev:foo\r\n")
    assert got["engine"] == got["redis"]
