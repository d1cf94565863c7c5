"""Waiting for replicas: what ``wait_replicas`` / ``wait_timeout_ms`` / ``wait_aof_local`` send,
and how the reply is judged (pure, except :func:`has_command`).

Replication is asynchronous: a write the primary acknowledged can vanish with it when a replica
that had not received it is promoted. ``WAIT numreplicas timeout`` blocks the connection that wrote
until ``numreplicas`` replicas acknowledged every write *that connection* sent, or the timeout
passed, and answers how many did. So the WAIT must go on the very connection of the write: the
callers append it to the write's pipeline (one WAIT per pipeline, not one per entry).
``WAITAOF numlocal numreplicas timeout`` (Redis 7.2+) waits for the writes to be fsynced to the
primary's (``numlocal=1``) and the replicas' AOF; it is used only where ``COMMAND INFO WAITAOF``
says the server has it.

A write that leaves nothing to replicate (a duplicate publish: its marker was found) does not
advance the connection's replication offset, so a WAIT after it could report an earlier offset.
The scripts of keyed publishes therefore re-set the marker they found (``KEEPTTL``): replicas
apply the stream in order, so a replica that has that write has the earlier add too.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import redis

from streamworker.errors import ConfigError, ConnectionLost, ReplicaWaitTimeout

DEFAULT_WAIT_TIMEOUT_MS = 1_000
"""How long a write waits for its replicas by default (WAIT's timeout; 0 would block forever, so
it is refused)."""


class WaitObserver(Protocol):
    """Told about every wait: the operation (``publish``, ``publish_many``, ``relay``,
    ``dlq_replay``, ``spark_commit``, ``archive_trim``), the seconds from sending the write to
    the wait's reply, and whether too few replicas acknowledged.
    :meth:`streamworker.observability.metrics.Metrics.observe_replica_wait` is one."""

    def __call__(self, operation: str, seconds: float, timed_out: bool) -> None: ...


def check_replicas(value: object, name: str = "wait_replicas") -> int:
    """``value`` if it is an integer >= 0, else ConfigError."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{name} must be an integer >= 0, not {value!r}")
    return value


def check_timeout(value: object, name: str = "wait_timeout_ms") -> int:
    """``value`` if it is an integer >= 1 (WAIT's 0 means "forever"), else ConfigError."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name} must be an integer >= 1 (0 would wait forever), not {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class ReplicaWait:
    """How long and for whom a write waits before it counts as done.

    Attributes:
        replicas: replicas that must acknowledge the write (0: none, today's behaviour).
        timeout_ms: the most the wait takes; fewer acknowledgements by then raise
            ReplicaWaitTimeout (never a hang: the server answers by then).
        aof_local: also wait for the primary to fsync the write to its AOF (``WAITAOF``,
            Redis 7.2+); the replicas then count only once they fsynced it too.
    """

    replicas: int = 0
    timeout_ms: int = DEFAULT_WAIT_TIMEOUT_MS
    aof_local: bool = False

    def __post_init__(self) -> None:
        check_replicas(self.replicas)
        check_timeout(self.timeout_ms)
        if not isinstance(self.aof_local, bool):
            raise ConfigError(f"wait_aof_local must be True or False, not {self.aof_local!r}")

    @property
    def active(self) -> bool:
        """Whether anything is waited for (else nothing is sent: today's behaviour)."""
        return self.replicas > 0 or self.aof_local

    def command(self) -> tuple[str | int, ...]:
        """The command to append to the write's pipeline."""
        if self.aof_local:
            return ("WAITAOF", 1, self.replicas, self.timeout_ms)
        return ("WAIT", self.replicas, self.timeout_ms)

    def stronger(self, other: ReplicaWait) -> ReplicaWait:
        """The wait that satisfies both (a batch whose entries ask for different waits)."""
        return ReplicaWait(
            max(self.replicas, other.replicas),
            max(self.timeout_ms, other.timeout_ms),
            self.aof_local or other.aof_local,
        )

    def check(
        self,
        reply: Any,
        subject: str,
        *,
        retry_safe: bool,
        retry: str,
        stopwatch: Stopwatch | None = None,
    ) -> None:
        """Raise ReplicaWaitTimeout unless ``reply`` (of :meth:`command`) meets the wait.

        ``subject`` names the write ("publish to 'orders'"), ``retry`` says what doing it again
        does; both go into the message, with the counts. ``stopwatch`` (started before the
        write was sent) reports the wait to its observer.
        """
        if isinstance(reply, Exception):
            raise ConnectionLost(f"{subject}: {self.command()[0]} failed: {reply}")
        if self.aof_local:
            local, acked = (int(v) for v in reply)
        else:
            local, acked = 1, int(reply)
        met = acked >= self.replicas and local >= 1
        if stopwatch is not None:
            stopwatch.done(timed_out=not met)
        if met:
            return
        where = (
            "the primary did not fsync it to its AOF and "
            if not local
            else "written on the primary, but "
        )
        raise ReplicaWaitTimeout(
            f"{subject}: {where}only {acked} of {self.replicas} replica(s) acknowledged it "
            f"within {self.timeout_ms} ms, so it may be lost on a failover; {retry}",
            requested=self.replicas,
            acknowledged=acked,
            retry_safe=retry_safe,
        )


NO_WAIT = ReplicaWait()


def command_exists(reply: Sequence[Any]) -> bool:
    """Whether a ``COMMAND INFO NAME`` reply describes a command (``[None]``: the server has no
    such command). Pure, for the capability checks."""
    return bool(reply) and reply[0] is not None


def has_command(client: redis.Redis, name: str) -> bool:
    """Whether the server behind ``client`` has command ``name``, by ``COMMAND INFO`` (the
    command itself, not a version string: forks and managed services differ). Blocking."""
    # "COMMAND INFO" as one name keeps redis-py's COMMAND reply parser (which fails on [None])
    # away; redis-py splits it into two words on the wire.
    return command_exists(client.execute_command("COMMAND INFO", name))  # type: ignore[no-untyped-call]


def refuse_waitaof() -> ConfigError:
    """The error for ``wait_aof_local`` on a server without WAITAOF."""
    return ConfigError(
        "wait_aof_local needs the WAITAOF command (Redis 7.2+), and this server has none "
        "(COMMAND INFO WAITAOF is empty); use wait_replicas alone, or upgrade the server"
    )


class Stopwatch:
    """Times one wait for a :class:`WaitObserver` (no-op without one)."""

    __slots__ = ("_observer", "_operation", "_start")

    def __init__(self, observer: WaitObserver | None, operation: str) -> None:
        self._observer = observer
        self._operation = operation
        self._start = time.monotonic()

    def done(self, timed_out: bool) -> None:
        if self._observer is not None:
            self._observer(self._operation, time.monotonic() - self._start, timed_out)
