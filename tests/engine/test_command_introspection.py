"""COMMAND GETKEYSANDFLAGS and COMMAND LIST side by side with redis-server 7.0.15."""

from __future__ import annotations

import shlex

import pytest

from tests.engine.conftest import Differ

pytestmark = pytest.mark.redis

GETKEYSANDFLAGS_CALLS = [
    "set k1 v1",
    "set k1 v1 get",
    "set k1 v1 ex 10",
    "mset k1 v1 k2 v2",
    "lmove k1 k2 left right",
    "sort k1 store k2",
    "sort k1 by w* get # store k2",
    "sort_ro k1",
    "bitfield k get u8 0",
    "bitfield k get u8 0 set u8 0 1",
    "bitfield k overflow wrap get u8 0",
    "bitfield_ro k get u8 0",
    "georadius k 1 2 3 m store d",
    "georadius k 1 2 3 m storedist d2 store d",
    "zunionstore d 2 a b",
    "zinter 2 a b",
    "eval x 2 a b",
    "fcall f 1 a",
    "xgroup create key g $",
    "xread count 1 streams s1 s2 0 0",
    "xreadgroup group g c streams s1 0",
    "lmpop 2 a b left",
    "blmpop 0 2 a b left",
    "rename a b",
    "copy a b",
    "getex k persist",
    "getdel k",
    "del a b c",
    "object encoding k",
    "memory usage k",
    "pfcount a b",
    "smove a b m",
    "lcs a b",
    "get k",
    "migrate h 1 k 0 5",
    "migrate h 1 '' 0 5 keys a b",
    "migrate h 1 '' 0 5 auth keys keys a",
    "migrate h 1 '' 0 5 auth2 u keys keys a",
    "migrate h 1 '' 0 5 copy",
]


@pytest.mark.parametrize("call", GETKEYSANDFLAGS_CALLS)
def test_getkeysandflags_gives_each_key_the_flags_of_its_key_spec(
    differ: Differ, call: str
) -> None:
    differ.check("COMMAND", "GETKEYSANDFLAGS", *shlex.split(call))


@pytest.mark.parametrize(
    "call",
    [
        "nosuch k",
        "ping",
        "get",
        "set k",
        "eval x 5 a",
        "zunionstore d x a",
        "migrate h 1 k 0 5 keys a",
    ],
)
def test_getkeysandflags_refuses_what_getkeys_refuses(differ: Differ, call: str) -> None:
    differ.check("COMMAND", "GETKEYSANDFLAGS", *shlex.split(call))


@pytest.mark.parametrize(
    "call",
    [
        "xread streams x 0",
        "xread count 2 streams x y 0 0",
        "xread streams x y z 0",
        "xread streams x",
        "xread count 1 x",
        "xreadgroup group g c streams x >",
        "xreadgroup group g c noack streams x y 0 0",
    ],
)
def test_getkeys_finds_xread_keys_by_their_key_spec(differ: Differ, call: str) -> None:
    differ.check("COMMAND", "GETKEYS", *shlex.split(call))


@pytest.mark.parametrize(
    "args",
    [
        "bad_arg",
        "filterby bad_arg",
        "filterby bad_arg bad_arg2",
        "filterby pattern",
        "filterby pattern a b",
    ],
)
def test_command_list_refuses_bad_filters_with_a_syntax_error(differ: Differ, args: str) -> None:
    differ.check("COMMAND", "LIST", *args.split())


def _names(raw: bytes) -> set[bytes]:
    lines = raw.split(b"\r\n")
    return {line for line in lines[2::2] if line}


@pytest.mark.parametrize(
    "args",
    [
        "",
        "filterby aclcat scripting",
        "filterby aclcat slow",
        "filterby aclcat connection",
        "filterby aclcat non_existing_category",
        "filterby pattern set",
        "filterby pattern config*",
        "filterby pattern config|*re*",
        "filterby pattern CL*HELP",
        "filterby pattern non_exists*",
        "filterby module non_existing_module",
    ],
)
def test_command_list_names_commands_and_subcommands_that_pass_the_filter(
    differ: Differ, args: str
) -> None:
    # Redis lists in its hash table's order; the engine lacks a few commands (MODULE...):
    # the names must be Redis's, less those the engine does not have.
    real, fake = differ.both("COMMAND", "LIST", *args.split())
    everything = _names(differ.both("COMMAND", "LIST")[1])
    assert b"client|list" in everything
    assert _names(fake) == _names(real) & everything


@pytest.mark.parametrize("command", ["MIGRATE", "GEORADIUS", "SORT", "ZUNIONSTORE", "SET", "LMOVE"])
def test_command_info_marks_movablekeys_as_redis_does(differ: Differ, command: str) -> None:
    real, fake = differ.both("COMMAND", "INFO", command)
    assert (b"movablekeys" in fake) == (b"movablekeys" in real)
