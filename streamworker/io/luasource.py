"""The text of the Redis scripts in ``streamworker/lua/`` as the server gets it: each script with
the fragments it includes put in.

Logic that several scripts need lives once, in a fragment ``lua/lib/<name>.lua`` that defines the
local function ``<name>`` (its header says what it takes and returns; it takes what it needs as
parameters). A script includes it with a line of its own::

    --!include <name>

A Lua comment, so the file still parses as it stands; the loader puts the fragment's text in that
line's place. A script includes a fragment at most once, and a fragment includes nothing. An
include of a fragment that does not exist, a second include of one, or a line that starts with
``--!include`` but is not of that form raises :class:`LuaSourceError` when the script is loaded
(for most scripts: when the module that calls it is imported). A script without includes is sent
as it is.

The composed text is what the server runs and what its SHA1 names, so line numbers in a script's
error replies (``@user_script:<line>``) count in it: :func:`lua_source` shows it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from importlib import resources

from streamworker.errors import StreamworkerError

_DIRECTIVE = "--!include"
_INCLUDE = re.compile(r"--!include ([a-z][a-z0-9_]*)")


class LuaSourceError(StreamworkerError):
    """A script of ``streamworker/lua/`` cannot be composed: an include names no fragment, names
    one a second time, is not of the form ``--!include <name>``, or stands in a fragment."""


def compose(script: str, text: str, fragment: Callable[[str], str | None]) -> str:
    """``text``, the script named ``script``, with each include line replaced by the text of its
    fragment; ``fragment(name)`` gives that text, or None when there is no such fragment."""
    if _DIRECTIVE not in text:
        return text
    lines = text.splitlines(keepends=True)
    included: set[str] = set()
    for number, line in enumerate(lines, 1):
        if not line.lstrip().startswith(_DIRECTIVE):
            continue
        where = f"lua/{script}.lua, line {number}"
        match = _INCLUDE.fullmatch(line.rstrip())
        if match is None:
            raise LuaSourceError(
                f"{where}: {line.strip()!r} is not an include (`--!include <name>`, at the start "
                "of a line, <name> in lower case)"
            )
        name = match[1]
        if name in included:
            raise LuaSourceError(f"{where}: includes the fragment {name!r} a second time")
        body = fragment(name)
        if body is None:
            raise LuaSourceError(
                f"{where}: includes the fragment {name!r}, but there is no lua/lib/{name}.lua"
            )
        if any(part.lstrip().startswith(_DIRECTIVE) for part in body.splitlines()):
            raise LuaSourceError(
                f"lua/lib/{name}.lua (included by lua/{script}.lua) has an include: fragments "
                "include nothing"
            )
        included.add(name)
        lines[number - 1] = body if body.endswith("\n") else body + "\n"
    return "".join(lines)


@functools.cache
def lua_source(name: str) -> str:
    """The script ``lua/<name>.lua`` as the server gets it (its includes composed); read once per
    process."""
    text = resources.files("streamworker.lua").joinpath(f"{name}.lua").read_text("utf-8")
    return compose(name, text, _fragment)


def script_names() -> list[str]:
    """The names of the scripts in ``streamworker/lua/`` (not the fragments of ``lua/lib/``),
    sorted."""
    return sorted(
        path.name.removesuffix(".lua")
        for path in resources.files("streamworker.lua").iterdir()
        if path.name.endswith(".lua") and path.is_file()
    )


def _fragment(name: str) -> str | None:
    path = resources.files("streamworker.lua").joinpath("lib").joinpath(f"{name}.lua")
    return path.read_text("utf-8") if path.is_file() else None
