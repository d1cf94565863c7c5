"""The append-only file: what is logged, replay, torn records, corruption, rewrites, the
directory lock, fsync policies, and ``engine:///path`` in process."""

from __future__ import annotations

import logging
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from streamworker.engine import Engine
from streamworker.engine.aof import (
    AOF_FILENAME,
    AofCorruptError,
    AppendOnlyFile,
    DirectoryLockedError,
    iter_records,
    open_persistent,
)
from streamworker.engine.errors import CommandError
from streamworker.engine.replies import OK, Status
from tests.engine.aof_support import Session, dump_state, random_workload
from tests.support.proc import ROOT


def reopen(aof: AppendOnlyFile) -> AppendOnlyFile:
    directory = aof.dir
    aof.close()
    return open_persistent(directory, appendfsync="always")


def records(path: Path) -> list[list[bytes]]:
    """The commands in the file (annotations left out)."""
    data = path.read_bytes()
    return [item for _, _, item in iter_records(data, path) if isinstance(item, list)]


@pytest.fixture
def aof(tmp_path: Path) -> AppendOnlyFile:
    a = open_persistent(tmp_path / "data", appendfsync="always")
    yield a
    a.close()


# --- what is logged --------------------------------------------------------------------------


def test_xadd_with_an_auto_id_is_logged_with_the_id_it_got(aof: AppendOnlyFile) -> None:
    s = Session(aof.engine)
    sid = s("XADD", "s", "*", "f", "v")
    assert [b"XADD", b"s", sid, b"f", b"v"] in records(aof.path)


def test_approximate_trimming_is_logged_as_the_exact_trim_it_amounted_to(
    aof: AppendOnlyFile,
) -> None:
    s = Session(aof.engine)
    s("CONFIG", "SET", "stream-node-max-entries", "2")
    for i in range(7):
        s("XADD", "s", "*", "n", i)
    sid = s("XADD", "s", "MAXLEN", "~", "3", "*", "n", "7")
    length = s("XLEN", "s")
    assert [b"XADD", b"s", b"MAXLEN", b"=", b"%d" % length, sid, b"n", b"7"] in records(aof.path)
    assert s("XTRIM", "s", "MAXLEN", "~", "1") > 0
    assert [b"XTRIM", b"s", b"MAXLEN", b"=", b"%d" % s("XLEN", "s")] in records(aof.path)


def test_relative_expiries_are_logged_as_absolute_times(aof: AppendOnlyFile) -> None:
    s = Session(aof.engine)
    s("SET", "a", "1", "EX", "100")
    s("SETEX", "b", "100", "1")
    s("SET", "c", "1")
    s("EXPIRE", "c", "100")
    s("GETEX", "a", "PX", "5000")
    logged = records(aof.path)
    for key in (b"a", b"b"):
        when = s("PEXPIRETIME", key)
        assert [b"SET", key, b"1", b"PXAT", b"%d" % when] in logged or [
            b"PEXPIREAT",
            key,
            b"%d" % when,
        ] in logged
    assert [b"PEXPIREAT", b"c", b"%d" % s("PEXPIRETIME", "c")] in logged
    assert not any(r[0] in (b"EXPIRE", b"SETEX", b"GETEX") for r in logged)


def test_float_increments_and_spop_are_logged_as_their_results(aof: AppendOnlyFile) -> None:
    s = Session(aof.engine)
    s("INCRBYFLOAT", "f", "0.1")
    s("HINCRBYFLOAT", "h", "x", "2.5")
    s("SADD", "set", "a", "b", "c")
    popped = s("SPOP", "set")
    logged = records(aof.path)
    assert [b"SET", b"f", b"0.1", b"KEEPTTL"] in logged
    assert [b"HSET", b"h", b"x", b"2.5"] in logged
    assert [b"SREM", b"set", popped] in logged


