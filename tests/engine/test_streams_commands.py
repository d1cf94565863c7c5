"""Stream commands through ``Engine.execute`` with an injected clock: argument handling, the
Redis 7.0 error texts and order, reply shapes (RESP2 and RESP3), delivery counters, idle and
seen-time rules, WATCH interaction."""

from __future__ import annotations

from typing import Any

import pytest

from streamworker.engine import Engine
from streamworker.engine.context import Blocked, ClientState
from streamworker.engine.errors import CommandError
from streamworker.engine.protocol import encode
from streamworker.engine.replies import NULL_ARRAY, NULL_BULK, Map, Status


class Clock:
    """A settable engine clock (Unix ms)."""

    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


class X:
    """One engine client with helpers."""

    def __init__(self, engine: Engine, clock: Clock) -> None:
        self.engine = engine
        self.clock = clock
        self.client: ClientState = engine.connect()

    def __call__(self, *args: str | bytes | int) -> Any:
        argv = [a if isinstance(a, bytes) else str(a).encode() for a in args]
        return self.engine.execute(self.client, argv)

    def raw(self, *args: str | bytes | int) -> bytes:
        reply = self(*args)
        assert not isinstance(reply, Blocked)
        return encode(reply, self.client.resp)

    def err(self, *args: str | bytes | int) -> str:
        reply = self(*args)
        assert isinstance(reply, CommandError), reply
        return reply.text

    def other(self) -> X:
        return X(self.engine, self.clock)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def x(clock: Clock) -> X:
    return X(Engine(clock=clock), clock)


def _ids(reply: list[Any]) -> list[bytes]:
    return [e[0] for e in reply]


# --- XADD ---------------------------------------------------------------------------------


def test_xadd_star_uses_the_engine_clock(x: X) -> None:
    assert x("XADD", "s", "*", "f", "v") == b"1000000-0"
    assert x("XADD", "s", "*", "f", "v") == b"1000000-1"


def test_xadd_ids_stay_monotonic_when_the_clock_goes_backwards(x: X, clock: Clock) -> None:
    x("XADD", "s", "*", "f", "v")
    clock.now -= 5000
    assert x("XADD", "s", "*", "f", "v") == b"1000000-1"


def test_xadd_ms_star_forms(x: X) -> None:
    assert x("XADD", "s", "0-*", "f", "v") == b"0-1"
    assert x("XADD", "s", "0-*", "f", "v") == b"0-2"
    assert x("XADD", "s", "5-*", "f", "v") == b"5-0"
    assert x("XADD", "s", "4-*", "f", "v") == CommandError(
        "ERR The ID specified in XADD is equal or smaller than the target stream top item"
    )


def test_xadd_ms_star_after_max_seq_is_the_elements_too_large_error(x: X) -> None:
    x("XADD", "s", "5-18446744073709551615", "f", "v")
    assert x.err("XADD", "s", "5-*", "f", "v") == "ERR Elements are too large to be stored"
    assert x("XLEN", "s") == 1


def test_xgroup_subcommand_errors_echo_the_word_as_typed(x: X) -> None:
    x("XADD", "s", "1-0", "f", "v")
    assert x.err("XINFO", "stream", "s", "x") == (
        "ERR unknown subcommand or wrong number of arguments for 'stream'. Try XINFO HELP."
    )
    assert x.err("XGROUP", "SetId", "s", "g", "0", "FOO", "1") == (
        "ERR unknown subcommand or wrong number of arguments for 'SetId'. Try XGROUP HELP."
    )


def test_xread_block_in_script_echoes_the_command_as_typed(x: X) -> None:
    x.client.ctx.in_script = True
    try:
        assert x.err("xread", "BLOCK", "0", "STREAMS", "s", "$") == (
            "ERR xread command is not allowed with BLOCK option from scripts"
        )
    finally:
        x.client.ctx.in_script = False


def test_xadd_bare_ms_means_seq_zero(x: X) -> None:
    assert x("XADD", "s", "7", "f", "v") == b"7-0"


def test_xadd_zero_id_is_rejected_before_the_type_check(x: X) -> None:
    x("SET", "str", "x")
    assert x.err("XADD", "str", "0-0", "f", "v") == (
        "ERR The ID specified in XADD must be greater than 0-0"
    )
    assert x.err("XADD", "str", "1-0", "f", "v").startswith("WRONGTYPE")


