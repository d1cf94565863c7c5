"""Server and connection commands: PING, ECHO, SELECT, HELLO, CLIENT, CONFIG, INFO, COMMAND,
FLUSHDB/FLUSHALL, DBSIZE, TIME, RESET, and unknown-command / arity texts."""

from __future__ import annotations

import pytest

from streamworker.engine import Engine
from streamworker.engine.errors import CommandError
from streamworker.engine.replies import OK, Map, Status, Verbatim
from tests.engine.conftest import Differ, Exec, FakeClock, cmds, run_script


def test_hello_3_switches_the_client_to_resp3(engine: Engine) -> None:
    client = engine.connect()
    reply = engine.execute(client, [b"HELLO", b"3"])
    assert isinstance(reply, Map)
    assert dict(reply.items)[b"proto"] == 3
    assert client.resp == 3


def test_hello_map_has_redis_7_fields_in_order(ex: Exec) -> None:
    reply = ex("HELLO")
    assert [k for k, _ in reply.items] == [
        b"server",
        b"version",
        b"proto",
        b"id",
        b"mode",
        b"role",
        b"modules",
    ]
    assert dict(reply.items)[b"version"] == b"7.0.15"


def test_hello_setname_names_the_client(ex: Exec) -> None:
    ex("HELLO", "3", "SETNAME", "worker-1")
    assert ex("CLIENT", "GETNAME") == b"worker-1"


def test_client_ids_are_unique_and_increasing(engine: Engine) -> None:
    a, b = engine.connect(), engine.connect()
    assert engine.execute(a, [b"CLIENT", b"ID"]) < engine.execute(b, [b"CLIENT", b"ID"])


def test_client_setinfo_is_unknown_in_7_0(ex: Exec) -> None:
    assert ex("CLIENT", "SETINFO", "LIB-NAME", "x") == CommandError(
        "ERR unknown subcommand 'SETINFO'. Try CLIENT HELP."
    )


def test_client_list_has_one_line_per_connection(engine: Engine, ex: Exec) -> None:
    engine.connect()
    reply = ex("CLIENT", "LIST")
    assert isinstance(reply, Verbatim)
    assert reply.text.count(b"\n") == 2


def test_select_switches_databases(ex: Exec) -> None:
    ex("SET", "k", "0")
    ex("SELECT", "3")
    assert ex("EXISTS", "k") == 0
    ex("SET", "k", "3")
    ex("SELECT", "0")
    assert ex("GET", "k") == b"0"


def test_flushall_empties_every_database(ex: Exec) -> None:
    ex("SET", "a", "1")
    ex("SELECT", "5")
    ex("SET", "b", "1")
    ex("FLUSHALL", "ASYNC")
    assert ex("DBSIZE") == 0
    ex("SELECT", "0")
    assert ex("DBSIZE") == 0


def test_config_set_updates_typed_stream_settings(engine: Engine, ex: Exec) -> None:
    assert ex("CONFIG", "SET", "stream-node-max-entries", "7") == OK
    assert engine.config.stream_node_max_entries == 7
    assert ex("CONFIG", "GET", "stream-node-max-entries") == Map(
        [(b"stream-node-max-entries", b"7")]
    )


def test_config_set_is_all_or_nothing(ex: Exec) -> None:
    reply = ex("CONFIG", "SET", "maxmemory", "100", "hz", "abc")
    assert isinstance(reply, CommandError)
    assert ex("CONFIG", "GET", "maxmemory") == Map([(b"maxmemory", b"0")])


def test_info_keyspace_lists_non_empty_databases(ex: Exec) -> None:
    ex("SET", "a", "1")
    ex("SET", "b", "1", "EX", "100")
    text = ex("INFO", "keyspace").text.decode()
    assert "db0:keys=2,expires=1,avg_ttl=" in text


