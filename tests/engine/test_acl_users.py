"""ACL users side by side with redis-server 7.0 over sockets (RESP2 and RESP3): ACL SETUSER's
rule grammar and errors, ACL GETUSER / LIST / USERS / DELUSER / DRYRUN / LOG, AUTH and
HELLO AUTH as users, NOPERM denials of commands, keys and channels (at the top level, in
MULTI, at EXEC, in scripts), and the disconnection of a deleted user's clients.

Each scenario runs the same command lines on both servers (one or more connections each)
and compares the raw replies; ACL LOG's age and client-info fields are masked (clock and
connection addresses)."""

from __future__ import annotations

import shlex
from collections.abc import Iterator, Sequence

import pytest

from tests.engine.admin_support import Conn, Pair, pair
from tests.engine.differential.resp import Node, dump, masked, parse, with_children

pytestmark = pytest.mark.redis

__all__ = ["pair"]

HASH = "a" * 64
# (connection number, command line); a bare line runs on connection 0.
Step = str | tuple[int, str]


@pytest.fixture(autouse=True)
def _clean(pair: Pair) -> Iterator[None]:
    yield
    for port in pair.ports.values():
        conn = Conn(port)
        conn.call("CONFIG", "SET", "requirepass", "")
        conn.call("ACL", "SETUSER", "default", "on", "nopass", "~*", "&*", "+@all")
        conn.call("CONFIG", "SET", "acl-pubsub-default", "resetchannels")
        users = conn.call("ACL", "USERS").split(b"\r\n")[2::2]
        for name in users:
            if name and name != b"default":
                conn.call("ACL", "DELUSER", name)
        conn.call("ACL", "LOG", "RESET")
        conn.call("FLUSHALL")
        conn.close()


def _mask_log(raw: bytes) -> bytes:
    # ACL LOG entries: the age and the client's description depend on the clock and on
    # the connection, the rest must match.
    node = parse(raw)
    if not node.is_aggregate:
        return raw
    entries = []
    for entry in node.children:
        kids = list(entry.children)
        for i in range(0, len(kids) - 1, 2):
            if kids[i].text in (b"age-seconds", b"client-info"):
                kids[i + 1] = masked(kids[i + 1], b"<masked>")
        entries.append(with_children(entry, kids) if entry.is_aggregate else entry)
    return dump(with_children(node, entries) if entries else node)


def _mask_hello_id(raw: bytes) -> bytes:
    # HELLO's map carries the connection id, which differs between the servers.
    node = parse(raw)
    if not node.is_aggregate:
        return raw
    kids = list(node.children)
    for i in range(0, len(kids) - 1, 2):
        if kids[i].text == b"id":
            kids[i + 1] = masked(kids[i + 1], b"0")
    return dump(with_children(node, kids))


def run(pair: Pair, steps: Sequence[Step], resp: int = 2) -> dict[str, list[bytes]]:
    """Run ``steps`` on each side; the replies per side (ACL LOG masked)."""
    out: dict[str, list[bytes]] = {}
    for name, port in pair.ports.items():
        conns: dict[int, Conn] = {}
        replies = []
        try:
            for step in steps:
                n, line = step if isinstance(step, tuple) else (0, step)
                if n not in conns:
                    conns[n] = Conn(port, resp)
                args = shlex.split(line)
                reply = conns[n].call(*args)
                if [a.lower() for a in args[:2]] == ["acl", "log"]:
                    reply = _mask_log(reply)
                elif args[0].lower() == "hello":
                    reply = _mask_hello_id(reply)
                replies.append(reply)
        finally:
            for conn in conns.values():
                conn.close()
        out[name] = replies
    return out


def same(pair: Pair, steps: Sequence[Step], resp: int = 2) -> list[bytes]:
    """Run ``steps`` on both sides, assert the replies are equal, return the engine's."""
    replies = run(pair, steps, resp)
    for i, (mine, theirs) in enumerate(zip(replies["engine"], replies["redis"], strict=True)):
        assert mine == theirs, f"step {i} {steps[i]!r}: engine {mine!r} != redis {theirs!r}"
    return replies["engine"]


