"""The shared fast RESP reader (engine/resp.py) that the request parser and the AOF loader use."""

from __future__ import annotations

from streamworker.engine.resp import read_arrays


def _split(data: bytes) -> tuple[list[bytes], int]:
    parts = data.split(b"\r\n")
    return parts, len(parts) - 1


def test_reads_consecutive_arrays_and_returns_the_part_after_them() -> None:
    parts, last = _split(b"*1\r\n$4\r\nPING\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n")
    out: list[list[bytes]] = []
    assert read_arrays(parts, 0, last, out, last, last) == last
    assert out == [[b"PING"], [b"GET", b"k"]]


def test_stops_before_a_payload_holding_crlf() -> None:
    parts, last = _split(b"*1\r\n$4\r\nPING\r\n*1\r\n$4\r\na\r\nb\r\n")
    out: list[list[bytes]] = []
    assert read_arrays(parts, 0, last, out, last, last) == 3
    assert out == [[b"PING"]]


def test_stops_before_an_array_cut_short() -> None:
    parts, last = _split(b"*2\r\n$3\r\nGET\r\n")
    out: list[list[bytes]] = []
    assert read_arrays(parts, 0, last, out, last, last) == 0
    assert out == []


def test_leaves_empty_arrays_and_leading_zeros_to_the_slow_reader() -> None:
    for data in (b"*0\r\n", b"*01\r\n$1\r\na\r\n"):
        parts, last = _split(data)
        assert read_arrays(parts, 0, last, [], last, last) == 0


def test_reads_at_most_the_given_number_of_arrays() -> None:
    parts, last = _split(b"*1\r\n$1\r\na\r\n*1\r\n$1\r\nb\r\n")
    out: list[list[bytes]] = []
    assert read_arrays(parts, 0, last, out, 1, last) == 3
    assert out == [[b"a"]]


def test_stops_before_an_array_longer_than_max_count() -> None:
    parts, last = _split(b"*1\r\n$1\r\na\r\n*2\r\n$1\r\nb\r\n$1\r\nc\r\n")
    out: list[list[bytes]] = []
    assert read_arrays(parts, 0, last, out, last, 1) == 3
    assert out == [[b"a"]]
