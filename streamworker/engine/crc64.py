"""CRC-64 as Redis computes it for DUMP payloads and RDB files.

Redis uses the "Jones" polynomial ``0xad93d23594c935a9``, reflected input and output, initial
value 0, no final XOR (``crc64("123456789") == 0xE9C6D914C4B8D9CA``). DUMP appends the CRC of
everything before it as 8 little-endian bytes; an RDB file ends with the CRC of the whole file
before the checksum. The table is built once at import (256 entries); the per-byte loop is plain
Python, which is fine for the sizes the engine checksums (payloads, and files written once).
"""

from __future__ import annotations

__all__ = ["crc64", "crc64_bytes"]

_POLY_REFLECTED = 0x95AC9329AC4BC9B5  # 0xad93d23594c935a9 with its 64 bits reversed


def _build_table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ _POLY_REFLECTED if crc & 1 else crc >> 1
        table.append(crc)
    return tuple(table)


_TABLE = _build_table()


def crc64(data: bytes | bytearray | memoryview, crc: int = 0) -> int:
    """The CRC-64/Jones of ``data``, continuing from ``crc`` (0 to start)."""
    table = _TABLE
    for byte in bytes(data):
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc


def crc64_bytes(data: bytes | bytearray | memoryview) -> bytes:
    """The 8 little-endian bytes Redis appends after ``data`` (DUMP payloads, RDB files)."""
    return crc64(data).to_bytes(8, "little")