# -- the rule grammar -------------------------------------------------------------------------

SETUSER_CASES = {
    "new user": ["ACL SETUSER bob", "ACL GETUSER bob", "ACL LIST", "ACL USERS"],
    "scripting and set": [
        "ACL SETUSER bob on >123 +@scripting +set ~x*",
        "ACL GETUSER bob",
        "ACL LIST",
    ],
    "everything": ["ACL SETUSER bob on nopass +@all ~* &*", "ACL GETUSER bob", "ACL LIST"],
    "aliases": ["ACL SETUSER bob allcommands allkeys allchannels", "ACL GETUSER bob"],
    "all but one": ["ACL SETUSER bob +@all -get", "ACL GETUSER bob"],
    "one category": ["ACL SETUSER bob +@hash", "ACL GETUSER bob"],
    "category then none": ["ACL SETUSER bob +@hash nocommands", "ACL GETUSER bob"],
    "all but a category": ["ACL SETUSER bob +@all -@dangerous", "ACL GETUSER bob"],
    "a subcommand": ["ACL SETUSER bob +config|get", "ACL GETUSER bob"],
    "a container": ["ACL SETUSER bob +client", "ACL GETUSER bob"],
    "container minus sub": ["ACL SETUSER bob +client -client|kill", "ACL GETUSER bob"],
    "first arg": ["ACL SETUSER bob +select|0 +select|1", "ACL GETUSER bob", "ACL LIST"],
    "all but a command except one first arg": [
        "ACL SETUSER bob +@all -select +select|0",
        "ACL GETUSER bob",
    ],
    "first arg then command": ["ACL SETUSER bob +select|0 +select", "ACL GETUSER bob"],
    "key permissions": [
        "ACL SETUSER bob %R~r* %W~w* %RW~rw* ~all* %R~w*",
        "ACL GETUSER bob",
        "ACL LIST",
    ],
    "keys reset": ["ACL SETUSER bob ~a ~b resetkeys ~c", "ACL GETUSER bob"],
    "channels": ["ACL SETUSER bob &chan* &x &x", "ACL GETUSER bob", "ACL LIST"],
    "channels reset": ["ACL SETUSER bob &a resetchannels &b", "ACL GETUSER bob"],
    "selectors": [
        "ACL SETUSER bob on (~x* +get) '(%R~y +@hash)'",
        "ACL GETUSER bob",
        "ACL LIST",
    ],
    "selector spread over arguments": [
        "ACL SETUSER bob (~x* +get &c)",
        "ACL SETUSER bob '(~y' '+set)'",
        "ACL GETUSER bob",
    ],
    "quoted selector rules": [
        "ACL SETUSER bob on '(\"~x y\" +get)'",
        'ACL SETUSER bob \'("~a" "&b")\'',
        "ACL SETUSER bob '(\"~unbalanced)'",
        "ACL GETUSER bob",
        "ACL LIST",
    ],
    "clearselectors": ["ACL SETUSER bob (~x +get) clearselectors", "ACL GETUSER bob"],
    "reset": ["ACL SETUSER bob on >p ~x +get reset", "ACL GETUSER bob", "ACL LIST"],
    "passwords": [
        "ACL SETUSER bob >a >b >a <a",
        "ACL GETUSER bob",
        f"ACL SETUSER bob #{HASH}",
        f"ACL SETUSER bob !{HASH}",
        "ACL GETUSER bob",
    ],
    "nopass and resetpass": [
        "ACL SETUSER bob >a nopass",
        "ACL GETUSER bob",
        "ACL SETUSER bob resetpass",
        "ACL GETUSER bob",
    ],
    "payload flags": [
        "ACL SETUSER bob skip-sanitize-payload",
        "ACL LIST",
        "ACL SETUSER bob sanitize-payload",
        "ACL GETUSER bob",
    ],
    "case": ["ACL SETUSER bob ON +GET ~K +@HASH", "ACL GETUSER bob"],
    "users order": ["ACL SETUSER zed", "ACL SETUSER alice", "ACL SETUSER Bob", "ACL USERS"],
    "empty rule": ["ACL SETUSER bob ''", "ACL GETUSER bob"],
    "acl-pubsub-default": [
        "CONFIG SET acl-pubsub-default allchannels",
        "ACL SETUSER bob",
        "ACL GETUSER bob",
        "ACL SETUSER bob reset",
        "ACL LIST",
    ],
}


