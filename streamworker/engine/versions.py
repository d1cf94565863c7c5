"""The Redis version the engine answers as, and the stream features each version brings.

By default the engine is Redis 7.0.15: its command table, replies and error texts are 7.0's,
checked byte for byte against redis-server by the differential tests. Asking for an 8.x version
(``Engine(redis_version="8.10")``, ``engine://memory?redis_version=8.10``, ``streamworker engine
serve --redis-version 8.10``) adds the stream commands and options that version documents, on top
of the same 7.0 engine (see docs/engine-redis8.md for what is implemented and what is not).

The features are switched on by registering commands and option parsers when the engine is
built (:func:`streamworker.engine.commands.streams_r8.install`), never by a version test on the
command path: a 7.0 engine runs exactly the code it ran before versions existed.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "ACKDEL_SINCE",
    "CLAIM_SINCE",
    "DEFAULT_REDIS_VERSION",
    "IDMP_SINCE",
    "READ_LIMITS_SINCE",
    "XNACK_SINCE",
    "RedisVersion",
    "parse_redis_version",
]

DEFAULT_REDIS_VERSION: Final = "7.0.15"

ACKDEL_SINCE: Final = (8, 2)
"""XACKDEL, XDELEX, and KEEPREF / DELREF / ACKED on XADD and XTRIM."""
CLAIM_SINCE: Final = (8, 4)
"""XREADGROUP ... CLAIM min-idle-time."""
IDMP_SINCE: Final = (8, 6)
"""XADD ... IDMP pid iid | IDMPAUTO pid, XCFGSET, and XINFO STREAM's IDMP fields."""
XNACK_SINCE: Final = (8, 8)
"""XNACK key group SILENT|FAIL|FATAL IDS n id ... [RETRYCOUNT c] [FORCE]."""
READ_LIMITS_SINCE: Final = (8, 10)
"""MAXCOUNT and MAXSIZE on XREAD and XREADGROUP."""

# The newest 8.x minor the engine knows of: a later one would promise features it lacks.
_LATEST_MINOR: Final = 10


class RedisVersion:
    """A version the engine can answer as: 7.0.15, or 8.<minor>.<patch> with minor <= 10.

    ``text`` is what INFO, HELLO and Lua's ``redis.REDIS_VERSION`` report; ``at_least((8, 4))``
    tells whether a feature of that version is in. Immutable.
    """

    __slots__ = ("major", "minor", "patch", "text")

    def __init__(self, major: int, minor: int, patch: int) -> None:
        self.major = major
        self.minor = minor
        self.patch = patch
        self.text = f"{major}.{minor}.{patch}"

    def at_least(self, since: tuple[int, int]) -> bool:
        """Whether this version has the features introduced in ``since`` (major, minor)."""
        return (self.major, self.minor) >= since

    @property
    def is_redis8(self) -> bool:
        """An 8.x version (the stream features of :mod:`.commands.streams_r8` apply)."""
        return self.major >= 8

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RedisVersion) and self.text == other.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return f"RedisVersion({self.text!r})"


def parse_redis_version(text: str) -> RedisVersion:
    """``"7.0"`` / ``"7.0.15"`` (the default) or ``"8.N"`` / ``"8.N.P"`` with N in 0..10.

    Raises ValueError with one line saying what is accepted: the engine implements Redis 7.0
    exactly and the stream additions of 8.x, nothing in between (7.2 and 7.4 changed replies
    the engine does not reproduce).
    """
    parts = text.strip().split(".")
    ok = 2 <= len(parts) <= 3 and all(p.isdigit() and len(p) <= 4 for p in parts)
    if ok:
        nums = [int(p) for p in parts]
        major, minor = nums[0], nums[1]
        patch = nums[2] if len(nums) == 3 else 0
        if major == 7 and minor == 0 and (len(nums) == 2 or patch == 15):
            return RedisVersion(7, 0, 15)
        if major == 8 and minor <= _LATEST_MINOR:
            return RedisVersion(8, minor, patch)
    raise ValueError(
        f"redis version {text!r} is not one the engine speaks: use 7.0 (the default, "
        f"7.0.15) or 8.0 .. 8.{_LATEST_MINOR}"
    )
