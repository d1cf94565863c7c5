"""RDB files: redis-server 7.0's SAVE loaded by ``streamworker engine serve --load-rdb`` (a
subprocess through the CLI) and compared key by key, the engine's SAVE loaded by redis-server,
BGSAVE/LASTSAVE/INFO, and clear errors for damaged files."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from streamworker.engine import Engine
from streamworker.engine.crc64 import crc64_bytes
from streamworker.engine.errors import CommandError
from streamworker.engine.rdb.files import (
    RdbLoadError,
    build_rdb,
    load_rdb,
    load_rdb_bytes,
    save_rdb,
)
from streamworker.engine.rdb.primitives import RdbFormatError
from tests.engine.aof_support import Session, dump_state
from tests.support.engine_server import EngineServerProcess
from tests.support.proc import ROOT
from tests.support.servers import RedisServer

pytestmark = pytest.mark.redis

_FAR_MS = 4102444800000  # 2100-01-01
_SERVE = (sys.executable, "-m", "streamworker", "engine", "serve", "--port", "0")


def populate(port: int) -> None:
    """Every type in two databases, with expiries, multi-node streams with groups."""
    r0 = redis.Redis(port=port, db=0)
    r0.config_set("stream-node-max-entries", "3")
    r0.set("s", "hello")
    r0.set("n", "-12345")
    r0.set("lz", "abc" * 50)
    r0.rpush("l", *[f"item{i}" for i in range(300)], 7, -70000)
    r0.sadd("si", 1, 2, 3, -9223372036854775808)
    r0.sadd("ss", "a", "b", 3)
    r0.hset("h", mapping={"f": "v", "n": "12"})
    r0.hset("hbig", mapping={f"f{i}": f"v{i}" for i in range(600)})
    r0.zadd("z", {"a": 1, "b": 2.5, "c": -0.1})
    r0.zadd("zbig", {f"m{i}": i / 3 for i in range(200)})
    for i in range(10):
        r0.xadd("st", {"f": str(i), "g": "x" * i}, id=f"{i + 1}-1")
    r0.xdel("st", "4-1")
    r0.xgroup_create("st", "g1", id="0")
    r0.xgroup_create("st", "g2", id="$")
    r0.xreadgroup("g1", "alice", {"st": ">"}, count=4)
    r0.xreadgroup("g1", "bob", {"st": ">"}, count=2)
    r0.xack("st", "g1", "2-1")
    r0.set("ttl", "v", pxat=_FAR_MS)
    r0.set("soon", "v", px=100000)
    r3 = redis.Redis(port=port, db=3)
    r3.set("other-db", "x")
    r3.rpush("l3", "a")
    r0.config_set("stream-node-max-entries", "100")


def snapshot_of(
    snap: dict[tuple[int, bytes], Any], layout: bool = True
) -> dict[tuple[int, bytes], Any]:
    """``snap`` without the streams' node count when not ``layout``."""
    if layout:
        return snap
    out = {}
    for k, (kind, when, value) in snap.items():
        if kind == "stream":
            rng, groups, full = value
            value = (rng, groups, {f: v for f, v in full.items() if f != "radix-tree-keys"})
        out[k] = (kind, when, value)
    return out


def snapshot(port: int, layout: bool = True) -> dict[tuple[int, bytes], Any]:
    """Every key of every database: type, absolute expiry (PEXPIRETIME) and contents (without
    the streams' node count when not ``layout``)."""
    out: dict[tuple[int, bytes], Any] = {}
    for db in range(16):
        r = redis.Redis(port=port, db=db)
        for key in sorted(r.keys()):
            kind = r.type(key).decode()
            value: Any
            if kind == "string":
                value = r.get(key)
            elif kind == "list":
                value = r.lrange(key, 0, -1)
            elif kind == "set":
                value = sorted(r.smembers(key))
            elif kind == "hash":
                value = sorted(r.hgetall(key).items())
            elif kind == "zset":
                value = r.zrange(key, 0, -1, withscores=True)
            else:
                full = r.xinfo_stream(key, full=True)
                full.pop("radix-tree-nodes", None)  # the rax's internal node count
                value = (r.xrange(key), r.xinfo_groups(key), full)
            out[(db, key)] = (kind, r.execute_command("PEXPIRETIME", key), value)
        r.close()
    return snapshot_of(out, layout)


def test_a_redis_server_rdb_loads_through_engine_serve_key_by_key(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "redis").start()
    try:
        populate(server.port)
        assert server.client().save()
        expected = snapshot(server.port)
    finally:
        server.stop()
    rdb = tmp_path / "from-redis.rdb"
    shutil.copy(server.dir / "dump.rdb", rdb)
    engine = EngineServerProcess(tmp_path / "engine", extra=("--load-rdb", str(rdb)))
    engine.dir = None  # in memory: the RDB is the only data
    engine.start()
    try:
        got = snapshot(engine.port)
        info = engine.client().info("persistence")
    finally:
        engine.stop()
    assert got == expected
    assert info["rdb_last_load_keys_loaded"] == len(expected)