@pytest.mark.parametrize("resp", [2, 3])
@pytest.mark.parametrize("case", sorted(SETUSER_CASES))
def test_acl_setuser_and_getuser_match_redis(pair: Pair, case: str, resp: int) -> None:
    same(pair, SETUSER_CASES[case], resp)


SETUSER_ERRORS = [
    "ACL SETUSER bob +nosuch",
    "ACL SETUSER bob -nosuch",
    "ACL SETUSER bob +@nosuch",
    "ACL SETUSER bob -@nosuch",
    "ACL SETUSER bob foo",
    "ACL SETUSER bob ~* ~x",
    "ACL SETUSER bob allkeys %R~x",
    "ACL SETUSER bob &* &x",
    "ACL SETUSER bob +get|",
    "ACL SETUSER bob +config|get|x",
    "ACL SETUSER bob +config|nosuch",
    "ACL SETUSER bob -get|x",
    "ACL SETUSER bob %X~a",
    "ACL SETUSER bob %RR~a",
    "ACL SETUSER bob '~a b'",
    "ACL SETUSER bob '&a b'",
    "ACL SETUSER bob <nope",
    "ACL SETUSER bob !nope",
    "ACL SETUSER bob #abc",
    f"ACL SETUSER bob #{'A' * 64}",
    f"ACL SETUSER bob !{HASH}",
    "ACL SETUSER bob (~x +get",
    "ACL SETUSER bob on (~x +nosuch)",
    "ACL SETUSER bob (foo)",
    "ACL SETUSER 'a b'",
    "ACL SETUSER bob +",
    "ACL SETUSER bob -",
    "ACL SETUSER bob +@",
]


@pytest.mark.parametrize("line", SETUSER_ERRORS)
def test_acl_setuser_error_is_redis_s_and_changes_nothing(pair: Pair, line: str) -> None:
    same(pair, [line, "ACL USERS", "ACL SETUSER bob on", line, "ACL LIST"])


def test_acl_deluser_counts_the_users_it_removed(pair: Pair) -> None:
    same(
        pair,
        [
            "ACL SETUSER alice",
            "ACL SETUSER bob",
            "ACL DELUSER alice nobody bob alice",
            "ACL USERS",
            "ACL SETUSER carol",
            "ACL DELUSER carol default",
            "ACL USERS",
        ],
    )


DRYRUN = [
    "ACL DRYRUN bob get x1",
    "ACL DRYRUN bob get y",
    "ACL DRYRUN bob set x1 v",
    "ACL DRYRUN bob set w1 v",
    "ACL DRYRUN bob set w1 v GET",
    "ACL DRYRUN bob hset x1 f v",
    "ACL DRYRUN bob publish chan m",
    "ACL DRYRUN bob publish other m",
    "ACL DRYRUN bob subscribe chan other",
    "ACL DRYRUN bob psubscribe c*",
    "ACL DRYRUN bob psubscribe chan",
    "ACL DRYRUN bob mset x1 v y v",
    "ACL DRYRUN bob config get x",
    "ACL DRYRUN bob config set x y",
    "ACL DRYRUN bob auth a b",
    "ACL DRYRUN bob eval x 1 y",
    "ACL DRYRUN bob get",
    "ACL DRYRUN bob nosuch",
    "ACL DRYRUN nobody get x",
]


@pytest.mark.parametrize("line", DRYRUN)
def test_acl_dryrun_answers_as_redis(pair: Pair, line: str) -> None:
    same(
        pair,
        [
            "ACL SETUSER bob on ~x* %W~w* &chan +get +set +publish +subscribe +psubscribe "
            "+mset +config|get +eval",
            line,
        ],
    )


