"""The fault proxy's parsing (tests/support/faultproxy.py): RESP and PostgreSQL message
boundaries, and a seeded schedule that replays."""

from __future__ import annotations

import struct

import pytest

from tests.support.faultproxy import (
    SSL_REQUEST,
    Fault,
    FaultRates,
    FaultSchedule,
    PgSplitter,
    command_tag,
    is_commit_reply,
    is_empty_reply,
    parse_command,
    resp_frame_end,
)


def test_resp_simple_frames_end_at_their_line() -> None:
    assert resp_frame_end(b"+OK\r\n") == 5
    assert resp_frame_end(b"-ERR no\r\n:1\r\n") == 9
    assert resp_frame_end(b":12\r\n") == 5


def test_resp_bulk_string_waits_for_its_whole_body() -> None:
    frame = b"$5\r\nhello\r\n"
    assert resp_frame_end(frame) == len(frame)
    for cut in range(len(frame)):
        assert resp_frame_end(frame[:cut]) is None


def test_resp_bulk_body_may_contain_crlf() -> None:
    frame = b"$4\r\na\r\nb\r\n"
    assert resp_frame_end(frame + b"+OK\r\n") == len(frame)


def test_resp_null_bulk_and_null_array_are_complete_frames() -> None:
    assert resp_frame_end(b"$-1\r\n") == 5
    assert resp_frame_end(b"*-1\r\n") == 5


def test_resp_nested_arrays_of_an_xreadgroup_reply_are_one_frame() -> None:
    reply = (
        b"*1\r\n*2\r\n$1\r\ns\r\n*2\r\n"
        b"*2\r\n$3\r\n1-0\r\n*2\r\n$1\r\nn\r\n$1\r\n0\r\n"
        b"*2\r\n$3\r\n2-0\r\n*-1\r\n"
    )
    assert resp_frame_end(reply + b"+OK\r\n") == len(reply)
    assert resp_frame_end(reply[:-1]) is None


def test_resp3_maps_attributes_and_scalars_frame() -> None:
    assert resp_frame_end(b"%1\r\n+a\r\n:1\r\n") == 12
    attribute = b"|1\r\n+ttl\r\n:3\r\n"
    assert resp_frame_end(attribute + b"+OK\r\n") == len(attribute) + 5
    assert resp_frame_end(b"_\r\n") == 3
    assert resp_frame_end(b",1.5\r\n") == 6


def test_resp_pipelined_commands_split_one_by_one() -> None:
    buf = b"*2\r\n$4\r\nPING\r\n$1\r\nx\r\n*1\r\n$4\r\nPING\r\n"
    first = resp_frame_end(buf)
    assert first is not None
    assert parse_command(buf[:first]) == [b"PING", b"x"]
    assert parse_command(buf[first:]) == [b"PING"]


def test_resp_blocking_read_command_parses_with_its_arguments() -> None:
    cmd = [b"XREADGROUP", b"GROUP", b"g", b"c", b"BLOCK", b"100", b"STREAMS", b"s", b">"]
    frame = b"*%d\r\n" % len(cmd) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in cmd)
    assert resp_frame_end(frame) == len(frame)
    assert parse_command(frame) == cmd


def test_resp_inline_command_ends_at_its_line() -> None:
    assert resp_frame_end(b"PING\r\n") == 6
    assert parse_command(b"PING x\r\n") == [b"PING", b"x"]


def test_resp_garbage_length_is_an_error() -> None:
    with pytest.raises(ValueError, match="not RESP"):
        resp_frame_end(b"$x\r\n")


def test_empty_read_replies_are_recognised() -> None:
    assert is_empty_reply(b"*-1\r\n")
    assert not is_empty_reply(b"*1\r\n*2\r\n$1\r\ns\r\n*0\r\n")


