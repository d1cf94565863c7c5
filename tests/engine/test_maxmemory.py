"""``maxmemory``, eviction policies, MEMORY, and the LRU/LFU data behind OBJECT IDLETIME/FREQ.

Which keys a policy evicts is checked on the engine alone, on a fake clock, with
``maxmemory-samples`` above the key count (the sample is then every key, so the choice is
exact). What redis-server does deterministically (the OOM refusals and their texts, EXECABORT,
scripts under OOM, OBJECT FREQ's refusal, MEMORY's replies for small values) is compared side
by side: ``maxmemory 1`` is over the limit on both whatever they hold.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streamworker.engine import Engine
from streamworker.engine.aof import open_persistent
from streamworker.engine.memory import STARTUP_BYTES, alloc_size
from streamworker.engine.replies import NULL_BULK
from tests.engine.conftest import Differ, FakeClock, RawEngine, RawRedis

_OOM = b"-OOM command not allowed when used memory > 'maxmemory'.\r\n"


def _used(ex: Any) -> int:
    info = ex("INFO", "memory").text.decode()
    return int(next(x for x in info.split("\r\n") if x.startswith("used_memory:")).split(":")[1])


def _evicted(ex: Any) -> int:
    info = ex("INFO", "stats").text.decode()
    line = next(x for x in info.split("\r\n") if x.startswith("evicted_keys:"))
    return int(line.split(":")[1])


def _key_bytes(ex: Any, key: str) -> int:
    size = ex("MEMORY", "USAGE", key)
    assert isinstance(size, int)
    return size


def _limit_to_free(ex: Any, *keys: str) -> None:
    """Set maxmemory so that evicting about ``len(keys)`` keys like these gets under it."""
    used = _used(ex)
    need = sum(_key_bytes(ex, k) for k in keys)
    assert ex("CONFIG", "SET", "maxmemory", used - need + 1) == ex("PING").__class__("OK")


def _keys(ex: Any) -> set[str]:
    return {k.decode() for k in ex("KEYS", "*")}


@pytest.fixture
def setup(ex: Any) -> Any:
    ex("CONFIG", "SET", "maxmemory-samples", "100")
    return ex


def _fill(ex: Any, clock: FakeClock, names: list[str], ttl: bool = False) -> None:
    for name in names:
        if ttl:
            ex("SET", name, "v" * 20, "EX", 100_000)
        else:
            ex("SET", name, "v" * 20)


# -- sizes ---------------------------------------------------------------------------------


def test_alloc_size_follows_jemalloc_classes() -> None:
    assert [alloc_size(n) for n in (1, 9, 17, 21, 129, 161, 257)] == [8, 16, 32, 32, 160, 192, 320]


def test_used_memory_is_startup_plus_the_keys(ex: Any) -> None:
    assert _used(ex) == STARTUP_BYTES
    ex("SET", "a", "b")
    assert _used(ex) == STARTUP_BYTES + _key_bytes(ex, "a")


def test_used_memory_follows_writes_and_deletes_while_tracking(ex: Any) -> None:
    ex("CONFIG", "SET", "maxmemory", "100mb")
    ex("RPUSH", "l", *["x" * 50] * 100)
    grown = _used(ex)
    assert grown == STARTUP_BYTES + _key_bytes(ex, "l")
    ex("DEL", "l")
    assert _used(ex) == STARTUP_BYTES


def test_memory_usage_grows_with_the_value(ex: Any) -> None:
    ex("HSET", "h", "f", "v")
    small = _key_bytes(ex, "h")
    for i in range(1000):
        ex("HSET", "h", f"f{i}", "v" * 100)
    assert _key_bytes(ex, "h") > small + 100_000


# -- differential: replies and error texts ---------------------------------------------------


@pytest.fixture
def d(differ: Differ) -> Iterator[Differ]:
    differ.both("CONFIG", "RESETSTAT")
    try:
        yield differ
    finally:
        for side in (differ.real, differ.fake):
            side.call("CONFIG", "SET", "maxmemory", "0")
            side.call("CONFIG", "SET", "maxmemory-policy", "noeviction")


@pytest.mark.redis
@pytest.mark.parametrize(
    "value_cmd",
    [
        ("SET", "k", "b"),
        ("SET", "k", "12345"),
        ("SET", "k", "x" * 100),
        ("HSET", "k", "f", "v"),
        ("RPUSH", "k", "a", "b", "c"),
        ("SADD", "k", "1", "2", "3"),
        ("ZADD", "k", "1", "a", "2", "b"),
    ],
)
@pytest.mark.parametrize("resp", [2, 3])
def test_memory_usage_of_small_values_matches_redis(
    d: Differ, value_cmd: tuple[str, ...], resp: int
) -> None:
    d.both("HELLO", resp)
    d.check(*value_cmd)
    d.check("MEMORY", "USAGE", "k")


@pytest.mark.redis
@pytest.mark.parametrize("resp", [2, 3])
def test_memory_usage_errors_match_redis(d: Differ, resp: int) -> None:
    d.both("HELLO", resp)
    d.check("SET", "k", "v")
    d.check("MEMORY", "USAGE", "k", "SAMPLES", "-1")
    d.check("MEMORY", "USAGE", "k", "SAMPLES", "x")
    d.check("MEMORY", "USAGE", "k", "SAMPLES")
    d.check("MEMORY", "USAGE", "k", "FOO")
    d.check("MEMORY", "USAGE", "nokey")
    d.check("MEMORY", "USAGE", "k", "SAMPLES", "0")
    d.check("MEMORY", "HELP")
    d.check("MEMORY", "NOSUCH")


@pytest.mark.redis
def test_memory_stats_has_the_fields_redis_has(d: Differ) -> None:
    d.check("SET", "k", "v")
    d.both("HELLO", 3)  # doubles are "," then: the bulk strings are the map's keys
    real, fake = d.both("MEMORY", "STATS")

    def names(reply: bytes) -> list[bytes]:
        lines = reply.split(b"\r\n")
        return [lines[i + 1] for i in range(len(lines) - 1) if lines[i].startswith(b"$")]

    assert names(fake) == names(real)


@pytest.mark.redis
def test_noeviction_refuses_denyoom_commands_and_serves_the_rest(d: Differ) -> None:
    d.check("SET", "k", "v")
    d.check("CONFIG", "SET", "maxmemory", "1")
    assert d.check("SET", "k", "w") == _OOM
    d.check("LPUSH", "l", "x")
    d.check("GET", "k")
    d.check("DEL", "k")
    d.check("INFO", "errorstats")


@pytest.mark.redis
@pytest.mark.parametrize(
    "policy", ["volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl"]
)
def test_volatile_policy_without_volatile_keys_is_oom(d: Differ, policy: str) -> None:
    d.check("SET", "k", "v")
    d.check("CONFIG", "SET", "maxmemory-policy", policy)
    d.check("CONFIG", "SET", "maxmemory", "1")
    assert d.check("SET", "k2", "v") == _OOM
    d.check("DBSIZE")


@pytest.mark.redis
def test_allkeys_policy_evicts_everything_then_refuses(d: Differ) -> None:
    for i in range(5):
        d.check("SET", f"k{i}", "v")
    d.check("CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
    d.check("CONFIG", "SET", "maxmemory", "1")
    assert d.check("SET", "new", "v") == _OOM
    d.check("DBSIZE")
    real, fake = d.both("INFO", "stats")
    assert b"evicted_keys:5\r\n" in real
    assert b"evicted_keys:5\r\n" in fake


@pytest.mark.redis
def test_a_command_queued_over_the_limit_makes_exec_abort(d: Differ) -> None:
    d.check("CONFIG", "SET", "maxmemory", "1")
    d.check("MULTI")
    assert d.check("GET", "k") == _OOM  # anything but EXEC/DISCARD is refused in MULTI
    d.check("SET", "k", "v")
    d.check("EXEC")
    d.check("INFO", "errorstats")


@pytest.mark.redis
def test_exec_holding_a_denyoom_command_aborts_when_over_the_limit(
    d: Differ, redis_port: int
) -> None:
    real2 = RawRedis(redis_port)
    assert isinstance(d.fake, RawEngine)
    fake2 = RawEngine(d.fake.engine)
    try:
        d.check("MULTI")
        d.check("SET", "k", "v")
        d.check("GET", "k")
        assert real2.call("CONFIG", "SET", "maxmemory", "1") == b"+OK\r\n"
        assert fake2.call("CONFIG", "SET", "maxmemory", "1") == b"+OK\r\n"
        d.check("EXEC")
        d.check("EXISTS", "k")
    finally:
        real2.close()
        fake2.close()


@pytest.mark.redis
def test_exec_of_read_only_commands_runs_over_the_limit(d: Differ, redis_port: int) -> None:
    real2 = RawRedis(redis_port)
    assert isinstance(d.fake, RawEngine)
    fake2 = RawEngine(d.fake.engine)
    try:
        d.check("SET", "k", "v")
        d.check("MULTI")
        d.check("GET", "k")
        real2.call("CONFIG", "SET", "maxmemory", "1")
        fake2.call("CONFIG", "SET", "maxmemory", "1")
        d.check("EXEC")
    finally:
        real2.close()
        fake2.close()


@pytest.mark.redis
@pytest.mark.parametrize(
    "body",
    [
        "return redis.call('set','x','1')",
        "return redis.pcall('set','x','1')",
        "return redis.call('get','x')",
        "#!lua\nreturn redis.call('set','x','1')",
        "#!lua\nreturn redis.call('get','x')",
        "#!lua flags=allow-oom\nreturn redis.call('set','x','1')",
        "#!lua flags=no-writes\nreturn redis.call('get','x')",
    ],
)
def test_scripts_over_the_limit_behave_as_in_redis(d: Differ, body: str) -> None:
    d.check("SET", "x", "0")
    d.check("CONFIG", "SET", "maxmemory", "1")
    d.check("EVAL", body, "0")
    d.check("GET", "x")


@pytest.mark.redis
def test_evalsha_of_a_declared_script_is_refused_up_front(d: Differ) -> None:
    sha = d.check("SCRIPT", "LOAD", "#!lua\nreturn redis.call('set','x','1')")
    d.check("CONFIG", "SET", "maxmemory", "1")
    d.check("EVALSHA", sha.split(b"\r\n")[1], "0")


@pytest.mark.redis
@pytest.mark.parametrize(
    ("flags", "body", "call"),
    [
        ("", "return redis.call('set','x','1')", "FCALL"),
        ("", "return redis.pcall('set','x','1')", "FCALL"),
        ("'allow-oom'", "return redis.call('set','x','1')", "FCALL"),
        ("'no-writes'", "return redis.call('get','x')", "FCALL"),
        ("'no-writes'", "return redis.call('get','x')", "FCALL_RO"),
        ("'allow-oom'", "return redis.call('get','x')", "FCALL_RO"),
    ],
)
def test_functions_over_the_limit_behave_as_in_redis(
    d: Differ, flags: str, body: str, call: str
) -> None:
    code = (
        "#!lua name=oomlib\nredis.register_function{function_name='f', "
        f"callback=function(keys, args) {body} end, flags={{{flags}}}}}"
    )
    d.check("FUNCTION", "LOAD", "REPLACE", code)
    try:
        d.check("SET", "x", "0")
        d.check("CONFIG", "SET", "maxmemory", "1")
        d.check(call, "f", "0")
        d.check("GET", "x")
    finally:
        d.both("CONFIG", "SET", "maxmemory", "0")
        d.both("FUNCTION", "FLUSH")


@pytest.mark.redis
def test_object_freq_needs_an_lfu_policy(d: Differ) -> None:
    d.check("SET", "k", "v")
    d.check("OBJECT", "FREQ", "k")
    d.check("CONFIG", "SET", "maxmemory-policy", "allkeys-lfu")
    d.check("OBJECT", "IDLETIME", "k")
    d.check("OBJECT", "FREQ", "nokey")


@pytest.mark.redis
@pytest.mark.parametrize("resp", [2, 3])
def test_object_freq_starts_at_five_and_the_first_access_makes_six(d: Differ, resp: int) -> None:
    d.both("HELLO", resp)
    d.check("CONFIG", "SET", "maxmemory-policy", "allkeys-lfu")
    d.check("SET", "k", "v")
    d.check("OBJECT", "FREQ", "k")
    d.check("GET", "k")
    d.check("OBJECT", "FREQ", "k")


@pytest.mark.redis
def test_new_config_parameters_match_redis(d: Differ) -> None:
    for name in ("lfu-log-factor", "lfu-decay-time", "maxmemory-eviction-tenacity"):
        d.check("CONFIG", "GET", name)
    d.check("CONFIG", "SET", "maxmemory-eviction-tenacity", "101")
    d.check("CONFIG", "SET", "lfu-log-factor", "-1")


# -- engine alone: which keys each policy evicts ------------------------------------------------


def test_allkeys_lru_evicts_the_least_recently_used(setup: Any, clock: FakeClock) -> None:
    ex = setup
    ex("CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
    cold = [f"cold{i}" for i in range(5)]
    hot = [f"hot{i}" for i in range(5)]
    _fill(ex, clock, cold + hot)
    clock.now += 60_000
    for k in hot:
        ex("GET", k)
    _limit_to_free(ex, *cold[:3])
    ex("PING")
    assert set(hot) <= _keys(ex)
    assert len(set(cold) - _keys(ex)) == 3
    assert _evicted(ex) == 3


def test_volatile_lru_evicts_only_keys_with_a_ttl(setup: Any, clock: FakeClock) -> None:
    ex = setup
    ex("CONFIG", "SET", "maxmemory-policy", "volatile-lru")
    idle = [f"persist{i}" for i in range(5)]
    _fill(ex, clock, idle)
    clock.now += 60_000
    volatile = [f"ttl{i}" for i in range(5)]
    _fill(ex, clock, volatile, ttl=True)
    _limit_to_free(ex, *volatile[:2])
    ex("PING")
    assert set(idle) <= _keys(ex)
    assert len(set(volatile) - _keys(ex)) == 2


def test_allkeys_lfu_keeps_the_frequently_used(setup: Any, clock: FakeClock) -> None:
    ex = setup
    ex("CONFIG", "SET", "maxmemory-policy", "allkeys-lfu")
    ex("CONFIG", "SET", "lfu-log-factor", "0")  # every access counts: deterministic
    cold = [f"cold{i}" for i in range(5)]
    hot = [f"hot{i}" for i in range(5)]
    _fill(ex, clock, hot + cold)
    for _ in range(10):
        for k in hot:
            ex("GET", k)
    assert ex("OBJECT", "FREQ", "hot0") == 15
    assert ex("OBJECT", "FREQ", "cold0") == 5
    _limit_to_free(ex, *cold[:3])
    ex("PING")
    assert set(hot) <= _keys(ex)
    assert len(set(cold) - _keys(ex)) == 3


def test_volatile_lfu_evicts_rarely_used_keys_with_a_ttl(setup: Any, clock: FakeClock) -> None:
    ex = setup
    ex("CONFIG", "SET", "maxmemory-policy", "volatile-lfu")
    ex("CONFIG", "SET", "lfu-log-factor", "0")
    rare = [f"rare{i}" for i in range(3)]
    used = [f"used{i}" for i in range(3)]
    _fill(ex, clock, rare)  # no TTL: never evicted
    _fill(ex, clock, used, ttl=True)
    _fill(ex, clock, ["ttlcold"], ttl=True)
    for _ in range(5):
        for k in used:
            ex("GET", k)
    _limit_to_free(ex, "ttlcold")
    ex("PING")
    assert "ttlcold" not in _keys(ex)
    assert set(rare + used) <= _keys(ex)


def test_volatile_ttl_evicts_the_soonest_to_expire(setup: Any, clock: FakeClock) -> None:
    ex = setup
    ex("CONFIG", "SET", "maxmemory-policy", "volatile-ttl")
    for i in range(5):
        ex("SET", f"t{i}", "v" * 20, "EX", 1000 * (i + 1))
    ex("SET", "forever", "v" * 20)
    _limit_to_free(ex, "t0", "t1")
    ex("PING")
    assert _keys(ex) == {"t2", "t3", "t4", "forever"}


def test_allkeys_random_evicts_until_under_the_limit(setup: Any, clock: FakeClock) -> None:
    ex = setup
    ex("CONFIG", "SET", "maxmemory-policy", "allkeys-random")
    names = [f"k{i}" for i in range(20)]
    _fill(ex, clock, names)
    _limit_to_free(ex, *names[:4])
    ex("PING")
    assert _evicted(ex) == 4
    assert _used(ex) <= int(ex("CONFIG", "GET", "maxmemory").items[0][1])


def test_volatile_random_never_evicts_persistent_keys(setup: Any, clock: FakeClock) -> None:
    ex = setup
    ex("CONFIG", "SET", "maxmemory-policy", "volatile-random")
    persistent = [f"p{i}" for i in range(10)]
    volatile = [f"v{i}" for i in range(10)]
    _fill(ex, clock, persistent)
    _fill(ex, clock, volatile, ttl=True)
    _limit_to_free(ex, *volatile[:5])
    ex("PING")
    assert set(persistent) <= _keys(ex)
    assert len(set(volatile) - _keys(ex)) == 5


def test_eviction_happens_before_a_write_which_then_succeeds(setup: Any, clock: FakeClock) -> None:
    ex = setup
    ex("CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
    _fill(ex, clock, [f"k{i}" for i in range(10)])
    _limit_to_free(ex, "k0")
    clock.now += 1000
    assert ex("SET", "new", "v" * 20) == ex("PING").__class__("OK")
    assert "new" in _keys(ex)


def test_object_idletime_reports_the_lru_clock(setup: Any, clock: FakeClock) -> None:
    ex = setup
    ex("CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
    ex("SET", "k", "v")
    clock.now += 7_000
    assert ex("OBJECT", "IDLETIME", "k") == 7
    assert ex("OBJECT", "IDLETIME", "k") == 7  # OBJECT does not touch the key
    ex("GET", "k")
    assert ex("OBJECT", "IDLETIME", "k") == 0


def test_object_freq_decays_one_per_lfu_decay_time_minutes(setup: Any, clock: FakeClock) -> None:
    ex = setup
    ex("CONFIG", "SET", "maxmemory-policy", "allkeys-lfu")
    ex("CONFIG", "SET", "lfu-log-factor", "0")
    ex("SET", "k", "v")
    for _ in range(5):
        ex("GET", "k")
    assert ex("OBJECT", "FREQ", "k") == 10
    clock.now += 3 * 60_000
    assert ex("OBJECT", "FREQ", "k") == 7
    ex("CONFIG", "SET", "lfu-decay-time", "0")  # the decay is computed when read, not stored
    clock.now += 60 * 60_000
    assert ex("OBJECT", "FREQ", "k") == 10


def test_evicted_keys_are_deleted_in_the_append_only_file(tmp_path: Path) -> None:
    aof = open_persistent(tmp_path / "data", appendfsync="always")
    engine = aof.engine
    client = engine.connect()

    def run(*args: object) -> object:
        return engine.execute(client, [str(a).encode() for a in args])

    run("CONFIG", "SET", "maxmemory-policy", "allkeys-random")
    for i in range(5):
        run("SET", f"k{i}", "v")
    run("CONFIG", "SET", "maxmemory", "1")
    run("PING")
    assert run("DBSIZE") == 0
    directory = aof.dir
    aof.close()
    again = open_persistent(directory, appendfsync="always")
    try:
        assert again.engine.execute(again.engine.connect(), [b"DBSIZE"]) == 0
    finally:
        again.close()


def test_tracking_starts_with_the_keys_already_there() -> None:
    engine = Engine()
    client = engine.connect()
    engine.execute(client, [b"SET", b"k", b"v" * 100])
    before = engine.memory.used_memory()
    engine.execute(client, [b"CONFIG", b"SET", b"maxmemory", b"10mb"])
    assert engine.memory.used_memory() == before
    engine.execute(client, [b"CONFIG", b"SET", b"maxmemory", b"0"])
    assert engine.memory.used_memory() == before


def test_flush_swapdb_and_expiry_keep_the_total_right(ex: Any, clock: FakeClock) -> None:
    ex("CONFIG", "SET", "maxmemory", "100mb")
    ex("SET", "a", "x" * 100)
    ex("SET", "b", "y" * 100, "PX", 50)
    ex("SWAPDB", 0, 1)
    ex("SELECT", 1)
    assert _used(ex) == STARTUP_BYTES + _key_bytes(ex, "a") + _key_bytes(ex, "b")
    clock.now += 100
    assert ex("GET", "b") == NULL_BULK  # expired on lookup
    assert _used(ex) == STARTUP_BYTES + _key_bytes(ex, "a")
    ex("FLUSHALL")
    assert _used(ex) == STARTUP_BYTES


def test_untracked_used_memory_of_a_large_database_is_extrapolated_closely() -> None:
    engine = Engine()
    client = engine.connect()
    engine.execute_many(client, [[b"SET", b"key:%d" % i, b"v" * (i % 50)] for i in range(25_000)])
    estimated = engine.memory.used_memory()
    engine.execute(client, [b"CONFIG", b"SET", b"maxmemory", b"1gb"])  # exact, tracked
    exact = engine.memory.used_memory()
    assert abs(estimated - exact) < exact * 0.02


def test_pops_of_movable_key_and_served_blocking_commands_are_charged(ex: Any) -> None:
    ex("CONFIG", "SET", "maxmemory", "100mb")
    ex("RPUSH", "l", *["x" * 100] * 50)
    ex("LMPOP", 1, "l", "LEFT", "COUNT", 40)
    assert _used(ex) == STARTUP_BYTES + _key_bytes(ex, "l")
    blocked = ex("BLPOP", "empty", 0)
    ex("RPUSH", "empty", "a" * 100, "b" * 100)  # serves the BLPOP, which pops the first
    assert blocked.reply == [b"empty", b"a" * 100]
    assert _used(ex) == STARTUP_BYTES + _key_bytes(ex, "l") + _key_bytes(ex, "empty")


def test_every_eviction_publishes_an_evicted_event() -> None:
    from tests.support.engine_server import ThreadedServer

    server = ThreadedServer()
    try:
        client = server.client()
        client.config_set("notify-keyspace-events", "Ee")
        listener = client.pubsub()
        listener.subscribe("__keyevent@0__:evicted")
        assert listener.get_message(timeout=5)["type"] == "subscribe"
        client.config_set("maxmemory-policy", "allkeys-random")
        for i in range(50):
            client.set(f"k{i}", "v" * 100)
        used = int(client.info("memory")["used_memory"])
        client.config_set("maxmemory", str(used - 2000))
        client.set("trigger", "x")  # a denyoom command: evicts until under the limit
        evicted = int(client.info("stats")["evicted_keys"])
        assert evicted > 0
        keys = []
        while len(keys) < evicted:
            message = listener.get_message(timeout=5)
            assert message is not None, f"{len(keys)} of {evicted} evicted events arrived"
            keys.append(message["data"])
        assert all(client.exists(k) == 0 for k in keys)
        client.config_set("maxmemory", "0")
        listener.close()
    finally:
        server.close()


@pytest.mark.redis
def test_scripts_write_again_once_maxmemory_is_unset(d: Differ) -> None:
    """The OOM state of the last command over the limit does not outlive CONFIG SET maxmemory 0."""
    d.check("CONFIG", "SET", "maxmemory", "1")
    d.check("EVAL", "return redis.call('set','x','1')", "0")
    d.check("CONFIG", "SET", "maxmemory", "0")
    d.check("EVAL", "return redis.pcall('incr','x')", "0")
    d.check("EVAL", "return redis.call('set','x','2')", "0")
    d.check("GET", "x")
