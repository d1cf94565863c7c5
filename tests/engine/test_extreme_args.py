"""Every command of the engine's table with extreme and malformed arguments, side by side with
redis-server 7.0: the int64 and int32 extremes, 2^64, empty strings and non-numbers in every
count, offset, index, range, TTL and timeout slot (:mod:`tests.engine.differential.extremes`),
on a key of every type, and with the wrong number of arguments.

Each reply must match redis-server's (same bytes; for commands whose result chance or hashing
decides, the same reply type and length; SCAN's cursor is opaque), each command must answer
within :data:`COMMAND_TIME_LIMIT_S` (the failure names it), and the process's peak memory must
not jump. The table run is exhaustive (about 27,000 commands); the hypothesis run mixes
extremes into random argument lists in RESP2 and RESP3, seeded so that a failure replays.
"""

from __future__ import annotations

import resource
import time
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from streamworker.engine import Engine, msgs
from streamworker.engine.commands import load_commands
from streamworker.engine.context import Blocked, ClientState
from streamworker.engine.protocol import encode
from tests.engine.differential.extremes import (
    ALLOCATING_COMMANDS,
    ALLOCATING_OFFSETS,
    EXTREMES,
    KEYS,
    REPEATING_COMMANDS,
    REPEATING_COUNTS,
    SETUP,
    SKIPPED,
    TEMPLATES,
    expand,
)
from tests.engine.differential.normalize import normalize
from tests.engine.differential.resp import RawConnection, pack_command, pretty
from tests.engine.test_fuzz_differential import COMMAND_TIME_LIMIT_S, time_limit
from tests.support.hypothesis_profiles import examples

pytestmark = pytest.mark.redis

# Chance decides which members come back; SCAN's cursor is a position in a hash table;
_SHAPE_ONLY = frozenset({b"srandmember", b"spop", b"zrandmember", b"hrandfield"})
# COMMAND describes the whole table, redis-server's has more commands than the engine's;
# CLIENT LIST/INFO/ID describe the connection.
# SSCAN walks a set of strings in Redis's dict order (COUNT decides how many come back).
_ERROR_OR_SHAPE = frozenset({b"scan", b"sscan", b"command", b"client"})
# Commands whose min-idle / IDLE argument compares with the time since the fixture was built.
_IDLE_TIMED = frozenset({b"xautoclaim", b"xclaim", b"xpending"})
# Peak RSS may grow by this much over a whole run (the engine's fixture data is a few bytes).
_MEMORY_JUMP_LIMIT_BYTES = 200 * 1024 * 1024
# Commands answering one frame per argument (several replies to one command).
_MULTI_FRAME = frozenset({"unsubscribe", "punsubscribe", "sunsubscribe"})
# Commands that change state: the fixture is rebuilt after each of them.
_STATEFUL = frozenset({b"select", b"swapdb", b"client", b"config", b"eval", b"xgroup"})


class SideBySide:
    """redis-server and a fresh engine, both holding :data:`SETUP`'s keys."""

    def __init__(self, port: int, resp: int = 2) -> None:
        self.resp = resp
        self.real = RawConnection(port)
        if resp == 3:
            self.real.call([b"HELLO", b"3"])
        self.engine = Engine()
        self.client: ClientState = self.engine.connect()
        self.write_flagged = {
            name
            for name, spec in self.engine.table.items()
            if "write" in spec.flags or spec.subcommands
        }
        # Commands that can change nothing but keys: the plain reads and writes. After only
        # those, flushing the keys and replaying SETUP rebuilds the fixture in place, as on
        # redis-server; after any other (config, ACL, functions, scripts, the selected database,
        # the connection, ...) the engine is built anew. Building one costs some 10 ms (command
        # table, ACL categories) and the table run rebuilds thousands of times.
        self.keys_only = {
            name
            for name, spec in self.engine.table.items()
            if ("write" in spec.flags or "readonly" in spec.flags)
            and not spec.subcommands
            and name not in _STATEFUL
        }
        self.only_keys_changed = True
        # redis-server's rebuild waits to go out with the next command (one round trip, not two).
        self.real_pending: list[list[bytes]] = []

    def _rebuild_batch(self) -> list[list[bytes]]:
        return [[b"FLUSHALL"], [b"SELECT", b"0"], *(list(c) for c in SETUP)]

    def reset(self) -> None:
        """Both sides back to SETUP's keys (see ``keys_only``)."""
        if self.only_keys_changed:
            for c in self._rebuild_batch():
                self.engine.execute(self.client, c)
        else:
            self.engine = Engine()
            self.client = self.engine.connect()
            if self.resp == 3:
                self.engine.execute(self.client, [b"HELLO", b"3"])
            for c in SETUP:
                self.engine.execute(self.client, list(c))
        self.only_keys_changed = True
        self.real_pending = self._rebuild_batch()

    def _flush_real_pending(self) -> None:
        batch, self.real_pending = self.real_pending, []
        if batch:
            self.real.sock.sendall(b"".join(pack_command(c) for c in batch))
            for _ in batch:
                self.real.read_reply()

    def real_call(self, argv: list[bytes]) -> bytes:
        """``argv``'s reply from redis-server, after any rebuild still waiting to be sent (its
        replies are read and dropped, as they always were)."""
        batch, self.real_pending = self.real_pending, []
        self.real.sock.sendall(b"".join(pack_command(c) for c in [*batch, argv]))
        for _ in batch:
            self.real.read_reply()
        return self.real.read_reply()

    def dirty_after(self, argv: list[bytes]) -> bool:
        name = argv[0].lower()
        return name in self.write_flagged or name in _STATEFUL or name.startswith(b"b")

    def engine_call(self, argv: list[bytes]) -> bytes:
        started = time.monotonic()
        with time_limit([a.decode("latin-1") for a in argv]):
            reply = self.engine.execute(self.client, argv)
        elapsed = time.monotonic() - started
        assert elapsed < COMMAND_TIME_LIMIT_S, f"{argv!r} took {elapsed:.1f} s on the engine"
        assert not isinstance(reply, Blocked), f"the engine blocked on {argv!r}"
        return encode(reply, self.client.resp)

    def compare(self, argv: list[bytes]) -> None:
        if argv[0].lower() in _IDLE_TIMED:
            # Both sides' pending entries then have an idle time past 1 ms.
            self._flush_real_pending()
            time.sleep(0.002)
        if argv[0].lower() not in self.keys_only:
            self.only_keys_changed = False
        fake = self.engine_call(argv)
        real = self.real_call(argv)
        assert _comparable(argv, fake) == _comparable(argv, real), (
            f"{argv!r}: redis={pretty(real)} engine={pretty(fake)}"
        )

    def close(self) -> None:
        self._flush_real_pending()
        self.real.call([b"FLUSHALL"])
        self.real.call([b"FUNCTION", b"FLUSH"])
        self.real.close()
        self.engine.disconnect(self.client)


