"""COPY and OBJECT, side by side with redis-server 7.0 (byte-identical replies)."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamworker.engine.aof import open_persistent
from tests.engine.aof_support import Session, dump_state
from tests.engine.conftest import Differ, cmds, run_script

pytestmark = pytest.mark.redis


@pytest.mark.parametrize("resp", [2, 3])
def test_copy_duplicates_every_type_with_its_ttl(differ: Differ, resp: int) -> None:
    run_script(
        differ,
        cmds(
            """
            SET s hello
            SET n 12345
            RPUSH l a b c
            SADD set 3 1 2
            HSET h f v g w
            ZADD z 1 a 2 b
            XADD st 1-1 f v
            XGROUP CREATE st g 0
            XREADGROUP GROUP g c STREAMS st >
            PEXPIRE s 100000
            COPY s s2
            COPY n n2
            COPY l l2
            COPY set set2
            COPY h h2
            COPY z z2
            COPY st st2
            GET s2
            GET n2
            LRANGE l2 0 -1
            SMEMBERS set2
            HGETALL h2
            ZRANGE z2 0 -1 WITHSCORES
            XRANGE st2 - +
            XPENDING st2 g
            XINFO GROUPS st2
            TYPE st2
            EXISTS s2
            PERSIST s2
            RPUSH l2 d
            LRANGE l a -1
            LRANGE l 0 -1
            XADD st2 2-1 f v
            XLEN st
            XACK st2 g 1-1
            XPENDING st g
            HSET h2 f changed
            HGET h f
            ZADD z2 5 a
            ZSCORE z a
            """
        ),
        resp,
    )


def test_copy_refuses_an_existing_destination_unless_replace(differ: Differ) -> None:
    run_script(
        differ,
        cmds(
            """
            SET a 1
            SET b 2
            COPY a b
            GET b
            COPY a b REPLACE
            GET b
            COPY missing b
            COPY missing b REPLACE
            GET b
            COPY a a
            COPY a a REPLACE
            COPY a a DB 0
            COPY a a DB 1
            COPY a b replace REPLACE
            """
        ),
        2,
    )


def test_copy_to_another_database(differ: Differ) -> None:
    run_script(
        differ,
        cmds(
            """
            SET a 1
            EXPIRE a 1000
            COPY a a DB 1
            COPY a a DB 1
            SELECT 1
            GET a
            TTL a
            COPY a a DB 0 REPLACE
            SELECT 0
            COPY a b DB 15
            COPY a b DB 16
            COPY a b DB -1
            COPY a b DB 2147483648
            COPY a b DB 9223372036854775808
            COPY a b DB x
            COPY a b DB
            COPY a b REPLACE DB
            COPY a b NOSUCH
            COPY a
            FLUSHALL
            """
        ),
        2,
    )


def test_copy_is_replayed_from_the_append_only_file(tmp_path: Path) -> None:
    aof = open_persistent(tmp_path / "data", appendfsync="always")
    s = Session(aof.engine)
    s("XADD", "st", "1-1", "f", "v")
    s("XGROUP", "CREATE", "st", "g", "0")
    s("XREADGROUP", "GROUP", "g", "c", "STREAMS", "st", ">")
    s("SET", "a", "1", "EX", "1000")
    s("COPY", "st", "st2", "DB", "3")
    s("COPY", "a", "a", "DB", "1")
    s("COPY", "a", "st", "REPLACE")
    before = dump_state(aof.engine)
    directory = aof.dir
    aof.close()
    replayed = open_persistent(directory, appendfsync="always")
    try:
        assert dump_state(replayed.engine) == before
    finally:
        replayed.close()
