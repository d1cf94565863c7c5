"""INFO commandstats and latencystats, side by side with redis-server 7.0: every call is counted
under its command (``cmdstat_config|get`` for subcommands) as a call, a rejection (refused before
running: arity, NOAUTH, queued in a doomed MULTI...) or a failure (ran and replied an error);
CONFIG RESETSTAT empties them. Durations differ between the two servers, so the tests compare
the counters and check the shape of the timings."""

from __future__ import annotations

import re

import pytest

from tests.engine.conftest import Differ

pytestmark = pytest.mark.redis

_LINE = re.compile(
    rb"^cmdstat_([a-z|_-]+):calls=(\d+),usec=(\d+),usec_per_call=(\d+\.\d\d),"
    rb"rejected_calls=(\d+),failed_calls=(\d+)$"
)
_PERCENTILES = re.compile(rb"^latency_percentiles_usec_([a-z|_-]+):(.*)$")


def _counters(info_reply: bytes) -> dict[bytes, tuple[int, int, int]]:
    """``{command: (calls, rejected, failed)}`` from an INFO commandstats reply (the INFO call
    that produced it is left out: it is counted before it replies on one side only)."""
    out = {}
    for line in info_reply.split(b"\r\n"):
        if not line.startswith(b"cmdstat_"):
            continue
        m = _LINE.match(line)
        assert m is not None, line
        name, calls, _, _, rejected, failed = m.groups()
        if name != b"info":
            out[name] = (int(calls), int(rejected), int(failed))
    return out


def _both_counters(
    d: Differ,
) -> tuple[dict[bytes, tuple[int, int, int]], dict[bytes, tuple[int, int, int]]]:
    real, fake = d.both("INFO", "commandstats")
    return _counters(real), _counters(fake)


@pytest.fixture
def d(differ: Differ) -> Differ:
    differ.both("CONFIG", "RESETSTAT")
    return differ


def test_resetstat_leaves_only_itself(d: Differ) -> None:
    real, fake = _both_counters(d)
    assert fake == real == {b"config|resetstat": (1, 0, 0)}


def test_calls_are_counted_per_command_and_subcommand(d: Differ) -> None:
    d.check("SET", "a", "1")
    d.check("SET", "b", "2")
    d.check("GET", "a")
    d.check("CONFIG", "GET", "maxmemory-samples")
    real, fake = _both_counters(d)
    assert fake == real
    assert fake[b"set"] == (2, 0, 0)
    assert fake[b"config|get"] == (1, 0, 0)


def test_wrong_arity_is_a_rejected_call(d: Differ) -> None:
    d.check("GET")
    d.check("CONFIG")
    real, fake = _both_counters(d)
    assert fake == real
    assert fake[b"get"] == (0, 1, 0)


def test_unknown_commands_and_subcommands_are_counted_nowhere(d: Differ) -> None:
    d.check("NOSUCHCOMMAND", "x")
    d.check("CONFIG", "NOSUCH")
    real, fake = _both_counters(d)
    assert fake == real == {b"config|resetstat": (1, 0, 0)}


def test_an_error_reply_is_a_failed_call(d: Differ) -> None:
    d.check("SET", "s", "abc")
    d.check("INCR", "s")
    d.check("LPUSH", "s", "x")
    d.check("XADD", "st", "1-1", "f", "v")
    d.check("XADD", "st", "1-1", "f", "v")
    real, fake = _both_counters(d)
    assert fake == real
    assert fake[b"incr"] == (1, 0, 1)
    assert fake[b"lpush"] == (1, 0, 1)
    assert fake[b"xadd"] == (2, 0, 1)


def test_transaction_commands_count_when_exec_runs_them(d: Differ) -> None:
    d.check("SET", "s", "abc")
    for cmd in (("MULTI",), ("INCR", "s"), ("GET", "s"), ("EXEC",)):
        d.check(*cmd)
    real, fake = _both_counters(d)
    assert fake == real
    assert fake[b"incr"] == (1, 0, 1)
    assert fake[b"exec"] == (1, 0, 0)


