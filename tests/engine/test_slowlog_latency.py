"""SLOWLOG and LATENCY, side by side with redis-server 7.0 where the outcome does not depend on
timing (help texts, errors, the entry shape with its argument trimming, empty histories), and
on the engine alone for what needs a slow call (a Lua busy loop of a known length)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from streamworker.engine import Engine
from streamworker.engine.diagnostics import slowlog_args
from tests.engine.conftest import Differ
from tests.engine.differential.resp import Node, parse

# A script that runs for about ARGV[1] milliseconds (redis.call('time') is the clock).
_BUSY = (
    "local t0 = redis.call('time') local start = t0[1] * 1000000 + t0[2] "
    "while true do local t = redis.call('time') "
    "if t[1] * 1000000 + t[2] - start >= tonumber(ARGV[1]) * 1000 then return 1 end end"
)


@pytest.fixture
def d(differ: Differ) -> Iterator[Differ]:
    for side in (differ.real, differ.fake):
        side.call("SLOWLOG", "RESET")
        side.call("LATENCY", "RESET")
    try:
        yield differ
    finally:
        for side in (differ.real, differ.fake):
            side.call("CONFIG", "SET", "slowlog-log-slower-than", "10000")
            side.call("CONFIG", "SET", "slowlog-max-len", "128")
            side.call("CONFIG", "SET", "latency-monitor-threshold", "0")
            side.call("SLOWLOG", "RESET")


def _entries(raw: bytes) -> list[Node]:
    return list(parse(raw).children)


def _args_and_name(entry: Node) -> tuple[list[bytes], bytes]:
    return [a.text for a in entry.children[3].children], entry.children[5].text


# -- differential ---------------------------------------------------------------------------


@pytest.mark.redis
@pytest.mark.parametrize("resp", [2, 3])
def test_help_texts_match_redis(d: Differ, resp: int) -> None:
    d.both("HELLO", resp)
    d.check("SLOWLOG", "HELP")
    d.check("LATENCY", "HELP")


@pytest.mark.redis
@pytest.mark.parametrize(
    "cmd",
    [
        ("SLOWLOG", "GET", "-2"),
        ("SLOWLOG", "GET", "x"),
        ("SLOWLOG", "GET", "1", "2"),
        ("SLOWLOG", "GET", "0"),
        ("SLOWLOG", "NOSUCH"),
        ("SLOWLOG", "LEN", "x"),
        ("LATENCY", "HELP", "xxx"),
        ("LATENCY", "GRAPH", "blabla"),
        ("LATENCY", "HISTORY", "blabla"),
        ("LATENCY", "RESET", "blabla"),
        ("LATENCY", "LATEST"),
        ("LATENCY", "NOSUCH"),
        ("CONFIG", "SET", "latency-monitor-threshold", "-1"),
        ("CONFIG", "SET", "slowlog-log-slower-than", "-2"),
        ("CONFIG", "GET", "latency-monitor-threshold"),
    ],
)
@pytest.mark.parametrize("resp", [2, 3])
def test_replies_and_errors_match_redis(d: Differ, cmd: tuple[str, ...], resp: int) -> None:
    d.both("HELLO", resp)
    d.check(*cmd)


@pytest.mark.redis
def test_slowlog_entries_have_redis_shape_and_trimming(d: Differ) -> None:
    d.check("CONFIG", "SET", "slowlog-log-slower-than", "0")
    d.check("CLIENT", "SETNAME", "app")
    d.check("SET", "k", "x" * 200)
    d.check("RPUSH", "l", *[str(i) for i in range(40)])
    d.check("CONFIG", "SET", "slowlog-log-slower-than", "10000")
    real, fake = d.both("SLOWLOG", "GET", "-1")
    real_entries, fake_entries = _entries(real), _entries(fake)
    assert [_args_and_name(e) for e in fake_entries] == [_args_and_name(e) for e in real_entries]
    for entry in fake_entries:
        assert [c.kind for c in entry.children] == [ord(x) for x in ":::*$$"]
    by_command = {args[0]: (args, name) for args, name in map(_args_and_name, fake_entries)}
    args, name = by_command[b"RPUSH"]
    assert name == b"app"
    assert len(args) == 32
    assert args[-1] == b"... (11 more arguments)"
    args, _ = by_command[b"SET"]
    assert args[2] == b"x" * 128 + b"... (72 more bytes)"


@pytest.mark.redis
def test_commands_of_scripts_and_transactions_are_logged_like_redis(d: Differ) -> None:
    d.check("CONFIG", "SET", "slowlog-log-slower-than", "0")
    d.check("EVAL", "redis.call('set','a','b') return 1", "0")
    for cmd in (("MULTI",), ("SET", "x", "1"), ("GET", "x"), ("EXEC",)):
        d.check(*cmd)
    d.check("CONFIG", "SET", "slowlog-log-slower-than", "-1")
    real, fake = d.both("SLOWLOG", "GET", "-1")

    def logged(raw: bytes) -> list[tuple[list[bytes], bytes]]:
        return [(_args_and_name(e)[0], e.children[4].text) for e in _entries(raw)]

    script_addr = [addr for args, addr in logged(fake) if args[0] == b"set"]
    assert script_addr == [b"?:0"]
    assert [args for args, _ in logged(fake)] == [args for args, _ in logged(real)]


@pytest.mark.redis
def test_slowlog_ids_grow_and_max_len_keeps_the_newest(d: Differ) -> None:
    d.check("CONFIG", "SET", "slowlog-max-len", "2")
    d.check("CONFIG", "SET", "slowlog-log-slower-than", "0")
    for i in range(4):
        d.check("SET", "k", i)
    d.check("CONFIG", "SET", "slowlog-log-slower-than", "-1")
    d.check("SLOWLOG", "LEN")
    real, fake = d.both("SLOWLOG", "GET")
    assert [_args_and_name(e) for e in _entries(fake)] == [
        _args_and_name(e) for e in _entries(real)
    ]
    ids = [int(e.children[0].head) for e in _entries(fake)]
    assert ids[0] == ids[1] + 1


@pytest.mark.redis
def test_latency_histogram_lists_called_commands_by_full_name(d: Differ) -> None:
    d.check("CONFIG", "RESETSTAT")
    d.check("SET", "a", "b")
    d.check("SET", "c", "d")
    d.both("CLIENT", "ID")
    d.both("HELLO", 3)

    def shape(raw: bytes) -> dict[bytes, bytes]:
        node = parse(raw)
        out = {}
        for i in range(0, len(node.children), 2):
            stats = node.children[i + 1].children
            out[node.children[i].text] = stats[1].head  # calls
        return out

    for names in ((), ("set",), ("client",), ("client|id", "blabla"), ("blabla",)):
        real, fake = d.both("LATENCY", "HISTOGRAM", *names)
        assert shape(fake) == shape(real), names


# -- engine alone ---------------------------------------------------------------------------


@pytest.fixture
def rex() -> Any:
    """``rex("SET", "k", "v")``: a command on an engine on the real clock (the busy loop
    reads it through TIME)."""
    engine = Engine()
    client = engine.connect()

    def run(*args: object) -> Any:
        return engine.execute(
            client, [a if isinstance(a, bytes) else str(a).encode() for a in args]
        )

    return run


def test_slowlog_args_redacts_passwords() -> None:
    assert slowlog_args("auth", [b"AUTH", b"user", b"secret"]) == [
        b"AUTH",
        b"(redacted)",
        b"(redacted)",
    ]
    assert slowlog_args("hello", [b"HELLO", b"3", b"AUTH", b"u", b"p", b"SETNAME", b"x"]) == [
        b"HELLO",
        b"3",
        b"AUTH",
        b"(redacted)",
        b"(redacted)",
        b"SETNAME",
        b"x",
    ]


def test_a_slow_call_is_logged_with_its_duration(rex: Any) -> None:
    rex("CONFIG", "SET", "slowlog-log-slower-than", "5000")
    rex("GET", "k")
    rex("EVAL", _BUSY, 0, 10)
    entries = rex("SLOWLOG", "GET")
    assert len(entries) == 1
    assert entries[0][3][0] == b"EVAL"
    assert entries[0][2] >= 10_000


def test_negative_threshold_disables_the_slowlog(rex: Any) -> None:
    rex("CONFIG", "SET", "slowlog-log-slower-than", "-1")
    rex("EVAL", _BUSY, 0, 2)
    assert rex("SLOWLOG", "LEN") == 0


def test_slowlog_reset_empties_it(rex: Any) -> None:
    rex("CONFIG", "SET", "slowlog-log-slower-than", "0")
    rex("SET", "k", "v")
    assert rex("SLOWLOG", "LEN") > 0
    rex("SLOWLOG", "RESET")
    assert rex("SLOWLOG", "LEN") in (0, 1)  # RESET itself may be logged after it ran


def test_latency_monitor_records_slow_commands(rex: Any) -> None:
    rex("CONFIG", "SET", "latency-monitor-threshold", "5")
    rex("EVAL", _BUSY, 0, 20)
    latest = {e[0]: e[1:] for e in rex("LATENCY", "LATEST")}
    # (the script's own TIME calls are fast-command samples if the machine stalls one)
    assert b"command" in latest
    when, ms, max_ms = latest[b"command"]
    assert 20 <= ms == max_ms
    history = rex("LATENCY", "HISTORY", "command")
    assert history == [[when, ms]]
    graph = rex("LATENCY", "GRAPH", "command").text
    assert graph.startswith(b"command - high ")
    assert b"command" in rex("LATENCY", "DOCTOR").text
    assert rex("LATENCY", "RESET") == len(latest)
    assert rex("LATENCY", "LATEST") == []


def test_calls_under_the_threshold_record_nothing(rex: Any) -> None:
    rex("CONFIG", "SET", "latency-monitor-threshold", "10000")
    rex("GET", "k")
    assert rex("LATENCY", "LATEST") == []


def test_latency_threshold_zero_records_nothing(rex: Any) -> None:
    rex("EVAL", _BUSY, 0, 5)
    assert rex("LATENCY", "LATEST") == []
    assert rex("LATENCY", "DOCTOR").text


def test_samples_within_one_second_keep_the_largest(rex: Any) -> None:
    from streamworker.engine.diagnostics import LatencyEvent

    event = LatencyEvent()
    event.add(100, 5)
    event.add(100, 9)
    event.add(100, 7)
    event.add(101, 3)
    assert list(event.samples) == [(100, 9), (101, 3)]
    assert event.max_ms == 9
