"""Engine configuration parameters (CONFIG GET/SET).

Values are kept as Redis renders them in CONFIG GET. Typed attributes used on hot paths
(``stream_node_max_entries``, ``stream_node_max_bytes``) are kept in sync by :meth:`set`.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from streamworker.engine import msgs
from streamworker.engine.errors import CommandError
from streamworker.engine.notify import keyspace_events_from_string, keyspace_events_to_string
from streamworker.engine.numbers import parse_int

__all__ = [
    "EngineConfig",
    "memtoull",
    "parse_client_output_buffer_limit",
    "parse_percentiles",
    "parse_save_points",
]

_Validator = Callable[[str], str]


_ULLONG = 2**64


def _int_range(lo: int, hi: int, *, unsigned: bool = False) -> _Validator:
    """An integer parameter as Redis 7.0 parses it: ``string2ll`` (ASCII digits only, no
    ``+``, no leading zeros, no ``-0``, int64), then the bounds; ``unsigned`` parameters
    compare the int64 as C's unsigned cast would (``-1`` is out of range, not negative)."""

    def check(value: str) -> str:
        n = parse_int(value.encode("utf-8", "surrogateescape"))
        if n is None:
            raise ValueError("argument couldn't be parsed into an integer")
        _bounds(n, lo, hi, unsigned)
        return str(n)

    return check


def _bounds(n: int, lo: int, hi: int, unsigned: bool) -> None:
    if unsigned:
        n %= _ULLONG
    if n < lo or n > hi:
        raise ValueError(f"argument must be between {lo} and {hi} inclusive")


_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1024,
    "m": 1000**2,
    "mb": 1024**2,
    "g": 1000**3,
    "gb": 1024**3,
}


def memtoull(value: str) -> int | None:
    """Redis 7.0's ``memtoull``: ASCII digits and an optional unit (b, k, kb, m, mb, g, gb,
    any case), no sign; an empty number is 0, one past 2**64-1 saturates (strtoull), and the
    unit multiplies modulo 2**64. None when malformed ("argument must be a memory value")."""
    if value.startswith("-"):
        return None
    i = 0
    while i < len(value) and "0" <= value[i] <= "9":
        i += 1
    mul = _UNITS.get(value[i:].lower())
    if mul is None or i >= 128:
        return None
    digits = value[:i]
    number = min(int(digits), _ULLONG - 1) if digits else 0
    return (number * mul) % _ULLONG


def _memory(lo: int, hi: int, *, unsigned: bool = True) -> _Validator:
    """A memory parameter: :func:`memtoull`, then the bounds (a value of 2**63 or more reads
    as negative for the signed ones, as C's cast does)."""

    def check(value: str) -> str:
        n = memtoull(value)
        if n is None:
            raise ValueError("argument must be a memory value")
        if not unsigned and n > _LLONG_MAX:
            n -= _ULLONG
        _bounds(n, lo, hi, unsigned)
        return str(n % _ULLONG if unsigned else n)

    return check


def _hz(value: str) -> str:
    # Redis clamps hz into 1..500 once accepted (updateHZ), and CONFIG GET shows the clamp.
    return str(min(max(int(_int_range(0, 2**31 - 1)(value)), 1), 500))


def _strtoll_to_int(text: str) -> int | None:
    """``(int) strtoll(text, &end, 10)`` with ``*end == '\\0'`` required: leading blanks and a
    sign allowed, int64 saturation, then C's truncation to 32 bits. None when text is left."""
    body = text.lstrip(" \t\n\v\f\r")
    sign = -1 if body[:1] == "-" else 1
    if body[:1] in ("-", "+"):
        body = body[1:]
    if not body:
        # strtoll consumed nothing: end points at the start, which is NUL only for "".
        return 0 if not text else None
    if not all("0" <= c <= "9" for c in body):
        return None
    n = max(min(sign * int(body.lstrip("0") or "0"), _LLONG_MAX), -_LLONG_MAX - 1)
    n &= 0xFFFFFFFF
    return n - 2**32 if n >= 2**31 else n


