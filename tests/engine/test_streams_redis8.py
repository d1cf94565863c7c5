"""The engine's Redis 8.x mode (``redis_version="8.10"``): the stream commands and options of
Redis 8.2 .. 8.8, built from their redis.io pages (each test cites the page it checks), in
RESP2 and RESP3, through the append-only file, its rewrite and RDB; and the default 7.0 mode
refusing each of them exactly as redis-server 7.0.15 does.

No Redis 8 server can be installed here: the 8.x behaviour is checked against the pages, the
7.0 refusals against the session's real redis-server.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streamworker.engine import Engine
from streamworker.engine.aof import AppendOnlyFile, iter_records, open_persistent
from streamworker.engine.context import Blocked
from streamworker.engine.errors import CommandError
from streamworker.engine.inproc import engine_from_url, forget_engine
from streamworker.engine.protocol import encode
from streamworker.engine.rdb.files import build_rdb, load_rdb_bytes
from streamworker.engine.replies import NULL_BULK, Map
from tests.engine.aof_support import Session, dump_state
from tests.engine.conftest import Differ, FakeClock
from tests.support.engine_server import EngineServerProcess
from tests.support.proc import ROOT

LLONG_MAX = (1 << 63) - 1

XREADGROUP_PAGE = "https://redis.io/docs/latest/commands/xreadgroup/"


class Run:
    """One client of an engine: ``run("XADD", "s", "1-0", "f", "v")`` -> the reply value;
    ``run.wire(3, ...)`` -> the reply as RESP3 bytes."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.client = engine.connect()

    def __call__(self, *args: Any) -> Any:
        argv = [a if isinstance(a, bytes) else str(a).encode() for a in args]
        reply = self.engine.execute(self.client, argv)
        if isinstance(reply, CommandError):
            raise reply
        return reply

    def wire(self, resp: int, *args: Any) -> bytes:
        self("HELLO", resp)
        return encode(self(*args), resp)


@pytest.fixture
def r8(clock: FakeClock) -> Engine:
    """An 8.10 engine on the fake clock."""
    return Engine(clock=clock, redis_version="8.10")


@pytest.fixture
def run(r8: Engine) -> Run:
    return Run(r8)


def pending(run: Run, key: str = "s", group: str = "g") -> list[list[Any]]:
    """XPENDING's extended form, every entry: [id, consumer, idle, deliveries]."""
    return run("XPENDING", key, group, "-", "+", 100)  # type: ignore[no-any-return]


def read_all(run: Run, consumer: str, n: int, key: str = "s") -> None:
    """``consumer`` reads ``n`` new entries (they become pending with one delivery each)."""
    run("XREADGROUP", "GROUP", "g", consumer, "COUNT", n, "STREAMS", key, ">")


def stream_with_group(run: Run, n: int) -> None:
    """Stream ``s`` with entries 1-0 .. n-0 (field ``i``) and group ``g`` at 0."""
    for i in range(1, n + 1):
        run("XADD", "s", f"{i}-0", "i", i)
    run("XGROUP", "CREATE", "s", "g", "0")


# --- the version choice ---------------------------------------------------------------------


def test_default_engine_reports_7_0_15_in_info_and_hello() -> None:
    """By default the engine is Redis 7.0.15, as before the version choice existed."""
    run = Run(Engine())
    assert b"redis_version:7.0.15\r\n" in run("INFO", "server").text
    assert dict(run("HELLO", "3").items)[b"version"] == b"7.0.15"


def test_an_8_10_engine_reports_8_10_0_in_info_hello_and_lua(run: Run) -> None:
    """The chosen version is what INFO server, HELLO and scripts' redis.REDIS_VERSION say."""
    assert b"redis_version:8.10.0\r\n" in run("INFO", "server").text
    assert dict(run("HELLO", "3").items)[b"version"] == b"8.10.0"
    assert run("EVAL", "return redis.REDIS_VERSION", 0) == b"8.10.0"


def test_a_version_the_engine_does_not_speak_is_refused_in_one_line() -> None:
    """7.2 changed replies the engine does not reproduce; 9.0 promises what it lacks."""
    for bad in ("7.2", "9.0", "8.11", "eight"):
        with pytest.raises(ValueError, match=r"use 7\.0 .* or 8\.0 \.\. 8\.10") as info:
            Engine(redis_version=bad)
        assert "\n" not in str(info.value)


def test_engine_url_redis_version_query_selects_the_version() -> None:
    """``engine://memory/NAME?redis_version=8.10`` builds an 8.10 engine; the same name asked
    for with another version is refused rather than silently served by the first one."""
    url = "engine://memory/r8-url?redis_version=8.10"
    try:
        engine = engine_from_url(url)
        assert engine.redis_version == "8.10.0"
        assert engine_from_url("engine://memory/r8-url") is engine
        with pytest.raises(ValueError, match=r"already open as Redis 8\.10\.0"):
            engine_from_url("engine://memory/r8-url?redis_version=7.0")
        with pytest.raises(ValueError, match="not one the engine speaks"):
            engine_from_url("engine://memory/r8-other?redis_version=6.2")
    finally:
        forget_engine(url)


def test_versions_before_a_feature_do_not_have_its_commands() -> None:
    """XNACK is 8.8 (https://redis.io/docs/latest/commands/xnack/: "Available since 8.8.0"),
    XREADGROUP CLAIM 8.4, XACKDEL 8.2: an 8.2 engine has XACKDEL only."""
    run = Run(Engine(redis_version="8.2"))
    run("XADD", "s", "1-0", "f", "v")
    run("XGROUP", "CREATE", "s", "g", "0")
    assert run("XACKDEL", "s", "g", "IDS", 1, "1-0") == [1]
    with pytest.raises(CommandError, match="unknown command 'XNACK'"):
        run("XNACK", "s", "g", "FAIL", "IDS", 1, "1-0")
    with pytest.raises(CommandError, match="syntax error"):
        run("XREADGROUP", "GROUP", "g", "c", "CLAIM", 0, "STREAMS", "s", ">")


# --- Redis 7.0 mode refuses every 8.x command and option as redis-server 7.0.15 does ----------

_REFUSED_IN_7_0 = [
    ("XACKDEL", "s", "g", "IDS", "1", "1-0"),
    ("XACKDEL", "s", "g", "ACKED", "IDS", "1", "1-0"),
    ("XDELEX", "s", "DELREF", "IDS", "1", "1-0"),
    ("XNACK", "s", "g", "FAIL", "IDS", "1", "1-0"),
    ("XCFGSET", "s", "IDMP-DURATION", "100"),
    ("XADD", "s", "KEEPREF", "*", "f", "v"),
    ("XADD", "s", "ACKED", "MAXLEN", "0", "*", "f", "v"),
    ("XADD", "s", "MAXLEN", "0", "DELREF", "*", "f", "v"),
    ("XADD", "s", "IDMP", "p", "i", "*", "f", "v"),
    ("XADD", "s", "IDMPAUTO", "p", "*", "f", "v"),
    ("XTRIM", "s", "MAXLEN", "0", "ACKED"),
    ("XTRIM", "s", "DELREF", "MINID", "5"),
    ("XREADGROUP", "GROUP", "g", "c", "CLAIM", "0", "STREAMS", "s", ">"),
    ("XREADGROUP", "GROUP", "g", "c", "COUNT", "1", "CLAIM", "10", "STREAMS", "s", ">"),
    ("XREAD", "CLAIM", "0", "STREAMS", "s", "0"),
    ("XREAD", "MAXCOUNT", "1", "STREAMS", "s", "0"),
    ("XREADGROUP", "GROUP", "g", "c", "MAXSIZE", "100", "STREAMS", "s", ">"),
]