def test_a_command_refused_while_queueing_is_rejected_and_exec_fails(d: Differ) -> None:
    for cmd in (("MULTI",), ("GET",), ("SET", "k", "v"), ("EXEC",)):
        d.check(*cmd)
    real, fake = _both_counters(d)
    assert fake == real
    assert fake[b"get"] == (0, 1, 0)
    assert fake[b"exec"] == (1, 0, 1)
    assert b"set" not in fake


def test_script_commands_count_under_their_own_names(d: Differ) -> None:
    d.check("SET", "s", "abc")
    d.check("EVAL", "redis.pcall('incr', KEYS[1]); return redis.call('get', KEYS[1])", 1, "s")
    real, fake = _both_counters(d)
    assert fake == real
    assert fake[b"incr"] == (1, 0, 1)
    assert fake[b"get"] == (1, 0, 0)
    assert fake[b"eval"] == (1, 0, 0)


def test_a_script_that_errors_is_a_failed_eval(d: Differ) -> None:
    d.check("EVAL", "return redis.error_reply('MY err')", 0)
    real, fake = _both_counters(d)
    assert fake == real
    assert fake[b"eval"] == (1, 0, 1)


def test_a_command_a_script_may_not_run_is_a_rejected_call(d: Differ) -> None:
    # Redis's scriptCall refusals (arity, noscript, read-only script) count as rejections.
    d.check("EVAL", "return redis.pcall('get')", 0)
    d.check("EVAL", "return redis.pcall('multi')", 0)
    d.check("EVAL_RO", "return redis.pcall('set', KEYS[1], 'v')", 1, "k")
    real, fake = _both_counters(d)
    assert fake == real
    assert fake[b"get"] == (0, 1, 0)
    assert fake[b"set"] == (0, 1, 0)


def test_a_write_refused_by_min_replicas_in_a_script_is_a_rejected_call(d: Differ) -> None:
    d.both("CONFIG", "SET", "min-replicas-to-write", "1")
    try:
        d.check("EVAL", "return redis.pcall('set', KEYS[1], 'v')", 1, "k")
        d.check("SET", "k", "v")
        d.check("EVAL", "#!lua\nreturn 1", 0)
        d.check("EVAL", "#!lua flags=no-writes\nreturn 1", 0)
        d.check("MULTI")
        d.check("SET", "k", "v")
        d.check("EXEC")
    finally:
        d.both("CONFIG", "SET", "min-replicas-to-write", "0")
    real, fake = _both_counters(d)
    assert fake == real
    assert fake[b"set"] == (0, 3, 0)


@pytest.mark.parametrize(
    "script", ["return redis.call('select', 99)", "return redis.pcall('select', 99)"]
)
def test_a_script_passing_on_a_command_error_is_a_failed_eval(d: Differ, script: str) -> None:
    d.check("EVAL", script, 0)
    real, fake = _both_counters(d)
    assert fake == real
    assert fake[b"eval"] == (1, 0, 1)


def _errorstats(d: Differ) -> tuple[bytes, bytes]:
    real, fake = d.both("INFO", "errorstats")
    return real.split(b"\r\n", 1)[1], fake.split(b"\r\n", 1)[1]


@pytest.mark.parametrize(
    "script",
    [
        "return redis.call('set', KEYS[1], 'v')",
        "local t = redis.pcall('set', KEYS[1], 'v'); return 1",
        "return redis.pcall('set', KEYS[1], 'v')",
    ],
)
def test_a_script_write_refused_for_memory_counts_one_error(d: Differ, script: str) -> None:
    # Redis counts the refusal when it happens (errorstats, set's rejected_calls), not again
    # when the script passes the error on.
    d.both("CONFIG", "SET", "maxmemory", "1")
    try:
        d.check("EVAL", script, 1, "k")
    finally:
        d.both("CONFIG", "SET", "maxmemory", "0")
    real, fake = _both_counters(d)
    assert fake == real
    assert fake[b"set"] == (0, 1, 0)
    real_errors, fake_errors = _errorstats(d)
    assert fake_errors == real_errors