def test_a_group_read_is_logged_as_xclaim_and_setid(aof: AppendOnlyFile) -> None:
    s = Session(aof.engine)
    ids = [s("XADD", "s", "*", "n", i) for i in range(3)]
    s("XGROUP", "CREATE", "s", "g", "0")
    s("XREADGROUP", "GROUP", "g", "alice", "COUNT", "2", "STREAMS", "s", ">")
    logged = records(aof.path)
    assert [b"XGROUP", b"CREATECONSUMER", b"s", b"g", b"alice"] in logged
    claim = next(r for r in logged if r[0] == b"XCLAIM")
    assert claim[1:7] == [b"s", b"g", b"alice", b"0", ids[0], ids[1]]
    assert claim[7:] == [
        b"TIME",
        claim[8],
        b"RETRYCOUNT",
        b"1",
        b"FORCE",
        b"JUSTID",
        b"LASTID",
        ids[1],
    ]
    assert [b"XGROUP", b"SETID", b"s", b"g", ids[1], b"ENTRIESREAD", b"2"] in logged
    assert not any(r[0] == b"XREADGROUP" for r in logged)


def test_read_only_and_failed_commands_are_not_logged(aof: AppendOnlyFile) -> None:
    s = Session(aof.engine)
    s("SET", "k", "v")
    s("GET", "k")
    assert isinstance(s("XADD", "k", "*", "f", "v"), CommandError)
    s("SET", "k", "w", "NX")
    s("EXPIRE", "missing", "10")
    assert [r[0] for r in records(aof.path)] == [b"SELECT", b"SET"]


def test_a_transaction_is_logged_as_one_multi_exec_block(aof: AppendOnlyFile) -> None:
    s = Session(aof.engine)
    s("MULTI")
    s("SET", "a", "1")
    s("INCR", "a")
    s("GET", "a")
    s("EXEC")
    assert [r[0] for r in records(aof.path)] == [b"SELECT", b"MULTI", b"SET", b"INCR", b"EXEC"]


def test_a_script_is_logged_as_its_effects_in_one_transaction(aof: AppendOnlyFile) -> None:
    s = Session(aof.engine)
    s("SADD", "set", "a", "b")
    popped = s(
        "EVAL",
        "redis.call('XADD', KEYS[1], '*', 'f', 'v'); redis.call('INCR', 'n');"
        " return redis.call('SPOP', KEYS[2])",
        2,
        "s",
        "set",
    )
    logged = records(aof.path)
    assert [r[0] for r in logged[2:]] == [b"MULTI", b"XADD", b"INCR", b"SREM", b"EXEC"]
    assert logged[-2] == [b"SREM", b"set", popped]
    assert not any(r[0] == b"EVAL" for r in logged)


def test_writes_a_script_keeps_out_of_replication_are_not_logged(aof: AppendOnlyFile) -> None:
    s = Session(aof.engine)
    s(
        "EVAL",
        "redis.set_repl(redis.REPL_NONE); redis.call('XADD', 'hidden', '*', 'f', 'v');"
        " redis.set_repl(redis.REPL_ALL); return redis.call('SET', 'k', 'v')",
        0,
    )
    assert records(aof.path) == [[b"SELECT", b"0"], [b"SET", b"k", b"v"]]


# --- replay ----------------------------------------------------------------------------------


def test_replay_restores_every_type_with_its_expiry(aof: AppendOnlyFile) -> None:
    s = Session(aof.engine)
    s("SET", "str", "v", "PX", "500000")
    s("HSET", "h", "a", "1", "b", "2")
    s("SADD", "set", "x", "y")
    s("ZADD", "z", "1.5", "m", "-inf", "n")
    s("RPUSH", "l", "1", "2", "3")
    s("SELECT", "5")
    s("SET", "other-db", "yes")
    before = dump_state(aof.engine)
    after = reopen(aof)
    try:
        assert dump_state(after.engine) == before
    finally:
        after.close()