@pytest.mark.parametrize("resp", [2, 3])
def test_7_0_mode_refuses_each_8x_command_and_option_as_redis_7_0_15(
    differ: Differ, resp: int
) -> None:
    """Every reply, byte for byte, equals the session's redis-server 7.0.15's: the unknown
    commands' and the syntax / invalid-ID errors the 7.0 parsers give the new words; the
    stream is left as it was."""
    differ.both("HELLO", resp)
    differ.check("XADD", "s", "1-0", "f", "v")
    differ.check("XGROUP", "CREATE", "s", "g", "0")
    for cmd in _REFUSED_IN_7_0:
        reply = differ.check(*cmd)
        assert reply.startswith(b"-"), cmd
    differ.check("XINFO", "STREAM", "s")
    differ.check("XPENDING", "s", "g")


# --- XREADGROUP ... CLAIM (8.4) --------------------------------------------------------------


def test_claim_reads_idle_pending_entries_first_then_new_ones_under_one_count(
    run: Run, clock: FakeClock
) -> None:
    """https://redis.io/docs/latest/commands/xreadgroup/ (Ordering guarantees): "Idle pending
    entries are reported first, then incoming entries"; COUNT caps both together ("20 idle
    pending entries + 80 incoming entries")."""
    stream_with_group(run, 5)
    read_all(run, "dead", 2)
    clock.now += 5000
    reply = run("XREADGROUP", "GROUP", "g", "live", "COUNT", 3, "CLAIM", 1000, "STREAMS", "s", ">")
    assert reply == [
        [
            b"s",
            [
                [b"1-0", [b"i", b"1"], 5000, 1],
                [b"2-0", [b"i", b"2"], 5000, 1],
                [b"3-0", [b"i", b"3"], 0, 0],
            ],
        ]
    ]
    assert [row[:2] for row in pending(run)] == [
        [b"1-0", b"live"],
        [b"2-0", b"live"],
        [b"3-0", b"live"],
    ]
    assert [row[3] for row in pending(run)] == [2, 2, 1]


def test_claim_leaves_entries_not_idle_long_enough_with_their_owner(
    run: Run, clock: FakeClock
) -> None:
    """XREADGROUP page (The CLAIM option): only messages "pending for at least min-idle-time
    milliseconds" are claimed; the others keep their owner, time and count."""
    stream_with_group(run, 2)
    read_all(run, "a", 1)
    clock.now += 999
    reply = run("XREADGROUP", "GROUP", "g", "b", "CLAIM", 1000, "STREAMS", "s", ">")
    assert reply == [[b"s", [[b"2-0", [b"i", b"2"], 0, 0]]]]
    assert pending(run)[0] == [b"1-0", b"a", 999, 1]


def test_claim_takes_the_longest_idle_entries_first(run: Run, clock: FakeClock) -> None:
    """XREADGROUP page (Ordering guarantees): "Idle pending entries are ordered by idle time
    (longer first)", not by ID."""
    stream_with_group(run, 3)
    read_all(run, "a", 3)
    clock.now += 100
    run("XCLAIM", "s", "g", "a", 0, "1-0")  # 1-0 delivered again: now the least idle
    clock.now += 5000
    reply = run("XREADGROUP", "GROUP", "g", "b", "CLAIM", 10, "STREAMS", "s", ">")
    assert [(e[0], e[2]) for e in reply[0][1]] == [(b"2-0", 5100), (b"3-0", 5100), (b"1-0", 5000)]


def test_claim_does_not_drop_deleted_entries_from_the_pel_unlike_xautoclaim(
    run: Run, clock: FakeClock
) -> None:
    """XREADGROUP page (What happens when a pending message is deleted?): the PELs "retain the
    deleted entries' IDs". A CLAIM read skips such an entry and leaves it pending with its
    owner, where XAUTOCLAIM purges it (https://redis.io/commands/xautoclaim/)."""
    stream_with_group(run, 2)
    read_all(run, "a", 2)
    run("XDEL", "s", "1-0")
    clock.now += 2000
    reply = run("XREADGROUP", "GROUP", "g", "b", "CLAIM", 1000, "STREAMS", "s", ">")
    assert reply == [[b"s", [[b"2-0", [b"i", b"2"], 2000, 1]]]]
    assert pending(run)[0] == [b"1-0", b"a", 2000, 1]
    assert run("XAUTOCLAIM", "s", "g", "b", 1000, "0")[2] == [b"1-0"]
    assert [row[0] for row in pending(run)] == [b"2-0"]


def test_claim_is_ignored_for_a_history_read(run: Run, clock: FakeClock) -> None:
    """XREADGROUP page: "CLAIM min-idle-time is ignored if the specified id is not >": the
    consumer's own pending entries come back in the standard two-element format."""
    stream_with_group(run, 2)
    read_all(run, "a", 2)
    clock.now += 5000
    reply = run("XREADGROUP", "GROUP", "g", "a", "CLAIM", 0, "STREAMS", "s", "0")
    assert reply == [[b"s", [[b"1-0", [b"i", b"1"]], [b"2-0", [b"i", b"2"]]]]]


def test_claim_with_noack_still_claims_pending_entries_but_not_new_ones(
    run: Run, clock: FakeClock
) -> None:
    """XREADGROUP page: "When used together with CLAIM, NOACK does not apply for retrieved
    pending entries": the claimed entry stays pending (now the reader's), the new one does
    not become pending."""
    stream_with_group(run, 2)
    read_all(run, "a", 1)
    clock.now += 100
    reply = run("XREADGROUP", "GROUP", "g", "b", "NOACK", "CLAIM", 50, "STREAMS", "s", ">")
    assert [e[0] for e in reply[0][1]] == [b"1-0", b"2-0"]
    assert pending(run) == [[b"1-0", b"b", 0, 2]]


def test_claim_with_nothing_to_claim_or_read_answers_nil_and_creates_no_consumer(
    run: Run,
) -> None:
    """As a 7.0 ``>`` read with nothing new (https://redis.io/commands/xreadgroup/): a null
    reply, and the consumer is not created."""
    stream_with_group(run, 1)
    read_all(run, "a", 1)
    reply = run("XREADGROUP", "GROUP", "g", "b", "CLAIM", 1000, "STREAMS", "s", ">")
    assert encode(reply, 2) == b"*-1\r\n"
    assert encode(reply, 3) == b"_\r\n"
    names = [dict(c.items)[b"name"] for c in run("XINFO", "CONSUMERS", "s", "g")]
    assert names == [b"a"]


def test_claim_min_idle_time_must_be_a_non_negative_integer(run: Run) -> None:
    """XREADGROUP page: CLAIM takes an integer min-idle-time; a negative or non-integer one is
    refused before anything is read."""
    stream_with_group(run, 1)
    for bad in ("-1", "abc", "1.5"):
        with pytest.raises(CommandError, match="min-idle-time"):
            run("XREADGROUP", "GROUP", "g", "c", "CLAIM", bad, "STREAMS", "s", ">")
    assert run("XINFO", "GROUPS", "s")[0].items[2] == (b"pending", 0)


def test_a_group_and_a_consumer_named_claim_are_not_the_option(run: Run) -> None:
    """The CLAIM option is found where the option parser walks, not as any word "claim"."""
    run("XADD", "s", "1-0", "f", "v")
    run("XGROUP", "CREATE", "s", "claim", "0")
    reply = run("XREADGROUP", "GROUP", "claim", "claim", "STREAMS", "s", ">")
    assert reply == [[b"s", [[b"1-0", [b"f", b"v"]]]]]


