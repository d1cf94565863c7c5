"""What happens to a message after its handler ran: pure rules, unit-tested directly."""

from __future__ import annotations

import enum
import sqlite3
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from streamworker.errors import DeadLetter, PermanentFailure, RateLimited, Retry

if TYPE_CHECKING:
    from streamworker.core.message import Message


class Action(enum.Enum):
    """What the runtime does with a message once its handler has returned or raised."""

    ACK = "ack"  # effects done: XACK
    LEAVE_PENDING = "leave_pending"  # failed: stay in the PEL for a retry, no ack
    DEAD_LETTER = "dead_letter"  # move to the dead-letter stream (XADD + XACK, atomically)


@dataclass(frozen=True, slots=True)
class Outcome:
    """The decision for one message, with the reason for logs and the dead-letter entry."""

    action: Action
    error: str = ""
    retry_delay_ms: int | None = None
    duplicate: bool = False  # ACK without running the handler: already processed
    retry: bool = False  # LEAVE_PENDING because the handler raised Retry (control flow)
    preset: bool = False  # decided before the handler, which did not run (nothing written)
    # LEAVE_PENDING for a rate limit (the handler raised RateLimited, or the handler was paused
    # by one): the delivery is handed back uncounted and the retry waits ``retry_delay_ms``.
    rate_limited: bool = False
    value: Any = field(default=None, compare=False, repr=False)  # what the handler returned
    # The failure's traceback, bounded (see bounded_traceback); set for dead letters only.
    traceback: str = field(default="", compare=False, repr=False)

    @property
    def acked(self) -> bool:
        """True when the message is to be acked (handled now, or a duplicate)."""
        return self.action is Action.ACK

    @property
    def metric(self) -> str:
        """The ``outcome`` label of ``streamworker_messages_total`` for this outcome."""
        if self.action is Action.ACK:
            return "duplicate" if self.duplicate else "acked"
        if self.action is Action.DEAD_LETTER:
            return "dead_lettered"
        return "retried" if self.retry else "failed"


ACKED = Outcome(Action.ACK)
DUPLICATE = Outcome(Action.ACK, duplicate=True)
"""Already processed (the idempotency record exists): acked, the handler not run again."""
NOT_STARTED = Outcome(Action.LEAVE_PENDING, "not started: the worker is shutting down")
"""A message of the batch in hand whose handler had not started when shutdown began: it stays in
this consumer's PEL, and the next start (or another consumer's reclaim) delivers it again."""
CLAIMED_AWAY = Outcome(Action.LEAVE_PENDING, "claimed by another consumer meanwhile")
"""A message another consumer took over before this one processed it: left to that consumer,
neither counted as a failure nor retried here."""
SKIPPED = (NOT_STARTED, CLAIMED_AWAY)


def describe(exc: BaseException) -> str:
    """``"<type>: <message>"`` as stored in logs and dead letters."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


MAX_TRACEBACK_CHARS = 4000
"""A dead letter's ``dlq_traceback`` keeps at most this many characters: the end of the
traceback (the innermost frames and the error), so a deep or looping stack cannot bloat the
dead-letter stream."""


def bounded_traceback(exc: BaseException, limit: int = MAX_TRACEBACK_CHARS) -> str:
    """``exc``'s formatted traceback, cut to its last ``limit`` characters ("…" marks a cut)."""
    text = "".join(traceback.format_exception(exc)).rstrip("\n")
    return text if len(text) <= limit else "…" + text[-(limit - 1) :]


# SQLite names a missing table or column only in the message text (its error code is the generic
# SQLITE_ERROR); PostgreSQL's SQLSTATE class 42 is "syntax error or access rule violation":
# undefined table/column/function, insufficient privilege... all fixed by a deployment, never by
# a redelivery.
_SQLITE_SCHEMA = ("no such table", "no such column", "has no column named")


def schema_error(exc: BaseException) -> BaseException | None:
    """The driver error in ``exc``'s chain (itself, a SQLAlchemy wrapper's ``orig``, its cause or
    context) that says the database's schema does not fit the statement, or None.

    A SQLite ``OperationalError`` naming a missing table or column, or any driver error whose
    ``sqlstate`` is of class 42 (psycopg, asyncpg). Pure: inspects attributes, imports no driver.
    """
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        err = todo.pop()
        if err is None or id(err) in seen:
            continue
        seen.add(id(err))
        sqlstate = getattr(err, "sqlstate", None)
        if isinstance(sqlstate, str) and sqlstate.startswith("42"):
            return err
        if isinstance(err, sqlite3.OperationalError) and any(
            marker in str(err) for marker in _SQLITE_SCHEMA
        ):
            return err
        orig = getattr(err, "orig", None)
        todo.extend(
            [orig if isinstance(orig, BaseException) else None, err.__cause__, err.__context__]
        )
    return None


