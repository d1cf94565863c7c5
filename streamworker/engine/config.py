"""Engine configuration parameters (CONFIG GET/SET).

Values are kept as Redis renders them in CONFIG GET. Typed attributes used on hot paths
(``stream_node_max_entries``, ``stream_node_max_bytes``) are kept in sync by :meth:`set`.
"""

from __future__ import annotations

from collections.abc import Callable

from streamworker.engine import msgs
from streamworker.engine.errors import CommandError

__all__ = ["EngineConfig"]

_Validator = Callable[[str], str]


def _int_range(lo: int, hi: int) -> _Validator:
    def check(value: str) -> str:
        try:
            n = int(value, 10)
        except ValueError:
            raise ValueError("argument couldn't be parsed into an integer") from None
        if value.strip() != value or (value.startswith("+")):
            raise ValueError("argument couldn't be parsed into an integer")
        if n < lo or n > hi:
            raise ValueError(f"argument must be between {lo} and {hi} inclusive")
        return str(n)

    return check


_UNITS = {"k": 1000, "kb": 1024, "m": 1000**2, "mb": 1024**2, "g": 1000**3, "gb": 1024**3}


def _memory(lo: int, hi: int) -> _Validator:
    def check(value: str) -> str:
        text = value.lower()
        mul = 1
        for suffix in ("kb", "mb", "gb", "k", "m", "g"):
            if text.endswith(suffix):
                mul = _UNITS[suffix]
                text = text[: -len(suffix)]
                break
        if not text or not (text.isdigit() or (text[0] == "-" and text[1:].isdigit())):
            raise ValueError("argument must be a memory value")
        n = int(text) * mul
        if n < lo or n > hi:
            raise ValueError(f"argument must be between {lo} and {hi} inclusive")
        return str(n)

    return check


def _bool(value: str) -> str:
    low = value.lower()
    if low in ("yes", "no"):
        return low
    raise ValueError("argument must be 'yes' or 'no'")


def _enum(*choices: str) -> _Validator:
    def check(value: str) -> str:
        low = value.lower()
        if low in choices:
            return low
        raise ValueError("argument(s) must be one of the following: " + ", ".join(choices))

    return check


def _any(value: str) -> str:
    return value


_LLONG_MAX = 2**63 - 1

_OBUF_CLASSES = {"normal": "normal", "slave": "slave", "replica": "slave", "pubsub": "pubsub"}


def parse_client_output_buffer_limit(value: str) -> dict[str, tuple[int, int, int]]:
    """``client-output-buffer-limit`` text -> ``{class: (hard bytes, soft bytes, soft
    seconds)}`` (classes ``normal``, ``slave``, ``pubsub``); ValueError when malformed."""
    words = value.split()
    if not words or len(words) % 4:
        raise ValueError("Wrong number of arguments in buffer limit configuration.")
    out: dict[str, tuple[int, int, int]] = {}
    mem = _memory(0, _LLONG_MAX)
    for i in range(0, len(words), 4):
        cls = _OBUF_CLASSES.get(words[i].lower())
        if cls is None:
            raise ValueError("Invalid client class specified in buffer limit configuration.")
        try:
            hard = int(mem(words[i + 1]))
            soft = int(mem(words[i + 2]))
            seconds = int(words[i + 3], 10)
        except ValueError:
            raise ValueError(
                "Error in hard, soft or soft_seconds setting in buffer limit configuration."
            ) from None
        if seconds < 0:
            raise ValueError(
                "Error in hard, soft or soft_seconds setting in buffer limit configuration."
            )
        out[cls] = (hard, soft, seconds)
    return out


def _client_output_buffer_limit(value: str) -> str:
    limits = parse_client_output_buffer_limit(value)
    full = parse_client_output_buffer_limit(_PARAMS["client-output-buffer-limit"][0])
    full.update(limits)
    return " ".join(f"{cls} {h} {s} {sec}" for cls, (h, s, sec) in full.items())