def test_xadd_exhausted_stream(x: X) -> None:
    x("XADD", "s", "18446744073709551615-18446744073709551615", "f", "v")
    text = "ERR The stream has exhausted the last possible ID, unable to add more items"
    assert x.err("XADD", "s", "*", "f", "v") == text
    assert x.err("XADD", "s", "18446744073709551615-*", "f", "v") == text


def test_xadd_arity_is_checked_after_the_options(x: X) -> None:
    assert x.err("XADD", "s", "MAXLEN", "~", "5", "*", "f") == (
        "ERR wrong number of arguments for 'xadd' command"
    )
    assert x.err("XADD", "s", "MAXLEN", "~", "x", "*", "f") == (
        "ERR value is not an integer or out of range"
    )


def test_xadd_nomkstream_on_a_missing_key_is_nil(x: X) -> None:
    assert x("XADD", "s", "NOMKSTREAM", "*", "f", "v") is NULL_BULK
    assert x("EXISTS", "s") == 0


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (
            ("LIMIT", "5"),
            "ERR syntax error, LIMIT cannot be used without specifying a trimming strategy",
        ),
        (("LIMIT", "0"), "ERR syntax error, LIMIT cannot be used without the special ~ option"),
        (
            ("MAXLEN", "5", "LIMIT", "5"),
            "ERR syntax error, LIMIT cannot be used without the special ~ option",
        ),
        (("MAXLEN", "-1"), "ERR The MAXLEN argument must be >= 0."),
        (("MAXLEN", "~", "1", "LIMIT", "-1"), "ERR The LIMIT argument must be >= 0."),
        (
            ("MAXLEN", "1", "MINID", "1"),
            "ERR syntax error, MAXLEN and MINID options at the same time are not compatible",
        ),
        (("MINID", "+"), "ERR Invalid stream ID specified as stream command argument"),
    ],
)
def test_xadd_trim_option_errors(x: X, args: tuple[str, ...], text: str) -> None:
    assert x.err("XADD", "s", *args, "*", "f", "v") == text


def test_xadd_maxlen_zero_leaves_an_empty_stream(x: X) -> None:
    assert x("XADD", "s", "MAXLEN", "=", "0", "1-0", "f", "v") == b"1-0"
    assert (x("XLEN", "s"), x("EXISTS", "s")) == (0, 1)


def test_xadd_approximate_maxlen_drops_whole_nodes(x: X) -> None:
    x("CONFIG", "SET", "stream-node-max-entries", "3")
    for i in range(1, 11):
        x("XADD", "s", "MAXLEN", "~", "5", f"{i}-0", "f", "v")
    assert x("XLEN", "s") == 7


def test_xadd_implicit_approx_limit_is_100_node_entries(x: X) -> None:
    x("CONFIG", "SET", "stream-node-max-entries", "1")
    for i in range(1, 351):
        x("XADD", "s", f"{i}-0", "f", "v")
    assert x("XTRIM", "s", "MAXLEN", "~", "0") == 100


def test_xadd_touches_watchers(x: X) -> None:
    y = x.other()
    x("WATCH", "s")
    y("XADD", "s", "1-0", "f", "v")
    x("MULTI")
    x("PING")
    assert x("EXEC") is NULL_ARRAY


# --- XRANGE / XREVRANGE / XLEN / XDEL / XTRIM -----------------------------------------------------


@pytest.fixture
def s3(x: X) -> X:
    for i in (1, 2, 3):
        x("XADD", "s", f"{i}-0", "f", f"v{i}")
    return x


def test_xrange_full_and_exclusive(s3: X) -> None:
    assert _ids(s3("XRANGE", "s", "-", "+")) == [b"1-0", b"2-0", b"3-0"]
    assert _ids(s3("XRANGE", "s", "(1-0", "(3-0")) == [b"2-0"]


def test_xrange_incomplete_end_means_max_seq(s3: X) -> None:
    s3("XADD", "s", "3-9", "f", "v")
    assert _ids(s3("XRANGE", "s", "3", "3")) == [b"3-0", b"3-9"]