@pytest.mark.parametrize(
    ("resp", "expected"),
    [
        (
            2,
            b"*1\r\n*2\r\n$1\r\ns\r\n*2\r\n*4\r\n$3\r\n1-0\r\n*2\r\n$1\r\ni\r\n$1\r\n1\r\n"
            b":700\r\n:1\r\n*4\r\n$3\r\n2-0\r\n*2\r\n$1\r\ni\r\n$1\r\n2\r\n:0\r\n:0\r\n",
        ),
        (
            3,
            b"%1\r\n$1\r\ns\r\n*2\r\n*4\r\n$3\r\n1-0\r\n*2\r\n$1\r\ni\r\n$1\r\n1\r\n"
            b":700\r\n:1\r\n*4\r\n$3\r\n2-0\r\n*2\r\n$1\r\ni\r\n$1\r\n2\r\n:0\r\n:0\r\n",
        ),
    ],
)
def test_claim_reply_carries_idle_and_delivery_count_as_integers(
    run: Run, clock: FakeClock, resp: int, expected: bytes
) -> None:
    """XREADGROUP page (Reply extension for claimed entries): id, field-value pairs,
    milliseconds since the last delivery, deliveries so far; RESP2 an array of [key,
    entries], RESP3 a map (Return information)."""
    stream_with_group(run, 2)
    read_all(run, "a", 1)
    clock.now += 700
    argv = ("XREADGROUP", "GROUP", "g", "b", "CLAIM", 500, "STREAMS", "s", ">")
    assert run.wire(resp, *argv) == expected


def test_a_blocked_claim_read_is_served_by_xadd_in_the_claim_format(run: Run, r8: Engine) -> None:
    """XREADGROUP page: "Like XREAD the XREADGROUP command can be used in a blocking way"; the
    entry that wakes the reader comes with idle 0 and count 0 like any new entry."""
    stream_with_group(run, 1)
    read_all(run, "a", 1)
    blocked = run("XREADGROUP", "GROUP", "g", "b", "BLOCK", 0, "CLAIM", 10**6, "STREAMS", "s", ">")
    assert isinstance(blocked, Blocked)
    Run(r8)("XADD", "s", "2-0", "i", "2")
    assert r8.wait(blocked, timeout_s=5) == [[b"s", [[b"2-0", [b"i", b"2"], 0, 0]]]]


# --- XDELEX / XACKDEL / reference policies (8.2) ---------------------------------------------


def test_xdelex_keepref_deletes_the_entry_and_keeps_pel_references(run: Run) -> None:
    """https://redis.io/docs/latest/commands/xdelex/: KEEPREF (the default) "deletes the
    specified entries from the stream, but preserves existing references ... in all consumer
    groups' PEL"; -1 for an ID the stream does not have."""
    stream_with_group(run, 2)
    read_all(run, "a", 2)
    assert run("XDELEX", "s", "IDS", 2, "1-0", "9-0") == [1, -1]
    assert run("XLEN", "s") == 1
    assert [row[0] for row in pending(run)] == [b"1-0", b"2-0"]


def test_xdelex_delref_removes_the_entry_from_every_pel(run: Run) -> None:
    """XDELEX page: DELREF "also removes all references to these entries from all consumer
    groups' pending entry lists", and does so even for an ID no longer in the stream."""
    stream_with_group(run, 3)
    run("XGROUP", "CREATE", "s", "g2", "0")
    read_all(run, "a", 3)
    run("XREADGROUP", "GROUP", "g2", "b", "STREAMS", "s", ">")
    run("XDEL", "s", "3-0")
    assert run("XDELEX", "s", "DELREF", "IDS", 2, "1-0", "3-0") == [1, -1]
    assert [row[0] for row in pending(run)] == [b"2-0"]
    assert [row[0] for row in pending(run, group="g2")] == [b"2-0"]


def test_xdelex_acked_deletes_only_what_every_group_has_read_and_acknowledged(
    run: Run,
) -> None:
    """XDELEX page: ACKED "only deletes entries that were read and acknowledged by all
    consumer groups"; the others answer 2. An entry a group has not read yet is kept too."""
    stream_with_group(run, 3)
    read_all(run, "a", 2)
    run("XACK", "s", "g", "1-0")
    assert run("XDELEX", "s", "ACKED", "IDS", 3, "1-0", "2-0", "3-0") == [1, 2, 2]
    assert [e[0] for e in run("XRANGE", "s", "-", "+")] == [b"2-0", b"3-0"]


def test_xdelex_on_a_missing_key_answers_minus_one_per_id(run: Run) -> None:
    """XDELEX page (Return information): "-1 for each requested ID when the given key does not
    exist"."""
    assert run("XDELEX", "nokey", "IDS", 2, "1-0", "2-0") == [-1, -1]


def test_xdelex_numids_must_match_the_ids_given(run: Run) -> None:
    """XDELEX page: "numids: The number of IDs that follow"; a count that is not a positive
    integer, more IDs than follow, or no IDS block at all is refused and deletes nothing."""
    run("XADD", "s", "1-0", "f", "v")
    with pytest.raises(CommandError, match="numids"):
        run("XDELEX", "s", "IDS", 3, "1-0", "2-0")
    with pytest.raises(CommandError, match="positive integer"):
        run("XDELEX", "s", "IDS", 0, "1-0")
    with pytest.raises(CommandError, match="syntax error"):
        run("XDELEX", "s", "IDS", 1, "1-0", "2-0")
    with pytest.raises(CommandError, match="syntax error"):
        run("XDELEX", "s", "ACKED", "KEEPREF", "1-0")
    with pytest.raises(CommandError, match="Invalid stream ID"):
        run("XDELEX", "s", "IDS", 2, "1-0", "bad")
    assert run("XLEN", "s") == 1


def test_xackdel_acknowledges_and_deletes(run: Run) -> None:
    """https://redis.io/docs/latest/commands/xackdel/ (Examples): XACKDEL ... KEEPREF IDS 2
    answers [1, 1], the PEL summary is empty and the stream too."""
    stream_with_group(run, 2)
    read_all(run, "consumer1", 2)
    assert run("XACKDEL", "s", "g", "KEEPREF", "IDS", 2, "1-0", "2-0") == [1, 1]
    assert encode(run("XPENDING", "s", "g"), 2) == b"*4\r\n:0\r\n$-1\r\n$-1\r\n*-1\r\n"
    assert run("XRANGE", "s", "-", "+") == []


def test_xackdel_acked_keeps_an_entry_another_group_still_holds(run: Run) -> None:
    """XACKDEL page: ACKED "acknowledges the entries in the specified consumer group and only
    deletes entries that were read and acknowledged by all consumer groups": 2 while g2 still
    has it pending, 1 once g2 acknowledges it with XACKDEL too."""
    stream_with_group(run, 1)
    run("XGROUP", "CREATE", "s", "g2", "0")
    read_all(run, "a", 1)
    run("XREADGROUP", "GROUP", "g2", "b", "STREAMS", "s", ">")
    assert run("XACKDEL", "s", "g", "ACKED", "IDS", 1, "1-0") == [2]
    assert pending(run) == []
    assert run("XLEN", "s") == 1
    assert run("XACKDEL", "s", "g2", "ACKED", "IDS", 1, "1-0") == [1]
    assert run("XLEN", "s") == 0


def test_xackdel_delref_removes_the_entry_from_other_groups_pels(run: Run) -> None:
    """XACKDEL page: DELREF "also removes all references to these entries from all consumer
    groups' pending entry lists"."""
    stream_with_group(run, 1)
    run("XGROUP", "CREATE", "s", "g2", "0")
    read_all(run, "a", 1)
    run("XREADGROUP", "GROUP", "g2", "b", "STREAMS", "s", ">")
    assert run("XACKDEL", "s", "g", "DELREF", "IDS", 1, "1-0") == [1]
    assert pending(run, group="g2") == []


def test_xackdel_on_a_missing_key_or_group_answers_minus_one_per_id(run: Run) -> None:
    """XACKDEL page (Return information): "-1 for each requested ID when the given key does
    not exist"; a missing group is answered the same way (as XACK answers 0 for both)."""
    assert run("XACKDEL", "nokey", "g", "IDS", 1, "1-0") == [-1]
    run("XADD", "s", "1-0", "f", "v")
    assert run("XACKDEL", "s", "nogroup", "IDS", 1, "1-0") == [-1]
    assert run("XLEN", "s") == 1


