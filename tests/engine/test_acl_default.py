"""ACL for the default user, side by side with redis-server 7.0 over sockets (RESP2 and RESP3):
every read-only subcommand byte for byte, and the user-changing ones on ``default`` (other
users: test_acl_users.py)."""

from __future__ import annotations

import shlex
from collections.abc import Iterator

import pytest

from streamworker.engine import Engine
from streamworker.engine.commands.acl import CATEGORIES, categories_of
from tests.engine.admin_support import Conn, Pair, pair

pytestmark = pytest.mark.redis

__all__ = ["pair"]


@pytest.fixture(autouse=True)
def _clean(pair: Pair) -> Iterator[None]:
    yield
    pair.cleanup()


SAME_REPLY = [
    "ACL",
    "ACL FOO",
    "ACL HELP",
    "ACL WHOAMI",
    "ACL WHOAMI x",
    "ACL USERS",
    "ACL LIST",
    "ACL CAT",
    "ACL CAT foo",
    "ACL CAT read x",
    "ACL GETUSER default",
    "ACL GETUSER nobody",
    "ACL GETUSER",
    "ACL GENPASS 0",
    "ACL GENPASS 4097",
    "ACL GENPASS -1",
    "ACL GENPASS x",
    "ACL GENPASS 1 2",
    "ACL LOG",
    "ACL LOG RESET",
    "ACL LOG 5",
    "ACL LOG -1",
    "ACL LOG x",
    "ACL LOG 1 2",
    "ACL DRYRUN default get a",
    "ACL DRYRUN default GET",
    "ACL DRYRUN default foo",
    "ACL DRYRUN default client",
    "ACL DRYRUN default client foo",
    "ACL DRYRUN default CLIENT ID",
    "ACL DRYRUN default xadd s * f v",
    "ACL DRYRUN nobody get a",
    "ACL DRYRUN default",
    "ACL SETUSER default",
    "ACL SETUSER default on",
    "ACL SETUSER default on allkeys allcommands allchannels",
    "ACL SETUSER default ~* &* +@all",
    "ACL DELUSER default",
    "ACL DELUSER nobody",
    "ACL DELUSER nobody default",
    "ACL DELUSER",
    "ACL LOAD",
    "ACL SAVE",
    "ACL LOAD x",
]


@pytest.mark.parametrize("resp", [2, 3])
@pytest.mark.parametrize("line", SAME_REPLY)
def test_acl_reply_is_redis_s(pair: Pair, line: str, resp: int) -> None:
    replies = pair.both(*shlex.split(line), resp=resp)
    assert replies["engine"] == replies["redis"]


@pytest.mark.parametrize("bits", [None, "1", "5", "8", "255", "4096"])
def test_acl_genpass_gives_as_many_hex_digits_as_redis(pair: Pair, bits: str | None) -> None:
    args = ["ACL", "GENPASS"] + ([bits] if bits else [])
    replies = pair.both(*args)
    head = {name: r.split(b"\r\n", 1)[0] for name, r in replies.items()}
    assert head["engine"] == head["redis"]
    body = replies["engine"].split(b"\r\n")[1]
    assert all(c in b"0123456789abcdef" for c in body)
    if bits is None or int(bits) >= 64:
        assert pair.both(*args)["engine"] != replies["engine"]  # random each time


def test_acl_with_requirepass_shows_the_password_hash_as_redis(pair: Pair) -> None:
    out = {}
    for name, port in pair.ports.items():
        conn = Conn(port)
        conn.call("CONFIG", "SET", "requirepass", "s3cret")
        try:
            out[name] = [conn.call("ACL", "LIST"), conn.call("ACL", "GETUSER", "default")]
            out[name].append(conn.call("ACL", "SETUSER", "default", "nopass"))
            out[name].append(conn.call("ACL", "LIST"))
        finally:
            conn.call("CONFIG", "SET", "requirepass", "")
            conn.close()
    assert out["engine"] == out["redis"]


def _members(reply: bytes) -> set[bytes]:
    parts = reply.split(b"\r\n")
    return {parts[i] for i in range(2, len(parts) - 1, 2)}


# Every category's members as Redis 7.0 assigns them, for every command the engine has
# (commands only redis-server has are left out of the comparison).
@pytest.mark.parametrize("category", CATEGORIES)
def test_acl_cat_lists_the_engine_s_commands_of_a_category_as_redis(
    pair: Pair, category: str
) -> None:
    replies = pair.both("ACL", "CAT", category)
    table = Engine().table
    known = set(table)
    for spec in table.values():
        known.update(s.name.encode() for s in (spec.subcommands or {}).values())
    redis_members = {m for m in _members(replies["redis"]) if m in known}
    assert _members(replies["engine"]) == redis_members


def test_every_command_has_a_speed_category() -> None:
    for spec in Engine().table.values():
        for sub in (spec.subcommands or {}).values() or [spec]:
            cats = categories_of(sub)
            assert ("fast" in cats) != ("slow" in cats), sub.name
            assert cats <= set(CATEGORIES), sub.name