def test_an_engine_save_loads_in_redis_server(tmp_path: Path) -> None:
    """engine serve --dir DIR saves to DIR/dump.rdb (dir is DIR), where redis-server loads it."""
    data_dir = tmp_path / "data"
    engine = EngineServerProcess(data_dir)
    engine.start()
    try:
        populate(engine.port)
        expected = snapshot(engine.port)
        c = engine.client()
        assert c.config_get("dir")["dir"] == str(data_dir.resolve())
        before = c.lastsave()
        time.sleep(1.05)  # LASTSAVE has a one-second resolution
        assert c.save()
        assert c.lastsave() > before
        assert c.info("persistence")["rdb_saves"] == 1
    finally:
        engine.stop()
    target = tmp_path / "redis"
    target.mkdir()
    shutil.copy(data_dir / "dump.rdb", target / "dump.rdb")
    server = RedisServer(target).start()
    try:
        assert snapshot(server.port) == expected
    finally:
        server.stop()


def test_bgsave_writes_the_file_in_the_background_as_redis_replies(tmp_path: Path) -> None:
    e = Engine()
    e.config.set("enable-protected-configs", "yes")  # as redis-server --enable-protected-configs
    s = Session(e)
    s("CONFIG", "SET", "dir", str(tmp_path))
    s("CONFIG", "SET", "dbfilename", "bg.rdb")
    s("RPUSH", "l", "a", "b")
    assert s("BGSAVE").text == "Background saving started"
    from streamworker.engine.commands.rdb import wait_bgsave

    wait_bgsave(e, 30)
    info = s("INFO", "persistence").text.decode()
    assert "rdb_bgsave_in_progress:0" in info
    assert "rdb_last_bgsave_status:ok" in info
    fresh = Engine()
    load_rdb(fresh, tmp_path / "bg.rdb")
    assert dump_state(fresh) == dump_state(e)


def test_bgsave_writes_the_data_as_of_the_command_not_later_writes(tmp_path: Path) -> None:
    e = Engine()
    e.config.set("enable-protected-configs", "yes")
    s = Session(e)
    s("CONFIG", "SET", "dir", str(tmp_path))
    s("SET", "before", "1")
    assert s("BGSAVE").text == "Background saving started"
    s("SET", "after", "1")
    s("DEL", "before")
    from streamworker.engine.commands.rdb import wait_bgsave

    wait_bgsave(e, 30)
    fresh = Engine()
    load_rdb(fresh, tmp_path / "dump.rdb")
    assert Session(fresh)("KEYS", "*") == [b"before"]


def test_bgsave_refuses_arguments_other_than_schedule() -> None:
    s = Session(Engine())
    assert s("BGSAVE", "NOW") == CommandError("ERR syntax error")


def test_config_set_of_dir_and_dbfilename_is_refused_as_protected_config() -> None:
    s = Session(Engine())
    for name in ("dir", "dbfilename"):
        assert s("CONFIG", "SET", name, "x").text == (
            f"ERR CONFIG SET failed (possibly related to argument '{name}') - "
            "can't set protected config"
        )


def test_config_set_dir_refuses_a_missing_directory_and_dbfilename_a_path(tmp_path: Path) -> None:
    e = Engine()
    e.config.set("enable-protected-configs", "yes")
    s = Session(e)
    missing = s("CONFIG", "SET", "dir", str(tmp_path / "missing"))
    assert missing.text == (
        "ERR CONFIG SET failed (possibly related to argument 'dir') - No such file or directory"
    )
    path = s("CONFIG", "SET", "dbfilename", "a/b.rdb")
    assert path.text == (
        "ERR CONFIG SET failed (possibly related to argument 'dbfilename') - "
        "dbfilename can't be a path, just a filename"
    )


def test_save_round_trips_every_type_through_the_engine() -> None:
    e = Engine()
    s = Session(e)
    s("SET", "k", "v")
    s("PEXPIREAT", "k", _FAR_MS)
    s("ZADD", "z", "1", "a")
    s("XADD", "st", "1-1", "f", "v")
    s("XGROUP", "CREATE", "st", "g", "0")
    s("XREADGROUP", "GROUP", "g", "c", "STREAMS", "st", ">")
    s("SELECT", "5")
    s("HSET", "h", "f", "v")
    fresh = Engine()
    from streamworker.engine.rdb.files import load_rdb_bytes

    load_rdb_bytes(fresh, build_rdb(e))
    assert dump_state(fresh) == dump_state(e)


# --- damaged files -------------------------------------------------------------------------------


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    e = Engine()
    s = Session(e)
    for i in range(20):
        s("RPUSH", f"l{i}", "a" * i, "b")
    path = tmp_path / "dump.rdb"
    path.write_bytes(build_rdb(e))
    return path