def decide(exc: BaseException | None, delivery_count: int, max_deliveries: int) -> Outcome:
    """Decide what happens to a message given how its handler ended.

    * no exception -> ack;
    * RateLimited -> leave pending for its ``retry_after_ms``, whatever the count (the
      delivery is handed back uncounted: see :func:`rate_limited`);
    * DeadLetter or PermanentFailure -> dead-letter now, whatever the count;
    * any other failure (Retry included) -> leave pending, unless this delivery was the last one
      allowed (``delivery_count >= max_deliveries``), which dead-letters it: a message is handled
      at most ``max_deliveries`` times.
    """
    if exc is None:
        return ACKED
    if isinstance(exc, RateLimited):
        return rate_limited(exc.retry_after_ms, describe(exc))
    if isinstance(exc, DeadLetter | PermanentFailure) or delivery_count >= max_deliveries:
        # The traceback is formatted only for a dead letter, which keeps it (dlq_traceback).
        return Outcome(Action.DEAD_LETTER, describe(exc), traceback=bounded_traceback(exc))
    if isinstance(exc, Retry):
        return Outcome(Action.LEAVE_PENDING, describe(exc), exc.delay_ms, retry=True)
    return Outcome(Action.LEAVE_PENDING, describe(exc))


def rate_limited(retry_after_ms: int, error: str, *, ran: bool = True) -> Outcome:
    """A message left pending for a rate limit: retried after ``retry_after_ms``, its delivery
    handed back (never counted toward ``max_deliveries``, never dead-lettered for it).
    ``ran=False``: its handler was not started because the handler is paused (``preset``:
    nothing of it was written)."""
    return Outcome(
        Action.LEAVE_PENDING,
        error,
        max(0, retry_after_ms),
        retry=True,
        preset=not ran,
        rate_limited=True,
    )


def over_delivered(delivery_count: int, max_deliveries: int) -> bool:
    """A message delivered more often than allowed is dead-lettered without running the handler,
    unless its effects are recorded as applied (then it is acked as a duplicate: see
    :func:`over_delivered_verdict`).

    This catches messages whose handler crashed the process (so ``decide`` never ran) on every
    delivery: the delivery counter lives in Redis and survives the crashes.
    """
    return delivery_count > max_deliveries


def over_delivered_verdict(delivery_count: int, max_deliveries: int) -> Outcome:
    """The outcome of an over-delivered message whose effects are not recorded as applied.

    The consume loop still hands such a message to the idempotency strategy, whose duplicate
    check comes first ("processed beats over-delivered"): a crash between COMMIT and XACK on the
    last allowed delivery makes the redelivery over-delivered, and it must be acked, not
    dead-lettered (a replay of the dead letter would apply it twice).
    """
    return Outcome(
        Action.DEAD_LETTER,
        f"delivered {delivery_count} times (max_deliveries={max_deliveries})",
        preset=True,
    )


def retry_delay_ms(outcome: Outcome, delivery_count: int, base_ms: int, max_ms: int) -> int:
    """How long a failed message waits before its next delivery.

    ``Retry(delay_ms=…)`` sets it; otherwise it doubles with each delivery: ``base_ms`` after the
    first, ``2 * base_ms`` after the second, … capped at ``max_ms``.
    """
    if outcome.retry_delay_ms is not None:
        return outcome.retry_delay_ms
    exponent = max(0, min(delivery_count - 1, 32))
    return int(min(max_ms, base_ms * (2**exponent)))


@dataclass(frozen=True, slots=True)
class BatchOutcomes:
    """What one call of a batch handler (``batch=True``) came to, one outcome per message passed.

    ``raised``: the call failed as a whole (the handler raised, or returned something that is
    not a result map): every message it was given failed, and nothing it wrote may be kept (the
    SQL strategy rolls the batch's transaction back). Otherwise the messages whose outcome is
    not an ack failed alone, and the handler wrote nothing for them (its contract).
    """

    outcomes: list[Outcome]
    raised: bool = False


class BadBatchResult(TypeError):
    """A batch handler returned something other than None or a map of the messages' ids."""


def batch_outcomes(
    result: Any, messages: Sequence[Message[Any]], max_deliveries: int
) -> list[Outcome]:
    """The outcome of each of ``messages`` from what their batch handler returned.

    * None -> every message acked;
    * a mapping ``{message id: value}``: a missing id, or the value None, is acked; an exception
      (``Retry``, ``DeadLetter``, any error) fails that message as if a single handler had raised
      it (:func:`decide`); any other value (the ``Effects`` of ``idempotency="lua"``) is acked
      with that value.

    Raises BadBatchResult for anything else, or for an id that is not one of ``messages``.
    """
    if result is None:
        return [ACKED] * len(messages)
    if not isinstance(result, Mapping):
        raise BadBatchResult(
            f"a batch handler returns None or a mapping {{message id: result}}, "
            f"not {type(result).__name__}"
        )
    if not result:
        return [ACKED] * len(messages)
    known = {m.id for m in messages}
    unknown = [k for k in result if k not in known]
    if unknown:
        raise BadBatchResult(
            f"a batch handler's result names ids that are not in its batch: {unknown[:3]!r}"
        )
    outcomes: list[Outcome] = []
    for msg in messages:
        value = result.get(msg.id)
        if value is None:
            outcomes.append(ACKED)
        elif isinstance(value, BaseException):
            outcomes.append(decide(value, msg.delivery_count, max_deliveries))
        else:
            outcomes.append(Outcome(Action.ACK, value=value))
    return outcomes
