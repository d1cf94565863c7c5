"""The streamworker exception tree.

Everything streamworker raises derives from :class:`StreamworkerError`. Foreign errors (redis-py,
SQLAlchemy, pydantic) are converted where they are caught, with the original kept as ``__cause__``.

:class:`Retry` and :class:`DeadLetter` are *control flow*: a handler raises them to steer what happens
to its message. They are logged at info level, never as errors.
"""

from __future__ import annotations


class StreamworkerError(Exception):
    """Root of every error streamworker raises."""


class ConfigError(StreamworkerError):
    """Settings, handler options or a command line that cannot work; raised at start-up."""


class TargetError(ConfigError):
    """``streamworker run TARGET``: the module or attribute cannot be loaded, or is not an App."""


class ConnectionLost(StreamworkerError):
    """Redis (or the database) could not be reached or dropped the connection."""


class PublishError(StreamworkerError):
    """A publish did not do what was asked: Redis refused the entry (e.g. an explicit id below the
    stream's last entry), or, as :class:`ReplicaWaitTimeout`, it was added but not replicated."""


class ReplicaWaitTimeout(PublishError):
    """A write was applied by the primary, but fewer replicas than asked (``wait_replicas``)
    acknowledged it within ``wait_timeout_ms``: a failover now may lose it.

    Raised by publishes with ``wait_replicas`` (and ``wait_aof_local``), by the outbox relay before
    it deletes rows, by DLQ replay, the Spark sink's commit and the archive's trim before they
    act on a write. Nothing is undone on the primary.

    Attributes:
        requested: replicas asked for.
        acknowledged: replicas that acknowledged within the timeout (with ``WAITAOF``: that
            fsynced it to their AOF).
        retry_safe: True when doing the same again adds nothing twice (a keyed publish, an outbox
            row, a replay or commit guarded by its own marker), so retrying until the replicas
            catch up is the remedy.
    """

    def __init__(
        self, message: str, *, requested: int, acknowledged: int, retry_safe: bool
    ) -> None:
        super().__init__(message)
        self.requested = requested
        self.acknowledged = acknowledged
        self.retry_safe = retry_safe

    def __reduce__(self) -> tuple[object, ...]:
        # Keyword-only arguments: pickling (multiprocessing, Spark executors) must pass them.
        return (
            _rebuild_replica_wait_timeout,
            (str(self), self.requested, self.acknowledged, self.retry_safe),
        )


def _rebuild_replica_wait_timeout(
    message: str, requested: int, acknowledged: int, retry_safe: bool
) -> ReplicaWaitTimeout:
    return ReplicaWaitTimeout(
        message, requested=requested, acknowledged=acknowledged, retry_safe=retry_safe
    )


class PermanentFailure(StreamworkerError):
    """A message that can never succeed: it is dead-lettered at once, without retries.

    Raised by streamworker itself for a body that fails validation or fields that are not UTF-8;
    handlers raise :class:`DeadLetter` instead.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class HandlerControl(StreamworkerError):
    """Base of the control-flow signals a handler may raise."""


class Retry(HandlerControl):
    """Raised by a handler: leave the message pending and retry it after ``delay_ms``.

    The message is not acked. The reclaimer redelivers it once the delay has passed; the delivery
    counter still counts, so ``max_deliveries`` bounds how often this can happen.
    """

    def __init__(self, delay_ms: int | None = None, reason: str = "") -> None:
        super().__init__(reason or "retry requested by handler")
        if delay_ms is not None and delay_ms < 0:
            raise ValueError("delay_ms must be >= 0")
        self.delay_ms = delay_ms
        self.reason = reason


class RateLimited(HandlerControl):
    """Raised by a handler: the service it calls is rate-limiting us (it answered HTTP 429, say);
    pause this handler for ``retry_after_ms`` in every worker of the group, and retry the message
    after the pause.

    Unlike :class:`Retry`, the delivery does not count toward ``max_deliveries`` (its counter is
    handed back, as a graceful stop does) and the message is never dead-lettered for it. The
    messages of the batch that had not started wait for the pause too, uncounted. A crash between
    the raise and the hand-back leaves that one delivery counted.
    """

    def __init__(self, retry_after_ms: int = 1_000, reason: str = "") -> None:
        super().__init__(reason or f"rate limited: retry after {retry_after_ms} ms")
        if isinstance(retry_after_ms, bool) or not isinstance(retry_after_ms, int):
            raise TypeError(f"retry_after_ms must be an integer, not {retry_after_ms!r}")
        if retry_after_ms < 0:
            raise ValueError("retry_after_ms must be >= 0")
        self.retry_after_ms = retry_after_ms
        self.reason = reason


class DeadLetter(HandlerControl):
    """Raised by a handler: this message can never succeed; move it to the dead-letter stream now."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class DatabaseUnavailable(ConnectionLost):
    """The database of ``idempotency="sql"`` could not be reached, dropped the connection, or could
    not take the batch's transaction (lock timeout, deadlock, serialization failure).

    Raised by the SQL strategy before anything of the batch was acked. The consume loop keeps the
    batch in hand and retries it after a capped backoff, without re-reading it from Redis (which
    would count a delivery per attempt and dead-letter messages because of an outage).
    """


class SchemaError(DatabaseUnavailable):
    """A statement met a schema that does not fit the code: a missing table or column (SQLite
    "no such table", "no such column", "has no column named"; PostgreSQL SQLSTATE class 42,
    e.g. 42P01 undefined_table, 42703 undefined_column).

    A deployment's mistake (a migration not run, code ahead of its schema), not the message's:
    the consume loop pauses that handler with a capped backoff and keeps the batch in hand,
    ``/readyz`` answers 503 naming the error, and nothing counts toward ``max_deliveries``. The
    handler resumes by itself once the statement succeeds. A subclass of
    :class:`DatabaseUnavailable` so that every path that gives an outage back to the loop
    (nothing acked, the transaction rolled back) gives this back the same way.
    """


class ConsumerNameTaken(ConfigError):
    """Another live process owns this worker's consumer name (in one of its streams and groups).

    Two processes with one name would take each other's pending entries for their own backlog and
    run them twice; the second one refuses to start instead (the CLI exits 2). Give each process
    its own name (``--consumer``, ``STREAMWORKER_CONSUMER``, ``POD_NAME``).
    """


class DatabaseTimeout(DatabaseUnavailable):
    """A batch's database work passed its deadline (``db_deadline_s``): its connection was
    aborted and thrown away; the batch is retried on a fresh one like any DatabaseUnavailable."""
