"""The RDB codec's pure parts: LZF, listpack/intset, bounded reading, payload checks (no
server; the byte-for-byte comparisons with redis-server are in test_rdb_dump_restore.py)."""

from __future__ import annotations

import random

import pytest

from streamworker.engine.rdb import codec, lzf
from streamworker.engine.rdb.listpack import (
    PackedFormatError,
    intset_decode,
    intset_encode,
    listpack_decode,
    listpack_encode,
)
from streamworker.engine.rdb.primitives import RdbFormatError, Reader, save_len, save_string


@pytest.mark.parametrize("alphabet", [b"a", b"ab", b"abcdefgh", bytes(range(256))])
def test_lzf_output_decompresses_to_the_input(alphabet: bytes) -> None:
    rnd = random.Random(len(alphabet))
    for n in (21, 22, 50, 300, 5000, 70000):
        data = bytes(rnd.choice(alphabet) for _ in range(n))
        packed = lzf.compress(data, 2 * n + 64)
        assert packed is not None
        assert lzf.decompress(packed, n) == data


def test_lzf_gives_up_when_the_output_room_is_too_small() -> None:
    data = bytes(range(256))  # incompressible
    assert lzf.compress(data, len(data) - 4) is None


@pytest.mark.parametrize(
    ("blob", "size"),
    [
        (b"\x00a\x20\x05", 5),  # a back-reference 6 bytes before the start
        (b"\x05abc", 6),  # a literal run past the end of the input
        (b"\x00a", 2),  # shorter than declared
        (b"\x00a", 1 << 60),  # a length no input of this size can produce
        (b"\xe0", 10),  # a truncated long back-reference
    ],
)
def test_lzf_refuses_damaged_input(blob: bytes, size: int) -> None:
    with pytest.raises(lzf.LzfError):
        lzf.decompress(blob, size)


def test_listpack_round_trips_strings_and_integers_of_every_width() -> None:
    items: list[bytes | int] = [b"", b"a", b"x" * 63, b"x" * 64, b"x" * 4095, b"x" * 4096]
    items += [0, 127, 128, -4096, 4095, 4096, -32768, 32767, -(2**23), 2**31 - 1, -(2**63)]
    items += [b"007", b"-0", b"12345678901234567890"]
    out = listpack_decode(listpack_encode(items), as_int=True)
    assert out == items


@pytest.mark.parametrize(
    "damage",
    [
        lambda lp: lp[:-1],  # no end byte
        lambda lp: lp[:4] + b"\x09\x00" + lp[6:],  # wrong element count
        lambda lp: b"\x00\x01\x00\x00" + lp[4:],  # wrong total size
        lambda lp: lp[:8] + b"\x07" + lp[9:],  # a back-length that does not match
    ],
)
def test_listpack_refuses_damaged_bytes(damage: object) -> None:
    lp = listpack_encode([b"a", b"b"])
    with pytest.raises(PackedFormatError):
        listpack_decode(damage(lp))  # type: ignore[operator]


@pytest.mark.parametrize(
    "blob", [b"\x01\x01f", b"\x01\x01f\x01", b"\x01\x01f\x05\x00v", b"\x01\xfe\x00"]
)
def test_zipmap_refuses_truncated_bytes(blob: bytes) -> None:
    from streamworker.engine.rdb.listpack import zipmap_decode

    with pytest.raises(PackedFormatError):
        zipmap_decode(blob)


@pytest.mark.parametrize(
    "blob",
    [
        b"\x0b\x00\x00\x00\x0a\x00\x00\x00\x01\x00\xff",  # a count without the entry
        b"\x0d\x00\x00\x00\x0a\x00\x00\x00\x01\x00\x00\x05\xff",  # entry past the end
        b"\x0c\x00\x00\x00\x0a\x00\x00\x00\x01\x00\x00\xff",  # an entry cut after its prevlen
    ],
)
def test_ziplist_refuses_damaged_bytes(blob: bytes) -> None:
    from streamworker.engine.rdb.listpack import ziplist_decode

    with pytest.raises(PackedFormatError):
        ziplist_decode(blob)