# name -> (default, validator or None for immutable)
_PARAMS: dict[str, tuple[str, _Validator | None]] = {
    "stream-node-max-entries": ("100", _int_range(0, _LLONG_MAX)),
    "stream-node-max-bytes": ("4096", _memory(0, _LLONG_MAX)),
    "maxmemory": ("0", _memory(0, _LLONG_MAX)),
    "maxmemory-policy": (
        "noeviction",
        _enum(
            "volatile-lru",
            "volatile-lfu",
            "volatile-random",
            "volatile-ttl",
            "allkeys-lru",
            "allkeys-lfu",
            "allkeys-random",
            "noeviction",
        ),
    ),
    # Persistence is chosen at start (engine serve --dir, engine:///path): see _FIXED.
    "appendonly": ("no", _bool),
    "appendfsync": ("everysec", _enum("always", "everysec", "no")),
    "auto-aof-rewrite-percentage": ("100", _int_range(0, 2**31 - 1)),
    "auto-aof-rewrite-min-size": ("67108864", _memory(0, _LLONG_MAX)),
    "aof-load-truncated": ("yes", _bool),
    "aof-timestamp-enabled": ("no", None),
    # Unlike Redis (normal 0 0 0), normal clients are bounded by default: a client that
    # never reads its replies is disconnected instead of exhausting memory.
    "client-output-buffer-limit": (
        "normal 268435456 67108864 60 slave 268435456 67108864 60 pubsub 33554432 8388608 60",
        _client_output_buffer_limit,
    ),
    # No snapshots: the engine is in-memory (persistence is AOF, part 2).
    "save": ("", _any),
    "databases": ("16", None),
    "timeout": ("0", _int_range(0, 2**31 - 1)),
    "hz": ("10", _int_range(0, 2**31 - 1)),
    "maxclients": ("10000", _int_range(1, 2**32 - 1)),
    "notify-keyspace-events": ("", _any),
    "lua-time-limit": ("5000", _int_range(0, _LLONG_MAX)),
    "busy-reply-threshold": ("5000", _int_range(0, _LLONG_MAX)),
    "proto-max-bulk-len": ("536870912", _memory(1024 * 1024, _LLONG_MAX)),
    "client-query-buffer-limit": ("1073741824", _memory(1024 * 1024, _LLONG_MAX)),
    "hash-max-listpack-entries": ("128", _int_range(0, _LLONG_MAX)),
    "hash-max-listpack-value": ("64", _memory(0, _LLONG_MAX)),
    "zset-max-listpack-entries": ("128", _int_range(0, _LLONG_MAX)),
    "zset-max-listpack-value": ("64", _memory(0, _LLONG_MAX)),
    "set-max-intset-entries": ("512", _int_range(0, _LLONG_MAX)),
    "list-max-listpack-size": ("-2", _int_range(-(2**31), 2**31 - 1)),
    "slowlog-log-slower-than": ("10000", _int_range(-1, _LLONG_MAX)),
    "slowlog-max-len": ("128", _int_range(0, _LLONG_MAX)),
    "loglevel": ("notice", _enum("debug", "verbose", "notice", "warning")),
    "port": ("6379", None),
    "bind": ("* -::*", None),
    "dir": ("/", None),
    "dbfilename": ("dump.rdb", _any),
    "appendfilename": ("appendonly.aof", None),
    "cluster-enabled": ("no", None),
    "daemonize": ("no", None),
    "protected-mode": ("yes", _bool),
    "requirepass": ("", _any),
    "maxmemory-samples": ("5", _int_range(1, 2**31 - 1)),
    "latency-tracking": ("yes", _bool),
    "lazyfree-lazy-user-del": ("no", _bool),
    "lazyfree-lazy-user-flush": ("no", _bool),
}


# Parameters that parse like Redis's but cannot change while the engine runs.
_FIXED = {
    "appendonly": "persistence is chosen when the engine starts "
    "(streamworker engine serve --dir, engine:///path)",
}


class EngineConfig:
    """CONFIG parameters of one engine. Not thread-safe alone (the engine lock guards it)."""

    __slots__ = ("stream_node_max_bytes", "stream_node_max_entries", "values", "version")

    def __init__(self, databases: int = 16) -> None:
        self.values: dict[str, str] = {name: default for name, (default, _) in _PARAMS.items()}
        self.values["databases"] = str(databases)
        self.stream_node_max_entries = 100
        self.stream_node_max_bytes = 4096
        # Bumped by every set(): transports cache parsed values and re-read them on change.
        self.version = 0

    def names(self) -> list[str]:
        """All parameter names, in table order."""
        return list(self.values)

    def get(self, name: str) -> str | None:
        """The value of ``name`` (lowercase), or None if unknown."""
        return self.values.get(name)

    def is_known(self, name: str) -> bool:
        """Whether ``name`` (lowercase) is a parameter."""
        return name in self.values

    def validate(self, name: str, value: str) -> str:
        """The normalized value for ``name``; CommandError with Redis's CONFIG SET text."""
        entry = _PARAMS.get(name)
        if entry is None:
            raise CommandError(msgs.config_unknown_param(name))
        validator = entry[1]
        if validator is None:
            raise CommandError(msgs.config_set_failed(name, "can't set immutable config"))
        try:
            checked = validator(value)
        except ValueError as exc:
            raise CommandError(msgs.config_set_failed(name, str(exc))) from None
        if name in _FIXED and checked != self.values[name]:
            raise CommandError(msgs.config_set_failed(name, _FIXED[name]))
        return checked

    def set(self, name: str, value: str) -> None:
        """Store an already validated value."""
        self.values[name] = value
        self.version += 1
        if name == "stream-node-max-entries":
            self.stream_node_max_entries = int(value)
        elif name == "stream-node-max-bytes":
            self.stream_node_max_bytes = int(value)