def test_a_blocking_command_counts_once_when_it_times_out(d: Differ) -> None:
    d.check("BLPOP", "nolist", "0.01")
    real, fake = _both_counters(d)
    assert fake == real
    assert fake[b"blpop"] == (1, 0, 0)


def test_resetstat_clears_every_counter(d: Differ) -> None:
    d.check("SET", "s", "abc")
    d.check("INCR", "s")
    d.check("GET")
    d.check("CONFIG", "RESETSTAT")
    real, fake = _both_counters(d)
    assert fake == real == {b"config|resetstat": (1, 0, 0)}


def test_usec_per_call_is_usec_over_calls(d: Differ) -> None:
    for i in range(3):
        d.check("SET", "k", i)
    _, fake = d.both("INFO", "commandstats")
    line = next(x for x in fake.split(b"\r\n") if x.startswith(b"cmdstat_set:"))
    m = _LINE.match(line)
    assert m is not None
    assert float(m.group(4)) == pytest.approx(int(m.group(3)) / 3, abs=0.01)


def test_default_info_leaves_out_the_per_command_sections(d: Differ) -> None:
    real, fake = d.both("INFO")
    for reply in (real, fake):
        assert b"# Commandstats" not in reply
        assert b"# Latencystats" not in reply


def test_info_all_orders_the_sections_like_redis(d: Differ) -> None:
    real, fake = d.both("INFO", "ALL")

    def titles(reply: bytes) -> list[bytes]:
        return [line for line in reply.split(b"\r\n") if line.startswith(b"# ")]

    assert titles(fake) == titles(real)


def _percentile_lines(info_reply: bytes) -> dict[bytes, bytes]:
    out = {}
    for line in info_reply.split(b"\r\n"):
        m = _PERCENTILES.match(line)
        if m is not None and m.group(1) != b"info":
            out[m.group(1)] = m.group(2)
    return out


def test_latencystats_lists_the_called_commands_with_the_configured_percentiles(
    d: Differ,
) -> None:
    d.check("SET", "k", "v")
    d.check("GET", "k")
    real, fake = (_percentile_lines(r) for r in d.both("INFO", "latencystats"))
    assert sorted(fake) == sorted(real) == [b"config|resetstat", b"get", b"set"]
    names = re.compile(rb"^p50=\d+\.\d{3},p99=\d+\.\d{3},p99\.9=\d+\.\d{3}$")
    assert all(names.match(v) for v in fake.values()), fake


def test_latencystats_follows_latency_tracking_info_percentiles(d: Differ) -> None:
    try:
        d.check("CONFIG", "SET", "latency-tracking-info-percentiles", "90")
        d.check("CONFIG", "GET", "latency-tracking-info-percentiles")
        d.check("SET", "k", "v")
        real, fake = (_percentile_lines(r) for r in d.both("INFO", "latencystats"))
        assert re.match(rb"^p90=\d+\.\d{3}$", fake[b"set"])
        assert re.match(rb"^p90=\d+\.\d{3}$", real[b"set"])
        d.check("CONFIG", "SET", "latency-tracking-info-percentiles", "50 abc")
        d.check("CONFIG", "SET", "latency-tracking-info-percentiles", "101")
    finally:
        d.both("CONFIG", "SET", "latency-tracking-info-percentiles", "50 99 99.9")


def test_a_new_engine_starts_with_empty_commandstats() -> None:
    from streamworker.engine import Engine

    first = Engine()
    client = first.connect()
    first.execute(client, [b"SET", b"k", b"v"])
    second = Engine()
    assert second.table[b"set"].calls == 0
    assert first.table[b"set"].calls == 1
