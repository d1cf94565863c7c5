"""What the test kit reports: a published message, the handler calls it got, where it stands."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Sent:
    """A published message: its stream and entry id (what the assertions take)."""

    stream: str
    id: str

    def __str__(self) -> str:
        return f"{self.stream}/{self.id}"


@dataclass(frozen=True, slots=True)
class Attempt:
    """One call of a handler for one message."""

    handler: str
    group: str
    delivery_count: int
    error: str | None  # ``"Type: message"`` when the handler raised
    result: Any = field(default=None, compare=False)  # what it returned (e.g. Effects)


@dataclass(frozen=True, slots=True)
class MessageOutcome:
    """Where a message stands for one group after :meth:`TestWorker.drain`.

    ``status`` is ``"acked"`` (handled, or recognised as a duplicate), ``"dead_lettered"``
    (``reason`` holds the dead letter's ``dlq_error``), ``"pending"`` (delivered, not acked) or
    ``"undelivered"`` (the group has not read it).
    """

    sent: Sent
    group: str
    status: str
    attempts: tuple[Attempt, ...]
    reason: str | None = None

    @property
    def deliveries(self) -> int:
        """The highest delivery count a handler saw (0 when it never ran)."""
        return max((a.delivery_count for a in self.attempts), default=0)


class DrainTimeout(AssertionError):
    """:meth:`TestWorker.drain` gave up: some group still had work left."""


def explain(out: MessageOutcome, expected: str) -> str:
    """The assertion message: what was expected, where the message stands, every handler call."""
    text = f"{out.sent} was expected {expected}, but it is {out.status.replace('_', '-')}"
    if out.reason:
        text += f" ({out.reason})"
    if out.attempts:
        text += "; handler calls: " + "; ".join(
            f"delivery {a.delivery_count}: {a.error or 'returned'}" for a in out.attempts
        )
    else:
        text += "; its handler was never called"
    return text
