"""The message a handler receives."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

BodyT = TypeVar("BodyT")


@dataclass(frozen=True, slots=True)
class Message(Generic[BodyT]):
    """One stream entry as delivered to a handler. Pure data: no I/O, safe to share across threads.

    Attributes:
        id: the entry id, ``"<ms>-<seq>"``.
        stream: the stream key it was read from.
        group: the consumer group that delivered it.
        consumer: the consumer name it was delivered to (this worker).
        fields: the entry's field/value pairs, decoded as UTF-8, in entry order.
        body: the handler's pydantic model validated from ``fields``, or ``None`` when the handler
            declares no model.
        delivery_count: how many times the group has delivered this entry, this delivery included
            (Redis's delivery counter, so it survives worker restarts).
    """

    id: str
    stream: str
    group: str
    consumer: str
    fields: dict[str, str]
    body: BodyT
    delivery_count: int = 1

    @property
    def timestamp_ms(self) -> int:
        """The millisecond part of the id: when the entry was added (for ``*`` ids)."""
        return int(self.id.split("-", 1)[0])