def test_stores_and_restores_over_unreclaimed_expired_keys_replay_exactly(
    aof: AppendOnlyFile,
) -> None:
    # Active expiry off: the commands themselves meet keys past their TTL (an empty STORE
    # result deletes one as a live key, RESTORE REPLACE replaces one, MOVE skips one).
    aof.engine.keyspace.active_expire = lambda budget=1000: 0  # type: ignore[method-assign]
    s = Session(aof.engine)
    s("RPUSH", "l", "a")
    payload = s("DUMP", "l")
    for key in ("d1", "d2", "d3", "k", "m"):
        s("SET", key, "v", "PX", "50")
    s("GEOADD", "g", "1", "1", "a")
    time.sleep(0.1)  # past PX 50: the keys are expired but not reclaimed (active expiry is off)
    assert s("SINTERSTORE", "d1", "nosuch") == 0
    assert s("ZUNIONSTORE", "d2", "1", "l2") == 0
    assert s("GEORADIUS", "g", "1", "1", "1", "km", "STORE", "d3") == 1
    assert s("RESTORE", "k", "0", payload, "REPLACE") == OK
    assert s("MOVE", "m", "1") == 0
    assert s("PFMERGE", "h", "g2") == OK
    before = dump_state(aof.engine)
    after = reopen(aof)
    try:
        assert dump_state(after.engine) == before
    finally:
        after.close()


def test_replay_restores_groups_consumers_and_the_pel_exactly(aof: AppendOnlyFile) -> None:
    s = Session(aof.engine)
    ids = [s("XADD", "s", "*", "n", i) for i in range(10)]
    s("XGROUP", "CREATE", "s", "g", "0")
    s("XREADGROUP", "GROUP", "g", "a", "COUNT", "4", "STREAMS", "s", ">")
    time.sleep(0.005)  # distinct delivery times, which the replay must restore as they were
    s("XREADGROUP", "GROUP", "g", "b", "NOACK", "COUNT", "2", "STREAMS", "s", ">")
    s("XREADGROUP", "GROUP", "g", "a", "STREAMS", "s", "0")
    s("XACK", "s", "g", ids[0])
    s("XDEL", "s", ids[1])
    time.sleep(0.005)  # distinct delivery times again
    s("XCLAIM", "s", "g", "c", "0", ids[2], "IDLE", "50", "RETRYCOUNT", "9")
    s("XCLAIM", "s", "g", "c", "0", ids[8], "FORCE", "LASTID", ids[9])
    s("XAUTOCLAIM", "s", "g", "d", "0", "0", "COUNT", "2")
    s("XGROUP", "CREATECONSUMER", "s", "g", "idle")
    s("XGROUP", "CREATE", "s", "g2", "$", "ENTRIESREAD", "3")
    s("XSETID", "s", ids[9], "ENTRIESADDED", "12", "MAXDELETEDID", ids[1])
    before = dump_state(aof.engine)
    after = reopen(aof)
    try:
        assert dump_state(after.engine) == before
    finally:
        after.close()


def test_a_blocked_group_read_served_later_is_logged(aof: AppendOnlyFile) -> None:
    engine = aof.engine
    reader = engine.connect()
    blocked = engine.execute(
        reader, [b"XREADGROUP", b"GROUP", b"g", b"c", b"BLOCK", b"0", b"STREAMS", b"s", b">"]
    )
    assert isinstance(blocked, CommandError)  # no group yet
    s = Session(engine)
    s("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    pending = engine.execute(
        reader, [b"XREADGROUP", b"GROUP", b"g", b"c", b"BLOCK", b"0", b"STREAMS", b"s", b">"]
    )
    s("XADD", "s", "*", "f", "v")
    assert engine.wait(pending, 5) is not None  # type: ignore[arg-type]
    before = dump_state(engine)
    after = reopen(aof)
    try:
        assert dump_state(after.engine) == before
    finally:
        after.close()


def test_a_blpop_served_later_is_logged_as_the_pop_it_made(aof: AppendOnlyFile) -> None:
    engine = aof.engine
    pending = engine.execute(engine.connect(), [b"BLPOP", b"q", b"0"])
    s = Session(engine)
    s("RPUSH", "q", "x", "y")
    assert engine.wait(pending, 5) == [b"q", b"x"]  # type: ignore[arg-type]
    s("BRPOP", "q", "0")
    logged = records(aof.path)
    assert [b"LPOP", b"q"] in logged
    assert [b"RPOP", b"q"] in logged
    before = dump_state(engine)
    after = reopen(aof)
    try:
        assert dump_state(after.engine) == before
    finally:
        after.close()


