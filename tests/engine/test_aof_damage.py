"""Damaged append-only files (issue #24), side by side with redis-server 7.0: a damaged
record stops the start with its byte offset (an opt-in flag skips damaged records, loudly),
the per-record CRC catches damage inside values that Redis cannot see, and start-up errors
say what failed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from streamworker.engine.aof import AOF_FILENAME, AofCorruptError, PersistenceError, open_persistent
from tests.engine.aof_support import Session
from tests.support.engine_server import EngineServerProcess
from tests.support.proc import ROOT
from tests.support.servers import RedisServer, free_port


def _write_stream_file(directory: Path, entries: int = 20) -> bytes:
    aof = open_persistent(directory, appendfsync="always")
    s = Session(aof.engine)
    for i in range(entries):
        s("XADD", "orders", f"{i + 1}-0", "amount", f"value-{i:04d}")
    aof.close()
    return (directory / AOF_FILENAME).read_bytes()


def _flip(data: bytes, needle: bytes, nth: int, replacement: bytes) -> tuple[bytes, int]:
    """``data`` with the ``nth`` occurrence of ``needle`` replaced; and its offset."""
    offset = -1
    for _ in range(nth + 1):
        offset = data.index(needle, offset + 1)
    return data[:offset] + replacement + data[offset + len(needle) :], offset


def _serve(directory: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """``streamworker engine serve --dir directory`` run until it exits (or 20 s)."""
    args = [sys.executable, "-m", "streamworker", "engine", "serve", "--port", str(free_port())]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [*args, "--dir", str(directory), *extra],
        capture_output=True,
        text=True,
        timeout=20,
        env=env,
        cwd=ROOT,
        check=False,
    )


def _strip_checksums(data: bytes) -> bytes:
    """The file as Redis (or an engine before checksums) would have written it."""
    return re.sub(rb"#C:[0-9a-f]{8}\r\n", b"", data)


def _record_offset(data: bytes, offset: int) -> int:
    """The offset of the record (its checksum line) holding byte ``offset``."""
    return data.rindex(b"#C:", 0, offset)


@pytest.mark.redis
def test_a_flipped_byte_in_a_command_name_stops_both_servers_at_start(tmp_path: Path) -> None:
    data = _write_stream_file(tmp_path / "engine")
    damaged, offset = _flip(data, b"XADD", 10, b"\xa7ADD")
    (tmp_path / "engine" / AOF_FILENAME).write_bytes(damaged)
    real = RedisServer(tmp_path / "redis", appendonly=True)
    (tmp_path / "redis" / AOF_FILENAME).write_bytes(damaged)
    with pytest.raises(RuntimeError, match="exited at start"):
        real.start()
    assert "Unknown command" in (tmp_path / "redis" / "redis.log").read_text(errors="replace")
    with pytest.raises(AofCorruptError, match="checksum mismatch") as info:
        open_persistent(tmp_path / "engine")
    assert info.value.offset == _record_offset(damaged, offset)


def test_an_unknown_command_in_a_file_without_checksums_stops_the_start(tmp_path: Path) -> None:
    data = _strip_checksums(_write_stream_file(tmp_path / "d"))
    damaged, offset = _flip(data, b"XADD", 10, b"\xa7ADD")
    (tmp_path / "d" / AOF_FILENAME).write_bytes(damaged)
    with pytest.raises(AofCorruptError, match="unknown command") as info:
        open_persistent(tmp_path / "d")
    assert info.value.offset == data.rindex(b"*", 0, offset)


def test_the_engine_serve_command_refuses_a_damaged_file_naming_the_offset(
    tmp_path: Path,
) -> None:
    data = _write_stream_file(tmp_path / "d")
    damaged, offset = _flip(data, b"XADD", 10, b"\xa7ADD")
    (tmp_path / "d" / AOF_FILENAME).write_bytes(damaged)
    done = _serve(tmp_path / "d")
    assert done.returncode != 0
    assert f"at offset {_record_offset(damaged, offset)}" in done.stderr
    assert "cannot listen" not in done.stderr


def test_skipping_damaged_records_is_opt_in_and_loud(tmp_path: Path) -> None:
    data = _write_stream_file(tmp_path / "d")
    damaged, offset = _flip(data, b"XADD", 10, b"\xa7ADD")
    (tmp_path / "d" / AOF_FILENAME).write_bytes(damaged)
    proc = EngineServerProcess(tmp_path / "d", extra=("--aof-skip-damaged",)).start()
    try:
        with proc.client() as c:
            assert c.xlen("orders") == 19
            assert c.xrange("orders", "11-0", "11-0") == []
        assert f"DAMAGED record in the append-only file {tmp_path / 'd' / AOF_FILENAME}" in (
            proc.log()
        )
        assert f"at offset {_record_offset(damaged, offset)}" in proc.log()
    finally:
        proc.stop()


@pytest.mark.redis
def test_a_flipped_byte_inside_a_value_is_caught_by_the_checksum_where_redis_is_blind(
    tmp_path: Path,
) -> None:
    data = _write_stream_file(tmp_path / "engine")
    damaged, offset = _flip(data, b"value-0010", 0, b"valuE-0010")
    (tmp_path / "engine" / AOF_FILENAME).write_bytes(damaged)
    real = RedisServer(tmp_path / "redis", appendonly=True)
    (tmp_path / "redis" / AOF_FILENAME).write_bytes(damaged)
    real.start()
    try:
        with real.client() as r:
            # redis-server loads the damaged value without a word (and skips the #C lines).
            assert r.xrange("orders", "11-0", "11-0") == [(b"11-0", {b"amount": b"valuE-0010"})]
            assert r.xlen("orders") == 20
    finally:
        real.stop()
    with pytest.raises(AofCorruptError, match="checksum mismatch") as info:
        open_persistent(tmp_path / "engine")
    assert info.value.offset == _record_offset(damaged, offset)


def test_every_record_the_engine_writes_carries_a_checksum(tmp_path: Path) -> None:
    aof = open_persistent(tmp_path / "d", appendfsync="always")
    s = Session(aof.engine)
    s("SET", "a", "1")
    s("MULTI")
    s("SET", "b", "2")
    s("SELECT", "3")
    s("SET", "c", "3")
    s("EXEC")
    aof.close()
    lines = (tmp_path / "d" / AOF_FILENAME).read_bytes().split(b"\r\n")
    starts = [i for i, line in enumerate(lines) if line.startswith(b"*")]
    assert len(starts) >= 6  # SET, MULTI, SET, SELECT, SET, EXEC (and SELECT 0 after)
    assert all(lines[i - 1].startswith(b"#C:") for i in starts)


def test_an_aof_that_is_a_directory_is_reported_as_such(tmp_path: Path) -> None:
    (tmp_path / "d" / AOF_FILENAME).mkdir(parents=True)
    with pytest.raises(PersistenceError, match="Is a directory"):
        open_persistent(tmp_path / "d")
    done = _serve(tmp_path / "d")
    assert done.returncode != 0
    assert f"{tmp_path / 'd' / AOF_FILENAME}: Is a directory" in done.stderr
    assert "cannot listen" not in done.stderr


def test_a_port_in_use_is_reported_as_a_listen_failure(tmp_path: Path) -> None:
    first = EngineServerProcess().start()
    try:
        args = [sys.executable, "-m", "streamworker", "engine", "serve", "--port"]
        done = subprocess.run(
            [*args, str(first.port)],
            capture_output=True,
            text=True,
            timeout=20,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            cwd=ROOT,
            check=False,
        )
    finally:
        first.stop()
    assert done.returncode != 0
    assert f"cannot listen on 127.0.0.1 port {first.port}: Address already in use" in done.stderr