# Key permissions by key-spec flags, for commands whose keys move or carry mixed flags.
KEY_FLAG_LINES = [
    "EXISTS r1 w1 x",
    "DEL r1",
    "DEL w1",
    "UNLINK w1 x1",
    "COPY r1 w1",
    "COPY w1 r1",
    "RENAME w1 w2",
    "RENAME r1 w2",
    "LMOVE r1 w1 LEFT RIGHT",
    "LMOVE w1 w2 LEFT RIGHT",
    "BITOP AND w1 r1 r2",
    "BITOP AND r1 w1",
    "MSET w1 a w2 b",
    "MSET w1 a r1 b",
    "MGET r1 r2",
    "MGET r1 w1",
    "ZUNIONSTORE w1 2 r1 r2",
    "ZUNIONSTORE r1 2 r1 r2",
    "ZUNION 2 r1 w1",
    "LMPOP 2 w1 w2 LEFT",
    "LMPOP 2 w1 r1 LEFT",
    "XREAD STREAMS r1 r2 0 0",
    "XREAD COUNT 1 STREAMS r1 w1 0 0",
    "XREADGROUP GROUP g c STREAMS w1 >",
    "XREADGROUP GROUP g c STREAMS r1 >",
    "EVAL x 2 x1 x2",
    "EVAL x 1 r1",
    "EVAL_RO x 1 r1",
    "SORT r1",
    "SORT r1 STORE w1",
    "SORT r1 STORE r2",
    "SORT_RO r1",
    "GEORADIUS r1 0 0 1 km STORE w1",
    "GEORADIUS r1 0 0 1 km STORE r2",
    "GEOSEARCHSTORE w1 r1 FROMLONLAT 0 0 BYRADIUS 1 km",
    "OBJECT ENCODING r1",
    "OBJECT ENCODING w1",
    "SET r1 v GET",
    "SET w1 v",
    "SET w1 v GET",
    "BITFIELD r1 GET u4 0",
    "BITFIELD r1 SET u4 0 1",
    "BITFIELD w1 SET u4 0 1",
    "GETDEL w1",
    "GETEX r1",
    "INCR w1",
    "APPEND w1 x",
    "PFMERGE w1 r1",
    "TOUCH w1",
    "TYPE w1",
]


@pytest.mark.parametrize("line", KEY_FLAG_LINES)
def test_key_permissions_follow_the_key_specs_as_redis(pair: Pair, line: str) -> None:
    same(pair, ["ACL SETUSER kf on +@all %R~r* %W~w* ~x*", f"ACL DRYRUN kf {line}"])


# -- AUTH and HELLO ---------------------------------------------------------------------------

AUTH_CASES = {
    "auth as a user": [
        "ACL SETUSER bob on >123 +@all ~*",
        (1, "AUTH bob 123"),
        (1, "ACL WHOAMI"),
        (1, "AUTH bob wrong"),
        (1, "ACL WHOAMI"),
        (1, "AUTH nobody x"),
        "ACL LOG",
    ],
    "a disabled user cannot log in": [
        "ACL SETUSER bob off >123 +@all",
        (1, "AUTH bob 123"),
        "ACL SETUSER bob on",
        (1, "AUTH bob 123"),
        (1, "ACL WHOAMI"),
    ],
    "a nopass user takes any password": [
        "ACL SETUSER bob on nopass +@all",
        (1, "AUTH bob anything"),
        (1, "ACL WHOAMI"),
    ],
    "hello auth": [
        "ACL SETUSER bob on >123 +@all",
        (1, "HELLO 3 AUTH bob 123"),
        (1, "ACL WHOAMI"),
        (2, "HELLO 2 AUTH bob nope"),
        (2, "HELLO 2 AUTH nobody nope"),
        "ACL LOG 2",
    ],
    "one-word auth without a password": ["AUTH foo"],
    "auth inside multi": [
        "ACL SETUSER bob on >1 +@all",
        (1, "MULTI"),
        (1, "AUTH bob nope"),
        (1, "AUTH bob 1"),
        (1, "EXEC"),
        (1, "ACL WHOAMI"),
        "ACL LOG 1",
    ],
    "requirepass": [
        "CONFIG SET requirepass pw",
        "ACL GETUSER default",
        (1, "GET x"),
        (1, "AUTH nope"),
        (1, "AUTH pw"),
        (1, "GET x"),
        (2, "AUTH default pw"),
        (2, "ACL WHOAMI"),
        "CONFIG SET requirepass ''",
        "ACL LIST",
    ],
    "default user with a password set by acl": [
        "ACL SETUSER default >secret",
        "ACL GETUSER default",
        (1, "AUTH secret"),
        (1, "ACL SETUSER default nopass"),
        "ACL LIST",
    ],
    "reset goes back to the default user": [
        "ACL SETUSER bob on >1 +@all",
        (1, "AUTH bob 1"),
        (1, "RESET"),
        (1, "ACL WHOAMI"),
    ],
    "client kill by user": [
        "ACL SETUSER bob on >1 +@all",
        "CLIENT KILL USER nobody",
        "CLIENT KILL USER bob",
    ],
}


