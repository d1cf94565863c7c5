"""Generic key commands and expiry, on the engine and against redis-server 7.0."""

from __future__ import annotations

import pytest

from streamworker.engine import Engine
from streamworker.engine.keyspace import glob_match
from streamworker.engine.replies import NULL_BULK, OK, Status
from tests.engine.conftest import Differ, Exec, FakeClock, cmds, run_script


def test_del_counts_only_existing_keys(ex: Exec) -> None:
    ex("SET", "a", "1")
    assert ex("DEL", "a", "b", "a") == 1


def test_exists_counts_repeated_keys_again(ex: Exec) -> None:
    ex("SET", "a", "1")
    assert ex("EXISTS", "a", "a", "b") == 2


def test_type_names_every_value_kind(ex: Exec) -> None:
    ex("SET", "s", "1")
    ex("HSET", "h", "f", "v")
    ex("SADD", "st", "m")
    ex("ZADD", "z", "1", "m")
    ex("RPUSH", "l", "x")
    assert [ex("TYPE", k) for k in ("s", "h", "st", "z", "l", "none")] == [
        Status("string"),
        Status("hash"),
        Status("set"),
        Status("zset"),
        Status("list"),
        Status("none"),
    ]


def test_expired_key_disappears_on_lookup(ex: Exec, clock: FakeClock) -> None:
    ex("SET", "k", "v")
    ex("PEXPIRE", "k", "50")
    clock.now += 50
    assert ex("EXISTS", "k") == 0
    assert ex("TTL", "k") == -2


def test_active_expiry_reclaims_keys_without_lookups(
    engine: Engine, ex: Exec, clock: FakeClock
) -> None:
    for i in range(10):
        ex("SET", f"k{i}", "v", "PX", "10")
    ex("SET", "keep", "v")
    clock.now += 10
    assert ex("DBSIZE") == 11  # DBSIZE counts keys not reclaimed yet, as Redis does
    engine.run_cron()
    assert ex("DBSIZE") == 1


def test_expire_in_the_past_deletes_the_key(ex: Exec) -> None:
    ex("SET", "k", "v")
    assert ex("EXPIRE", "k", "-1") == 1
    assert ex("GET", "k") is NULL_BULK


def test_ttl_rounds_to_the_nearest_second(ex: Exec, clock: FakeClock) -> None:
    ex("SET", "k", "v", "PX", "1500")
    assert ex("TTL", "k") == 2
    clock.now += 1001
    assert ex("TTL", "k") == 0


def test_expiretime_reports_the_absolute_deadline(ex: Exec, clock: FakeClock) -> None:
    ex("SET", "k", "v", "PX", "1500")
    assert ex("PEXPIRETIME", "k") == clock.now + 1500


def test_rename_moves_value_and_ttl(ex: Exec) -> None:
    ex("SET", "a", "v", "EX", "100")
    assert ex("RENAME", "a", "b") == OK
    assert ex("GET", "b") == b"v"
    assert ex("TTL", "b") == 100
    assert ex("EXISTS", "a") == 0


def test_scan_returns_every_key_once_across_cursors(ex: Exec) -> None:
    keys = {f"key:{i}".encode() for i in range(250)}
    for k in keys:
        ex("SET", k, "v")
    seen: list[bytes] = []
    cursor = b"0"
    while True:
        cursor, batch = ex("SCAN", cursor, "COUNT", "7")
        seen.extend(batch)
        if cursor == b"0":
            break
    assert sorted(seen) == sorted(keys)


def test_scan_returns_keys_present_throughout_despite_writes(ex: Exec) -> None:
    for i in range(100):
        ex("SET", f"old:{i}", "v")
    seen: set[bytes] = set()
    cursor = b"0"
    n = 0
    while True:
        cursor, batch = ex("SCAN", cursor, "COUNT", "10")
        seen.update(batch)
        ex("SET", f"new:{n}", "v")
        ex("DEL", f"old:{99 - n}") if n < 10 else None
        n += 1
        if cursor == b"0":
            break
    assert {f"old:{i}".encode() for i in range(90)} <= seen


def test_scan_filters_by_type_and_match(ex: Exec) -> None:
    ex("SET", "s1", "v")
    ex("HSET", "h1", "f", "v")
    ex("SET", "x1", "v")
    _, found = ex("SCAN", "0", "TYPE", "string", "MATCH", "s*", "COUNT", "100")
    assert found == [b"s1"]


def test_keys_skips_expired_keys(ex: Exec, clock: FakeClock) -> None:
    ex("SET", "a", "v", "PX", "5")
    ex("SET", "b", "v")
    clock.now += 5
    assert ex("KEYS", "*") == [b"b"]