def test_xrange_count_zero_is_a_null_array_but_missing_key_is_empty(s3: X) -> None:
    assert s3("XRANGE", "s", "-", "+", "COUNT", "0") is NULL_ARRAY
    assert s3("XRANGE", "s", "-", "+", "COUNT", "-3") is NULL_ARRAY
    assert s3("XRANGE", "nokey", "-", "+", "COUNT", "0") == ()


def test_xrange_invalid_interval_bounds(s3: X) -> None:
    assert s3.err("XRANGE", "s", "(18446744073709551615-18446744073709551615", "+") == (
        "ERR invalid start ID for the interval"
    )
    assert s3.err("XRANGE", "s", "-", "(0-0") == "ERR invalid end ID for the interval"
    assert s3.err("XRANGE", "s", "(-", "+") == (
        "ERR Invalid stream ID specified as stream command argument"
    )


def test_xrevrange_orders_backwards_with_count(s3: X) -> None:
    assert _ids(s3("XREVRANGE", "s", "+", "-", "COUNT", "2")) == [b"3-0", b"2-0"]


def test_xrange_entry_shape(s3: X) -> None:
    assert (
        s3.raw("XRANGE", "s", "2", "2") == b"*1\r\n*2\r\n$3\r\n2-0\r\n*2\r\n$1\r\nf\r\n$2\r\nv2\r\n"
    )


def test_xdel_on_a_missing_key_does_not_parse_ids(x: X) -> None:
    assert x("XDEL", "nokey", "garbage") == 0


def test_xdel_is_all_or_nothing(s3: X) -> None:
    assert s3.err("XDEL", "s", "1-0", "bad").startswith("ERR Invalid stream ID")
    assert s3("XLEN", "s") == 3


def test_xdel_updates_max_deleted_and_first_ids(s3: X) -> None:
    assert s3("XDEL", "s", "1-0", "3-0", "9-9") == 2
    info = dict(s3("XINFO", "STREAM", "s").items)
    assert info[b"max-deleted-entry-id"] == b"3-0"
    assert info[b"recorded-first-entry-id"] == b"2-0"


def test_xdel_everything_keeps_the_key(s3: X) -> None:
    s3("XDEL", "s", "1-0", "2-0", "3-0")
    info = dict(s3("XINFO", "STREAM", "s").items)
    assert (info[b"length"], info[b"recorded-first-entry-id"], info[b"radix-tree-keys"]) == (
        0,
        b"0-0",
        0,
    )


def test_xtrim_needs_a_strategy(x: X) -> None:
    assert x.err("XTRIM", "s", "LIMIT", "5") == (
        "ERR syntax error, LIMIT cannot be used without specifying a trimming strategy"
    )
    assert x.err("XTRIM", "s", "FOO", "5") == "ERR syntax error"
    assert x("XTRIM", "nokey", "MAXLEN", "5") == 0


def test_xtrim_minid(s3: X) -> None:
    assert s3("XTRIM", "s", "MINID", "3") == 2
    assert _ids(s3("XRANGE", "s", "-", "+")) == [b"3-0"]


# --- XREAD --------------------------------------------------------------------------------------


def test_xread_returns_entries_after_the_id(s3: X) -> None:
    assert s3("XREAD", "STREAMS", "s", "1-0") == [[b"s", s3("XRANGE", "s", "2", "+")]]


def test_xread_with_nothing_new_is_a_null_array(s3: X) -> None:
    assert s3("XREAD", "STREAMS", "s", "$") is NULL_ARRAY
    assert s3("XREAD", "STREAMS", "nokey", "0") is NULL_ARRAY


def test_xread_count_zero_means_no_limit(s3: X) -> None:
    assert len(s3("XREAD", "COUNT", "0", "STREAMS", "s", "0")[0][1]) == 3


