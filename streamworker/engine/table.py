"""The command table's entries (:class:`CommandSpec`) and the registry the
:func:`command` decorator fills.

The lowest layer of the command path: :mod:`.core` dispatches on these entries,
:mod:`.keyspecs`, :mod:`.acl`, :mod:`.memory` and :mod:`.tracking` read them, and the modules of
:mod:`.commands` register into :data:`COMMANDS` at import (see :mod:`.commands` for the
decorator's contract). It imports no other engine module, so every layer can use it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

__all__ = ["COMMANDS", "HISTOGRAM_BUCKETS", "CommandFunc", "CommandSpec", "command"]

CommandFunc = Callable[..., Any]
"""A command's implementation, ``(ctx, args) -> reply``; :data:`.commands.CommandFunc` spells
out the types (a command context is above this layer)."""
_F = TypeVar("_F", bound=Callable[..., Any])


class CommandSpec:
    """One entry of the command table (a command, a container, or a subcommand)."""

    __slots__ = (
        "arity",
        "container",
        "denyoom",
        "dirty_reply",
        "duration_ns",
        "failed_calls",
        "first_key",
        "flags",
        "func",
        "histogram",
        "last_key",
        "movable",
        "name",
        "no_multi",
        "noscript",
        "notouch",
        "queueable",
        "rejected_calls",
        "skip",
        "step",
        "subcommands",
        "touch_at",
        "touch_keys",
        "write",
    )

    def __init__(
        self,
        name: str,
        func: CommandFunc | None,
        arity: int,
        flags: Iterable[str] = (),
        first_key: int = 0,
        last_key: int = 0,
        step: int = 0,
    ) -> None:
        self.name = name
        self.func = func
        self.arity = arity
        self.flags: frozenset[str] = frozenset(flags)
        self.first_key = first_key
        self.last_key = last_key
        self.step = step
        self.container: str | None = name.split("|", 1)[0] if "|" in name else None
        self.skip = 2 if self.container is not None else 1
        self.subcommands: dict[bytes, CommandSpec] | None = None
        self.no_multi = "no-multi" in self.flags
        self.noscript = "noscript" in self.flags
        # Commands that run immediately even while MULTI is open (Redis's execCommand list).
        self.queueable = name not in _MULTI_IMMEDIATE
        self.denyoom = "denyoom" in self.flags
        self.movable = "movablekeys" in self.flags
        self.write = "write" in self.flags
        # Its integer reply is what it changed (Redis's server.dirty increment): DEL's count.
        self.dirty_reply = name in _DIRTY_IS_REPLY
        # Looks its keys up without touching their LRU/LFU data (Redis's LOOKUP_NOTOUCH).
        self.notouch = name in _NOTOUCH or self.container in ("object", "memory")
        # Where the engine stamps the access time of the keys a call named (OBJECT IDLETIME):
        # ``touch_at`` is the argv position of a command's one key (0: none, or several),
        # ``touch_keys`` marks the commands with several (or movable) keys.
        single = first_key > 0 and first_key == last_key
        self.touch_at = first_key if single and not self.notouch else 0
        # (EVAL and FCALL look nothing up themselves: their scripts' calls stamp their keys.)
        self.touch_keys = (
            not self.notouch
            and not single
            and (first_key > 0 or self.movable)
            and name not in _SCRIPT_CALLS
        )
        self.reset_stats()

    def reset_stats(self) -> None:
        """Zero the INFO commandstats / LATENCY HISTOGRAM counters (CONFIG RESETSTAT).

        :attr:`calls` counts executions, ``duration_ns`` their summed time, ``rejected_calls`` the
        calls refused before running (arity, OOM, NOAUTH...), ``failed_calls`` the ones that
        ran and replied an error (Redis 7.0's definitions). ``histogram[i]`` counts calls that
        took less than ``1024 << i`` ns (the buckets LATENCY HISTOGRAM reports).
        """
        self.duration_ns = 0
        self.rejected_calls = 0
        self.failed_calls = 0
        self.histogram: list[int] = [0] * HISTOGRAM_BUCKETS

    @property
    def calls(self) -> int:
        """Executions counted (the histogram's total: one counter less on the hot path)."""
        return sum(self.histogram)

    def copy(self) -> CommandSpec:
        """A copy with zeroed counters (and copied subcommands)."""
        dup = CommandSpec(
            self.name, self.func, self.arity, self.flags, self.first_key, self.last_key, self.step
        )
        if self.subcommands is not None:
            dup.subcommands = {name: sub.copy() for name, sub in self.subcommands.items()}
        return dup

    def key_positions(self, argc: int) -> list[int]:
        """Argv positions of the keys for a call with ``argc`` words (legacy key spec)."""
        if self.first_key <= 0:
            return []
        last = self.last_key if self.last_key >= 0 else argc + self.last_key
        step = self.step or 1
        return list(range(self.first_key, min(last, argc - 1) + 1, step))

    def __repr__(self) -> str:
        return f"CommandSpec({self.name!r}, arity={self.arity})"


HISTOGRAM_BUCKETS = 44
"""Power-of-two latency buckets from 1.024 us up (the last one takes everything longer)."""

# Commands that read keys without touching their access data (LOOKUP_NOTOUCH in Redis 7.0).
_NOTOUCH = frozenset({"exists", "type", "ttl", "pttl", "expiretime", "pexpiretime"})
_SCRIPT_CALLS = frozenset({"eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"})
# Write commands whose integer reply is the number of changes Redis 7.0 counts for them
# (server.dirty): the keys DEL removed, the members SREM removed, 1 when EXPIRE set a TTL...
_DIRTY_IS_REPLY = frozenset(
    {
        "del",
        "unlink",
        "expire",
        "pexpire",
        "expireat",
        "pexpireat",
        "persist",
        "renamenx",
        "move",
        "copy",
        "hdel",
        "hsetnx",
        "sadd",
        "srem",
        "zrem",
        "zremrangebyrank",
        "zremrangebyscore",
        "zremrangebylex",
        "lrem",
        "xdel",
        "xtrim",
        "xack",
        "xgroup|createconsumer",
        "xgroup|destroy",
    }
)

_MULTI_IMMEDIATE = frozenset({"exec", "discard", "multi", "watch", "quit", "reset"})

COMMANDS: dict[str, CommandSpec] = {}
"""Top-level commands by lowercase name; subcommands hang off ``spec.subcommands``."""


def command(
    name: str,
    arity: int,
    flags: Iterable[str] = (),
    first_key: int = 0,
    last_key: int = 0,
    step: int = 0,
) -> Callable[[_F], _F]:
    """Register the decorated function as the implementation of ``name`` (see module doc)."""
    lname = name.lower()

    def deco(func: _F) -> _F:
        spec = CommandSpec(lname, func, arity, flags, first_key, last_key, step)
        if spec.container is not None:
            parent = COMMANDS.get(spec.container)
            if parent is None:
                parent = CommandSpec(spec.container, None, -2)
                COMMANDS[spec.container] = parent
            if parent.subcommands is None:
                parent.subcommands = {}
            parent.subcommands[lname.split("|", 1)[1].encode()] = spec
        else:
            existing = COMMANDS.get(lname)
            if existing is not None and existing.func is None:
                spec.subcommands = existing.subcommands
            COMMANDS[lname] = spec
        return func

    return deco