def test_xadd_acked_trimming_keeps_entries_a_group_still_needs(run: Run) -> None:
    """https://redis.io/docs/latest/commands/xadd/: ACKED "when trimming, only removes entries
    that were read and acknowledged by all consumer groups" (entries a group has pending or
    has not read yet stay, even past MAXLEN)."""
    stream_with_group(run, 4)
    read_all(run, "a", 3)
    run("XACK", "s", "g", "1-0", "3-0")
    run("XADD", "s", "ACKED", "MAXLEN", 1, "5-0", "i", 5)
    assert [e[0] for e in run("XRANGE", "s", "-", "+")] == [b"2-0", b"4-0", b"5-0"]


def test_xadd_delref_trimming_drops_the_trimmed_entries_references(run: Run) -> None:
    """XADD page: DELREF "when trimming, removes entries ... and also removes all references
    to these entries from all consumer groups' PEL"; KEEPREF (the default) keeps them."""
    stream_with_group(run, 4)
    read_all(run, "a", 4)
    run("XADD", "s", "MAXLEN", 3, "5-0", "i", 5)  # 1-0 and 2-0 go, still pending
    assert [row[0] for row in pending(run)] == [b"1-0", b"2-0", b"3-0", b"4-0"]
    run("XADD", "s", "DELREF", "MAXLEN", 2, "6-0", "i", 6)  # 3-0 and 4-0 go, with their refs
    assert [row[0] for row in pending(run)] == [b"1-0", b"2-0"]
    assert [e[0] for e in run("XRANGE", "s", "-", "+")] == [b"5-0", b"6-0"]


def test_xtrim_acked_without_groups_trims_like_keepref(run: Run) -> None:
    """XADD page: "If there are no consumer groups, these arguments have no effect"."""
    for i in range(1, 5):
        run("XADD", "s", f"{i}-0", "i", i)
    assert run("XTRIM", "s", "MAXLEN", 1, "ACKED") == 3
    assert run("XTRIM", "s", "MINID", "9-0", "DELREF") == 1


def test_xtrim_acked_minid_removes_acknowledged_entries_below_the_threshold(run: Run) -> None:
    """https://redis.io/docs/latest/commands/xtrim/ with ACKED: below MINID only the entries
    every group has read and acknowledged go; the removed entry behind a kept one is a
    tombstone (max-deleted-entry-id moves, so lag is not guessed wrong)."""
    stream_with_group(run, 4)
    read_all(run, "a", 3)
    run("XACK", "s", "g", "2-0", "3-0")
    assert run("XTRIM", "s", "MINID", "4-0", "ACKED") == 2
    assert [e[0] for e in run("XRANGE", "s", "-", "+")] == [b"1-0", b"4-0"]
    info = dict(run("XINFO", "STREAM", "s").items)
    assert info[b"max-deleted-entry-id"] == b"3-0"


# --- XNACK (8.8) -----------------------------------------------------------------------------


def test_xnack_fail_releases_entries_unowned_with_their_count(run: Run) -> None:
    """https://redis.io/docs/latest/commands/xnack/ (Basic usage with FAIL mode): the reply
    counts the released entries, which "appear with empty consumer in XPENDING", idle -1 and
    the delivery count unchanged (FAIL "keeps the current delivery counter value")."""
    stream_with_group(run, 2)
    read_all(run, "consumer1", 2)
    assert run("XNACK", "s", "g", "FAIL", "IDS", 2, "1-0", "2-0") == 2
    assert pending(run) == [[b"1-0", b"", -1, 1], [b"2-0", b"", -1, 1]]
    summary = run("XPENDING", "s", "g")
    assert summary[0] == 2
    assert summary[3] == []
    consumers = run("XINFO", "CONSUMERS", "s", "g")
    assert dict(consumers[0].items)[b"pending"] == 0


def test_xnack_silent_undoes_the_delivery_and_fatal_marks_it_failed_for_good(
    run: Run, clock: FakeClock
) -> None:
    """XNACK page (mode): SILENT "decrements the delivery counter by 1", FATAL "sets the
    delivery counter to the maximum value (LLONG_MAX)"."""
    stream_with_group(run, 2)
    read_all(run, "a", 2)
    clock.now += 10
    run("XREADGROUP", "GROUP", "g", "a", "STREAMS", "s", "0")  # both at 2 deliveries
    assert run("XNACK", "s", "g", "SILENT", "IDS", 1, "1-0") == 1
    assert run("XNACK", "s", "g", "FATAL", "IDS", 1, "2-0") == 1
    assert [row[3] for row in pending(run)] == [1, LLONG_MAX]


def test_xnack_retrycount_sets_the_counter_whatever_the_mode(run: Run) -> None:
    """XNACK page (RETRYCOUNT): "Directly sets the delivery counter to the specified value,
    overriding the mode-based adjustment"."""
    stream_with_group(run, 1)
    read_all(run, "a", 1)
    assert run("XNACK", "s", "g", "FATAL", "IDS", 1, "1-0", "RETRYCOUNT", 5) == 1
    assert pending(run) == [[b"1-0", b"", -1, 5]]


def test_xnack_ignores_ids_not_pending_unless_force_creates_them(run: Run) -> None:
    """XNACK page (Notes): IDs not in the group PEL "will be ignored and not counted"; FORCE
    "creates new unowned PEL entries for IDs that are not already in the group PEL. The
    entry must exist in the stream", its counter 0, or RETRYCOUNT, or LLONG_MAX for FATAL."""
    stream_with_group(run, 3)
    assert run("XNACK", "s", "g", "FAIL", "IDS", 2, "1-0", "9-0") == 0
    assert run("XNACK", "s", "g", "FAIL", "IDS", 2, "1-0", "9-0", "FORCE") == 1
    assert run("XNACK", "s", "g", "FATAL", "IDS", 1, "2-0", "FORCE") == 1
    assert run("XNACK", "s", "g", "SILENT", "IDS", 1, "3-0", "RETRYCOUNT", 4, "FORCE") == 1
    assert pending(run) == [
        [b"1-0", b"", -1, 0],
        [b"2-0", b"", -1, LLONG_MAX],
        [b"3-0", b"", -1, 4],
    ]


def test_released_entries_are_claimed_first_whatever_min_idle_time(
    run: Run, clock: FakeClock
) -> None:
    """XNACK page (Behavior): released entries get delivery time 0, "making [them] immediately
    claimable with any min-idle-time threshold", and are "prioritized over other pending
    messages" when claimed (here by XREADGROUP CLAIM, whose reply shows the count kept)."""
    stream_with_group(run, 3)
    read_all(run, "a", 3)
    clock.now += 60_000
    run("XNACK", "s", "g", "FAIL", "IDS", 1, "3-0")
    reply = run("XREADGROUP", "GROUP", "g", "b", "COUNT", 1, "CLAIM", 10**9, "STREAMS", "s", ">")
    assert [(e[0], e[3]) for e in reply[0][1]] == [(b"3-0", 1)]
    assert pending(run)[2] == [b"3-0", b"b", 0, 2]
    claimed = run("XAUTOCLAIM", "s", "g", "c", 0, "0", "JUSTID")
    assert claimed[1] == [b"1-0", b"2-0", b"3-0"]


def test_xnack_needs_a_mode_a_group_and_valid_ids(run: Run) -> None:
    """XNACK page: the mode "must be one of" SILENT, FAIL, FATAL; the group must exist
    (NOGROUP, as XCLAIM); a bad ID or RETRYCOUNT changes nothing."""
    stream_with_group(run, 1)
    read_all(run, "a", 1)
    with pytest.raises(CommandError, match="SILENT, FAIL or FATAL"):
        run("XNACK", "s", "g", "IDS", 1, "1-0", "FORCE")
    with pytest.raises(CommandError, match=r"^NOGROUP"):
        run("XNACK", "s", "nog", "FAIL", "IDS", 1, "1-0")
    with pytest.raises(CommandError, match="RETRYCOUNT"):
        run("XNACK", "s", "g", "FAIL", "IDS", 1, "1-0", "RETRYCOUNT", -1)
    with pytest.raises(CommandError, match="Invalid stream ID"):
        run("XNACK", "s", "g", "FAIL", "IDS", 1, "x")
    assert pending(run)[0][1] == b"a"


