"""The contract between the consume loop and an idempotency strategy."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

from streamworker.message import Message
from streamworker.outcomes import Outcome

Invoke = Callable[[Message[Any], Mapping[type, Any]], Awaitable[Outcome]]
"""Runs the handler for one message with the given provided resources (e.g. a SQL session) and
returns the runtime's decision. It never raises for handler errors; it does raise CancelledError."""


class Strategy(Protocol):
    """Processes one batch of messages of one subscription.

    ``process`` runs the handler for every message through ``invoke`` and makes the effects of the
    messages whose outcome is ACK durable *before* it XACKs exactly those messages. Messages with
    other outcomes must be left pending and their effects undone. When cancelled (shutdown deadline),
    it acks what had finished and re-raises.
    """

    name: str

    async def process(self, batch: Sequence[Message[Any]], invoke: Invoke) -> list[Outcome]:
        """Handle ``batch``; return one outcome per message, in order."""
        ...