def test_intset_picks_the_narrowest_width_and_refuses_unsorted_members() -> None:
    assert intset_encode([3, 1])[:4] == b"\x02\x00\x00\x00"
    assert intset_encode([1, 40000])[:4] == b"\x04\x00\x00\x00"
    assert intset_encode([1, 2**40])[:4] == b"\x08\x00\x00\x00"
    assert intset_decode(intset_encode([5, -5, 0])) == [-5, 0, 5]
    unsorted = b"\x02\x00\x00\x00\x02\x00\x00\x00\x05\x00\x01\x00"
    with pytest.raises(PackedFormatError):
        intset_decode(unsorted)


def test_a_count_larger_than_the_remaining_bytes_is_refused_before_reading() -> None:
    r = Reader(save_len(1 << 60) + b"abc")
    with pytest.raises(RdbFormatError, match="element count"):
        r.count()


def test_strings_round_trip_through_every_string_encoding() -> None:
    for s in (b"", b"0", b"-129", b"2147483647", b"2147483648", b"007", b"ab" * 40):
        assert Reader(save_string(s)).string() == s


def test_payload_checks_length_version_and_checksum() -> None:
    good = codec.dump_payload(b"v", codec.EncodingLimits())
    assert codec.payload_ok(good)
    assert not codec.payload_ok(good[:9])
    assert not codec.payload_ok(good[:-1] + bytes((good[-1] ^ 1,)))
    newer = bytearray(good)
    newer[-10] = 11
    assert not codec.payload_ok(bytes(newer))


def test_strings_past_the_lzf_limit_are_written_uncompressed_and_still_read_back() -> None:
    from streamworker.engine.rdb.primitives import LZF_MAX_INPUT

    big = b"a" * (LZF_MAX_INPUT + 1)
    encoded = save_string(big)
    assert encoded == save_len(len(big)) + big
    assert Reader(encoded).string() == big
    assert save_string(big[:-1])[0] == 0xC3  # at the limit: LZF, as redis-server


def _sample_values() -> list[object]:
    from collections import deque

    from streamworker.engine import Engine
    from tests.engine.aof_support import Session

    e = Engine()
    s = Session(e)
    s("XADD", "st", "1-1", "f", "v", "g", "12")
    s("XADD", "st", "2-1", "f", "v", "g", "13")
    s("XADD", "st", "3-1", "other", "x")
    s("XDEL", "st", "2-1")
    s("XGROUP", "CREATE", "st", "g", "0")
    s("XREADGROUP", "GROUP", "g", "c", "STREAMS", "st", ">")
    s("ZADD", "z", "1", "a", "2.5", "b")
    s("ZADD", "zs", *[x for i in range(200) for x in (str(i), f"m{i}")])
    s("HSET", "h", "f", "v", "n", "1")
    z = e.keyspace.dbs[0]
    return [
        b"hello" * 10,
        deque([b"a", b"1", b"b" * 70]),
        {b"1", b"2", b"-3"},
        {b"a", b"b"},
        {b"f": b"v", b"n": b"1"},
        {f"f{i}".encode(): b"v" * 70 for i in range(3)},
        z.data[b"z"],
        z.data[b"zs"],
        z.data[b"st"],
    ]


def test_damaged_payloads_fail_as_bad_data_never_as_another_exception() -> None:
    rnd = random.Random(5)
    limits = codec.EncodingLimits()
    for value in _sample_values():
        good = codec.dump_payload(value, limits)[:-10]
        for _ in range(300):
            data = bytearray(good)
            if rnd.random() < 0.3:
                data = data[: rnd.randrange(len(data))]
            else:
                for _ in range(rnd.randint(1, 3)):
                    data[rnd.randrange(len(data))] = rnd.randrange(256)
            try:
                codec.parse_payload(bytes(data))
            except RdbFormatError:
                pass
