"""Differential tests: hypothesis-generated command programs (valid and invalid) run on
redis-server 7.0.15 and on the engine, comparing raw reply bytes, RESP2 and RESP3.

Each program runs from an empty server on two connections (RESP2 and RESP3 after HELLO 3),
and every reply of the engine must equal redis-server's byte for byte once what the clock
decides is masked in both (see ``differential/normalize.py``). fakeredis runs as a third
column for reference: its mismatches are counted and printed in the terminal summary, never
asserted on.

The budget is fixed and derandomized (the same programs on every run): the counts below under
the ``ci`` hypothesis profile, a quarter of them under ``dev`` (tests/support/hypothesis_profiles.py);
set ``DIFFERENTIAL_EXAMPLES`` to scale it for a longer local hunt.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from tests.engine.differential import strategies as S
from tests.engine.differential.backends import EngineBackend, FakeredisBackend, RedisBackend
from tests.engine.differential.normalize import normalize
from tests.engine.differential.resp import dump, parse
from tests.engine.differential.runner import Tally, describe, run_program
from tests.support.hypothesis_profiles import examples
from tests.support.servers import RedisServer

pytestmark = pytest.mark.redis

_SCALE = float(os.environ.get("DIFFERENTIAL_EXAMPLES", "1"))


def _budget(n: int) -> settings:
    return settings(
        max_examples=max(1, int(examples(n) * _SCALE)),
        deadline=None,
        derandomize=True,
        database=None,
        print_blob=False,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


class _TallyReport:
    """A runtime pytest plugin: prints fakeredis's tally after the run."""

    def __init__(self) -> None:
        self.tallies: dict[str, Tally] = {}

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.tallies:
            return
        terminalreporter.section("differential: fakeredis (reference column, not asserted)")
        total = Tally()
        for name, t in self.tallies.items():
            terminalreporter.write_line(f"{name}: {t.summary()}")
            total.programs += t.programs
            total.programs_mismatched += t.programs_mismatched
            total.commands += t.commands
            total.commands_mismatched += t.commands_mismatched
            for ex in t.first_examples[:2]:
                terminalreporter.write_line(f"    e.g. {ex}")
        terminalreporter.write_line(f"total: {total.summary()}")


@pytest.fixture(scope="module")
def tally_report(request: pytest.FixtureRequest) -> _TallyReport:
    report = _TallyReport()
    request.config.pluginmanager.register(report, "differential-fakeredis-tally")
    return report


@pytest.fixture(scope="module")
def columns(
    redis_server: RedisServer,
) -> Iterator[tuple[RedisBackend, EngineBackend, FakeredisBackend]]:
    """redis-server (the reference), the engine, fakeredis — shared by a module's examples."""
    real = RedisBackend(redis_server.port)
    engine = EngineBackend()
    fake = FakeredisBackend()
    yield real, engine, fake
    real.reset()
    real.close()
    engine.close()
    fake.close()


def _check(
    columns: tuple[RedisBackend, EngineBackend, FakeredisBackend],
    report: _TallyReport,
    group: str,
    program: Sequence[S.Step],
) -> None:
    real, engine, fake = columns
    tally = report.tallies.setdefault(group, Tally())
    mismatch = run_program(real, engine, program, extra=fake, tally=tally)
    if mismatch is not None:
        pytest.fail(describe(program, mismatch), pytrace=False)


# --- the harness itself -------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        b"+OK\r\n",
        b"$-1\r\n",
        b"*-1\r\n",
        b"_\r\n",
        b"*2\r\n$3\r\n1-1\r\n*2\r\n$1\r\nf\r\n$0\r\n\r\n",
        b"%1\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n1-1\r\n_\r\n",
        b",1.5\r\n",
        b"~2\r\n:1\r\n:2\r\n",
        b"-ERR syntax error\r\n",
    ],
)
def test_reply_tree_round_trips_raw_bytes(raw: bytes) -> None:
    """parse/dump is lossless, so comparing normalised trees is comparing raw bytes."""
    assert dump(parse(raw)) == raw