def _dir(value: str) -> str:
    # Redis chdir()s and reports strerror(errno); the engine only records the directory
    # (SAVE writes there), since changing the process's directory would affect its host.
    try:
        if os.path.isdir(value):
            return os.path.abspath(value)
        exists = os.path.exists(value)
    except ValueError:  # an embedded NUL byte
        exists = False
    raise ValueError("Not a directory" if exists else "No such file or directory")


def _dbfilename(value: str) -> str:
    if "/" in value or "\\" in value:
        raise ValueError("dbfilename can't be a path, just a filename")
    return value


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


def parse_save_points(value: str) -> list[tuple[int, int]]:
    """The ``save`` parameter as (seconds, changes) pairs: BGSAVE when at least ``changes``
    changes happened and ``seconds`` passed since the last save. Redis 7.0's rules: words
    split on single spaces, pairs of integers, seconds at least 1, changes at least 0;
    ValueError otherwise. The empty string: no automatic saves."""
    if not value:
        return []
    words = value.split(" ")
    numbers = [_strtoll_to_int(w) if w else 0 for w in words]
    if len(words) % 2:
        raise ValueError("Invalid save parameters")
    points: list[tuple[int, int]] = []
    for i in range(0, len(words), 2):
        seconds, changes = numbers[i], numbers[i + 1]
        if seconds is None or changes is None or seconds < 1 or changes < 0:
            raise ValueError("Invalid save parameters")
        points.append((seconds, changes))
    return points


def _save(value: str) -> str:
    parse_save_points(value)
    return value


class _EventClasses(str):
    """notify-keyspace-events as CONFIG GET shows it, carrying the class bits it was parsed
    from: the text can hide a class ('A' hides 'n', as in Redis 7.0), the bits do not."""

    flags: int


def _keyspace_events(value: str) -> str:
    # Imported here: pubsub imports keyspace, which config must not pull in at import time.

    flags = keyspace_events_from_string(value)
    if flags is None:
        raise ValueError(msgs.NOTIFY_KEYSPACE_EVENTS_INVALID)
    shown = _EventClasses(keyspace_events_to_string(flags))
    shown.flags = flags
    return shown


def parse_percentiles(value: str) -> list[float]:
    """``latency-tracking-info-percentiles``: blank-separated numbers in 0..100."""
    out: list[float] = []
    for word in value.split():
        try:
            p = float(word)
        except ValueError:
            raise ValueError("Invalid latency-tracking-info-percentiles parameters") from None
        if not 0.0 <= p <= 100.0:
            raise ValueError(
                "latency-tracking-info-percentiles parameters should sit between [0.0,100.0]"
            )
        out.append(p)
    return out


def _percentiles(value: str) -> str:
    return " ".join(f"{p:g}" for p in parse_percentiles(value))


_LLONG_MAX = 2**63 - 1

_OBUF_CLASSES = {"normal": "normal", "slave": "slave", "replica": "slave", "pubsub": "pubsub"}