def test_info_default_has_the_sections_clients_read(ex: Exec) -> None:
    text = ex("INFO").text.decode()
    for header in ("# Server", "# Clients", "# Memory", "# Persistence", "# Stats"):
        assert header in text
    for field in ("redis_version:7.0.15", "redis_mode:standalone", "role:master", "used_memory:"):
        assert field in text


def test_reset_returns_to_resp2_db0_and_no_transaction(engine: Engine) -> None:
    client = engine.connect()
    for argv in ([b"HELLO", b"3"], [b"SELECT", b"2"], [b"MULTI"]):
        engine.execute(client, argv)
    assert engine.execute(client, [b"RESET"]) == Status("RESET")
    assert (client.resp, client.db_index, client.in_multi) == (2, 0, False)


def test_unknown_command_quotes_up_to_128_bytes_of_args(ex: Exec) -> None:
    reply = ex("NOPE", "a" * 200)
    assert isinstance(reply, CommandError)
    assert reply.text == (
        "ERR unknown command 'NOPE', with args beginning with: '" + "a" * 128 + "' "
    )


def test_unknown_subcommand_names_the_container(ex: Exec) -> None:
    assert ex("CONFIG", "nope") == CommandError("ERR unknown subcommand 'nope'. Try CONFIG HELP.")


def test_container_without_subcommand_is_an_arity_error(ex: Exec) -> None:
    assert ex("CONFIG") == CommandError("ERR wrong number of arguments for 'config' command")


def test_subcommand_arity_error_uses_the_full_name(ex: Exec) -> None:
    assert ex("CONFIG", "GET") == CommandError(
        "ERR wrong number of arguments for 'config|get' command"
    )


SCRIPTS = {
    "ping_echo": """
        PING
        PING hello
        PING a b
        ECHO x
        ECHO
        ECHO a b
    """,
    "unknown_commands_and_arity": """
        NOSUCHCOMMAND
        NOSUCHCOMMAND a b
        nosuch "with space" ""
        GET
        GET a b
        SET a
        DEL
        EXISTS
        CONFIG
        CONFIG NOPE
        CONFIG GET
        CLIENT
        CLIENT NOPE
        CLIENT SETINFO LIB-NAME x
        CLIENT SETNAME
    """,
    "select_and_dbsize": """
        SELECT 1
        SET k v
        DBSIZE
        SELECT 0
        DBSIZE
        SELECT 16
        SELECT -1
        SELECT abc
        SELECT 99999999999
        SELECT 1
        FLUSHDB
        DBSIZE
    """,
    "flush_arguments": """
        FLUSHDB foo
        FLUSHDB SYNC
        FLUSHDB async
        FLUSHDB async x
        FLUSHALL SYNC
        FLUSHALL foo
        DBSIZE a
    """,
    "hello_variants": """
        HELLO 4
        HELLO 1
        HELLO abc
        HELLO 2 FOO
        HELLO 2 SETNAME
        HELLO 2 SETNAME "a b"
        HELLO 2 AUTH bob secret
        HELLO 2 AUTH default
        AUTH x
        AUTH default x
        AUTH a b c
    """,
    "client_name": """
        CLIENT GETNAME
        CLIENT SETNAME worker
        CLIENT GETNAME
        CLIENT SETNAME "a b"
        CLIENT SETNAME ""
        CLIENT GETNAME
        CLIENT SETNAME a b
        CLIENT ID extra
    """,
    "config_get_set": """
        CONFIG GET maxmemory
        CONFIG GET stream-node-max-entries
        CONFIG GET stream-node-max-bytes
        CONFIG GET appendonly
        CONFIG GET databases
        CONFIG GET nosuchparam
        CONFIG GET MAXMEMORY
        CONFIG SET stream-node-max-entries 50
        CONFIG GET stream-node-max-entries
        CONFIG SET stream-node-max-entries 100
        CONFIG SET stream-node-max-entries abc
        CONFIG SET maxmemory abc
        CONFIG SET maxmemory 1mb
        CONFIG GET maxmemory
        CONFIG SET maxmemory 0
        CONFIG SET nosuchparam x
        CONFIG SET maxmemory
        CONFIG SET maxmemory 1 maxmemory 2
        CONFIG SET databases 3
        CONFIG SET appendonly maybe
        CONFIG SET maxmemory-policy nope
        CONFIG SET maxmemory-policy allkeys-lru
        CONFIG GET maxmemory-policy
        CONFIG SET maxmemory-policy noeviction
        CONFIG REWRITE
        CONFIG RESETSTAT
        CONFIG HELP
    """,
    "client_list_filters_and_help": """
        CLIENT LIST TYPE foo
        CLIENT LIST TYPE pubsub
        CLIENT LIST ID abc
        CLIENT LIST ID 0
        CLIENT LIST foo
        CLIENT UNBLOCK abc
        CLIENT UNBLOCK 99999
        CLIENT UNBLOCK 99999 foo
        CLIENT NO-EVICT maybe
        CLIENT HELP
    """,
    "command_introspection_errors": """
        COMMAND INFO nosuchcmd
        COMMAND GETKEYS get
        COMMAND GETKEYS nosuch a
        COMMAND GETKEYS ping a
        COMMAND GETKEYS get a
        COMMAND GETKEYS get a b
        COMMAND GETKEYS mset a b c d
        COMMAND NOPE
    """,
    "swapdb_and_misc_arity": """
        SWAPDB 0 99
        SWAPDB a 1
        SWAPDB 0 a
        SET k v
        SWAPDB 0 1
        EXISTS k
        SELECT 1
        GET k
        SELECT 0
        LASTSAVE extra
        TIME extra
        INFO foo bar
        RANDOMKEY x
        KEYS
    """,
    "reset": """
        MULTI
        SET k v
        RESET
        EXEC
        RESET x
    """,
}