def test_normalize_masks_only_clock_values() -> None:
    """Clock ids, XPENDING idle times and XINFO seen-times are masked; explicit ids are not."""
    xadd = [b"XADD", b"s", b"*", b"f", b"v"]
    assert normalize(xadd, b"$15\r\n1700000000000-0\r\n") == normalize(
        xadd, b"$15\r\n1700000000123-4\r\n"
    )
    assert normalize(xadd, b"$3\r\n1-1\r\n") != normalize(xadd, b"$3\r\n1-2\r\n")
    pending = [b"XPENDING", b"s", b"g", b"-", b"+", b"10"]
    a = b"*1\r\n*4\r\n$3\r\n1-1\r\n$2\r\nc1\r\n:5\r\n:1\r\n"
    b = b"*1\r\n*4\r\n$3\r\n1-1\r\n$2\r\nc1\r\n:7\r\n:1\r\n"
    c = b"*1\r\n*4\r\n$3\r\n1-1\r\n$2\r\nc1\r\n:7\r\n:2\r\n"
    assert normalize(pending, a) == normalize(pending, b) != normalize(pending, c)
    consumers = [b"XINFO", b"CONSUMERS", b"s", b"g"]
    r2 = b"*1\r\n*6\r\n$4\r\nname\r\n$2\r\nc1\r\n$7\r\npending\r\n:1\r\n$4\r\nidle\r\n:%d\r\n"
    assert normalize(consumers, r2 % 3) == normalize(consumers, r2 % 12345)


# --- the differential groups --------------------------------------------------------------

_STREAM_PARTS = [
    S.xadd(),
    S.xadd(),
    S.xadd(),
    S.xrange(),
    S.xrange(),
    S.xlen(),
    S.xdel(),
    S.xtrim(),
    S.xread(),
    S.xread(),
    S.xsetid(),
    S.xinfo(),
    S.keyspace(),
]

_STREAM_SETUP = S.prelude()
_GROUP_SETUP = S.prelude(groups=True)

_GROUP_PARTS = [
    S.xreadgroup(),
    S.xreadgroup(),
    S.xreadgroup(),
    S.xadd_plain(),
    S.xgroup(),
    S.xgroup(),
    S.xack(),
    S.xpending(),
    S.xpending(),
    S.xclaim(),
    S.xclaim(),
    S.xautoclaim(),
    S.xautoclaim(),
    S.xinfo(),
    S.xinfo(),
    S.xdel(),
    S.xtrim(),
    S.xadd(),
    S.xsetid(),
]

_TYPE_PARTS = [
    S.strings(),
    S.hashes(),
    S.sets(),
    S.zsets(),
    S.lists(),
    S.keyspace(),
    S.keyspace(),
    S.xadd_plain(),
    S.xlen(),
    S.oddities(),
]

_BIT_PARTS = [
    S.bits(),
    S.bits(),
    S.bits(),
    S.bits(),
    S.strings(),
    S.keyspace(),
]

_GEO_PARTS = [
    S.geo(),
    S.geo(),
    S.geo(),
    S.keyspace(),
]

_HLL_PARTS = [
    S.hll(),
    S.hll(),
    S.hll(),
    S.strings(),
    S.keyspace(),
]

_LIST_PARTS = [
    S.lists(),
    S.lists(),
    S.list_positions(),
    S.list_positions(),
    S.list_positions(),
    S.keyspace(),
]

_LIST_MOVE_PARTS = [
    S.list_moves(),
    S.list_moves(),
    S.list_moves(),
    S.lists(),
    S.keyspace(),
]

_SET_ALGEBRA_PARTS = [
    S.set_algebra(),
    S.set_algebra(),
    S.set_algebra(),
    S.sets(),
    S.zsets(),
    S.keyspace(),
]

_RANDOM_SCAN_PARTS = [
    S.random_and_scans(),
    S.random_and_scans(),
    S.random_and_scans(),
    S.small_collections(),
    S.small_collections(),
    S.keyspace(),
]

_ZSET_POP_PARTS = [
    S.zset_pops(),
    S.zset_pops(),
    S.zset_pops(),
    S.zsets(),
    S.keyspace(),
]

_SORT_PARTS = [
    S.sorts(),
    S.sorts(),
    S.sorts(),
    S.lists(),
    S.keyspace(),
]