def test_a_truncated_file_is_refused_naming_the_file_and_offset(saved: Path) -> None:
    data = saved.read_bytes()
    saved.write_bytes(data[: len(data) // 2])
    with pytest.raises(RdbLoadError) as info:
        load_rdb(Engine(), saved)
    assert str(saved) in str(info.value)
    assert "unexpected end of data" in str(info.value)
    assert info.value.offset <= len(data) // 2


def test_a_wrong_checksum_is_refused(saved: Path) -> None:
    data = bytearray(saved.read_bytes())
    data[-1] ^= 0xFF
    saved.write_bytes(bytes(data))
    with pytest.raises(RdbLoadError, match="wrong RDB checksum") as info:
        load_rdb(Engine(), saved)
    assert info.value.offset == len(data) - 8


def test_a_damaged_byte_inside_a_value_is_refused_and_nothing_is_loaded(saved: Path) -> None:
    data = bytearray(saved.read_bytes())
    at = data.index(b"b", len(data) // 2)
    data[at - 1] = 0x7F  # a listpack element header that cannot be there
    saved.write_bytes(bytes(data))
    e = Engine()
    with pytest.raises(RdbLoadError):
        load_rdb(e, saved)
    assert not any(len(db) for db in e.keyspace.dbs)


def test_an_rdb_version_newer_than_10_is_refused_with_a_clear_message(saved: Path) -> None:
    data = saved.read_bytes()
    saved.write_bytes(b"REDIS0011" + data[9:])
    with pytest.raises(RdbLoadError, match="version 11 is newer"):
        load_rdb(Engine(), saved)


def test_engine_serve_exits_with_the_damage_named_on_stderr(saved: Path) -> None:
    data = saved.read_bytes()
    saved.write_bytes(data[:-20])
    proc = subprocess.run(
        [*_SERVE, "--load-rdb", str(saved)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode != 0
    assert f"cannot load RDB file {saved}" in proc.stderr
    assert "at byte offset" in proc.stderr


def test_load_rdb_into_a_data_directory_persists_through_its_aof(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "redis").start()
    try:
        populate(server.port)
        assert server.client().save()
        expected = snapshot(server.port)
    finally:
        server.stop()
    saved = server.dir / "dump.rdb"
    data_dir = tmp_path / "data"
    first = EngineServerProcess(data_dir, extra=("--load-rdb", str(saved)), appendfsync="always")
    first.start()
    try:
        assert snapshot(first.port) == expected
    finally:
        first.stop()
    # Started again without the RDB: the append-only file has everything, streams included
    # (rebuilt by XADD, so their node layout follows stream-node-max-entries, as after any
    # append-only file rewrite).
    again = EngineServerProcess(data_dir, port=first.port)
    again.start()
    try:
        assert snapshot(again.port, layout=False) == snapshot_of(expected, layout=False)
    finally:
        again.stop()
    refused = subprocess.run(
        [*_SERVE, "--dir", str(data_dir), "--load-rdb", str(saved)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert refused.returncode != 0
    assert "only into an empty data directory" in refused.stderr


def test_function_libraries_in_a_redis_rdb_are_loaded_with_the_keys(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "redis").start()
    try:
        c = server.client()
        c.function_load("#!lua name=lib\nredis.register_function('f', function() return 1 end)")
        c.set("k", "v")
        assert c.save()
    finally:
        server.stop()
    e = Engine()
    stats = load_rdb(e, server.dir / "dump.rdb")
    assert (stats.keys_loaded, stats.functions_loaded) == (1, 1)
    s = Session(e)
    assert s("GET", "k") == b"v"
    assert s("FCALL", "f", "0") == 1


def test_an_engine_save_with_libraries_is_loaded_by_redis_server(tmp_path: Path) -> None:
    e = Engine()
    s = Session(e)
    code = "#!lua name=mylib\nredis.register_function('double', function(k, a) return a[1] * 2 end)"
    assert s("FUNCTION", "LOAD", code) == b"mylib"
    s("SET", "k", "v")
    (tmp_path / "redis").mkdir()
    save_rdb(build_rdb(e), tmp_path / "redis" / "dump.rdb")
    server = RedisServer(tmp_path / "redis").start()
    try:
        c = server.client()
        assert c.fcall("double", 0, "21") == 42
        assert c.get("k") == b"v"
    finally:
        server.stop()


def test_an_rdb_whose_library_does_not_compile_loads_nothing(tmp_path: Path) -> None:
    e = Engine()
    s = Session(e)
    s("FUNCTION", "LOAD", "#!lua name=lib\nredis.register_function('f', function() return 1 end)")
    s("SET", "k", "v")
    s("CONFIG", "SET", "rdbcompression", "no")  # the code as plain bytes in the image
    image = build_rdb(e)
    assert b"function() return 1 end" in image
    body = image[:-8].replace(b"function() return 1 end", b"function() return 1 )))")  # same length
    fresh = Engine()
    with pytest.raises(RdbFormatError, match="function library cannot be loaded"):
        load_rdb_bytes(fresh, body + crc64_bytes(body))
    assert Session(fresh)("DBSIZE") == 0