@pytest.mark.redis
@pytest.mark.parametrize("resp", [2, 3])
@pytest.mark.parametrize("name", list(SCRIPTS))
def test_server_commands_match_redis(differ: Differ, name: str, resp: int) -> None:
    run_script(differ, cmds(SCRIPTS[name]), resp)


@pytest.mark.redis
@pytest.mark.parametrize("resp", [2, 3])
def test_hello_reply_matches_redis_except_the_client_id(differ: Differ, resp: int) -> None:
    real, fake = differ.both("HELLO", str(resp))
    real_id = differ.real.call("CLIENT", "ID").split(b"\r\n")[0][1:]
    fake_id = differ.fake.call("CLIENT", "ID").split(b"\r\n")[0][1:]
    assert fake.replace(b":" + fake_id + b"\r\n", b":ID\r\n") == real.replace(
        b":" + real_id + b"\r\n", b":ID\r\n"
    )


@pytest.mark.redis
def test_info_keyspace_line_matches_redis(differ: Differ) -> None:
    differ.check("SET", "a", "1")
    differ.check("SET", "b", "2")
    differ.check("INFO", "keyspace")


@pytest.mark.redis
def test_config_get_pattern_returns_the_same_parameters_as_redis(differ: Differ) -> None:
    for pattern in ("stream-node-*", "appendonly", "save"):
        real, fake = differ.both("CONFIG", "GET", pattern)
        assert sorted(fake.split(b"\r\n")) == sorted(real.split(b"\r\n")), pattern


def test_time_follows_an_injected_clock(ex: Exec, clock: FakeClock) -> None:
    clock.now = 1_700_000_000_123
    assert ex("TIME") == [b"1700000000", b"123000"]


def test_time_is_a_pair_of_bulk_strings_on_the_wall_clock() -> None:
    import time

    engine = Engine()
    seconds, micros = engine.execute(engine.connect(), [b"TIME"])
    assert abs(int(seconds) - time.time()) < 5
    assert 0 <= int(micros) < 1_000_000