_TX_PARTS = [
    S.xadd_plain(),
    S.xadd(),
    S.xreadgroup(),
    S.xread(),
    S.xgroup(),
    S.xack(),
    S.xpending(),
    S.xrange(),
    S.strings(),
    S.hashes(),
    S.keyspace(),
    S.oddities(),
]

# BLOCK only inside MULTI, where redis-server never blocks.
_MULTI_PARTS = [*_TX_PARTS, S.xreadgroup(in_multi=True), S.xread(in_multi=True)]

_ERROR_PARTS = [
    S.oddities(),
    S.oddities(),
    S.xadd(),
    S.xrange(),
    S.xread(),
    S.xreadgroup(),
    S.xgroup(),
    S.xclaim(),
    S.xautoclaim(),
    S.xpending(),
    S.xinfo(),
    S.xsetid(),
    S.xtrim(),
    S.xack(),
]


@_budget(250)
@given(program=S.programs(_STREAM_PARTS, setup=_STREAM_SETUP, max_steps=25))
def test_stream_commands_match_redis(
    columns: tuple[RedisBackend, EngineBackend, FakeredisBackend],
    tally_report: _TallyReport,
    program: list[S.Step],
) -> None:
    """XADD (ids, NOMKSTREAM, trimming), ranges, XLEN, XDEL, XTRIM, XREAD, XSETID, XINFO STREAM."""
    _check(columns, tally_report, "streams", program)


@_budget(300)
@given(program=S.programs(_GROUP_PARTS, setup=_GROUP_SETUP, max_steps=25))
def test_consumer_group_commands_match_redis(
    columns: tuple[RedisBackend, EngineBackend, FakeredisBackend],
    tally_report: _TallyReport,
    program: list[S.Step],
) -> None:
    """XGROUP, XREADGROUP, XACK, XPENDING, XCLAIM, XAUTOCLAIM, XINFO GROUPS/CONSUMERS/FULL."""
    _check(columns, tally_report, "groups", program)


@_budget(200)
@given(program=S.programs(_TYPE_PARTS, setup=_STREAM_SETUP, max_steps=20))
def test_keyspace_and_other_types_match_redis(
    columns: tuple[RedisBackend, EngineBackend, FakeredisBackend],
    tally_report: _TallyReport,
    program: list[S.Step],
) -> None:
    """Strings, hashes, sets, sorted sets, lists, TYPE/EXISTS/DEL/EXPIRE/TTL, beside streams."""
    _check(columns, tally_report, "types", program)


@_budget(150)
@given(program=S.programs(_BIT_PARTS, setup=_STREAM_SETUP, max_steps=20))
def test_bit_commands_match_redis(
    columns: tuple[RedisBackend, EngineBackend, FakeredisBackend],
    tally_report: _TallyReport,
    program: list[S.Step],
) -> None:
    """SETBIT, GETBIT, BITCOUNT, BITPOS, BITOP, BITFIELD and BITFIELD_RO beside strings."""
    _check(columns, tally_report, "bits", program)


@_budget(150)
@given(program=S.programs(_GEO_PARTS, setup=_STREAM_SETUP, max_steps=20))
def test_geo_commands_match_redis(
    columns: tuple[RedisBackend, EngineBackend, FakeredisBackend],
    tally_report: _TallyReport,
    program: list[S.Step],
) -> None:
    """GEOADD, GEOPOS, GEODIST, GEOHASH, GEORADIUS(BYMEMBER)(_RO), GEOSEARCH(STORE)."""
    _check(columns, tally_report, "geo", program)


@_budget(150)
@given(program=S.programs(_HLL_PARTS, setup=_STREAM_SETUP, max_steps=20))
def test_hyperloglog_commands_match_redis(
    columns: tuple[RedisBackend, EngineBackend, FakeredisBackend],
    tally_report: _TallyReport,
    program: list[S.Step],
) -> None:
    """PFADD, PFCOUNT, PFMERGE, PFDEBUG beside strings (GET of the HLL values)."""
    _check(columns, tally_report, "hll", program)