def parse_client_output_buffer_limit(value: str) -> dict[str, tuple[int, int, int]]:
    """``client-output-buffer-limit`` text -> ``{class: (hard bytes, soft bytes, soft
    seconds)}`` (classes ``normal``, ``slave``, ``pubsub``); ValueError when malformed."""
    words = value.split()
    if not words or len(words) % 4:
        raise ValueError("Wrong number of arguments in buffer limit configuration.")
    out: dict[str, tuple[int, int, int]] = {}
    for i in range(0, len(words), 4):
        cls = _OBUF_CLASSES.get(words[i].lower())
        if cls is None:
            raise ValueError("Invalid client class specified in buffer limit configuration.")
        # As Redis 7.0: memtoull for the sizes (2**64-1 and more saturate, unsigned), and
        # strtoll truncated to a C int for the seconds, refused when that is negative.
        hard = memtoull(words[i + 1])
        soft = memtoull(words[i + 2])
        seconds = _strtoll_to_int(words[i + 3])
        if hard is None or soft is None or seconds is None or seconds < 0:
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
    "maxmemory": ("0", _memory(0, _ULLONG - 1)),
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
    "auto-aof-rewrite-min-size": ("67108864", _memory(0, _LLONG_MAX, unsigned=False)),
    "aof-load-truncated": ("yes", _bool),
    "aof-timestamp-enabled": ("no", None),
    # Unlike Redis (normal 0 0 0), normal clients are bounded by default: a client that
    # never reads its replies is disconnected instead of exhausting memory. Subscribers as
    # Redis (32 MB hard, 8 MB for 60 s soft).
    "client-output-buffer-limit": (
        "normal 268435456 67108864 60 slave 268435456 67108864 60 pubsub 33554432 8388608 60",
        _client_output_buffer_limit,
    ),
    # No automatic snapshots by default (Redis's built-in default is "3600 1 300 100 60
    # 10000"): SAVE/BGSAVE write dir/dbfilename on request; save points BGSAVE from the cron.
    "save": ("", _save),
    # With save points set, a failed BGSAVE refuses writes (and PING) until a save succeeds.
    "stop-writes-on-bgsave-error": ("yes", _bool),
    "rdbcompression": ("yes", _bool),
    "rdbchecksum": ("yes", None),
    "databases": ("16", None),
    "timeout": ("0", _int_range(0, 2**31 - 1)),
    "hz": ("10", _hz),
    "maxclients": ("10000", _int_range(1, 2**32 - 1, unsigned=True)),
    "notify-keyspace-events": ("", _keyspace_events),
    "lua-time-limit": ("5000", _int_range(0, _LLONG_MAX)),
    "busy-reply-threshold": ("5000", _int_range(0, _LLONG_MAX)),
    "proto-max-bulk-len": ("536870912", _memory(1024 * 1024, _LLONG_MAX, unsigned=False)),
    "client-query-buffer-limit": ("1073741824", _memory(1024 * 1024, _LLONG_MAX)),
    # redis-server's built-in defaults (started without a config file: hash entries 512).
    "hash-max-listpack-entries": ("512", _int_range(0, _LLONG_MAX, unsigned=True)),
    "hash-max-listpack-value": ("64", _memory(0, _LLONG_MAX)),
    "zset-max-listpack-entries": ("128", _int_range(0, _LLONG_MAX, unsigned=True)),
    "zset-max-listpack-value": ("64", _memory(0, _LLONG_MAX)),
    "hll-sparse-max-bytes": ("3000", _memory(0, _LLONG_MAX)),
    "set-max-intset-entries": ("512", _int_range(0, _LLONG_MAX, unsigned=True)),
    "list-max-listpack-size": ("-2", _int_range(-(2**31), 2**31 - 1)),
    # Accepted for Redis's test suites and config files; the engine's lists are not compressed.
    "list-compress-depth": ("0", _int_range(0, 2**31 - 1)),
    # Their Redis 6 names, aliases of the same values (_ALIASES).
    "hash-max-ziplist-entries": ("512", _int_range(0, _LLONG_MAX, unsigned=True)),
    "hash-max-ziplist-value": ("64", _memory(0, _LLONG_MAX)),
    "zset-max-ziplist-entries": ("128", _int_range(0, _LLONG_MAX, unsigned=True)),
    "zset-max-ziplist-value": ("64", _memory(0, _LLONG_MAX)),
    "list-max-ziplist-size": ("-2", _int_range(-(2**31), 2**31 - 1)),
    "slowlog-log-slower-than": ("10000", _int_range(-1, _LLONG_MAX)),
    "slowlog-max-len": ("128", _int_range(0, _LLONG_MAX, unsigned=True)),
    "loglevel": ("notice", _enum("debug", "verbose", "notice", "warning")),
    "port": ("6379", None),
    "bind": ("* -::*", None),
    "dir": ("/", _dir),
    "dbfilename": ("dump.rdb", _dbfilename),
    "appendfilename": ("appendonly.aof", None),
    "cluster-enabled": ("no", None),
    "daemonize": ("no", None),
    "protected-mode": ("yes", _bool),
    "enable-protected-configs": ("no", None),
    "requirepass": ("", _any),
    "acllog-max-len": ("128", _int_range(0, _LLONG_MAX)),
    "acl-pubsub-default": ("resetchannels", _enum("allchannels", "resetchannels")),
    "maxmemory-samples": ("5", _int_range(1, 2**31 - 1)),
    "maxmemory-eviction-tenacity": ("10", _int_range(0, 100)),
    "lfu-log-factor": ("10", _int_range(0, 2**31 - 1)),
    "lfu-decay-time": ("1", _int_range(0, 2**31 - 1)),
    "latency-monitor-threshold": ("0", _int_range(0, _LLONG_MAX)),
    "latency-tracking-info-percentiles": ("50 99 99.9", _percentiles),
    "latency-tracking": ("yes", _bool),
    "lazyfree-lazy-user-del": ("no", _bool),
    "lazyfree-lazy-user-flush": ("no", _bool),
    # Replication, as a standalone Redis 7.0 exposes it. The engine streams its writes to
    # SYNC/PSYNC clients (engine/replication.py) and pings them every
    # repl-ping-replica-period seconds; as a replica (engine/replica_link.py) it obeys
    # replica-read-only, replica-serve-stale-data, repl-timeout, masterauth/masteruser;
    # the rest is accepted and reported, for Redis's test suites and config files.
    "repl-ping-replica-period": ("10", _int_range(1, 2**31 - 1)),
    "repl-ping-slave-period": ("10", _int_range(1, 2**31 - 1)),
    "repl-timeout": ("60", _int_range(1, 2**31 - 1)),
    "min-replicas-to-write": ("0", _int_range(0, 2**31 - 1)),
    "min-slaves-to-write": ("0", _int_range(0, 2**31 - 1)),
    "min-replicas-max-lag": ("10", _int_range(0, 2**31 - 1)),
    "min-slaves-max-lag": ("10", _int_range(0, 2**31 - 1)),
    "repl-diskless-sync": ("yes", _bool),
    "repl-diskless-sync-delay": ("5", _int_range(0, 2**31 - 1)),
    "repl-diskless-sync-max-replicas": ("0", _int_range(0, 2**31 - 1)),
    "repl-diskless-load": ("disabled", _enum("disabled", "on-empty-db", "swapdb")),
    "repl-backlog-size": ("1048576", _memory(1, _LLONG_MAX, unsigned=False)),
    "repl-backlog-ttl": ("3600", _int_range(0, _LLONG_MAX)),
    "repl-disable-tcp-nodelay": ("no", _bool),
    "replica-read-only": ("yes", _bool),
    "slave-read-only": ("yes", _bool),
    "replica-serve-stale-data": ("yes", _bool),
    "slave-serve-stale-data": ("yes", _bool),
    "replica-priority": ("100", _int_range(0, 2**31 - 1)),
    "slave-priority": ("100", _int_range(0, 2**31 - 1)),
    "replica-lazy-flush": ("no", _bool),
    "slave-lazy-flush": ("no", _bool),
    "replica-announced": ("yes", _bool),
    # A replica neither evicts nor refuses for memory (its master decides) while yes.
    "replica-ignore-maxmemory": ("yes", _bool),
    "slave-ignore-maxmemory": ("yes", _bool),
    # "host port" while the engine is a replica (REPLICAOF sets it; CONFIG SET cannot).
    "replicaof": ("", None),
    "slaveof": ("", None),
    # The credentials a replica gives its master (AUTH [masteruser] masterauth).
    "masterauth": ("", _any),
    "masteruser": ("", _any),
}