# --- what is logged, and persistence ---------------------------------------------------------


def records(path: Path) -> list[list[bytes]]:
    """The commands in an append-only file (annotations left out)."""
    return [item for _, _, item in iter_records(path.read_bytes(), path) if isinstance(item, list)]


@pytest.fixture
def aof8(tmp_path: Path) -> Iterator[AppendOnlyFile]:
    """An 8.10 engine logging to tmp_path/data."""
    a = open_persistent(tmp_path / "data", Engine(redis_version="8.10"), appendfsync="always")
    yield a
    a.close()


def reopen8(aof: AppendOnlyFile) -> AppendOnlyFile:
    directory = aof.dir
    aof.close()
    return open_persistent(directory, Engine(redis_version="8.10"), appendfsync="always")


def test_a_claim_read_is_logged_as_xclaim_as_xautoclaim_is(aof8: AppendOnlyFile) -> None:
    """XREADGROUP page: the claim is a change of owner, time and count; it is logged as the
    XCLAIM ... FORCE JUSTID that sets them exactly (XAUTOCLAIM's form), the new entries as a
    7.0 group read's XCLAIM ... LASTID."""
    s = Session(aof8.engine)
    for i in range(1, 4):
        s("XADD", "s", f"{i}-0", "i", i)
    s("XGROUP", "CREATE", "s", "g", "0")
    s("XREADGROUP", "GROUP", "g", "a", "COUNT", 1, "STREAMS", "s", ">")
    s("XREADGROUP", "GROUP", "g", "b", "CLAIM", 0, "STREAMS", "s", ">")
    claims = [r for r in records(aof8.path) if r[0] == b"XCLAIM" and r[3] == b"b"]
    assert claims[0][5] == b"1-0"
    assert b"RETRYCOUNT" in claims[0]
    assert claims[0][claims[0].index(b"RETRYCOUNT") + 1] == b"2"
    assert claims[1][5:7] == [b"2-0", b"3-0"]
    assert claims[1][-2:] == [b"LASTID", b"3-0"]
    assert not any(r[0] == b"XREADGROUP" and b"CLAIM" in r for r in records(aof8.path))


def test_an_approximate_delref_trim_is_logged_as_the_exact_trim_it_amounted_to(
    aof8: AppendOnlyFile,
) -> None:
    """XADD / XTRIM with ``~``: the record is exact (node layout decides what ``~`` removes),
    and keeps DELREF so that replay drops the same references."""
    s = Session(aof8.engine)
    s("CONFIG", "SET", "stream-node-max-entries", 2)
    for i in range(1, 6):
        s("XADD", "s", f"{i}-0", "i", i)
    s("XGROUP", "CREATE", "s", "g", "0")
    s("XREADGROUP", "GROUP", "g", "a", "STREAMS", "s", ">")
    assert s("XTRIM", "s", "DELREF", "MAXLEN", "~", 2) == 2
    assert [b"XTRIM", b"s", b"DELREF", b"MAXLEN", b"=", b"3"] in records(aof8.path)


def test_replay_restores_the_8x_commands_effects_exactly(aof8: AppendOnlyFile) -> None:
    """Every 8.x write replays to the same streams, groups and PELs (owners, counts, times)."""
    s = Session(aof8.engine)
    for i in range(1, 9):
        s("XADD", "s", f"{i}-0", "i", i)
    s("XGROUP", "CREATE", "s", "g", "0")
    s("XGROUP", "CREATE", "s", "g2", "0")
    s("XREADGROUP", "GROUP", "g", "a", "COUNT", 5, "STREAMS", "s", ">")
    s("XREADGROUP", "GROUP", "g2", "z", "COUNT", 2, "STREAMS", "s", ">")
    s("XNACK", "s", "g", "SILENT", "IDS", 2, "1-0", "2-0")
    s("XNACK", "s", "g", "FATAL", "IDS", 1, "3-0")
    s("XREADGROUP", "GROUP", "g", "b", "COUNT", 3, "CLAIM", 0, "STREAMS", "s", ">")
    s("XREADGROUP", "GROUP", "g", "b", "CLAIM", 0, "STREAMS", "s", "0")  # a history read
    s("XACKDEL", "s", "g", "ACKED", "IDS", 2, "4-0", "5-0")
    s("XDELEX", "s", "DELREF", "IDS", 1, "2-0")
    s("XADD", "s", "ACKED", "MAXLEN", 3, "9-0", "i", 9)
    s("XNACK", "s", "g2", "FAIL", "IDS", 1, "6-0", "RETRYCOUNT", 3, "FORCE")
    before = dump_state(aof8.engine)
    after = reopen8(aof8)
    try:
        assert dump_state(after.engine) == before
    finally:
        after.close()


def test_aof_rewrite_keeps_released_entries_unowned(aof8: AppendOnlyFile) -> None:
    """XNACK page (FORCE): "primarily used internally for AOF rewrite and replication": a
    rewrite writes released entries as XNACK ... RETRYCOUNT c FORCE and replay restores them
    unowned, with their counts."""
    s = Session(aof8.engine)
    for i in range(1, 4):
        s("XADD", "s", f"{i}-0", "i", i)
    s("XGROUP", "CREATE", "s", "g", "0")
    s("XREADGROUP", "GROUP", "g", "a", "STREAMS", "s", ">")
    s("XNACK", "s", "g", "FATAL", "IDS", 2, "1-0", "3-0")
    s("XDEL", "s", "3-0")
    before = dump_state(aof8.engine)
    aof8.rewrite()
    assert any(r[0] == b"XNACK" and b"FORCE" in r for r in records(aof8.path))
    after = reopen8(aof8)
    try:
        assert dump_state(after.engine) == before
    finally:
        after.close()


def test_rdb_round_trip_keeps_released_entries_and_claimed_counts(
    run: Run, clock: FakeClock
) -> None:
    """An RDB snapshot of an 8.x engine loads back with the unowned entries XNACK left, their
    delivery time 0 and counts (LLONG_MAX included), and the owners CLAIM gave."""
    stream_with_group(run, 3)
    read_all(run, "a", 3)
    clock.now += 5000
    run("XNACK", "s", "g", "FATAL", "IDS", 1, "1-0")
    run("XREADGROUP", "GROUP", "g", "b", "COUNT", 2, "CLAIM", 1000, "STREAMS", "s", ">")
    data = build_rdb(run.engine)
    other = Engine(clock=clock, redis_version="8.10")
    load_rdb_bytes(other, data)
    assert dump_state(other) == dump_state(run.engine)
    assert pending(Run(other)) == pending(run)


# --- COMMAND, key specs and ACL categories ---------------------------------------------------


def test_command_info_lists_the_new_commands_only_in_8x_mode(run: Run) -> None:
    """The pages' arity and flags: XACKDEL -6, XDELEX -5, XNACK -7, XCFGSET -2, all write and
    fast; a 7.0 engine has none of them (COMMAND COUNT differs by four)."""
    infos = run("COMMAND", "INFO", "xackdel", "xdelex", "xnack", "xcfgset")
    assert [(i[0], i[1]) for i in infos] == [
        (b"xackdel", -6),
        (b"xdelex", -5),
        (b"xnack", -7),
        (b"xcfgset", -2),
    ]
    assert all({f.text for f in i[2]} == {"write", "fast"} for i in infos)
    seven = Run(Engine())
    assert seven("COMMAND", "INFO", "xackdel", "xnack") == [NULL_BULK, NULL_BULK]
    assert run("COMMAND", "COUNT") == seven("COMMAND", "COUNT") + 4