@_budget(150)
@given(program=S.programs(_LIST_PARTS, setup=_STREAM_SETUP, max_steps=20))
def test_list_commands_match_redis(
    columns: tuple[RedisBackend, EngineBackend, FakeredisBackend],
    tally_report: _TallyReport,
    program: list[S.Step],
) -> None:
    """LPOS, LSET, LINSERT, LMPOP and BLMPOP (served or timing out at once) beside the other
    list commands."""
    _check(columns, tally_report, "lists", program)


@_budget(150)
@given(program=S.programs(_LIST_MOVE_PARTS, setup=_STREAM_SETUP, max_steps=20))
def test_list_move_commands_match_redis(
    columns: tuple[RedisBackend, EngineBackend, FakeredisBackend],
    tally_report: _TallyReport,
    program: list[S.Step],
) -> None:
    """LREM, LMOVE, RPOPLPUSH, BLMOVE and BRPOPLPUSH (served or timing out at once), the same
    list as source and destination, keys of other types."""
    _check(columns, tally_report, "list-moves", program)


@_budget(150)
@given(program=S.programs(_SET_ALGEBRA_PARTS, setup=_STREAM_SETUP, max_steps=20))
def test_set_algebra_commands_match_redis(
    columns: tuple[RedisBackend, EngineBackend, FakeredisBackend],
    tally_report: _TallyReport,
    program: list[S.Step],
) -> None:
    """SMOVE, the set STORE commands, ZUNION/ZINTER/ZDIFF and their STORE forms (WEIGHTS,
    AGGREGATE, infinite scores, sets as inputs, errors)."""
    _check(columns, tally_report, "set-algebra", program)


@_budget(150)
@given(program=S.programs(_RANDOM_SCAN_PARTS, setup=_STREAM_SETUP, max_steps=20))
def test_random_and_scan_commands_match_redis(
    columns: tuple[RedisBackend, EngineBackend, FakeredisBackend],
    tally_report: _TallyReport,
    program: list[S.Step],
) -> None:
    """SSCAN, HSCAN, ZSCAN of small collections; ZRANDMEMBER and HRANDFIELD where chance does
    not decide the reply."""
    _check(columns, tally_report, "random-scan", program)


@_budget(150)
@given(program=S.programs(_ZSET_POP_PARTS, setup=_STREAM_SETUP, max_steps=20))
def test_zset_pop_and_intersection_commands_match_redis(
    columns: tuple[RedisBackend, EngineBackend, FakeredisBackend],
    tally_report: _TallyReport,
    program: list[S.Step],
) -> None:
    """ZMPOP, BZMPOP, BZPOPMIN/MAX (served or timing out at once), ZINTERCARD, SINTERCARD,
    ZRANGESTORE beside the other sorted-set commands."""
    _check(columns, tally_report, "zset-pops", program)


@_budget(150)
@given(program=S.programs(_SORT_PARTS, max_steps=20))
def test_sort_commands_match_redis(
    columns: tuple[RedisBackend, EngineBackend, FakeredisBackend],
    tally_report: _TallyReport,
    program: list[S.Step],
) -> None:
    """SORT and SORT_RO (BY, GET, LIMIT, ASC/DESC, ALPHA, STORE, BY nosort) on lists, sets and
    sorted sets."""
    _check(columns, tally_report, "sort", program)


@_budget(200)
@given(
    program=S.programs(
        _TX_PARTS,
        setup=_GROUP_SETUP,
        multi_parts=_MULTI_PARTS,
        multi_percent=40,
        watch_percent=15,
        max_steps=12,
    )
)
def test_transactions_match_redis(
    columns: tuple[RedisBackend, EngineBackend, FakeredisBackend],
    tally_report: _TallyReport,
    program: list[S.Step],
) -> None:
    """MULTI/EXEC/DISCARD with queue-time errors, WATCH across connections, BLOCK inside MULTI."""
    _check(columns, tally_report, "transactions", program)


@_budget(200)
@given(program=S.programs(_ERROR_PARTS, setup=_GROUP_SETUP, mutate_percent=60, max_steps=15))
def test_argument_errors_match_redis(
    columns: tuple[RedisBackend, EngineBackend, FakeredisBackend],
    tally_report: _TallyReport,
    program: list[S.Step],
) -> None:
    """Wrong arity, unknown (sub)commands, bad ids and numbers, options in odd orders: the
    error text and which error wins."""
    _check(columns, tally_report, "errors", program)