def test_replay_runs_each_record_at_the_time_it_was_first_run(aof: AppendOnlyFile) -> None:
    s = Session(aof.engine)
    s("SET", "k", "v", "PX", "150")
    time.sleep(0.3)
    # k expired before this INCR: the replay must see it gone too, and not at load time.
    s("INCR", "k")
    assert s("GET", "k") == b"1"
    after = reopen(aof)
    try:
        assert Session(after.engine)("GET", "k") == b"1"
        assert Session(after.engine)("PTTL", "k") == -1
    finally:
        after.close()


@pytest.mark.parametrize("seed", range(4))
def test_random_workloads_replay_exactly(tmp_path: Path, seed: int) -> None:
    aof = open_persistent(tmp_path / "d", appendfsync="no")
    random_workload(Session(aof.engine), random.Random(seed), 400)
    before = dump_state(aof.engine)
    aof.close()
    again = open_persistent(tmp_path / "d")
    try:
        assert again.stats.load_errors == 0
        assert dump_state(again.engine) == before
    finally:
        again.close()


# --- torn records and corruption ----------------------------------------------------------------


def _write_two_records(directory: Path) -> bytes:
    aof = open_persistent(directory, appendfsync="always")
    s = Session(aof.engine)
    s("SET", "a", "1")
    s("SET", "b", "2")
    aof.close()
    return (directory / AOF_FILENAME).read_bytes()


def test_a_torn_last_record_is_dropped_with_a_warning_at_every_cut(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = _write_two_records(tmp_path / "full")
    # The last record starts with its checksum line.
    last = data.rindex(b"#C:")
    assert data[last:].index(b"*3\r\n$3\r\nSET") == len(b"#C:01234567\r\n")
    for cut in range(last + 1, len(data)):
        directory = tmp_path / f"cut{cut}"
        directory.mkdir()
        (directory / AOF_FILENAME).write_bytes(data[:cut])
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="streamworker.engine.aof"):
            aof = open_persistent(directory)
        try:
            s = Session(aof.engine)
            assert s("GET", "a") == b"1"
            assert s("EXISTS", "b") == 0
            assert "incomplete" in caplog.text
            assert (directory / AOF_FILENAME).stat().st_size == last
            # The file goes on from the cut: a write now is replayed after a restart.
            s("SET", "c", "3")
        finally:
            aof.close()
        again = open_persistent(directory)
        try:
            assert Session(again.engine)("MGET", "a", "b", "c")[0::2] == [b"1", b"3"]
        finally:
            again.close()


def test_trailing_zeros_after_a_crash_count_as_a_torn_record(tmp_path: Path) -> None:
    data = _write_two_records(tmp_path / "d")
    (tmp_path / "d" / AOF_FILENAME).write_bytes(data + b"\0" * 4096)
    aof = open_persistent(tmp_path / "d")
    try:
        assert Session(aof.engine)("MGET", "a", "b") == [b"1", b"2"]
        assert (tmp_path / "d" / AOF_FILENAME).stat().st_size == len(data)
    finally:
        aof.close()


def test_an_incomplete_transaction_at_the_end_is_reverted(tmp_path: Path) -> None:
    aof = open_persistent(tmp_path / "d", appendfsync="always")
    s = Session(aof.engine)
    s("SET", "before", "1")
    s("MULTI")
    s("SET", "x", "1")
    s("SET", "y", "2")
    s("EXEC")
    aof.close()
    path = tmp_path / "d" / AOF_FILENAME
    data = path.read_bytes()
    crc_line = len(b"#C:01234567\r\n")
    path.write_bytes(data[: data.rindex(b"*1\r\n$4\r\nEXEC") - crc_line])
    again = open_persistent(tmp_path / "d")
    try:
        assert Session(again.engine)("MGET", "before", "x", "y")[0] == b"1"
        assert Session(again.engine)("EXISTS", "x", "y") == 0
        assert path.read_bytes() == data[: data.rindex(b"*1\r\n$5\r\nMULTI") - crc_line]
    finally:
        again.close()


