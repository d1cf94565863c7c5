"""A script body's name and header: the SHA1 it is cached under and Redis 7.0's ``#!lua``
shebang line with its flags.

Below :mod:`.core`, which reads a script's flags before running EVAL (OOM, stale and
read-only checks), and :mod:`.scripting`, which compiles the body.
"""

from __future__ import annotations

import hashlib
from typing import Final

from streamworker.engine import msgs
from streamworker.engine.errors import CommandError

__all__ = ["SHEBANG_FLAGS", "parse_shebang", "sha1hex"]

SHEBANG_FLAGS: Final = frozenset(
    {"no-writes", "allow-oom", "allow-stale", "no-cluster", "allow-cross-slot-keys"}
)
"""The flags a ``#!lua flags=...`` line may name."""


def sha1hex(data: bytes) -> str:
    """The lowercase hex SHA1 of ``data`` (a script's name in the cache)."""
    return hashlib.sha1(data).hexdigest()


def parse_shebang(body: bytes) -> tuple[int, frozenset[str] | None]:
    """``(offset of the code, flags)`` for a script body: Redis 7.0's ``#!lua flags=...`` line.

    The code keeps the shebang's line feed so that line numbers stay the user's. Raises
    CommandError with Redis's texts for a malformed shebang.
    """
    if not body.startswith(b"#!"):
        return 0, None
    end = body.find(b"\n")
    if end < 0:
        raise CommandError(msgs.SCRIPT_INVALID_SHEBANG)
    parts = body[:end].split()
    if not parts or parts[0] != b"#!lua":
        engine = parts[0] if parts else b""
        raise CommandError(msgs.script_unexpected_engine(_text(engine)))
    flags: set[str] = set()
    for part in parts[1:]:
        if not part.startswith(b"flags="):
            raise CommandError(msgs.script_unknown_shebang_option(_text(part)))
        value = part[6:]
        if not value:
            continue
        for flag in value.split(b","):
            name = _text(flag)
            if name not in SHEBANG_FLAGS:
                raise CommandError(msgs.script_unexpected_flag(name))
            flags.add(name)
    return end, frozenset(flags)


def _text(b: bytes) -> str:
    return b.decode("utf-8", "surrogateescape")