_ALIAS_PAIRS = (
    ("lua-time-limit", "busy-reply-threshold"),
    ("hash-max-ziplist-entries", "hash-max-listpack-entries"),
    ("hash-max-ziplist-value", "hash-max-listpack-value"),
    ("zset-max-ziplist-entries", "zset-max-listpack-entries"),
    ("zset-max-ziplist-value", "zset-max-listpack-value"),
    ("list-max-ziplist-size", "list-max-listpack-size"),
    ("repl-ping-slave-period", "repl-ping-replica-period"),
    ("min-slaves-to-write", "min-replicas-to-write"),
    ("min-slaves-max-lag", "min-replicas-max-lag"),
    ("slave-read-only", "replica-read-only"),
    ("slave-serve-stale-data", "replica-serve-stale-data"),
    ("slave-priority", "replica-priority"),
    ("slave-lazy-flush", "replica-lazy-flush"),
    ("slaveof", "replicaof"),
    ("slave-ignore-maxmemory", "replica-ignore-maxmemory"),
)
_ALIASES = {a: b for pair in _ALIAS_PAIRS for a, b in (pair, pair[::-1])}

# Parameters that parse like Redis's but cannot change while the engine runs.
_FIXED = {
    "appendonly": "persistence is chosen when the engine starts "
    "(streamworker engine serve --dir, engine:///path)",
}


