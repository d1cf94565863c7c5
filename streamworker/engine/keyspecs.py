"""Which arguments of a call are keys: Redis 7.0's key specs and getkeys procs.

Shared by the command path (:mod:`.core`: ACL key checks, access-time stamps), memory
accounting (:mod:`.memory`) and COMMAND GETKEYS (:mod:`.commands.server`), so it sits below
all three; the specs themselves are the generated table in :mod:`.keyspecs_data`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from streamworker.engine.keyspecs_data import KEY_SPECS
from streamworker.engine.numbers import parse_int
from streamworker.engine.table import CommandSpec

__all__ = [
    "NOT_KEYS",
    "acl_keys",
    "command_keys",
    "key_indexes_by_specs",
    "keys_by_specs",
    "movable_keys",
    "proc_flags",
    "proc_keys",
    "specs_complete",
]

# Commands whose key specs are all flagged not_key (shard channels: the slot matters, there
# is no key): COMMAND INFO shows their positions, GETKEYS finds no key.
NOT_KEYS = frozenset({"ssubscribe", "sunsubscribe", "spublish"})

_NEEDS = {"access": 1, "insert": 2, "delete": 2, "update": 2}
# Per command: its keys' fixed positions and permissions for acl_keys, or None when they
# depend on the arguments (absent: not computed yet).
_ACL_PLANS: dict[str, list[tuple[int, int, int, int]] | None] = {}
_NO_PLAN: list[tuple[int, int, int, int]] = []


def _acl_plan(spec: CommandSpec) -> list[tuple[int, int, int, int]] | None:
    # (first index, last key offset (negative: from the end), step, needed permission) per
    # key spec, when every spec is a plain index + range without a limit.
    if (spec.first_key <= 0 and "movablekeys" not in spec.flags) or spec.name in NOT_KEYS:
        return []
    if spec.name in ("set", "bitfield"):
        return None
    specs = KEY_SPECS.get(spec.name, ())
    if not specs_complete(specs):
        return None
    plan = []
    for flags, begin, find in specs:
        if "not_key" in flags:
            continue
        if begin[0] != "index" or find[0] != "range" or find[3]:
            return None
        needed = 0
        for flag in flags:
            needed |= _NEEDS.get(flag, 0)
        plan.append((begin[1], find[1], find[2] or 1, needed))
    return plan


def acl_keys(spec: CommandSpec, argv: Sequence[bytes]) -> list[tuple[int, bytes, int]]:
    """The keys ACL checks for a call of ``spec``: (argv index, key, needed permission:
    1 read, 2 write, 3 both), from the key specs' access/insert/delete/update flags as
    Redis's ACLSelectorCheckKey reads them. Never raises (malformed calls give what can be
    found; the command refuses them afterwards)."""
    name = spec.name
    if name == "set":
        # One key, written; read too when GET asks for the old value (its variable flags).
        reads = any(a.lower() == b"get" for a in argv[3:])
        return [(1, argv[1], 3 if reads else 2)]
    plan = _ACL_PLANS.get(name, _NO_PLAN)
    if plan is _NO_PLAN:
        plan = _ACL_PLANS[name] = _acl_plan(spec)
    if plan is not None:
        # Fixed positions (GET, SET without options, MSET...): no per-call spec walk.
        argc = len(argv)
        out: list[tuple[int, bytes, int]] = []
        for first, lastkey, step, needed in plan:
            last = first + lastkey if lastkey >= 0 else argc + lastkey
            if last >= argc:
                last = argc - 1
            out.extend((i, argv[i], needed) for i in range(first, last + 1, step))
        return out
    if (spec.first_key <= 0 and "movablekeys" not in spec.flags) or name in NOT_KEYS:
        return []
    specs = KEY_SPECS.get(name, ())
    found: list[tuple[int, tuple[str, ...]]] | None = None
    if specs_complete(specs):
        found = key_indexes_by_specs(specs, argv)
    if found is None:
        try:
            keys = proc_keys(name, list(argv))
        except IndexError:
            keys = []
        if keys is None:
            found = [(p, specs[0][0] if specs else ()) for p in spec.key_positions(len(argv))]
        else:
            found = []
            at = 1
            for i, key in enumerate(keys):
                # The key's argv index: the same bytes object, from where the last was found.
                pos = next((j for j in range(at, len(argv)) if argv[j] is key), at)
                at = pos + 1
                flags = proc_flags(name, specs, list(argv), i) if specs else ()
                found.append((pos, flags))
        if name in ("set", "bitfield"):
            found = [(p, proc_flags(name, specs, list(argv), 0)) for p, _ in found]
    out = []
    for pos, flags in found:
        needed = 0
        for flag in flags:
            needed |= _NEEDS.get(flag, 0)
        if pos < len(argv):
            out.append((pos, argv[pos], needed))
    return out


def specs_complete(specs: tuple[Any, ...]) -> bool:
    """Whether ``specs`` alone find every key of a call (no incomplete, variable-flags or
    unknown spec: those commands need their getkeys proc)."""
    return bool(specs) and all(
        "incomplete" not in flags and "variable_flags" not in flags and begin[0] != "unknown"
        for flags, begin, _ in specs
    )


def keys_by_specs(
    specs: tuple[Any, ...], argv: Sequence[bytes]
) -> list[tuple[bytes, tuple[str, ...]]] | None:
    """Redis's getKeysUsingKeySpecs over ``argv`` (the command name first); None when a spec
    does not fit the arguments (Redis then falls back to the command's getkeys proc)."""
    found = key_indexes_by_specs(specs, argv)
    return None if found is None else [(argv[i], flags) for i, flags in found]


def key_indexes_by_specs(
    specs: tuple[Any, ...], argv: Sequence[bytes]
) -> list[tuple[int, tuple[str, ...]]] | None:
    """keys_by_specs with argv indexes instead of the keys."""
    argc = len(argv)
    out: list[tuple[int, tuple[str, ...]]] = []
    for flags, begin, find in specs:
        if "not_key" in flags:
            continue
        if begin[0] == "index":
            first = begin[1]
        else:
            _, word, startfrom = begin
            first = 0
            start = startfrom if startfrom > 0 else argc + startfrom
            end = argc - 1 if startfrom > 0 else 0
            i = start
            while i != end and 1 <= i < argc:
                if argv[i].lower() == word.encode():
                    first = i + 1
                    break
                i = i + 1 if start <= end else i - 1
            if not first:
                continue
        if find[0] == "range":
            _, lastkey, step, limit = find
            if lastkey >= 0:
                last = first + lastkey
            elif not limit:
                last = argc + lastkey
            else:
                last = first + ((argc - first) // limit + lastkey)
        else:
            _, keynumidx, firstkey, step = find
            if first + keynumidx >= argc:
                return None
            numkeys = parse_int(argv[first + keynumidx])
            if numkeys is None or numkeys < 0:
                return None
            first += firstkey
            last = first + numkeys - 1
        if last >= argc or last < first or first >= argc:
            return None
        out.extend((i, flags) for i in range(first, last + 1, step))
    return out


def proc_flags(name: str, specs: tuple[Any, ...], argv: list[bytes], index: int) -> tuple[str, ...]:
    """The flags Redis's getkeys procs give the key found ``index``-th."""
    if name == "set":
        has_get = any(a.lower() == b"get" for a in argv[3:])
        return ("RW", "access", "update") if has_get else ("OW", "update")
    if name == "bitfield":
        return ("RO", "access") if _bitfield_reads_only(argv) else ("RW", "access", "update")
    first: tuple[str, ...] = specs[0][0]
    last: tuple[str, ...] = specs[-1][0]
    if name == "migrate":
        # Redis's migrateGetKeys gives every key the first spec's flags.
        return first
    # SORT / SORT_RO: the sorted key, then the STORE destination (the last spec).
    return first if index == 0 else last


def _bitfield_reads_only(argv: list[bytes]) -> bool:
    i = 2
    while i < len(argv):
        remaining = len(argv) - i - 1
        word = argv[i].lower()
        if word == b"get" and remaining >= 2:
            i += 3
        elif word == b"overflow" and remaining >= 1:
            i += 2
        else:
            return False
    return True


# Commands whose keys follow a numkeys argument: the argv position of numkeys.
_NUMKEYS_AT = {
    "lmpop": 1,
    "blmpop": 2,
    "zmpop": 1,
    "bzmpop": 2,
    "zintercard": 1,
    "sintercard": 1,
    "zunion": 1,
    "zinter": 1,
    "zdiff": 1,
    "zunionstore": 2,
    "zinterstore": 2,
    "zdiffstore": 2,
    "eval": 2,
    "evalsha": 2,
    "eval_ro": 2,
    "evalsha_ro": 2,
    "fcall": 2,
    "fcall_ro": 2,
}
# Of those, the ones whose destination key comes first (argv[1]).
_NUMKEYS_WITH_DESTINATION = frozenset({"zunionstore", "zinterstore", "zdiffstore"})
_SORT_SKIPS = {b"limit": 2, b"get": 1, b"by": 1}


def proc_keys(name: str, argv: list[bytes]) -> list[bytes] | None:
    """The keys of a call of a command whose keys move (Redis's key specs / getkeys procs);
    None for the other commands."""
    at = _NUMKEYS_AT.get(name)
    if at is not None:
        numkeys = parse_int(argv[at])
        if numkeys is None or numkeys < 1 or numkeys > len(argv) - at - 1:
            return []
        keys = list(argv[at + 1 : at + 1 + numkeys])
        return [argv[1], *keys] if name in _NUMKEYS_WITH_DESTINATION else keys
    if name in ("sort", "sort_ro"):
        keys = [argv[1]]
        store: bytes | None = None
        i = 2
        while i < len(argv):
            word = argv[i].lower()
            if word in _SORT_SKIPS:
                i += _SORT_SKIPS[word]
            elif name == "sort" and word == b"store" and i + 1 < len(argv):
                # The last STORE wins, as in SORT itself.
                store = argv[i + 1]
            i += 1
        return keys + ([store] if store is not None else [])
    if name == "migrate":
        # The key argument, or (when it is "") the words after KEYS; AUTH/AUTH2 passwords
        # are skipped, as Redis's migrateGetKeys does.
        i = 6
        while i < len(argv):
            word = argv[i].lower()
            if word == b"auth":
                i += 1
            elif word == b"auth2":
                i += 2
            elif word == b"keys":
                return [] if argv[3] else list(argv[i + 1 :])
            i += 1
        return [argv[3]]
    if name in ("georadius", "georadiusbymember"):
        # Key specs: the source, then the word after the first STORE and after the first
        # STOREDIST found from the options' start (argv 6 / 5), in that order.
        keys = [argv[1]]
        start = 6 if name == "georadius" else 5
        for word in (b"store", b"storedist"):
            for i in range(start, len(argv)):
                if argv[i].lower() == word:
                    if i + 1 < len(argv):
                        keys.append(argv[i + 1])
                    break
        return keys
    return None


def movable_keys(spec: CommandSpec, argv: Sequence[bytes]) -> list[bytes]:
    """The keys of a movable-keys command's call (LMPOP, ZMPOP, SORT ... STORE...), as COMMAND
    GETKEYS finds them, else as Redis 7.0's key specs find them (XREAD and XREADGROUP: the
    first half of the words after STREAMS); none when neither fits the arguments."""
    args = list(argv)
    found = proc_keys(spec.name, args)
    if found is not None:
        return found
    specs = KEY_SPECS.get(spec.name)
    by_specs = keys_by_specs(specs, args) if specs else None
    return [key for key, _ in by_specs] if by_specs else []


def command_keys(spec: CommandSpec, argv: Sequence[bytes]) -> list[bytes]:
    """The keys a call names: the legacy key spec's positions (none for commands without)."""
    first = spec.first_key
    if first <= 0:
        return []
    argc = len(argv)
    if first == spec.last_key:
        return [argv[first]] if first < argc else []
    last = spec.last_key if spec.last_key >= 0 else argc + spec.last_key
    return [argv[i] for i in range(first, min(last, argc - 1) + 1, spec.step or 1)]