@pytest.mark.parametrize(
    ("pattern", "string", "expected"),
    [
        (b"*", b"anything", True),
        (b"h?llo", b"hello", True),
        (b"h?llo", b"hllo", False),
        (b"h*llo", b"heeeello", True),
        (b"h[ae]llo", b"hallo", True),
        (b"h[ae]llo", b"hillo", False),
        (b"h[^e]llo", b"hallo", True),
        (b"h[^e]llo", b"hello", False),
        (b"h[a-b]llo", b"hbllo", True),
        (b"h[b-a]llo", b"hbllo", True),
        (b"h\\*llo", b"h*llo", True),
        (b"h\\*llo", b"hello", False),
        (b"a*b*c", b"aXbYc", True),
        (b"a*b*c", b"aXbY", False),
        (b"[abc", b"a", True),
        (b"*a", b"", False),
        (b"", b"", True),
        (b"a**", b"a", True),
    ],
)
def test_glob_matches_like_redis(pattern: bytes, string: bytes, expected: bool) -> None:
    assert glob_match(pattern, string) is expected


def test_glob_nocase_folds_ascii() -> None:
    assert glob_match(b"MAX*", b"maxmemory", nocase=True)


SCRIPTS = {
    "del_unlink_exists_type": """
        SET a 1
        HSET h f v
        EXISTS a h nokey a
        TYPE a
        TYPE h
        TYPE nokey
        DEL a nokey
        UNLINK h
        DEL
        EXISTS
        TOUCH a nokey
    """,
    "expire_options_and_errors": """
        SET k v
        EXPIRE k 100
        TTL k
        EXPIRE k 50 GT
        EXPIRE k 200 GT
        EXPIRE k 300 LT
        EXPIRE k 100 LT
        TTL k
        EXPIRE k 10 NX
        EXPIRE k 10 XX
        PERSIST k
        EXPIRE k 10 XX
        EXPIRE k 10 GT
        EXPIRE k 10 LT
        PERSIST k
        PERSIST nokey
        EXPIRE k 10 NX XX
        EXPIRE k 10 GT LT
        EXPIRE k 10 NX GT
        EXPIRE k 10 FOO
        EXPIRE k abc
        EXPIRE k abc FOO
        EXPIRE k 9223372036854775807
        EXPIRE k -9223372036854775808
        PEXPIRE k 9223372036854775807
        EXPIRE nokey 10
        EXPIREAT k 1
        EXISTS k
    """,
    "ttl_pttl_expiretime_of_missing_and_persistent_keys": """
        TTL nokey
        PTTL nokey
        EXPIRETIME nokey
        PEXPIRETIME nokey
        SET k v
        TTL k
        PTTL k
        EXPIRETIME k
        PEXPIREAT k 99999999999999
        PEXPIRETIME k
        EXPIRETIME k
    """,
    "rename_and_renamenx": """
        RENAME nokey x
        RENAMENX nokey x
        SET a 1
        RENAME a a
        RENAMENX a a
        SET b 2
        RENAMENX a b
        RENAME a b
        GET b
        EXISTS a
        RENAMENX b c
        GET c
    """,
    "scan_argument_errors": """
        SCAN abc
        SCAN " 1"
        SCAN 0 COUNT 0
        SCAN 0 COUNT -1
        SCAN 0 COUNT abc
        SCAN 0 MATCH
        SCAN 0 FOO bar
        SCAN 0 TYPE
    """,
    "scan_small_keyspace_in_one_call": """
        SET k1 v
        SCAN 0
        SCAN 0 MATCH k*
        SCAN 0 MATCH x*
        SCAN 0 TYPE hash
        SCAN 0 TYPE STRING
        SCAN 0 TYPE nosuchtype
        SCAN ""
    """,
    "keys_patterns": """
        MSET hello 1 hallo 2 hxllo 3 foo 4
        KEYS h[^ae]llo
        KEYS f*
        KEYS nomatch*
        KEYS
    """,
}


@pytest.mark.redis
@pytest.mark.parametrize("resp", [2, 3])
@pytest.mark.parametrize("name", list(SCRIPTS))
def test_keys_match_redis(differ: Differ, name: str, resp: int) -> None:
    run_script(differ, cmds(SCRIPTS[name]), resp)


@pytest.mark.redis
def test_keys_lists_the_same_set_as_redis(differ: Differ) -> None:
    for i in range(50):
        differ.check("SET", f"user:{i}", "v")
        differ.check("HSET", f"h:{i}", "f", "v")
    real = differ.real.call("KEYS", "user:*[05]")
    fake = differ.fake.call("KEYS", "user:*[05]")
    assert sorted(real.split(b"\r\n")) == sorted(fake.split(b"\r\n"))