def test_key_specs_and_acl_categories_of_the_new_commands(run: Run) -> None:
    """The pages' key specs (XACKDEL: RW update delete on key 1; XDELEX: RW delete; XNACK: RW
    update) and categories (@write @stream @fast); a user limited to other keys is refused."""
    flags = run("COMMAND", "GETKEYSANDFLAGS", "XACKDEL", "s", "g", "IDS", 1, "1-0")
    assert flags[0][0] == b"s"
    assert {f.text for f in flags[0][1]} == {"RW", "update", "delete"}
    for name in ("xackdel", "xdelex", "xnack", "xcfgset"):
        assert name.encode() in run("ACL", "CAT", "stream")
        assert name.encode() in run("ACL", "CAT", "fast")
    run("ACL", "SETUSER", "u", "on", "nopass", "~other", "+@stream")
    run("AUTH", "u", "x")
    with pytest.raises(CommandError, match=r"^NOPERM"):
        run("XACKDEL", "s", "g", "IDS", 1, "1-0")


def test_command_docs_describe_the_new_commands(run: Run) -> None:
    """COMMAND DOCS has an entry for each (its summary is the command's own first line)."""
    docs = dict(run("COMMAND", "DOCS", "xnack", "xackdel").items)
    assert set(docs) == {b"xnack", b"xackdel"}
    assert isinstance(docs[b"xnack"], Map)


# --- engine serve --redis-version 8.10, over a socket ----------------------------------------


@pytest.fixture
def served8(tmp_path: Path) -> Iterator[EngineServerProcess]:
    """``streamworker engine serve --redis-version 8.10`` with a data directory."""
    server = EngineServerProcess(
        tmp_path / "data", appendfsync="always", extra=("--redis-version", "8.10")
    ).start()
    yield server
    server.stop()


@pytest.mark.parametrize("protocol", [2, 3])
def test_engine_serve_redis_version_8_10_speaks_claim_and_xackdel_to_redis_py(
    served8: EngineServerProcess, protocol: int
) -> None:
    """Over TCP with redis-py (RESP2 and RESP3): the server reports 8.10.0 (INFO, HELLO), a
    CLAIM read gives each entry its idle time and delivery count
    (https://redis.io/docs/latest/commands/xreadgroup/), XACKDEL acks and deletes
    (https://redis.io/docs/latest/commands/xackdel/), and all of it survives a restart."""
    r = served8.client(protocol=protocol)
    assert r.info("server")["redis_version"] == "8.10.0"
    for i in range(1, 4):
        r.xadd("s", {"i": i}, id=f"{i}-0")
    r.xgroup_create("s", "g", "0")
    r.xreadgroup("g", "a", {"s": ">"}, count=2)
    # The reply as it came (redis-py's XREADGROUP callback keeps two fields per entry).
    r.set_response_callback("XREADGROUP", lambda response, **options: response)
    raw = r.execute_command("XREADGROUP", "GROUP", "g", "b", "CLAIM", 0, "STREAMS", "s", ">")
    entries = raw[b"s"] if protocol == 3 else raw[0][1]
    assert [(e[0], e[3]) for e in entries] == [(b"1-0", 1), (b"2-0", 1), (b"3-0", 0)]
    assert r.execute_command("XACKDEL", "s", "g", "ACKED", "IDS", 2, "1-0", "9-0") == [1, -1]
    owners = [
        (p["message_id"], p["consumer"], p["times_delivered"])
        for p in r.xpending_range("s", "g", "-", "+", 10)
    ]
    assert owners == [(b"2-0", b"b", 2), (b"3-0", b"b", 1)]
    r.close()
    served8.restart()
    r = served8.client(protocol=protocol)
    after = r.xpending_range("s", "g", "-", "+", 10)
    assert [(p["message_id"], p["consumer"], p["times_delivered"]) for p in after] == owners
    assert [e[0] for e in r.xrange("s")] == [b"2-0", b"3-0"]
    r.close()