@pytest.mark.parametrize("resp", [2, 3])
@pytest.mark.parametrize("case", sorted(AUTH_CASES))
def test_auth_as_acl_users_matches_redis(pair: Pair, case: str, resp: int) -> None:
    same(pair, AUTH_CASES[case], resp)


# -- denials ----------------------------------------------------------------------------------

BOB = "ACL SETUSER bob on >1 ~x* %R~r* %W~w* &chan* +get +set +publish +subscribe "
BOB += "+psubscribe +ssubscribe +spublish +multi +exec +eval +acl|log +info +config|resetstat"
DENIAL_CASES = {
    "command": ["GET x", "HSET x f v", "CLIENT ID", "CONFIG GET port"],
    "keys": [
        "SET x1 v",
        "SET y v",
        "GET r1",
        "SET r1 v",
        "GET w1",
        "SET w1 v",
        "SET w1 v GET",
        "EVAL 'return 1' 2 x1 y",
    ],
    "channels": [
        "PUBLISH chan1 m",
        "PUBLISH other m",
        "SPUBLISH other m",
        "PSUBSCRIBE chan*",
        "PSUBSCRIBE ch*",
    ],
    "subscribe": ["SUBSCRIBE other"],
    "multi": ["MULTI", "SET x1 v", "HSET x f v", "SET y v", "EXEC", "GET x1", "ACL LOG 2"],
    "scripts": [
        "EVAL \"return redis.call('get', 'x1')\" 0",
        "EVAL \"return redis.call('hget', 'x1', 'f')\" 0",
        "EVAL \"return redis.call('set', 'y', 'v')\" 0",
        "EVAL \"return redis.call('publish', 'nope', 'v')\" 0",
        "EVAL \"return redis.pcall('set', 'y', 'v')\" 0",
        "EVAL \"return redis.acl_check_cmd('set', 'x1', 'v')\" 0",
        "EVAL \"return redis.acl_check_cmd('set', 'y', 'v')\" 0",
        "EVAL \"return redis.acl_check_cmd('hset', 'x1', 'f', 'v')\" 0",
        "EVAL \"return redis.acl_check_cmd('nosuch')\" 0",
    ],
    "log": ["GET x", "GET x", "SET y v", "PUBLISH other m", "ACL LOG", "ACL LOG 1"],
    "errorstats": [
        "CONFIG RESETSTAT",
        "GET x",
        "SET y v",
        "EVAL \"return redis.pcall('hget', 'x1', 'f')\" 0",
        "INFO errorstats",
    ],
}


@pytest.mark.parametrize("resp", [2, 3])
@pytest.mark.parametrize("case", sorted(DENIAL_CASES))
def test_denials_match_redis(pair: Pair, case: str, resp: int) -> None:
    steps: list[Step] = [BOB, (1, "AUTH bob 1")]
    steps += [(1, line) for line in DENIAL_CASES[case]]
    same(pair, steps, resp)