def test_corruption_before_the_end_is_an_error_naming_the_offset(tmp_path: Path) -> None:
    data = _write_two_records(tmp_path / "d")
    offset = data.index(b"$3\r\nSET")
    broken = data[:offset] + b"?" + data[offset + 1 :]
    (tmp_path / "d" / AOF_FILENAME).write_bytes(broken)
    with pytest.raises(AofCorruptError, match=f"at offset {offset}:") as info:
        open_persistent(tmp_path / "d")
    assert info.value.offset == offset
    # Nothing was changed and the directory is free again.
    assert (tmp_path / "d" / AOF_FILENAME).read_bytes() == broken
    with pytest.raises(AofCorruptError):
        open_persistent(tmp_path / "d")


def test_a_torn_record_is_an_error_when_aof_load_truncated_is_no(tmp_path: Path) -> None:
    data = _write_two_records(tmp_path / "d")
    (tmp_path / "d" / AOF_FILENAME).write_bytes(data[:-3])
    engine = Engine()
    engine.config.set("aof-load-truncated", "no")
    with pytest.raises(AofCorruptError, match="incomplete"):
        open_persistent(tmp_path / "d", engine)


# --- rewrites --------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_a_rewrite_reproduces_the_state_exactly(tmp_path: Path, seed: int) -> None:
    aof = open_persistent(tmp_path / "d", appendfsync="no")
    s = Session(aof.engine)
    rnd = random.Random(seed)
    random_workload(s, rnd, 400)
    before = dump_state(aof.engine)
    assert s("BGREWRITEAOF") == Status("Background append only file rewriting started")
    aof.wait_rewrite()
    assert not any(r[0] == b"XREADGROUP" and r[-1] == b">" for r in records(aof.path))
    aof.close()
    again = open_persistent(tmp_path / "d", appendfsync="no")
    try:
        assert again.stats.load_errors == 0
        assert dump_state(again.engine) == before
        # Writes after a rewrite go on from the rewritten state.
        random_workload(Session(again.engine), rnd, 200)
        more = dump_state(again.engine)
    finally:
        again.close()
    third = open_persistent(tmp_path / "d")
    try:
        assert dump_state(third.engine) == more
    finally:
        third.close()