def test_engine_serve_refuses_an_unknown_redis_version_in_one_line(tmp_path: Path) -> None:
    """``--redis-version 7.2`` stops the command with one clear line, before listening."""
    proc = subprocess.run(
        [sys.executable, "-m", "streamworker", "engine", "serve", "--redis-version", "7.2"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1
    assert "--redis-version" in lines[0]
    assert "7.2" in lines[0]


# --- XADD IDMP / IDMPAUTO, XCFGSET, XINFO STREAM (8.6) ---------------------------------------

IDEMPOTENCY_PAGE = "https://redis.io/docs/latest/develop/data-types/streams/idempotency/"


def xinfo(run: Run, key: str = "s") -> dict[bytes, Any]:
    """XINFO STREAM as a dict."""
    return dict(run("XINFO", "STREAM", key).items)


def test_a_retried_xadd_idmp_returns_the_original_id_and_adds_nothing(run: Run) -> None:
    """Idempotency page (Manual mode): a producer resending with the same (pid, iid) gets the
    ID the first XADD produced and the stream gets no second entry; XINFO STREAM counts the
    iid and the duplicate (Monitoring)."""
    first = run("XADD", "s", "IDMP", "p1", "order-7", "*", "n", 1)
    assert run("XADD", "s", "IDMP", "p1", "order-7", "*", "n", 1) == first
    assert run("XLEN", "s") == 1
    info = xinfo(run)
    assert info[b"pids-tracked"] == 1
    assert info[b"iids-tracked"] == 1
    assert info[b"iids-added"] == 1
    assert info[b"iids-duplicates"] == 1
    assert (info[b"idmp-duration"], info[b"idmp-maxsize"]) == (100, 100)


def test_producers_track_their_iids_independently(run: Run) -> None:
    """Idempotency page (Producer isolation): "Producers can use the same iid without
    conflicts, as long as the pids are different"."""
    a = run("XADD", "s", "IDMP", "p1", "iid-1", "*", "f", "v")
    b = run("XADD", "s", "IDMP", "p2", "iid-1", "*", "f", "v")
    assert a != b
    assert run("XLEN", "s") == 2


def test_idmpauto_derives_the_iid_from_the_content(run: Run) -> None:
    """Idempotency page (Automatic mode): "The same content produces the same iid"; other
    content is a new message."""
    a = run("XADD", "s", "IDMPAUTO", "p", "*", "f", "v", "g", "w")
    assert run("XADD", "s", "IDMPAUTO", "p", "*", "f", "v", "g", "w") == a
    assert run("XADD", "s", "IDMPAUTO", "p", "*", "f", "v", "g", "x") != a
    assert run("XLEN", "s") == 2


def test_an_iid_still_answers_after_its_entry_is_deleted(run: Run) -> None:
    """Idempotency page: Redis "will not forget an idempotency ID before the duration
    elapses": re-adding the iid after XDEL of its entry returns the deleted entry's ID and adds
    nothing (the map does not follow the entries)."""
    first = run("XADD", "s", "IDMP", "p", "i", "*", "f", "v")
    run("XDEL", "s", first)
    assert run("XADD", "s", "IDMP", "p", "i", "*", "f", "v") == first
    assert run("XLEN", "s") == 0


def test_an_iid_is_forgotten_after_idmp_duration(run: Run, clock: FakeClock) -> None:
    """Idempotency page (Expiration behavior): "iids expire after the configured
    IDMP-DURATION"; the same iid then adds a new entry."""
    run("XADD", "s", "1-0", "f", "v")
    run("XCFGSET", "s", "IDMP-DURATION", 10)
    first = run("XADD", "s", "IDMP", "p", "i", "*", "f", "v")
    clock.now += 9_999
    assert run("XADD", "s", "IDMP", "p", "i", "*", "f", "v") == first
    clock.now += 1
    assert run("XADD", "s", "IDMP", "p", "i", "*", "f", "v") != first
    assert run("XLEN", "s") == 3


def test_idmp_maxsize_keeps_only_the_newest_iids_per_producer(run: Run) -> None:
    """Idempotency page: "Redis never keeps more than IDMP-MAXSIZE iids per pid"; the oldest
    goes first, whatever the duration."""
    run("XADD", "s", "1-0", "f", "v")
    run("XCFGSET", "s", "IDMP-MAXSIZE", 2)
    ids = [run("XADD", "s", "IDMP", "p", f"i{n}", "*", "f", "v") for n in range(3)]
    assert run("XADD", "s", "IDMP", "p", "i2", "*", "f", "v") == ids[2]
    assert run("XADD", "s", "IDMP", "p", "i0", "*", "f", "v") not in ids
    assert xinfo(run)[b"iids-tracked"] == 2


def test_xcfgset_checks_its_arguments_and_a_change_clears_the_map(run: Run) -> None:
    """https://redis.io/docs/latest/commands/xcfgset/ (Error conditions, Behavior): ranges
    1-86400 s and 1-10000, at least one option, the stream must exist; a changed setting
    forgets the iids (idempotency page, Persistence), the same setting keeps them."""
    with pytest.raises(CommandError, match="no such key"):
        run("XCFGSET", "s", "IDMP-DURATION", 5)
    first = run("XADD", "s", "IDMP", "p", "i", "*", "f", "v")
    for args, text in [
        (("IDMP-DURATION", 0), "invalid duration"),
        (("IDMP-DURATION", 86_401), "invalid duration"),
        (("IDMP-MAXSIZE", 10_001), "invalid maxsize"),
        (("IDMP-MAXSIZE", "x"), "invalid maxsize"),
        ((), "syntax error"),
        (("IDMP-DURATION",), "syntax error"),
        (("BOGUS", 1), "syntax error"),
    ]:
        with pytest.raises(CommandError, match=text):
            run("XCFGSET", "s", *args)
    run("XCFGSET", "s", "IDMP-DURATION", 100, "IDMP-MAXSIZE", 100)
    assert run("XADD", "s", "IDMP", "p", "i", "*", "f", "v") == first
    run("XCFGSET", "s", "IDMP-MAXSIZE", 50)
    assert run("XADD", "s", "IDMP", "p", "i", "*", "f", "v") != first


def test_idmp_words_are_refused_before_8_6_as_7_0_refuses_them() -> None:
    """IDMP is 8.6 (https://redis.io/docs/latest/commands/xcfgset/: "Available since 8.6.0"):
    an 8.4 engine answers XADD IDMP with 7.0's invalid-ID error and has no XCFGSET."""
    run = Run(Engine(redis_version="8.4"))
    with pytest.raises(CommandError, match="Invalid stream ID"):
        run("XADD", "s", "IDMP", "p", "i", "*", "f", "v")
    with pytest.raises(CommandError, match="unknown command 'XCFGSET'"):
        run("XCFGSET", "s", "IDMP-DURATION", 5)


def test_xadd_idmp_is_logged_with_its_iid_and_replays_to_the_same_map(
    aof8: AppendOnlyFile,
) -> None:
    """Idempotency page (Persistence): "All producer-idempotent ID pairs are saved" and
    "Tracking remains active after restart": the record keeps IDMP pid iid, a retry is not
    logged, and after a restart the retry still gets the original ID."""
    s = Session(aof8.engine)
    first = s("XADD", "s", "IDMP", "p", "i", "*", "f", "v")
    s("XADD", "s", "IDMP", "p", "i", "*", "f", "v")
    s("XADD", "s", "IDMPAUTO", "q", "MAXLEN", "~", 10, "*", "f", "w")
    xadds = [r for r in records(aof8.path) if r[0] == b"XADD"]
    assert xadds[0] == [b"XADD", b"s", b"IDMP", b"p", b"i", first, b"f", b"v"]
    assert xadds[1][2:4] == [b"IDMPAUTO", b"q"]
    assert len(xadds) == 2
    after = reopen8(aof8)
    try:
        again = Session(after.engine)
        assert again("XADD", "s", "IDMP", "p", "i", "*", "f", "v") == first
        assert again("XLEN", "s") == 2
    finally:
        after.close()


def test_aof_rewrite_keeps_the_idmp_map_settings_and_a_deleted_entrys_iid(
    aof8: AppendOnlyFile,
) -> None:
    """The corner cases the issue names: IDMP state across an AOF rewrite (a bug Redis fixed
    in 8.6.2), with non-default XCFGSET settings and an iid whose entry was deleted."""
    s = Session(aof8.engine)
    s("XADD", "s", "1-0", "f", "v")
    s("XCFGSET", "s", "IDMP-DURATION", 600, "IDMP-MAXSIZE", 7)
    kept = s("XADD", "s", "IDMP", "p", "a", "*", "f", "v")
    gone = s("XADD", "s", "IDMP", "p", "b", "*", "f", "v")
    s("XADD", "s", "*", "f", "v")
    s("XDEL", "s", gone)
    before = dump_state(aof8.engine)
    aof8.rewrite()
    after = reopen8(aof8)
    try:
        again = Session(after.engine)
        assert dump_state(after.engine) == before
        info = dict(again("XINFO", "STREAM", "s").items)
        assert (info[b"idmp-duration"], info[b"idmp-maxsize"], info[b"iids-tracked"]) == (
            600,
            7,
            2,
        )
        assert again("XADD", "s", "IDMP", "p", "a", "*", "f", "v") == kept
        assert again("XADD", "s", "IDMP", "p", "b", "*", "f", "v") == gone
        assert again("XLEN", "s") == 3
    finally:
        after.close()


def test_rdb_round_trip_keeps_the_idmp_map(run: Run, clock: FakeClock) -> None:
    """Idempotency page (Persistence, "RDB/AOF: All producer-idempotent ID pairs are saved"):
    the map, its settings and counters survive SAVE and load; a 7.0 engine loads the same file
    and drops the map, as redis-server 7.0 skips the aux field that holds it."""
    run("XADD", "s", "1-0", "f", "v")
    run("XCFGSET", "s", "IDMP-DURATION", 300)
    first = run("XADD", "s", "IDMP", "p", "i", "*", "f", "v")
    run("XADD", "s", "IDMP", "p", "i", "*", "f", "v")
    data = build_rdb(run.engine)
    other = Run(Engine(clock=clock, redis_version="8.10"))
    load_rdb_bytes(other.engine, data)
    assert xinfo(other) == xinfo(run)
    assert other("XADD", "s", "IDMP", "p", "i", "*", "f", "v") == first
    seven = Run(Engine(clock=clock))
    load_rdb_bytes(seven.engine, data)
    assert b"idmp-duration" not in xinfo(seven)
    assert seven("XLEN", "s") == 2


def test_a_fatal_count_stays_at_llong_max_through_later_deliveries(aof8: AppendOnlyFile) -> None:
    """XNACK page (FATAL): the counter is set to LLONG_MAX "marking the message as permanently
    failed". A history read, XCLAIM and XAUTOCLAIM deliver it again without passing LLONG_MAX
    (a count beyond it would not fit the XCLAIM ... RETRYCOUNT record that logs it), and the
    file replays to the same PEL."""
    s = Session(aof8.engine)
    s("XADD", "s", "1-0", "f", "v")
    s("XGROUP", "CREATE", "s", "g", "0")
    s("XREADGROUP", "GROUP", "g", "a", "STREAMS", "s", ">")
    s("XNACK", "s", "g", "FATAL", "IDS", 1, "1-0")
    s("XCLAIM", "s", "g", "a", 0, "1-0")
    s("XREADGROUP", "GROUP", "g", "a", "STREAMS", "s", "0")
    s("XAUTOCLAIM", "s", "g", "b", 0, "0")
    assert s("XPENDING", "s", "g", "-", "+", 10)[0][3] == LLONG_MAX
    before = dump_state(aof8.engine)
    after = reopen8(aof8)
    try:
        assert dump_state(after.engine) == before
    finally:
        after.close()


# --- MAXCOUNT and MAXSIZE on XREAD / XREADGROUP (8.10) ---------------------------------------

XREAD_PAGE = "https://redis.io/docs/latest/commands/xread/"


def _two_streams(run: Run) -> None:
    for i in range(1, 6):
        run("XADD", "s", f"{i}-0", "f", "v" * i)
    run("XADD", "t", "1-0", "f", "x")
    run("XGROUP", "CREATE", "s", "g", "0")
    run("XGROUP", "CREATE", "t", "g", "0")


def test_xread_maxcount_caps_the_entries_of_all_streams_together(run: Run) -> None:
    """https://redis.io/docs/latest/commands/xread/ (MAXCOUNT, added in 8.10): "the maximum
    number of entries to return in total across all streams", where COUNT is per stream."""
    _two_streams(run)
    assert run("XREAD", "COUNT", 2, "MAXCOUNT", 3, "STREAMS", "s", "t", "0", "0") == [
        [b"s", [[b"1-0", [b"f", b"v"]], [b"2-0", [b"f", b"vv"]]]],
        [b"t", [[b"1-0", [b"f", b"x"]]]],
    ]
    # Exhausted by the first stream: the second is left out of the reply.
    assert run("XREAD", "MAXCOUNT", 2, "STREAMS", "s", "t", "0", "0") == [
        [b"s", [[b"1-0", [b"f", b"v"]], [b"2-0", [b"f", b"vv"]]]]
    ]


def test_maxsize_stops_before_the_entry_that_would_pass_it_but_returns_one_entry_at_least(
    run: Run,
) -> None:
    """XREAD page (MAXSIZE, 8.10): a cap on the reply's cumulative size; redis-py's xread
    documents it as a soft cap that still returns a single entry larger than it. The engine
    counts each entry's RESP2 bytes and never leaves a gap."""
    _two_streams(run)
    one = len(encode([b"1-0", [b"f", b"v"]], 2))
    two = len(encode([b"2-0", [b"f", b"vv"]], 2))
    assert run("XREAD", "MAXSIZE", one + two, "STREAMS", "s", "0") == [
        [b"s", [[b"1-0", [b"f", b"v"]], [b"2-0", [b"f", b"vv"]]]]
    ]
    assert run("XREAD", "MAXSIZE", one + two - 1, "STREAMS", "s", "0") == [
        [b"s", [[b"1-0", [b"f", b"v"]]]]
    ]
    assert run("XREAD", "MAXSIZE", 1, "STREAMS", "s", "0") == [[b"s", [[b"1-0", [b"f", b"v"]]]]]


def test_xreadgroup_maxcount_delivers_only_what_it_returns(run: Run) -> None:
    """XREADGROUP page (MAXCOUNT, 8.10): the cap applies before delivery, so entries left out
    stay new for the group (last-delivered-id stops at the last one returned)."""
    _two_streams(run)
    reply = run("XREADGROUP", "GROUP", "g", "a", "MAXCOUNT", 2, "STREAMS", "s", "t", ">", ">")
    assert reply == [[b"s", [[b"1-0", [b"f", b"v"]], [b"2-0", [b"f", b"vv"]]]]]
    assert [row[0] for row in pending(run)] == [b"1-0", b"2-0"]
    assert pending(run, "t") == []
    reply = run("XREADGROUP", "GROUP", "g", "b", "STREAMS", "s", "t", ">", ">")
    assert [e[0] for e in reply[0][1]] == [b"3-0", b"4-0", b"5-0"]
    assert [e[0] for e in reply[1][1]] == [b"1-0"]


def test_xreadgroup_maxsize_cuts_a_history_read_too(run: Run) -> None:
    """XREADGROUP page: the limits cap the whole reply, the consumer's pending history
    included; entries left out keep their delivery count."""
    _two_streams(run)
    read_all(run, "a", 5)
    first = len(encode([b"1-0", [b"f", b"v"]], 2))
    reply = run("XREADGROUP", "GROUP", "g", "a", "MAXSIZE", first, "STREAMS", "s", "0")
    assert reply == [[b"s", [[b"1-0", [b"f", b"v"]]]]]
    assert [row[3] for row in pending(run)] == [2, 1, 1, 1, 1]


def test_maxcount_with_claim_counts_claimed_and_new_entries(run: Run, clock: FakeClock) -> None:
    """XREADGROUP page: CLAIM's idle entries come first, and MAXCOUNT caps them and the new
    ones together; an idle entry left out stays with its owner."""
    _two_streams(run)
    read_all(run, "dead", 3)
    clock.now += 5000
    reply = run(
        "XREADGROUP", "GROUP", "g", "live", "MAXCOUNT", 2, "CLAIM", 1000, "STREAMS", "s", ">"
    )
    assert [e[0] for e in reply[0][1]] == [b"1-0", b"2-0"]
    assert [row[1] for row in pending(run)] == [b"live", b"live", b"dead"]


def test_blocked_xreadgroup_with_maxcount_is_served_within_it(run: Run, r8: Engine) -> None:
    """XREADGROUP page: a blocked read is served by the next XADD, under the same limits."""
    _two_streams(run)
    read_all(run, "a", 5)
    blocked = run("XREADGROUP", "GROUP", "g", "b", "MAXCOUNT", 1, "BLOCK", 0, "STREAMS", "s", ">")
    assert isinstance(blocked, Blocked)
    other = Run(r8)
    other("XADD", "s", "6-0", "f", "a")
    assert r8.wait(blocked) == [[b"s", [[b"6-0", [b"f", b"a"]]]]]


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (("MAXCOUNT", "0"), "ERR MAXCOUNT must be a positive integer"),
        (("MAXCOUNT", "x"), "ERR MAXCOUNT must be a positive integer"),
        (("MAXSIZE", "-1"), "ERR MAXSIZE must be a positive integer"),
        (("COUNT", "5", "MAXCOUNT", "2"), "ERR MAXCOUNT must be greater than or equal to COUNT"),
    ],
)
def test_bad_read_limits_are_refused_before_anything_is_read(
    run: Run, args: tuple[str, ...], text: str
) -> None:
    """XREAD / XREADGROUP pages: MAXCOUNT and MAXSIZE are positive integers; redis-py's
    client (which follows the server) also refuses a MAXCOUNT below COUNT. Nothing is
    delivered by a refused read."""
    _two_streams(run)
    for cmd in (("XREAD", *args), ("XREADGROUP", "GROUP", "g", "a", *args)):
        with pytest.raises(CommandError) as err:
            run(*cmd, "STREAMS", "s", "0" if cmd[0] == "XREAD" else ">")
        assert str(err.value) == text
    assert pending(run) == []