SORT_RULES = [
    "(+sort ~mylist)",
    "(+sort ~mylist ~v*)",
    "(+sort ~mylist %W~*)",
    "(+sort ~mylist %R~*)",
    "+sort ~*",
]


@pytest.mark.parametrize("rules", SORT_RULES)
def test_sort_by_and_get_patterns_need_read_access_to_every_key(pair: Pair, rules: str) -> None:
    same(
        pair,
        [
            "SET v1 1",
            "LPUSH mylist 1",
            f"ACL SETUSER s on nopass {rules}",
            (1, "AUTH s x"),
            (1, "SORT mylist BY v*"),
            (1, "SORT mylist GET v*"),
            (1, "SORT mylist BY constant"),
            (1, "SORT mylist"),
        ],
    )


def test_exec_refuses_a_queued_command_the_rules_no_longer_allow(pair: Pair) -> None:
    same(
        pair,
        [
            BOB,
            (1, "AUTH bob 1"),
            (1, "MULTI"),
            (1, "SET x1 v"),
            (1, "GET x1"),
            "ACL SETUSER bob -set",
            (1, "EXEC"),
            "ACL LOG 1",
        ],
    )


# -- disconnections ---------------------------------------------------------------------------


def _closed_after(pair: Pair, setup: list[str], victim: list[str], action: str) -> dict[str, bool]:
    out = {}
    for name, port in pair.ports.items():
        admin, target = Conn(port), Conn(port)
        for line in setup:
            admin.call(*shlex.split(line))
        for line in victim:
            target.call(*shlex.split(line))
        admin.call(*shlex.split(action))
        out[name] = target.closed_by_server(timeout=2)
        admin.close()
        target.close()
    return out


def test_deleting_a_user_disconnects_its_clients(pair: Pair) -> None:
    closed = _closed_after(
        pair, ["ACL SETUSER bob on >1 +@all ~*"], ["AUTH bob 1"], "ACL DELUSER bob"
    )
    assert closed == {"redis": True, "engine": True}


def test_deleting_another_user_keeps_the_clients(pair: Pair) -> None:
    closed = _closed_after(
        pair,
        ["ACL SETUSER bob on >1 +@all ~*", "ACL SETUSER carol"],
        ["AUTH bob 1"],
        "ACL DELUSER carol",
    )
    assert closed == {"redis": False, "engine": False}


def test_switching_a_user_off_keeps_its_connections_working(pair: Pair) -> None:
    # Redis 7.0 only refuses new logins of a user that is off.
    same(
        pair,
        [
            "ACL SETUSER bob on >1 +@all ~*",
            (1, "AUTH bob 1"),
            "ACL SETUSER bob off",
            (1, "SET k v"),
            (1, "ACL WHOAMI"),
            (2, "AUTH bob 1"),
        ],
    )


def test_a_user_deleting_itself_gets_the_reply_then_is_disconnected(pair: Pair) -> None:
    out = {}
    for name, port in pair.ports.items():
        conn = Conn(port)
        conn.call("ACL", "SETUSER", "bob", "on", ">1", "+@all")
        conn.call("AUTH", "bob", "1")
        out[name] = (conn.call("ACL", "DELUSER", "bob"), conn.closed_by_server(timeout=2))
        conn.close()
    assert out["engine"] == out["redis"] == (b":1\r\n", True)


def test_revoking_a_subscribed_channel_disconnects_the_subscriber(pair: Pair) -> None:
    closed = _closed_after(
        pair,
        ["ACL SETUSER bob on >1 +@all ~* &chan"],
        ["AUTH bob 1", "SUBSCRIBE chan"],
        "ACL SETUSER bob resetchannels &other",
    )
    assert closed == {"redis": True, "engine": True}


def test_widening_channels_keeps_the_subscriber(pair: Pair) -> None:
    closed = _closed_after(
        pair,
        ["ACL SETUSER bob on >1 +@all ~* &chan"],
        ["AUTH bob 1", "SUBSCRIBE chan"],
        "ACL SETUSER bob &other",
    )
    assert closed == {"redis": False, "engine": False}


