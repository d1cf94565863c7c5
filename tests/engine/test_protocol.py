"""protocol.py: the sans-I/O request parser and the RESP2/RESP3 reply encoder."""

from __future__ import annotations

import pytest

from streamworker.engine.errors import CommandError
from streamworker.engine.protocol import (
    INLINE_MAX_SIZE,
    ProtocolError,
    RequestParser,
    encode,
    parse_inline_args,
)
from streamworker.engine.replies import (
    NULL_ARRAY,
    NULL_BULK,
    OK,
    Double,
    Map,
    SetReply,
    Status,
    Verbatim,
)

# --- parser: multibulk ---------------------------------------------------------------------


def test_parses_one_multibulk_command() -> None:
    assert RequestParser().feed(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n") == [[b"GET", b"k"]]


def test_parses_several_pipelined_commands_from_one_chunk() -> None:
    data = b"*1\r\n$4\r\nPING\r\n" * 3
    assert RequestParser().feed(data) == [[b"PING"]] * 3


def test_returns_nothing_until_a_command_is_complete() -> None:
    p = RequestParser()
    data = b"*2\r\n$3\r\nSET\r\n$5\r\nhello\r\n"
    out: list[list[bytes]] = []
    for i in range(len(data)):
        out += p.feed(data[i : i + 1])
        if i < len(data) - 1:
            assert out == []
    assert out == [[b"SET", b"hello"]]


def test_keeps_the_incomplete_tail_for_the_next_feed() -> None:
    p = RequestParser()
    assert p.feed(b"*1\r\n$4\r\nPING\r\n*1\r\n$4\r\nPI") == [[b"PING"]]
    assert p.pending == len(b"*1\r\n$4\r\nPI")
    assert p.feed(b"NG\r\n") == [[b"PING"]]
    assert p.pending == 0


def test_bulk_payload_may_contain_crlf_and_binary() -> None:
    payload = b"a\r\nb\x00\xff"
    data = b"*2\r\n$4\r\nECHO\r\n$%d\r\n%s\r\n" % (len(payload), payload)
    assert RequestParser().feed(data) == [[b"ECHO", payload]]


def test_empty_bulk_argument_is_kept() -> None:
    assert RequestParser().feed(b"*2\r\n$4\r\nECHO\r\n$0\r\n\r\n") == [[b"ECHO", b""]]


def test_zero_and_negative_multibulk_counts_are_skipped() -> None:
    assert RequestParser().feed(b"*0\r\n*-1\r\n*1\r\n$4\r\nPING\r\n") == [[b"PING"]]


def test_bytes_after_a_bulk_payload_are_not_checked_for_crlf() -> None:
    # Redis skips the two bytes after the payload without looking at them.
    assert RequestParser().feed(b"*1\r\n$4\r\nPINGxx") == [[b"PING"]]


@pytest.mark.parametrize("count", [b"abc", b"+1", b"01", b"2147483648", b""])
def test_invalid_multibulk_length_is_a_protocol_error(count: bytes) -> None:
    with pytest.raises(ProtocolError) as exc:
        RequestParser().feed(b"*" + count + b"\r\n")
    assert exc.value.text == "ERR Protocol error: invalid multibulk length"


@pytest.mark.parametrize("size", [b"-1", b"abc", b"01", b""])
def test_invalid_bulk_length_is_a_protocol_error(size: bytes) -> None:
    with pytest.raises(ProtocolError) as exc:
        RequestParser().feed(b"*1\r\n$" + size + b"\r\n")
    assert exc.value.text == "ERR Protocol error: invalid bulk length"


def test_bulk_longer_than_proto_max_bulk_len_is_invalid() -> None:
    with pytest.raises(ProtocolError) as exc:
        RequestParser(max_bulk_len=10).feed(b"*1\r\n$11\r\n")
    assert exc.value.text == "ERR Protocol error: invalid bulk length"


def test_missing_dollar_names_the_byte_found() -> None:
    with pytest.raises(ProtocolError) as exc:
        RequestParser().feed(b"*1\r\n:4\r\n")
    assert exc.value.text == "ERR Protocol error: expected '$', got ':'"


def test_unterminated_multibulk_count_longer_than_64k_is_too_big() -> None:
    with pytest.raises(ProtocolError) as exc:
        RequestParser().feed(b"*" + b"1" * (INLINE_MAX_SIZE + 1))
    assert exc.value.text == "ERR Protocol error: too big mbulk count string"


def test_unterminated_bulk_count_longer_than_64k_is_too_big() -> None:
    with pytest.raises(ProtocolError) as exc:
        RequestParser().feed(b"*1\r\n$" + b"1" * (INLINE_MAX_SIZE + 1))
    assert exc.value.text == "ERR Protocol error: too big bulk count string"


# --- parser: inline ------------------------------------------------------------------------


def test_parses_inline_command() -> None:
    assert RequestParser().feed(b"SET k v\r\n") == [[b"SET", b"k", b"v"]]


def test_inline_accepts_bare_newline() -> None:
    assert RequestParser().feed(b"PING\n") == [[b"PING"]]


def test_blank_inline_line_produces_nothing() -> None:
    assert RequestParser().feed(b"\r\n   \r\nPING\r\n") == [[b"PING"]]


def test_inline_waits_for_the_newline() -> None:
    p = RequestParser()
    assert p.feed(b"PIN") == []
    assert p.feed(b"G\r\n") == [[b"PING"]]


def test_inline_longer_than_64k_without_newline_is_too_big() -> None:
    with pytest.raises(ProtocolError) as exc:
        RequestParser().feed(b"a" * (INLINE_MAX_SIZE + 1))
    assert exc.value.text == "ERR Protocol error: too big inline request"


def test_inline_unbalanced_quotes_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError) as exc:
        RequestParser().feed(b'SET "k v\r\n')
    assert exc.value.text == "ERR Protocol error: unbalanced quotes in request"