def test_an_8_8_engine_refuses_the_read_limits_as_a_syntax_error() -> None:
    """MAXCOUNT / MAXSIZE came in 8.10 (the XREAD page's history): an 8.8 engine, like 7.0,
    answers ``syntax error``."""
    run = Run(Engine(redis_version="8.8"))
    run("XADD", "s", "1-0", "f", "v")
    with pytest.raises(CommandError, match="syntax error"):
        run("XREAD", "MAXCOUNT", 1, "STREAMS", "s", "0")


def test_command_docs_of_an_8x_engine_lists_the_options_of_its_version() -> None:
    """COMMAND DOCS's ``arguments`` (https://redis.io/docs/latest/commands/command-docs/):
    what a client asks to find CLAIM, IDMP or MAXCOUNT; each only from its version on."""

    def tokens(version: str, name: str) -> set[bytes]:
        reply = Run(Engine(redis_version=version))("COMMAND", "DOCS", name)
        doc = dict(dict(reply.items)[name.lower().encode()].items)
        return {dict(arg.items)[b"token"] for arg in doc.get(b"arguments", [])}

    assert {b"CLAIM", b"MAXCOUNT", b"MAXSIZE"} <= tokens("8.10", "XREADGROUP")
    assert b"CLAIM" in tokens("8.4", "XREADGROUP")
    assert b"MAXCOUNT" not in tokens("8.8", "XREADGROUP")
    assert b"IDMP" in tokens("8.6", "XADD")
    assert b"IDMP" not in tokens("8.4", "XADD")
    assert tokens("7.0", "XREADGROUP") == set()
