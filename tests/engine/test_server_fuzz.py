"""Fuzzing the request parser and the server loop (hypothesis, a few seconds in CI).

Properties: the parser gives the same commands (or the same protocol error) however the bytes
are split into reads; the server answers every request with well-formed RESP, closes the
connection right after a protocol error, and keeps serving other clients whatever one of them
sends.
"""

from __future__ import annotations

import itertools
import socket
import time
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamworker.engine.protocol import ProtocolError, RequestParser
from tests.engine.conftest import pack, read_raw_reply
from tests.support.engine_server import ThreadedServer
from tests.support.hypothesis_profiles import examples

_SAFE_COMMANDS = [
    b"PING",
    b"ECHO",
    b"SET",
    b"GET",
    b"DEL",
    b"INCR",
    b"XADD",
    b"XLEN",
    b"XRANGE",
    b"XREAD",
    b"XGROUP",
    b"XREADGROUP",
    b"XACK",
    b"XPENDING",
    b"XCLAIM",
    b"XAUTOCLAIM",
    b"XINFO",
    b"XTRIM",
    b"XDEL",
    b"HSET",
    b"MULTI",
    b"EXEC",
    b"DISCARD",
    b"SELECT",
    b"HELLO",
    b"CLIENT",
    b"TYPE",
    b"NOSUCHCOMMAND",
]
_WORDS = [
    b"s",
    b"g",
    b"c",
    b"*",
    b">",
    b"0",
    b"$",
    b"-",
    b"+",
    b"COUNT",
    b"1",
    b"MKSTREAM",
    b"STREAMS",
    b"GROUP",
    b"CREATE",
    b"2",
    b"3",
    b"NOACK",
    b"STREAM",
    b"FULL",
    b"-1",
    b"LIST",
    b"SETNAME",
    b"x" * 40,
    b"",
    b"\r\n",
    b"\x00\xff",
]

words = st.one_of(st.sampled_from(_WORDS), st.binary(max_size=12))
command = st.tuples(st.sampled_from(_SAFE_COMMANDS), st.lists(words, max_size=6)).map(
    lambda c: [c[0], *c[1]]
)


def _frame(argv: list[bytes]) -> bytes:
    return pack(tuple(argv))


garbage = st.one_of(
    st.binary(max_size=40),
    st.sampled_from(
        [
            b"*abc\r\n",
            b"*1\r\nx\r\n",
            b"$-5\r\n",
            b'"open\r\n',
            b"*-1\r\n",
            b"*0\r\n",
            b"\r\n",
            b"*2\r\n$1\r\n",
            b"PING\n",
            b"*1\r\n$4\r\nPINGxx",
        ]
    ),
)
piece = st.one_of(command.map(_frame), command.map(lambda c: b" ".join(c) + b"\r\n"), garbage)
stream = st.lists(piece, min_size=1, max_size=12).map(b"".join)


def _parse(data: bytes, cuts: list[int]) -> tuple[str, object]:
    parser = RequestParser(max_bulk_len=1 << 20)
    out: list[list[bytes]] = []
    bounds = [0, *sorted(c % (len(data) + 1) for c in cuts), len(data)]
    try:
        for a, b in itertools.pairwise(bounds):
            out += parser.feed(data[a:b])
    except ProtocolError as exc:
        return "error", (out + exc.commands, exc.text)
    return "ok", (out, parser.pending)


@settings(max_examples=examples(400), deadline=None)
@given(stream, st.lists(st.integers(min_value=0, max_value=10_000), max_size=6))
def test_the_parser_does_not_depend_on_how_input_is_split(data: bytes, cuts: list[int]) -> None:
    assert _parse(data, cuts) == _parse(data, [])


@pytest.fixture(scope="module")
def fuzz_server() -> Iterator[ThreadedServer]:
    srv = ThreadedServer()
    yield srv
    srv.close()


def _exchange(port: int, data: bytes) -> list[bytes]:
    # Send data and end the request stream: the server answers what it can and closes.
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    replies: list[bytes] = []
    buf = bytearray()
    try:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        while True:
            try:
                replies.append(read_raw_reply(sock, buf))
            except ConnectionError:
                break
    except (BrokenPipeError, ConnectionResetError):
        pass
    finally:
        sock.close()
    assert not buf, f"a reply was cut short: {bytes(buf[:80])!r}"
    return replies


@settings(
    max_examples=examples(150),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(stream)
def test_the_server_answers_in_resp_and_survives_any_input(
    fuzz_server: ThreadedServer, data: bytes
) -> None:
    replies = _exchange(fuzz_server.port, data)
    for i, reply in enumerate(replies):
        if reply.startswith(b"-ERR Protocol error"):
            assert i == len(replies) - 1, "a protocol error closes the connection"
    bystander = socket.create_connection(("127.0.0.1", fuzz_server.port), timeout=5)
    bystander.sendall(b"*1\r\n$4\r\nPING\r\n")
    assert read_raw_reply(bystander, bytearray()) == b"+PONG\r\n"
    bystander.close()


_WORST_ARGUMENTS = [
    (b"SADD", b"s", b"a", b"b"),
    (b"SRANDMEMBER", b"s", b"-9223372036854775807"),
    (b"SRANDMEMBER", b"s", b"-9223372036854775808"),
    (b"SRANDMEMBER", b"s", b"-2147483648"),
    (b"SRANDMEMBER", b"s", b"9223372036854775807"),
    (b"SPOP", b"s", b"9223372036854775807"),
    (b"RPUSH", b"l", b"a"),
    (b"LRANGE", b"l", b"-9223372036854775808", b"9223372036854775807"),
    (b"LPOP", b"l", b"9223372036854775807"),
    (b"SETRANGE", b"str", b"9223372036854775807", b"x"),
    (b"GETRANGE", b"str", b"-9223372036854775808", b"9223372036854775807"),
    (b"XADD", b"x", b"1-1", b"f", b"v"),
    (b"XRANGE", b"x", b"-", b"+", b"COUNT", b"9223372036854775807"),
    (b"XGROUP", b"CREATE", b"x", b"g", b"0"),
    (b"XAUTOCLAIM", b"x", b"g", b"c", b"0", b"0", b"COUNT", b"9223372036854775807"),
    (b"XREADGROUP", b"GROUP", b"g", b"c", b"COUNT", b"9223372036854775807", b"STREAMS", b"x", b">"),
    (b"SCAN", b"0", b"COUNT", b"9223372036854775807"),
    (b"EXPIRE", b"s", b"9223372036854775807"),
    (b"ZRANGE", b"z", b"0", b"-1", b"BYSCORE", b"LIMIT", b"0", b"9223372036854775807"),
]


def test_the_worst_arguments_are_answered_at_once_through_the_server(
    fuzz_server: ThreadedServer,
) -> None:
    # The engine's extreme-argument table runs in process (test_extreme_args.py); this checks
    # the same bound through the RESP server: each answer within 2 s, other clients served.
    sock = socket.create_connection(("127.0.0.1", fuzz_server.port), timeout=5)
    buf = bytearray()
    try:
        for args in _WORST_ARGUMENTS:
            started = time.monotonic()
            sock.sendall(pack(args))
            reply = read_raw_reply(sock, buf)
            assert time.monotonic() - started < 2.0, args
            assert len(reply) < 1 << 20, args
    finally:
        sock.close()
    bystander = socket.create_connection(("127.0.0.1", fuzz_server.port), timeout=5)
    bystander.sendall(b"*1\r\n$4\r\nPING\r\n")
    assert read_raw_reply(bystander, bytearray()) == b"+PONG\r\n"
    bystander.close()