# Redis 7.0's PROTECTED_CONFIG parameters (CONFIG SET refused by default): SAVE writes
# dir/dbfilename, so a client must not point them elsewhere (engine serve --dir sets dir).
_PROTECTED = frozenset({"dir", "dbfilename"})


class EngineConfig:
    """CONFIG parameters of one engine. Not thread-safe alone (the engine lock guards it)."""

    __slots__ = (
        "_ints",
        "hash_limits",
        "notify_flags",
        "stream_node_max_bytes",
        "stream_node_max_entries",
        "values",
        "version",
    )

    def __init__(self, databases: int = 16) -> None:
        self.values: dict[str, str] = {name: default for name, (default, _) in _PARAMS.items()}
        self.values["databases"] = str(databases)
        # Redis's dir is its working directory: the engine starts with the process's.
        self.values["dir"] = os.getcwd()
        self.stream_node_max_entries = 100
        self.stream_node_max_bytes = 4096
        # notify-keyspace-events as class bits (notify.NOTIFY_*), 0 = off.
        self.notify_flags = 0
        # Bumped by every set(): transports cache parsed values and re-read them on change.
        self.version = 0
        # get_int's parsed values (cleared by set()).
        self._ints: dict[str, int] = {}
        # (hash-max-listpack-entries, hash-max-listpack-value), read by every hash write.
        self.hash_limits = (
            int(self.values["hash-max-listpack-entries"]),
            int(self.values["hash-max-listpack-value"]),
        )

    def names(self) -> list[str]:
        """All parameter names, in table order."""
        return list(self.values)

    def get(self, name: str) -> str | None:
        """The value of ``name`` (lowercase), or None if unknown."""
        return self.values.get(name)

    def get_int(self, name: str) -> int:
        """The value of integer parameter ``name`` (0 if unknown or empty), parsed once per
        CONFIG SET: commands read their encoding thresholds on every write."""
        try:
            return self._ints[name]
        except KeyError:
            value = self._ints[name] = int(self.values.get(name) or 0)
            return value

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
        if name in _PROTECTED and self.values.get("enable-protected-configs") == "no":
            # Redis 7.0 refuses these unless started with enable-protected-configs.
            raise CommandError(msgs.config_set_failed(name, "can't set protected config"))
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
        self._ints.clear()
        if name in _ALIASES:
            # Redis 7.0 renamed lua-time-limit busy-reply-threshold, *-ziplist-* *-listpack-*;
            # both names are one value.
            self.values[_ALIASES[name]] = value
        if name.startswith("hash-max-"):
            self.hash_limits = (
                int(self.values["hash-max-listpack-entries"]),
                int(self.values["hash-max-listpack-value"]),
            )
        if name == "stream-node-max-entries":
            self.stream_node_max_entries = int(value)
        elif name == "stream-node-max-bytes":
            self.stream_node_max_bytes = int(value)
        elif name == "notify-keyspace-events":
            if isinstance(value, _EventClasses):
                self.notify_flags = value.flags
                self.values[name] = str(value)
            else:
                self.notify_flags = keyspace_events_from_string(value) or 0
