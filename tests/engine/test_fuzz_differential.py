"""Seeded random command programs over the non-stream families, run on redis-server 7.0 and
on the engine; every reply must be byte-identical (RESP2 and RESP3), sent directly and through
``EVAL`` (``redis.pcall``). ``FUZZ_PROGRAMS`` scales the number of programs for a longer local
hunt.

Arguments are drawn from a pool that mixes keys, numbers in every awkward spelling (float and
exponent extremes included: ``1e999999999``, ``1e4900``, hex floats, denormals), and option
words, so most commands hit argument-parsing and error paths as well as the happy path. Every
engine command must answer within :data:`COMMAND_TIME_LIMIT_S` (issue #24: some numbers took
a minute to parse).
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.engine.conftest import Differ

pytestmark = pytest.mark.redis

KEYS = ["a", "b", "h", "z", "l", "s", "n"]
NUMBERS = [
    "0",
    "1",
    "2",
    "-1",
    "3",
    "10",
    "1.5",
    "-2.5",
    "0.1",
    "1e3",
    "1e400",
    "-1e400",
    "inf",
    "-inf",
    "+inf",
    "nan",
    "",
    " 1",
    "01",
    "0x10",
    "9223372036854775807",
    "-9223372036854775808",
    "9223372036854775808",
    "abc",
    "(1",
    "(2.5",
    "[a",
    "(b",
    "-",
    "+",
    # Float and exponent extremes (long double and double ranges, bounded parsing).
    "1e999999999",
    "-1e999999999",
    "1e-999999999",
    "-1e-999999999",
    "1e4900",
    "-1e4932",
    "1.2e4932",
    "1e-4950",
    "1e-4960",
    "0x1p16383",
    "0x1p-1074",
    "0x1.8p1",
    "1.7976931348623157e308",
    "4.9e-324",
    "2e-324",
    "1e-400",
    "-0",
    "+0.0",
    "1e",
    ".5e1",
    "5.",
    "1E+5",
    "1" + "0" * 400,
    "0." + "0" * 400 + "1",
]
WORDS = [
    "NX",
    "XX",
    "GT",
    "LT",
    "CH",
    "INCR",
    "EX",
    "EXAT",
    "KEEPTTL",
    "GET",
    "PERSIST",
    "WITHSCORES",
    "LIMIT",
    "BYSCORE",
    "BYLEX",
    "REV",
    "COUNT",
    "MATCH",
    "TYPE",
    "f",
    "g",
    "m",
    "x",
    "y",
]
COMMANDS = [
    "GET",
    "SET",
    "SETNX",
    "SETEX",
    "GETSET",
    "GETDEL",
    "GETEX",
    "INCR",
    "DECR",
    "INCRBY",
    "DECRBY",
    "INCRBYFLOAT",
    "MGET",
    "MSET",
    "MSETNX",
    "APPEND",
    "STRLEN",
    "GETRANGE",
    "SETRANGE",
    "DEL",
    "EXISTS",
    "TYPE",
    "EXPIRE",
    "PERSIST",
    "TTL",
    "RENAME",
    "RENAMENX",
    "HSET",
    "HSETNX",
    "HGET",
    "HMGET",
    "HGETALL",
    "HDEL",
    "HLEN",
    "HEXISTS",
    "HKEYS",
    "HVALS",
    "HINCRBY",
    "HINCRBYFLOAT",
    "HSTRLEN",
    "SADD",
    "SREM",
    "SMEMBERS",
    "SISMEMBER",
    "SMISMEMBER",
    "SCARD",
    "ZADD",
    "ZINCRBY",
    "ZSCORE",
    "ZMSCORE",
    "ZRANGE",
    "ZRANGEBYSCORE",
    "ZREVRANGEBYSCORE",
    "ZREVRANGE",
    "ZRANGEBYLEX",
    "ZRANK",
    "ZREVRANK",
    "ZREM",
    "ZCARD",
    "ZCOUNT",
    "ZLEXCOUNT",
    "ZREMRANGEBYSCORE",
    "ZREMRANGEBYRANK",
    "ZPOPMIN",
    "ZPOPMAX",
    "LPUSH",
    "RPUSH",
    "LPOP",
    "RPOP",
    "LRANGE",
    "LLEN",
    "LINDEX",
    "LTRIM",
    "MULTI",
    "EXEC",
    "DISCARD",
    "WATCH",
    "UNWATCH",
    "PING",
    "ECHO",
    "DBSIZE",
    "SELECT",
    "SWAPDB",
    "FLUSHDB",
    "RENAMENX",
    "LPUSHX",
    "RPUSHX",
    "ZREMRANGEBYLEX",
    "ZREVRANGEBYLEX",
    "EXPIRETIME",
    "EXPIREAT",
    "SINTER",
    "SUNION",
    "SDIFF",
    "UNLINK",
    "TOUCH",
    "HMSET",
]
UNORDERED = {"SMEMBERS", "SINTER", "SUNION", "SDIFF"}
# Redis 7.0 commands the engine gained later, fuzzed in programs of their own (with writers
# that give them data) so that the seeded programs above stay what they were.
NEWER_COMMANDS = [
    "LREM",
    "LMOVE",
    "RPOPLPUSH",
    "SMOVE",
    "SINTERSTORE",
    "SUNIONSTORE",
    "SDIFFSTORE",
    "ZUNION",
    "ZINTER",
    "ZDIFF",
    "ZUNIONSTORE",
    "ZINTERSTORE",
    "ZDIFFSTORE",
    "LCS",
    "SUBSTR",
    "MOVE",
    "SADD",
    "ZADD",
    "RPUSH",
    "LPUSH",
    "SET",
    "LRANGE",
    "ZRANGE",
    "MULTI",
    "EXEC",
    "SELECT",
]
# Millisecond expiries (PX, PSETEX, PEXPIRE) are left out: whether a 1 ms TTL has passed
# depends on round-trip timing, not on the engine.


def _token(rng: random.Random) -> str:
    pool = rng.choice((KEYS, NUMBERS, WORDS, KEYS, NUMBERS))
    return rng.choice(pool)


def _program(seed: int, length: int = 40, commands: list[str] = COMMANDS) -> list[list[str]]:
    rng = random.Random(seed)
    prog = []
    for _ in range(length):
        name = rng.choice(commands)
        args = [rng.choice(KEYS)] if rng.random() < 0.9 else []
        args += [_token(rng) for _ in range(rng.choice((0, 1, 1, 2, 2, 2, 3, 4, 5)))]
        prog.append([name, *args])
    prog.append(["DISCARD"])
    return prog


def _norm(name: str, raw: bytes) -> bytes:
    if name in UNORDERED:
        return b"\r\n".join(sorted(raw.split(b"\r\n")))
    return raw


COMMAND_TIME_LIMIT_S = 2.0
# Run through EVAL: the command and its arguments as ARGV, errors returned as error replies.
VIA_EVAL = "return redis.pcall(unpack(ARGV))"


@contextmanager
def time_limit(what: list[str]) -> Iterator[None]:
    """Fail (instead of hanging) when the engine takes longer than the limit for ``what``."""

    def expired(signum: int, frame: object) -> None:
        raise TimeoutError(f"{what} took longer than {COMMAND_TIME_LIMIT_S} s on the engine")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, COMMAND_TIME_LIMIT_S)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("via", ["direct", "eval"])
@pytest.mark.parametrize("resp", [2, 3])
@pytest.mark.parametrize("seed", range(int(os.environ.get("FUZZ_PROGRAMS", "60"))))
def test_random_program_matches_redis(differ: Differ, seed: int, resp: int, via: str) -> None:
    if resp == 3:
        differ.both("HELLO", 3)
    for cmd in _program(seed * 7 + resp):
        sent = cmd if via == "direct" else ["EVAL", VIA_EVAL, "0", *cmd]
        real = differ.real.call(*sent)
        started = time.monotonic()
        with time_limit(cmd):
            fake = differ.fake.call(*sent)
        assert time.monotonic() - started < COMMAND_TIME_LIMIT_S, cmd
        assert _norm(cmd[0], fake) == _norm(cmd[0], real), f"{cmd}: redis={real!r} engine={fake!r}"


@pytest.mark.parametrize("via", ["direct", "eval"])
@pytest.mark.parametrize("resp", [2, 3])
@pytest.mark.parametrize("seed", range(int(os.environ.get("FUZZ_PROGRAMS", "60")) // 2))
def test_random_program_of_the_newer_commands_matches_redis(
    differ: Differ, seed: int, resp: int, via: str
) -> None:
    """LREM, LMOVE, SMOVE, the set algebra, LCS, SUBSTR and MOVE in random programs."""
    if resp == 3:
        differ.both("HELLO", 3)
    for cmd in _program(seed * 11 + resp, commands=NEWER_COMMANDS):
        sent = cmd if via == "direct" else ["EVAL", VIA_EVAL, "0", *cmd]
        real = differ.real.call(*sent)
        with time_limit(cmd):
            fake = differ.fake.call(*sent)
        assert _norm(cmd[0], fake) == _norm(cmd[0], real), f"{cmd}: redis={real!r} engine={fake!r}"
