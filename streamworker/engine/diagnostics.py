"""The slow log and the latency monitor (SLOWLOG, LATENCY): pure data, fed by the engine.

The engine times every call (:meth:`~.core.Engine.account`) and hands the ones at least
:attr:`~.core.Engine.monitor_ns` long to :meth:`Diagnostics.record`, which applies
``slowlog-log-slower-than`` / ``slowlog-max-len`` and ``latency-monitor-threshold`` as Redis
7.0 does (slowlog.c, latency.c). Not thread-safe alone: the engine lock guards it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = [
    "LATENCY_SAMPLES",
    "SLOWLOG_MAX_ARGC",
    "SLOWLOG_MAX_ARG_BYTES",
    "Diagnostics",
    "LatencyEvent",
    "SlowlogEntry",
    "slowlog_args",
]

SLOWLOG_MAX_ARGC = 32
"""Arguments kept per slow log entry; the last slot then says how many more there were."""
SLOWLOG_MAX_ARG_BYTES = 128
"""Bytes kept per argument; the rest is replaced by a ``... (N more bytes)`` note."""
LATENCY_SAMPLES = 160
"""Samples kept per latency event (one per second at most)."""

_NEVER = 1 << 62

# Arguments Redis replaces by "(redacted)" in the slow log (secrets): command -> first index.
_REDACT_FROM = {"auth": 1, "acl|setuser": 2}
# CONFIG SET parameters whose values the slow log hides (Redis's SENSITIVE_CONFIG).
_SENSITIVE_CONFIGS = frozenset({b"requirepass", b"masterauth", b"masteruser"})


def _migrate_secrets(argv: Sequence[bytes]) -> set[int]:
    # MIGRATE's AUTH password and AUTH2 user and password, redacted as its option parser
    # meets them (it stops at an option it refuses, and at KEYS).
    out: set[int] = set()
    argc = len(argv)
    j = 6
    while j < argc:
        word = argv[j].lower()
        more = argc - 1 - j
        if word == b"auth":
            if not more:
                break
            j += 1
            out.add(j)
        elif word == b"auth2":
            if more < 2:
                break
            out.update((j + 1, j + 2))
            j += 2
        elif word not in (b"copy", b"replace"):
            break  # KEYS (the rest are keys) or an option MIGRATE refuses
        j += 1
    return out


def slowlog_args(name: str, argv: Sequence[bytes]) -> list[bytes]:
    """``argv`` as a slow log entry keeps it: at most 32 words (the 32nd becomes
    ``... (N more arguments)``), each cut at 128 bytes (plus ``... (N more bytes)``), and
    secrets (AUTH, HELLO ... AUTH user pass, MIGRATE ... AUTH/AUTH2, CONFIG SET
    requirepass/masterauth/masteruser, ACL SETUSER's user and rules) replaced by
    ``(redacted)``."""
    argc = len(argv)
    kept = min(argc, SLOWLOG_MAX_ARGC)
    redact_from = _REDACT_FROM.get(name, argc)
    secret_values: set[int] = set()
    if name == "migrate":
        secret_values = _migrate_secrets(argv)
    elif name == "config|set" and argc >= 4 and argc % 2 == 0:
        # Redis redacts the values of its sensitive parameters (passwords, the replication
        # user), the call refused or not.
        secret_values = {i + 1 for i in range(2, argc, 2) if argv[i].lower() in _SENSITIVE_CONFIGS}
    hello_auth = -1
    if name == "hello":
        for i in range(2, argc - 2):
            if argv[i].lower() == b"auth":
                hello_auth = i
                break
    out: list[bytes] = []
    for i in range(kept):
        if i == SLOWLOG_MAX_ARGC - 1 and argc > SLOWLOG_MAX_ARGC:
            out.append(b"... (%d more arguments)" % (argc - SLOWLOG_MAX_ARGC + 1))
            break
        if (
            i >= redact_from
            or (hello_auth >= 0 and hello_auth < i <= hello_auth + 2)
            or i in secret_values
        ):
            out.append(b"(redacted)")
            continue
        arg = argv[i]
        if len(arg) > SLOWLOG_MAX_ARG_BYTES:
            extra = len(arg) - SLOWLOG_MAX_ARG_BYTES
            arg = arg[:SLOWLOG_MAX_ARG_BYTES] + b"... (%d more bytes)" % extra
        out.append(bytes(arg))
    return out


@dataclass
class SlowlogEntry:
    """One slow log entry: SLOWLOG GET's ``[id, unix time, microseconds, args, addr, name]``."""

    id: int
    time_s: int
    duration_us: int
    args: list[bytes]
    addr: str
    name: bytes


@dataclass
class LatencyEvent:
    """One latency event's history: ``(unix second, ms)`` samples, one per second at most
    (a second sample within the same second keeps the larger), 160 at most, and the
    all-time maximum."""

    samples: deque[tuple[int, int]] = field(default_factory=lambda: deque(maxlen=LATENCY_SAMPLES))
    max_ms: int = 0

    def add(self, now_s: int, latency_ms: int) -> None:
        """Record ``latency_ms`` at ``now_s``."""
        self.max_ms = max(self.max_ms, latency_ms)
        if self.samples and self.samples[-1][0] == now_s:
            if latency_ms > self.samples[-1][1]:
                self.samples[-1] = (now_s, latency_ms)
            return
        self.samples.append((now_s, latency_ms))


class Diagnostics:
    """The slow log and latency events of one engine."""

    def __init__(self) -> None:
        self.slowlog: deque[SlowlogEntry] = deque()
        self.slowlog_next_id = 0
        self.slowlog_ns = 10_000_000
        self.slowlog_max_len = 128
        self.latency_ns = _NEVER
        self.events: dict[str, LatencyEvent] = {}

    def configure(self, slower_than_us: int, max_len: int, latency_threshold_ms: int) -> int:
        """Apply the three parameters; returns the shortest call duration (ns) worth
        recording (the engine's ``monitor_ns``)."""
        self.slowlog_max_len = max_len
        self.slowlog_ns = slower_than_us * 1000 if slower_than_us >= 0 and max_len else _NEVER
        self.latency_ns = latency_threshold_ms * 1_000_000 if latency_threshold_ms > 0 else _NEVER
        self.trim()
        return min(self.slowlog_ns, self.latency_ns)

    def trim(self) -> None:
        """Drop the oldest entries past ``slowlog-max-len``."""
        while len(self.slowlog) > self.slowlog_max_len:
            self.slowlog.pop()

    def record_call(
        self,
        *,
        name: str,
        fast: bool,
        skip_slowlog: bool,
        argv: Sequence[bytes],
        elapsed_ns: int,
        now_ms: int,
        addr: str,
        client_name: bytes,
    ) -> None:
        """One call that took ``elapsed_ns``: into the slow log and the ``command`` /
        ``fast-command`` latency event when over their thresholds."""
        if elapsed_ns >= self.latency_ns:
            self.add_latency("fast-command" if fast else "command", now_ms, elapsed_ns)
        if elapsed_ns >= self.slowlog_ns and not skip_slowlog:
            self.slowlog.appendleft(
                SlowlogEntry(
                    self.slowlog_next_id,
                    now_ms // 1000,
                    elapsed_ns // 1000,
                    slowlog_args(name, argv),
                    addr,
                    client_name,
                )
            )
            self.slowlog_next_id += 1
            self.trim()

    def add_latency(self, event: str, now_ms: int, elapsed_ns: int) -> None:
        """A sample of ``event`` if it reaches ``latency-monitor-threshold``."""
        if elapsed_ns < self.latency_ns:
            return
        entry = self.events.get(event)
        if entry is None:
            entry = self.events[event] = LatencyEvent()
        entry.add(now_ms // 1000, elapsed_ns // 1_000_000)

    def reset_latency(self, names: Sequence[str]) -> int:
        """Forget the named events (every event when ``names`` is empty); returns how many
        existed."""
        if not names:
            n = len(self.events)
            self.events.clear()
            return n
        done = 0
        for name in names:
            if self.events.pop(name, None) is not None:
                done += 1
        return done