def test_xread_resp3_is_a_map_keyed_by_stream(s3: X) -> None:
    s3("HELLO", "3")
    reply = s3("XREAD", "COUNT", "1", "STREAMS", "s", "0")
    assert isinstance(reply, Map)
    assert s3.raw("XREAD", "COUNT", "1", "STREAMS", "s", "0").startswith(b"%1\r\n$1\r\ns\r\n*1\r\n")


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (
            ("STREAMS", "s", ">"),
            "ERR The > ID can be specified only when calling XREADGROUP using the GROUP <group> <consumer> option.",
        ),
        (("STREAMS", "s", "+"), "ERR Invalid stream ID specified as stream command argument"),
        (
            ("STREAMS", "s", "t", "0"),
            "ERR Unbalanced XREAD list of streams: for each stream key an ID or '$' must be specified.",
        ),
        (
            ("GROUP", "g", "c", "STREAMS", "s", "0"),
            "ERR The GROUP option is only supported by XREADGROUP. You called XREAD instead.",
        ),
        (
            ("NOACK", "STREAMS", "s", "0"),
            "ERR The NOACK option is only supported by XREADGROUP. You called XREAD instead.",
        ),
        (("BLOCK", "x", "STREAMS", "s", "0"), "ERR timeout is not an integer or out of range"),
        (("BLOCK", "-1", "STREAMS", "s", "0"), "ERR timeout is negative"),
        (("FOO", "STREAMS", "s", "0"), "ERR syntax error"),
    ],
)
def test_xread_errors(x: X, args: tuple[str, ...], text: str) -> None:
    assert x.err("XREAD", *args) == text


def test_xread_block_is_refused_inside_scripts(x: X) -> None:
    x.client.ctx.in_script = True
    try:
        assert x.err("XREAD", "BLOCK", "0", "STREAMS", "s", "$") == (
            "ERR XREAD command is not allowed with BLOCK option from scripts"
        )
    finally:
        x.client.ctx.in_script = False


# --- XGROUP / XREADGROUP ---------------------------------------------------------------------


@pytest.fixture
def grp(s3: X) -> X:
    s3("XGROUP", "CREATE", "s", "g", "0")
    return s3


def test_xgroup_create_requires_the_key_unless_mkstream(x: X) -> None:
    assert x.err("XGROUP", "CREATE", "s", "g", "$").startswith(
        "ERR The XGROUP subcommand requires the key to exist."
    )
    assert x("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM") == Status("OK")
    assert x("XLEN", "s") == 0


def test_xgroup_create_duplicate_is_busygroup(grp: X) -> None:
    assert (
        grp.err("XGROUP", "CREATE", "s", "g", "0") == "BUSYGROUP Consumer Group name already exists"
    )


def test_xgroup_create_rejects_minus_and_plus_but_setid_accepts_them(grp: X) -> None:
    assert grp.err("XGROUP", "CREATE", "s", "g2", "-").startswith("ERR Invalid stream ID")
    assert grp("XGROUP", "SETID", "s", "g", "+").text == "OK"


def test_xgroup_entriesread_validation(grp: X) -> None:
    assert grp.err("XGROUP", "CREATE", "s", "g2", "0", "ENTRIESREAD", "-2") == (
        "ERR value for ENTRIESREAD must be positive or -1"
    )


def test_xgroup_create_without_entriesread_leaves_it_unknown(grp: X) -> None:
    grp("XGROUP", "CREATE", "s", "g2", "$")
    info = {m.items[0][1]: dict(m.items) for m in grp("XINFO", "GROUPS", "s")}
    assert info[b"g2"][b"entries-read"] is NULL_BULK
    assert info[b"g2"][b"lag"] == 0


def test_xgroup_unknown_option_is_a_subcommand_error(grp: X) -> None:
    assert grp.err("XGROUP", "CREATE", "s", "g2", "0", "FOO") == (
        "ERR unknown subcommand or wrong number of arguments for 'CREATE'. Try XGROUP HELP."
    )


def test_xgroup_setid_on_missing_group_is_nogroup(grp: X) -> None:
    assert grp.err("XGROUP", "SETID", "s", "nog", "0") == (
        "NOGROUP No such consumer group 'nog' for key name 's'"
    )


