"""The command table and the :func:`command` decorator.

A command function takes ``(ctx, args)`` and returns a :data:`~streamworker.engine.replies.Reply`
(or a :class:`~streamworker.engine.context.Blocked` from ``ctx.block(...)``); it raises
:class:`~streamworker.engine.errors.CommandError` for error replies::

    @command("xadd", arity=-5, flags=("write",), first_key=1, last_key=1, step=1)
    def xadd(ctx: Ctx, args: list[bytes]) -> Reply: ...

* ``args`` excludes the command name: ``XADD s * f v`` gives ``[b"s", b"*", b"f", b"v"]``.
  For a subcommand (``"xgroup|create"``) ``args`` excludes **both** words:
  ``XGROUP CREATE s g $`` gives ``[b"s", b"g", b"$"]``. The spec's ``skip`` attribute is the
  number of leading words dropped (1 or 2).
* ``arity`` counts every word including the command (and subcommand) names, as in Redis's
  COMMAND table: positive = exactly, negative = at least. Core checks it before calling the
  function, and also rejects unknown commands and unknown subcommands with Redis's texts.
* Registering ``"container|sub"`` creates the container entry (arity -2, no function) if it
  does not exist; registering the container name itself later gives it a function (e.g.
  ``COMMAND`` with no subcommand).
* ``first_key``/``last_key``/``step`` are Redis's legacy key specs (argv positions, counting the
  command name as 0; ``last_key=-1`` = up to the last argument).
* ``flags`` are Redis's command flags as lowercase strings (``write``, ``readonly``, ``fast``,
  ``blocking``, ``noscript``, ``no-multi``, ``admin``...); ``no-multi`` commands are refused
  while a MULTI is open, ``noscript`` ones inside a script.

The table's entries and the registry live in :mod:`..table` (below the engine's core, which
dispatches on them); this package re-exports them. Command modules register at import time;
:func:`load_commands` imports every module of this
package (including ``streams``) and returns the dispatch table keyed by the lowercased name as
bytes.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from streamworker.engine.context import Ctx
from streamworker.engine.table import COMMANDS, HISTOGRAM_BUCKETS, CommandSpec, command

if TYPE_CHECKING:
    from streamworker.engine.context import Blocked
    from streamworker.engine.replies import Reply

__all__ = [
    "COMMANDS",
    "HISTOGRAM_BUCKETS",
    "CommandFunc",
    "CommandSpec",
    "Ctx",
    "command",
    "load_commands",
]

CommandFunc = Callable[[Ctx, list[bytes]], "Reply | Blocked"]

# Modules loaded by load_commands(); "streams" is optional while it is being written.
_MODULES = (
    "keys",
    "strings",
    "bits",
    "hashes",
    "sets",
    "zsets",
    "lists",
    "sort",
    "hyperloglog",
    "geo",
    "server",
    "connection",
    "transactions",
    "streams",
    "scripting",
    "functions",
    "rdb",
    "pubsub",
    "server_admin",
    "acl",
    "memory",
    "latency",
)
_OPTIONAL_MODULES = frozenset({"streams"})


def load_commands() -> dict[bytes, CommandSpec]:
    """Import every command module and return the dispatch table keyed by lowercase bytes.

    Each call returns fresh copies of the specs: the call counters on them belong to one
    engine."""
    for mod in _MODULES:
        try:
            importlib.import_module(f"{__name__}.{mod}")
        except ModuleNotFoundError as exc:
            if mod in _OPTIONAL_MODULES and exc.name == f"{__name__}.{mod}":
                continue
            raise
    return {name.encode(): spec.copy() for name, spec in COMMANDS.items()}