def _typed(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!i", len(body) + 4) + body


def _startup(code: int, body: bytes = b"") -> bytes:
    return struct.pack("!ii", len(body) + 8, code) + body


def test_pg_frontend_reads_ssl_request_then_startup_then_typed_messages() -> None:
    startup = _startup(196608, b"user\x00postgres\x00\x00")
    query = _typed(b"Q", b"SELECT 1\x00")
    data = _startup(SSL_REQUEST) + startup + query
    out = PgSplitter(frontend=True).feed(data)
    assert [m.kind for m in out] == [b"", b"", b"Q"]
    assert out[2].raw == query
    assert out[2].body == b"SELECT 1\x00"


def test_pg_messages_split_across_chunks_come_out_whole() -> None:
    splitter = PgSplitter(frontend=False)
    data = _typed(b"C", b"COMMIT\x00") + _typed(b"Z", b"I")
    got = []
    for i in range(len(data)):
        got += splitter.feed(data[i : i + 1])
    assert [m.kind for m in got] == [b"C", b"Z"]


def test_pg_backend_answers_an_ssl_request_with_one_raw_byte() -> None:
    splitter = PgSplitter(frontend=False)
    splitter.expect_raw_byte()
    out = splitter.feed(b"N" + _typed(b"R", struct.pack("!i", 0)))
    assert (out[0].kind, out[0].raw) == (b"", b"N")
    assert out[1].kind == b"R"


def test_pg_commit_reply_is_recognised_by_its_command_complete() -> None:
    commit = PgSplitter(frontend=False).feed(_typed(b"C", b"COMMIT\x00") + _typed(b"Z", b"I"))
    insert = PgSplitter(frontend=False).feed(_typed(b"C", b"INSERT 0 1\x00") + _typed(b"Z", b"T"))
    assert command_tag(commit[0]) == b"COMMIT"
    assert is_commit_reply(commit)
    assert not is_commit_reply(insert)


def test_pg_bad_length_is_an_error() -> None:
    with pytest.raises(ValueError, match="not PostgreSQL"):
        PgSplitter(frontend=False).feed(b"Z" + struct.pack("!i", 2))


def test_a_seed_replays_the_same_schedule() -> None:
    rates = FaultRates(request_loss=0.01, reply_loss=0.01, hold=0.01, commit_loss=0.03)
    one = FaultSchedule(7, rates, protocol="redis")
    two = FaultSchedule(7, rates, protocol="redis")
    assert one.plan(5000) == two.plan(5000)
    assert [one.commit_fault(i) for i in range(500)] == [two.commit_fault(i) for i in range(500)]
    assert one.plan(5000) != FaultSchedule(8, rates, protocol="redis").plan(5000)


def test_a_decision_does_not_depend_on_the_ones_before_it() -> None:
    schedule = FaultSchedule(3, FaultRates(hold=0.5), protocol="postgres")
    later = schedule.request_fault(999)
    for i in range(999):
        schedule.request_fault(i)
    assert schedule.request_fault(999) == later


def test_schedule_rates_come_out_near_their_share_with_holds_in_range() -> None:
    rates = FaultRates(request_loss=0.01, reply_loss=0.01, hold=0.02)
    plan = FaultSchedule(11, rates, protocol="redis").plan(20_000)
    kinds = [f.kind for _, f in plan]
    assert 100 < kinds.count("hold") < 700
    assert 50 < kinds.count("reply_loss") < 350
    holds = [f.seconds for _, f in plan if f.kind == "hold"]
    assert min(holds) >= 0.3
    assert max(holds) <= 3.0


def test_rates_above_one_are_refused() -> None:
    with pytest.raises(ValueError, match="more than 1"):
        FaultSchedule(1, FaultRates(hold=0.7, stall=0.4), protocol="redis")


def test_a_fault_prints_its_kind_and_duration() -> None:
    assert str(Fault("hold", 1.25)) == "hold(1.25s)"
    assert str(Fault("reply_loss")) == "reply_loss"