def test_xgroup_destroy_createconsumer_delconsumer_counts(grp: X) -> None:
    assert grp("XGROUP", "CREATECONSUMER", "s", "g", "c") == 1
    assert grp("XGROUP", "CREATECONSUMER", "s", "g", "c") == 0
    grp("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">")
    assert grp("XGROUP", "DELCONSUMER", "s", "g", "c") == 3
    assert grp("XGROUP", "DELCONSUMER", "s", "g", "c") == 0
    assert grp("XGROUP", "DESTROY", "s", "g") == 1
    assert grp("XGROUP", "DESTROY", "s", "g") == 0


def test_xgroup_help_lists_the_subcommands(x: X) -> None:
    lines = [s.text for s in x("XGROUP", "HELP")]
    assert lines[0] == "XGROUP <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"
    assert lines[-2:] == ["HELP", "    Prints this help."]


def test_xreadgroup_missing_group_is_nogroup(s3: X) -> None:
    assert s3.err("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">") == (
        "NOGROUP No such key 's' or consumer group 'g' in XREADGROUP with GROUP option"
    )


def test_xreadgroup_dollar_is_refused(grp: X) -> None:
    assert grp.err("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", "$").startswith(
        "ERR The $ ID is meaningless in the context of XREADGROUP"
    )


def test_xreadgroup_new_entries_then_null_array(grp: X) -> None:
    assert len(grp("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">")[0][1]) == 3
    assert grp("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">") is NULL_ARRAY


def test_xreadgroup_with_nothing_new_creates_no_consumer(grp: X) -> None:
    grp("XREADGROUP", "GROUP", "g", "a", "STREAMS", "s", ">")
    grp("XREADGROUP", "GROUP", "g", "b", "STREAMS", "s", ">")
    assert [dict(m.items)[b"name"] for m in grp("XINFO", "CONSUMERS", "s", "g")] == [b"a"]


def test_xreadgroup_history_with_empty_pel_is_an_empty_list(grp: X) -> None:
    assert grp("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", "0") == [[b"s", []]]


def test_xreadgroup_history_counts_deliveries_and_shows_deleted_as_nil(grp: X) -> None:
    grp("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">")
    grp("XDEL", "s", "2-0")
    hist = grp("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", "0")[0][1]
    assert [e[1] is NULL_ARRAY for e in hist] == [False, True, False]
    counts = [e[3] for e in grp("XPENDING", "s", "g", "-", "+", "10")]
    assert counts == [2, 1, 2]


def test_xreadgroup_history_starts_after_the_given_id(grp: X) -> None:
    grp("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">")
    assert _ids(grp("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", "1-0")[0][1]) == [
        b"2-0",
        b"3-0",
    ]


def test_xreadgroup_noack_advances_without_pending(grp: X) -> None:
    grp("XREADGROUP", "GROUP", "g", "c", "NOACK", "STREAMS", "s", ">")
    assert grp("XPENDING", "s", "g")[0] == 0
    info = dict(grp("XINFO", "GROUPS", "s")[0].items)
    assert (info[b"last-delivered-id"], info[b"entries-read"], info[b"lag"]) == (b"3-0", 3, 0)


def test_setid_rewind_redelivers_with_count_reset_to_one(grp: X) -> None:
    grp("XREADGROUP", "GROUP", "g", "a", "STREAMS", "s", ">")
    grp("XREADGROUP", "GROUP", "g", "a", "STREAMS", "s", "0")
    grp("XGROUP", "SETID", "s", "g", "0")
    grp("XREADGROUP", "GROUP", "g", "b", "COUNT", "1", "STREAMS", "s", ">")
    first = grp("XPENDING", "s", "g", "-", "+", "10")
    assert [(e[1], e[3]) for e in first] == [(b"b", 1), (b"a", 2), (b"a", 2)]


def test_consumer_idle_follows_seen_time(grp: X, clock: Clock) -> None:
    grp("XREADGROUP", "GROUP", "g", "c", "COUNT", "1", "STREAMS", "s", ">")
    clock.now += 700
    assert dict(grp("XINFO", "CONSUMERS", "s", "g")[0].items)[b"idle"] == 700
    grp("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", "0")
    assert dict(grp("XINFO", "CONSUMERS", "s", "g")[0].items)[b"idle"] == 0


def test_xinfo_consumers_has_only_name_pending_idle(grp: X) -> None:
    grp("XGROUP", "CREATECONSUMER", "s", "g", "c")
    assert [k for k, _ in grp("XINFO", "CONSUMERS", "s", "g")[0].items] == [
        b"name",
        b"pending",
        b"idle",
    ]


# --- XACK / XPENDING -------------------------------------------------------------------------


@pytest.fixture
def pending(grp: X) -> X:
    grp("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">")
    return grp


def test_xack_counts_acknowledged(pending: X) -> None:
    assert pending("XACK", "s", "g", "1-0", "1-0", "9-0") == 1


def test_xack_missing_group_is_zero_without_parsing(pending: X) -> None:
    assert pending("XACK", "s", "nog", "garbage") == 0
    assert pending.err("XACK", "s", "g", "1-0", "garbage").startswith("ERR Invalid stream ID")
    assert pending("XPENDING", "s", "g")[0] == 3


def test_xpending_summary_counts_are_bulk_strings(pending: X) -> None:
    assert pending.raw("XPENDING", "s", "g") == (
        b"*4\r\n:3\r\n$3\r\n1-0\r\n$3\r\n3-0\r\n*1\r\n*2\r\n$1\r\nc\r\n$1\r\n3\r\n"
    )


def test_xpending_summary_of_empty_pel(grp: X) -> None:
    assert grp.raw("XPENDING", "s", "g") == b"*4\r\n:0\r\n$-1\r\n$-1\r\n*-1\r\n"


def test_xpending_extended_idle_filter_and_consumer(pending: X, clock: Clock) -> None:
    clock.now += 100
    pending("XCLAIM", "s", "g", "d", "0", "2-0")
    assert _ids(pending("XPENDING", "s", "g", "IDLE", "100", "-", "+", "10")) == [b"1-0", b"3-0"]
    assert _ids(pending("XPENDING", "s", "g", "-", "+", "10", "d")) == [b"2-0"]
    assert pending("XPENDING", "s", "g", "-", "+", "10", "nobody") == ()


def test_xpending_argument_errors_come_before_nogroup(pending: X) -> None:
    assert pending.err("XPENDING", "s", "nog", "-", "+", "x") == (
        "ERR value is not an integer or out of range"
    )
    assert pending.err("XPENDING", "s", "g", "-", "+") == "ERR syntax error"
    assert pending.err("XPENDING", "s", "nog") == "NOGROUP No such key 's' or consumer group 'nog'"


# --- XCLAIM / XAUTOCLAIM ---------------------------------------------------------------------


def _counts(x: X) -> dict[bytes, tuple[bytes, int]]:
    return {e[0]: (e[1], e[3]) for e in x("XPENDING", "s", "g", "-", "+", "100")}


def test_xclaim_increments_unless_justid_and_retrycount_wins(pending: X) -> None:
    pending("XCLAIM", "s", "g", "d", "0", "1-0")
    pending("XCLAIM", "s", "g", "d", "0", "2-0", "JUSTID")
    pending("XCLAIM", "s", "g", "d", "0", "3-0", "JUSTID", "RETRYCOUNT", "7")
    assert _counts(pending) == {b"1-0": (b"d", 2), b"2-0": (b"d", 1), b"3-0": (b"d", 7)}


def test_xclaim_force_creates_the_pending_entry(grp: X) -> None:
    assert _ids(grp("XCLAIM", "s", "g", "d", "0", "2-0", "FORCE")) == [b"2-0"]
    grp("XCLAIM", "s", "g", "e", "0", "3-0", "FORCE", "JUSTID")
    assert _counts(grp) == {b"2-0": (b"d", 2), b"3-0": (b"e", 1)}


def test_xclaim_force_skips_the_idle_check(grp: X) -> None:
    assert grp("XCLAIM", "s", "g", "d", "99999999", "2-0", "FORCE", "JUSTID") == [b"2-0"]


def test_xclaim_min_idle_filters(pending: X, clock: Clock) -> None:
    assert pending("XCLAIM", "s", "g", "d", "50", "1-0") == []
    clock.now += 50
    assert len(pending("XCLAIM", "s", "g", "d", "50", "1-0")) == 1


def test_xclaim_drops_deleted_entries_silently(pending: X) -> None:
    pending("XDEL", "s", "2-0")
    assert pending("XCLAIM", "s", "g", "d", "0", "1-0", "2-0", "JUSTID") == [b"1-0"]
    assert b"2-0" not in _counts(pending)


def test_xclaim_creates_the_consumer_only_when_claiming(pending: X) -> None:
    pending("XCLAIM", "s", "g", "ghost", "99999999", "1-0")
    names = [dict(m.items)[b"name"] for m in pending("XINFO", "CONSUMERS", "s", "g")]
    assert names == [b"c"]


def test_xclaim_idle_and_time_set_the_delivery_time(pending: X, clock: Clock) -> None:
    pending("XCLAIM", "s", "g", "d", "0", "1-0", "IDLE", "500", "JUSTID")
    pending("XCLAIM", "s", "g", "d", "0", "2-0", "TIME", str(clock.now - 200), "JUSTID")
    pending("XCLAIM", "s", "g", "d", "0", "3-0", "TIME", str(clock.now + 10_000), "JUSTID")
    idle = {e[0]: e[2] for e in pending("XPENDING", "s", "g", "-", "+", "10")}
    assert idle == {b"1-0": 500, b"2-0": 200, b"3-0": 0}


def test_xclaim_lastid_only_raises_the_group_id(pending: X) -> None:
    pending("XCLAIM", "s", "g", "d", "0", "1-0", "LASTID", "10-0", "JUSTID")
    pending("XCLAIM", "s", "g", "d", "0", "1-0", "LASTID", "5-0", "JUSTID")
    info = dict(pending("XINFO", "GROUPS", "s")[0].items)
    assert (info[b"last-delivered-id"], info[b"entries-read"]) == (b"10-0", 3)


def test_xclaim_option_errors(pending: X) -> None:
    assert pending.err("XCLAIM", "s", "g", "d", "0", "1-0", "BOGUS") == (
        "ERR Unrecognized XCLAIM option 'BOGUS'"
    )
    assert pending.err("XCLAIM", "s", "g", "d", "x", "1-0") == (
        "ERR Invalid min-idle-time argument for XCLAIM"
    )
    assert pending.err("XCLAIM", "s", "nog", "d", "x", "1-0") == (
        "NOGROUP No such key 's' or consumer group 'nog'"
    )


def test_xautoclaim_cursor_walks_the_pel(pending: X) -> None:
    first = pending("XAUTOCLAIM", "s", "g", "d", "0", "0", "COUNT", "2", "JUSTID")
    assert first == [b"3-0", [b"1-0", b"2-0"], []]
    assert pending("XAUTOCLAIM", "s", "g", "d", "0", "3-0", "COUNT", "2", "JUSTID") == [
        b"0-0",
        [b"3-0"],
        [],
    ]


def test_xautoclaim_reports_deleted_entries_even_when_not_idle(pending: X) -> None:
    pending("XDEL", "s", "1-0", "2-0")
    reply = pending("XAUTOCLAIM", "s", "g", "d", "99999999", "0", "COUNT", "1")
    assert reply == [b"2-0", [], [b"1-0"]]
    assert pending("XPENDING", "s", "g")[0] == 2


def test_xautoclaim_scans_at_most_ten_times_count(grp: X, clock: Clock) -> None:
    for i in range(4, 40):
        grp("XADD", "s", f"{i}-0", "f", "v")
    grp("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">")
    reply = grp("XAUTOCLAIM", "s", "g", "d", "99999999", "0", "COUNT", "2")
    assert reply == [b"21-0", [], []]


def test_xautoclaim_counts_deliveries(pending: X) -> None:
    pending("XAUTOCLAIM", "s", "g", "d", "0", "0", "COUNT", "1")
    pending("XAUTOCLAIM", "s", "g", "d", "0", "2-0", "COUNT", "1", "JUSTID")
    assert _counts(pending) == {b"1-0": (b"d", 2), b"2-0": (b"d", 1), b"3-0": (b"c", 1)}


def test_xautoclaim_count_must_be_positive(pending: X) -> None:
    assert (
        pending.err("XAUTOCLAIM", "s", "g", "d", "0", "0", "COUNT", "0") == "ERR COUNT must be > 0"
    )


# --- XINFO / XSETID --------------------------------------------------------------------------


def test_xinfo_stream_has_the_ten_7_0_fields(s3: X) -> None:
    keys = [k for k, _ in s3("XINFO", "STREAM", "s").items]
    assert keys == [
        b"length",
        b"radix-tree-keys",
        b"radix-tree-nodes",
        b"last-generated-id",
        b"max-deleted-entry-id",
        b"entries-added",
        b"recorded-first-entry-id",
        b"groups",
        b"first-entry",
        b"last-entry",
    ]


def test_xinfo_stream_of_an_empty_stream_has_nil_entries(x: X) -> None:
    x("XADD", "s", "MAXLEN", "0", "1-0", "f", "v")
    info = dict(x("XINFO", "STREAM", "s").items)
    assert info[b"first-entry"] is NULL_BULK
    assert info[b"last-entry"] is NULL_BULK


def test_xinfo_stream_full_shape(pending: X, clock: Clock) -> None:
    full = dict(pending("XINFO", "STREAM", "s", "FULL", "COUNT", "2").items)
    assert b"first-entry" not in full
    assert len(full[b"entries"]) == 2
    group = dict(full[b"groups"][0].items)
    assert list(group) == [
        b"name",
        b"last-delivered-id",
        b"entries-read",
        b"lag",
        b"pel-count",
        b"pending",
        b"consumers",
    ]
    assert group[b"pending"][0] == [b"1-0", b"c", clock.now, 1]
    consumer = dict(group[b"consumers"][0].items)
    assert list(consumer) == [b"name", b"seen-time", b"pel-count", b"pending"]
    assert consumer[b"pending"] == [[b"1-0", clock.now, 1], [b"2-0", clock.now, 1]]


def test_xinfo_stream_missing_key_and_bad_options(x: X) -> None:
    assert x.err("XINFO", "STREAM", "nokey") == "ERR no such key"
    x("XADD", "s", "1-0", "f", "v")
    assert x.err("XINFO", "STREAM", "s", "FOO") == (
        "ERR unknown subcommand or wrong number of arguments for 'STREAM'. Try XINFO HELP."
    )


def test_xinfo_groups_lag_nil_with_a_tombstone_ahead(pending: X) -> None:
    pending("XGROUP", "CREATE", "s", "late", "1-0", "ENTRIESREAD", "1")
    pending("XDEL", "s", "2-0")
    groups = {dict(m.items)[b"name"]: dict(m.items) for m in pending("XINFO", "GROUPS", "s")}
    assert groups[b"late"][b"lag"] is NULL_BULK
    assert groups[b"g"][b"lag"] == 0


def test_xsetid_rules(s3: X) -> None:
    assert s3.err("XSETID", "s", "2-0") == (
        "ERR The ID specified in XSETID is smaller than the target stream top item"
    )
    assert s3.err("XSETID", "s", "5-0", "ENTRIESADDED", "1") == (
        "ERR The entries_added specified in XSETID is smaller than the target stream length"
    )
    assert s3.err("XSETID", "s", "5-0", "MAXDELETEDID", "6-0") == (
        "ERR The ID specified in XSETID is smaller than the provided max_deleted_entry_id"
    )
    assert (
        s3.err("XSETID", "s", "5-0", "ENTRIESADDED", "-1") == "ERR entries_added must be positive"
    )
    assert s3.err("XSETID", "nokey", "5-0") == "ERR no such key"
    assert s3("XSETID", "s", "5-0", "ENTRIESADDED", "9", "MAXDELETEDID", "4-0").text == "OK"
    info = dict(s3("XINFO", "STREAM", "s").items)
    assert (info[b"last-generated-id"], info[b"entries-added"], info[b"max-deleted-entry-id"]) == (
        b"5-0",
        9,
        b"4-0",
    )


def test_xsetid_can_move_an_empty_stream_backwards(s3: X) -> None:
    s3("XTRIM", "s", "MAXLEN", "0")
    assert s3("XSETID", "s", "1-0").text == "OK"
    assert s3("XADD", "s", "2-0", "f", "v") == b"2-0"


# --- 7.2+ features stay absent ---------------------------------------------------------------


def test_xadd_keepref_is_just_an_invalid_id_in_7_0(x: X) -> None:
    assert x.err("XADD", "s", "KEEPREF", "*", "f", "v").startswith("ERR Invalid stream ID")


def test_xreadgroup_claim_option_is_a_syntax_error_in_7_0(grp: X) -> None:
    assert grp.err("XREADGROUP", "GROUP", "g", "c", "CLAIM", "10", "STREAMS", "s", ">") == (
        "ERR syntax error"
    )
