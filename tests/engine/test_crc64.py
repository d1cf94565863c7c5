"""CRC-64/Jones, the checksum of DUMP payloads and RDB files."""

from __future__ import annotations

from streamworker.engine.crc64 import crc64, crc64_bytes


def test_check_value_is_the_jones_polynomials() -> None:
    assert crc64(b"123456789") == 0xE9C6D914C4B8D9CA


def test_crc_continues_across_chunks() -> None:
    data = bytes(range(256)) * 3
    assert crc64(data[500:], crc64(data[:500])) == crc64(data)


def test_checksum_bytes_are_little_endian() -> None:
    assert crc64_bytes(b"") == bytes(8)
    assert crc64_bytes(b"123456789") == (0xE9C6D914C4B8D9CA).to_bytes(8, "little")