def _comparable(argv: list[bytes], raw: bytes) -> bytes:
    name = argv[0].lower()
    if raw.startswith(b"-"):
        return raw
    if name in _SHAPE_ONLY:
        return raw.split(b"\r\n", 1)[0]
    if name in _ERROR_OR_SHAPE:
        return raw[:1]
    return normalize(argv, raw)


def _allocates(argv: list[bytes]) -> bool:
    """A SETBIT / BITFIELD that would grow a string to 256 MB on both servers (the engine's
    bound on that is checked in test_bits.py)."""
    return argv[0].lower() in ALLOCATING_COMMANDS and any(a in ALLOCATING_OFFSETS for a in argv)


def _peak_rss_bytes() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def sides_any_resp(redis_port: int, request: pytest.FixtureRequest) -> Iterator[SideBySide]:
    s = SideBySide(redis_port, request.param)
    s.reset()
    yield s
    s.close()


@pytest.fixture
def sides(redis_port: int) -> Iterator[SideBySide]:
    s = SideBySide(redis_port)
    s.reset()
    yield s
    s.close()


def test_every_command_of_the_table_is_driven_or_skipped_for_a_reason() -> None:
    table = {name.decode() for name in load_commands()}
    assert table - set(TEMPLATES) - set(SKIPPED) == set()
    assert set(TEMPLATES) - table == set(), "templates for commands the engine lacks"


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_extreme_arguments_answer_at_once_as_redis_does(sides: SideBySide, name: str) -> None:
    before = _peak_rss_bytes()
    dirty = False
    for argv in expand(name):
        if name.encode() in REPEATING_COMMANDS and any(a in REPEATING_COUNTS for a in argv):
            continue
        if _allocates(argv):
            continue
        if dirty:
            sides.reset()
        sides.compare(argv)
        dirty = sides.dirty_after(argv)
    assert _peak_rss_bytes() - before < _MEMORY_JUMP_LIMIT_BYTES, name


@pytest.mark.parametrize("count", sorted(REPEATING_COUNTS))
def test_srandmember_refuses_a_huge_negative_count_at_once(sides: SideBySide, count: bytes) -> None:
    # redis-server would build -count members whatever the set's size (not sent to it).
    before = _peak_rss_bytes()
    reply = sides.engine_call([b"SRANDMEMBER", b"set", count])
    assert reply == b"-%s\r\n" % msgs.SRANDMEMBER_REPEATS_OUT_OF_RANGE.encode()
    assert _peak_rss_bytes() - before < _MEMORY_JUMP_LIMIT_BYTES


def test_srandmember_repeats_up_to_the_engine_bound(sides: SideBySide) -> None:
    limit = msgs.SRANDMEMBER_MAX_REPEATS
    assert sides.engine_call([b"SRANDMEMBER", b"set", b"-%d" % limit]).startswith(
        b"*%d\r\n" % limit
    )
    assert sides.engine_call([b"SRANDMEMBER", b"set", b"-%d" % (limit + 1)]).startswith(b"-ERR")


_NAMES = sorted(TEMPLATES)
_TOKENS = st.sampled_from(
    [
        *EXTREMES,
        *KEYS,
        b"COUNT",
        b"LIMIT",
        b"BLOCK",
        b"STREAMS",
        b"MAXLEN",
        b"~",
        b"EX",
        b"PX",
        b"BYSCORE",
        b"g",
        b"c",
        b"-",
        b"+",
        b"*",
    ]
)


@seed(20261126)
@settings(
    max_examples=examples(1000),
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    name=st.sampled_from(_NAMES),
    args=st.lists(_TOKENS, max_size=7),
)
def test_random_extreme_argument_lists_answer_at_once_as_redis_does(
    sides_any_resp: SideBySide, name: str, args: list[bytes]
) -> None:
    sides = sides_any_resp
    argv = [name.encode(), *args]
    lowered = [a.lower() for a in args]
    if (
        name in ("blpop", "brpop", "blmpop", "bzpopmin", "bzpopmax", "bzmpop")
        or b"block" in lowered
    ):
        # A missing key with a valid timeout blocks redis-server (the engine too).
        return
    if name.encode() in REPEATING_COMMANDS and any(a in REPEATING_COUNTS for a in args):
        return
    if _allocates(argv):
        return
    if name in _MULTI_FRAME and len(args) > 1:
        # One frame per channel: this harness reads one reply per command.
        return
    sides.reset()
    sides.compare(argv)