def test_inline_double_quotes_support_escapes() -> None:
    assert parse_inline_args(b'SET "a b\\n\\x41\\"" c') == [b"SET", b'a b\nA"', b"c"]


def test_inline_single_quotes_only_escape_the_quote() -> None:
    assert parse_inline_args(b"SET 'a\\'b\\n'") == [b"SET", b"a'b\\n"]


def test_inline_closing_quote_must_be_followed_by_space() -> None:
    assert parse_inline_args(b'SET "a"b') is None


def test_inline_empty_quoted_argument_is_kept() -> None:
    assert parse_inline_args(b'ECHO ""') == [b"ECHO", b""]


# --- encoder -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "resp2", "resp3"),
    [
        (b"abc", b"$3\r\nabc\r\n", b"$3\r\nabc\r\n"),
        (b"", b"$0\r\n\r\n", b"$0\r\n\r\n"),
        (42, b":42\r\n", b":42\r\n"),
        (-1, b":-1\r\n", b":-1\r\n"),
        (OK, b"+OK\r\n", b"+OK\r\n"),
        (Status("QUEUED"), b"+QUEUED\r\n", b"+QUEUED\r\n"),
        ([b"a", 1], b"*2\r\n$1\r\na\r\n:1\r\n", b"*2\r\n$1\r\na\r\n:1\r\n"),
        ((), b"*0\r\n", b"*0\r\n"),
        (NULL_BULK, b"$-1\r\n", b"_\r\n"),
        (NULL_ARRAY, b"*-1\r\n", b"_\r\n"),
        (None, b"$-1\r\n", b"_\r\n"),
        (Map([(b"k", 1)]), b"*2\r\n$1\r\nk\r\n:1\r\n", b"%1\r\n$1\r\nk\r\n:1\r\n"),
        (Map(), b"*0\r\n", b"%0\r\n"),
        (Double(1.5), b"$3\r\n1.5\r\n", b",1.5\r\n"),
        (Double(3.0), b"$1\r\n3\r\n", b",3\r\n"),
        (Double(float("inf")), b"$3\r\ninf\r\n", b",inf\r\n"),
        (Double(float("-inf")), b"$4\r\n-inf\r\n", b",-inf\r\n"),
        (Double(0.1), b"$19\r\n0.10000000000000001\r\n", b",0.10000000000000001\r\n"),
        (SetReply([b"a"]), b"*1\r\n$1\r\na\r\n", b"~1\r\n$1\r\na\r\n"),
        (Verbatim("hi"), b"$2\r\nhi\r\n", b"=6\r\ntxt:hi\r\n"),
        (CommandError("ERR boom"), b"-ERR boom\r\n", b"-ERR boom\r\n"),
        (True, b":1\r\n", b"#t\r\n"),
        (False, b":0\r\n", b"#f\r\n"),
    ],
)
def test_encodes_each_reply_type_per_protocol(reply: object, resp2: bytes, resp3: bytes) -> None:
    assert encode(reply, 2) == resp2
    assert encode(reply, 3) == resp3


def test_encodes_nested_map_inside_array() -> None:
    reply = [Map([(b"a", [NULL_BULK, Double(2.5)])])]
    assert encode(reply, 3) == b"*1\r\n%1\r\n$1\r\na\r\n*2\r\n_\r\n,2.5\r\n"
    assert encode(reply, 2) == b"*1\r\n*2\r\n$1\r\na\r\n*2\r\n$-1\r\n$3\r\n2.5\r\n"


def test_error_text_newlines_become_spaces() -> None:
    assert encode(CommandError("ERR a\r\nb")) == b"-ERR a  b\r\n"


def test_error_text_keeps_non_utf8_bytes() -> None:
    text = b"ERR \xff".decode("utf-8", "surrogateescape")
    assert encode(CommandError(text)) == b"-ERR \xff\r\n"


def test_encoding_an_unknown_type_fails() -> None:
    with pytest.raises(TypeError):
        encode(object())