def test_a_rewrite_keeps_pending_entries_whose_stream_entry_is_gone(aof: AppendOnlyFile) -> None:
    s = Session(aof.engine)
    ids = [s("XADD", "s", "*", "n", i) for i in range(6)]
    s("XGROUP", "CREATE", "s", "g", "0")
    s("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">")
    s("XDEL", "s", ids[2], ids[5])
    s("XTRIM", "s", "MAXLEN", "3")
    before = dump_state(aof.engine)
    aof.rewrite()
    after = reopen(aof)
    try:
        assert dump_state(after.engine) == before
        history = Session(after.engine)("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", "0")
        assert [e[0] for e in history[0][1]] == ids
    finally:
        after.close()


def test_a_rewrite_keeps_an_empty_stream_and_its_counters(aof: AppendOnlyFile) -> None:
    s = Session(aof.engine)
    s("XGROUP", "CREATE", "empty", "g", "$", "MKSTREAM")
    sid = s("XADD", "emptied", "*", "f", "v")
    s("XDEL", "emptied", sid)
    s("XSETID", "emptied", "1-1")  # 7.0 lets an emptied stream go below max-deleted-entry-id
    before = dump_state(aof.engine)
    aof.rewrite()
    after = reopen(aof)
    try:
        assert dump_state(after.engine) == before
    finally:
        after.close()


def test_a_failed_rewrite_leaves_the_old_file_in_use(
    aof: AppendOnlyFile, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = Session(aof.engine)
    s("SET", "a", "1")
    old = aof.path.read_bytes()

    def fail(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="No space left"):
        aof.rewrite()
    monkeypatch.undo()
    assert "aof_last_bgrewrite_status:err" in s("INFO", "persistence").text.decode()
    assert aof.path.read_bytes() == old
    assert not list(aof.dir.glob("*.rewrite-tmp"))
    s("SET", "b", "2")
    after = reopen(aof)
    try:
        assert Session(after.engine)("MGET", "a", "b") == [b"1", b"2"]
    finally:
        after.close()


def test_the_file_is_rewritten_when_it_grows_past_the_threshold(aof: AppendOnlyFile) -> None:
    s = Session(aof.engine)
    s("CONFIG", "SET", "auto-aof-rewrite-min-size", "4096")
    s("CONFIG", "SET", "auto-aof-rewrite-percentage", "100")
    for i in range(300):
        s("SET", "k", "x" * 50)
        if i % 50 == 0:
            aof.engine.run_cron()
            # A slow child (a loaded machine) would otherwise still be writing when the
            # loop ends, and everything written meanwhile is appended to the new file.
            aof.wait_rewrite()
    aof.engine.run_cron()
    aof.wait_rewrite()
    assert aof.stats.rewrites >= 1
    assert aof.path.stat().st_size < 4096 * 3
    after = reopen(aof)
    try:
        assert Session(after.engine)("GET", "k") == b"x" * 50
    finally:
        after.close()


def test_bgrewriteaof_runs_in_the_background_while_writes_go_on(aof: AppendOnlyFile) -> None:
    s = Session(aof.engine)
    for i in range(2000):
        s("XADD", "s", "*", "n", i)
    assert s("BGREWRITEAOF") == Status("Background append only file rewriting started")
    assert s("BGREWRITEAOF") == CommandError(
        "ERR Background append only file rewriting already in progress"
    )
    assert "aof_rewrite_in_progress:1" in s("INFO", "persistence").text.decode()
    for i in range(100):
        s("XADD", "s", "*", "during", i)
    deadline = time.monotonic() + 20
    while aof.rewriting:
        assert time.monotonic() < deadline
        time.sleep(0.02)
        aof.engine.run_cron()
    assert "aof_rewrite_in_progress:0" in s("INFO", "persistence").text.decode()
    s("XADD", "s", "*", "after", "1")
    before = dump_state(aof.engine)
    after = reopen(aof)
    try:
        assert dump_state(after.engine) == before
        assert after.stats.loaded_records < 2300
    finally:
        after.close()


def test_a_rewrite_that_cannot_fork_runs_in_place(aof: AppendOnlyFile) -> None:
    aof.background_rewrites = False
    s = Session(aof.engine)
    s("SET", "a", "1")
    s("SET", "a", "2")
    assert s("BGREWRITEAOF") == Status("Background append only file rewriting started")
    assert not aof.rewriting
    assert records(aof.path)[1:] == [[b"SET", b"a", b"2"]]


def test_info_persistence_reports_the_file(aof: AppendOnlyFile) -> None:
    s = Session(aof.engine)
    s("SET", "a", "1")
    info = s("INFO", "persistence").text.decode()
    assert "aof_enabled:1" in info
    assert "aof_rewrite_in_progress:0" in info
    assert "aof_last_write_status:ok" in info
    assert f"aof_current_size:{aof.path.stat().st_size}" in info


# --- fsync policies and write errors ------------------------------------------------------------


def test_always_fsyncs_before_execute_returns(
    aof: AppendOnlyFile, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[int] = []
    real = os.fdatasync

    def spy(fd: int) -> None:
        synced.append(os.fstat(fd).st_size)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", spy)
    Session(aof.engine)("SET", "a", "1")
    assert synced == [aof.path.stat().st_size]
    assert not aof.unsynced


def test_everysec_fsyncs_within_about_a_second(tmp_path: Path) -> None:
    aof = open_persistent(tmp_path / "d", appendfsync="everysec")
    try:
        Session(aof.engine)("SET", "a", "1")
        assert aof.unsynced
        deadline = time.monotonic() + 15  # the fsync thread runs every second; slow when loaded
        while aof.unsynced and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not aof.unsynced
    finally:
        aof.close()


def test_write_errors_refuse_writes_until_the_file_can_be_written(
    aof: AppendOnlyFile, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = Session(aof.engine)
    real_write = os.write

    def full(fd: int, data: object) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    s("SET", "a", "1")
    refused = s("SET", "b", "2")
    assert refused == CommandError(
        "MISCONF Errors writing to the AOF file: No space left on device"
    )
    assert s("GET", "a") == b"1"
    assert "aof_last_write_status:err" in s("INFO", "persistence").text.decode()
    monkeypatch.setattr(os, "write", real_write)
    aof.flush()
    assert s("SET", "b", "2") == OK
    after = reopen(aof)
    try:
        assert Session(after.engine)("MGET", "a", "b") == [b"1", b"2"]
    finally:
        after.close()


# --- the directory lock and engine:///path --------------------------------------------------------


def test_a_directory_cannot_be_opened_twice(aof: AppendOnlyFile) -> None:
    with pytest.raises(DirectoryLockedError, match=f"pid {os.getpid()}"):
        open_persistent(aof.dir)


def test_another_process_cannot_open_a_directory_in_use(aof: AppendOnlyFile) -> None:
    code = (
        "import sys\n"
        "from streamworker.engine.aof import open_persistent, DirectoryLockedError\n"
        "try:\n"
        f"    open_persistent({str(aof.dir)!r})\n"
        "except DirectoryLockedError as exc:\n"
        "    print(exc); sys.exit(3)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
        check=False,
    )
    assert proc.returncode == 3, proc.stderr
    assert f"in use by another engine (pid {os.getpid()})" in proc.stdout


def test_closing_releases_the_directory(aof: AppendOnlyFile) -> None:
    aof.close()
    again = open_persistent(aof.dir)
    again.close()


def test_engine_url_with_a_path_persists_across_reopening(tmp_path: Path) -> None:
    from streamworker.engine.inproc import forget_engine, sync_client

    url = f"engine://{tmp_path / 'data'}?appendfsync=always"
    client = sync_client(url)
    client.xadd("orders", {"n": "1"})
    client.xgroup_create("orders", "g", "0")
    client.xreadgroup("g", "c", {"orders": ">"})
    client.close()
    forget_engine(url)
    client = sync_client(url)
    try:
        assert client.xpending("orders", "g")["consumers"] == [{"name": b"c", "pending": 1}]
    finally:
        client.close()
        forget_engine(url)


def test_engine_url_options_are_checked() -> None:
    from streamworker.engine.inproc import engine_from_url

    with pytest.raises(ValueError, match="appendfsync must be"):
        engine_from_url("engine:///tmp/x?appendfsync=sometimes")
    with pytest.raises(ValueError, match="unknown option"):
        engine_from_url("engine:///tmp/x?fsync=always")


# --- the format is Redis's ---------------------------------------------------------------------


def _contents(r: Any) -> dict[bytes, Any]:
    out: dict[bytes, Any] = {}
    for key in sorted(r.keys("*")):
        kind = r.type(key)
        if kind == b"stream":
            groups = []
            for g in r.xinfo_groups(key):
                pending = r.xpending_range(key, g["name"], "-", "+", 10_000)
                groups.append(
                    (
                        g,
                        [(p["message_id"], p["consumer"], p["times_delivered"]) for p in pending],
                        sorted(
                            (c["name"], c["pending"]) for c in r.xinfo_consumers(key, g["name"])
                        ),
                    )
                )
            info = r.xinfo_stream(key)
            value: Any = (
                r.xrange(key),
                info["last-generated-id"],
                info["entries-added"],
                info["max-deleted-entry-id"],
                groups,
            )
        elif kind == b"string":
            value = r.get(key)
        elif kind == b"hash":
            value = r.hgetall(key)
        elif kind == b"set":
            value = sorted(r.smembers(key))
        elif kind == b"zset":
            value = r.zrange(key, 0, -1, withscores=True)
        else:
            value = r.lrange(key, 0, -1)
        out[key] = (kind, r.pexpiretime(key), value)
    return out


@pytest.mark.redis
def test_redis_server_7_0_loads_the_file(tmp_path: Path) -> None:
    from tests.support.engine_server import ThreadedServer
    from tests.support.servers import RedisServer

    aof = open_persistent(tmp_path / "engine", appendfsync="no")
    random_workload(Session(aof.engine), random.Random(5), 300)
    aof.close()
    real = RedisServer(tmp_path / "redis", appendonly=True)
    (tmp_path / "redis" / AOF_FILENAME).write_bytes(
        (tmp_path / "engine" / AOF_FILENAME).read_bytes()
    )
    real.start()
    engine = ThreadedServer(aof=open_persistent(tmp_path / "engine"))
    try:
        with real.client() as r, engine.client() as e:
            for db in range(3):
                r.select(db)
                e.select(db)
                assert _contents(e) == _contents(r)
    finally:
        engine.close()
        real.stop()
