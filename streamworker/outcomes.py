"""What happens to a message after its handler ran: pure rules, unit-tested directly."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from streamworker.errors import DeadLetter, PermanentFailure, Retry


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

    @property
    def acked(self) -> bool:
        return self.action is Action.ACK


ACKED = Outcome(Action.ACK)
NOT_STARTED = Outcome(Action.LEAVE_PENDING, "not started: the worker is shutting down")
"""A message of the batch in hand whose handler had not started when shutdown began: it stays in
this consumer's PEL, and the next start (or another consumer's reclaim) delivers it again."""


def describe(exc: BaseException) -> str:
    """``"<type>: <message>"`` as stored in logs and dead letters."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def decide(exc: BaseException | None, delivery_count: int, max_deliveries: int) -> Outcome:
    """Decide what happens to a message given how its handler ended.

    * no exception -> ack;
    * DeadLetter or PermanentFailure -> dead-letter now, whatever the count;
    * any other failure (Retry included) -> leave pending, unless this delivery was the last one
      allowed (``delivery_count >= max_deliveries``), which dead-letters it: a message is handled
      at most ``max_deliveries`` times.
    """
    if exc is None:
        return ACKED
    if isinstance(exc, DeadLetter | PermanentFailure):
        return Outcome(Action.DEAD_LETTER, describe(exc))
    if delivery_count >= max_deliveries:
        return Outcome(Action.DEAD_LETTER, describe(exc))
    delay = exc.delay_ms if isinstance(exc, Retry) else None
    return Outcome(Action.LEAVE_PENDING, describe(exc), delay)


def over_delivered(delivery_count: int, max_deliveries: int) -> bool:
    """A message delivered more often than allowed is dead-lettered without running the handler.

    This catches messages whose handler crashed the process (so ``decide`` never ran) on every
    delivery: the delivery counter lives in Redis and survives the crashes.
    """
    return delivery_count > max_deliveries