def test_log_entries_carry_the_denied_object(pair: Pair) -> None:
    # The masked comparison above hides the client info; the object and user must be there.
    replies = same(pair, [BOB, (1, "AUTH bob 1"), (1, "SET y v"), "ACL LOG"])
    root = parse(replies[-1])
    entry: Node = root.children[0]
    fields = {entry.children[i].text: entry.children[i + 1].text for i in range(0, 14, 2)}
    assert fields[b"object"] == b"y"
    assert fields[b"reason"] == b"key"
    assert fields[b"username"] == b"bob"


def test_the_slow_log_hides_acl_setuser_rules(pair: Pair) -> None:
    args = {}
    for name, port in pair.ports.items():
        conn = Conn(port)
        conn.call("CONFIG", "SET", "slowlog-log-slower-than", "0")
        try:
            conn.call("SLOWLOG", "RESET")
            conn.call("ACL", "SETUSER", "bob", "on", ">secret", "~x")
            entry = parse(conn.call("SLOWLOG", "GET", "1")).children[0]
            args[name] = [a.text for a in entry.children[3].children]
        finally:
            conn.call("CONFIG", "SET", "slowlog-log-slower-than", "10000")
            conn.close()
    assert args["engine"] == args["redis"]
    assert b"secret" not in b" ".join(args["engine"])


def test_a_script_denial_is_logged_with_the_calling_connection(pair: Pair) -> None:
    info = {}
    for name, port in pair.ports.items():
        admin, bob = Conn(port), Conn(port)
        admin.call("ACL", "SETUSER", "bob", "on", ">1", "+eval", "+client|setname", "~*")
        bob.call("AUTH", "bob", "1")
        bob.call("CLIENT", "SETNAME", "bobconn")
        bob.call("EVAL", "return redis.pcall('get', 'k')", "0")
        entry = parse(admin.call("ACL", "LOG", "1")).children[0]
        fields = {entry.children[i].text: entry.children[i + 1].text for i in range(0, 14, 2)}
        words = dict(w.split(b"=", 1) for w in fields[b"client-info"].split())
        info[name] = (fields[b"context"], words[b"name"], words[b"cmd"], words[b"user"])
        admin.close()
        bob.close()
    assert info["engine"] == info["redis"] == (b"lua", b"bobconn", b"eval", b"bob")


def test_the_slow_log_hides_sensitive_config_values_and_migrate_passwords(pair: Pair) -> None:
    args = {}
    for name, port in pair.ports.items():
        conn = Conn(port)
        conn.call("CONFIG", "SET", "slowlog-log-slower-than", "0")
        try:
            conn.call("SLOWLOG", "RESET")
            conn.call("CONFIG", "SET", "masterauth", "pw")
            conn.call("CONFIG", "SET", "masteruser", "u", "maxclients", "1000")
            conn.call("CONFIG", "SET", "requirepass", "")
            conn.call("CONFIG", "SET", "nosuch", "x", "masterauth", "y")
            conn.call("MIGRATE", "127.0.0.1", "1", "nokey", "0", "5000", "COPY", "AUTH", "pw")
            conn.call("MIGRATE", "127.0.0.1", "1", "nokey", "0", "5000", "AUTH2", "u", "pw")
            conn.call("MIGRATE", "127.0.0.1", "1", "", "0", "5000", "AUTH", "pw", "KEYS", "a")
            entries = parse(conn.call("SLOWLOG", "GET", "7")).children
            args[name] = [[a.text for a in e.children[3].children] for e in entries]
            args[name].append(conn.call("CONFIG", "GET", "masterauth"))
            args[name].append(conn.call("CONFIG", "GET", "masteruser"))
        finally:
            conn.call("CONFIG", "SET", "masterauth", "", "masteruser", "")
            conn.call("CONFIG", "SET", "slowlog-log-slower-than", "10000")
            conn.close()
    assert args["engine"] == args["redis"]
