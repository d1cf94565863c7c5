"""The contract between the consume loop and an idempotency strategy."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

from streamworker.message import Message
from streamworker.outcomes import Outcome

Invoke = Callable[[Message[Any], Mapping[type, Any]], Awaitable[Outcome]]
"""Runs the handler for one message with the given provided resources (e.g. a SQL session) and
returns the runtime's decision. It never raises for handler errors; it does raise CancelledError."""

InlineInvoke = Callable[[Message[Any], Mapping[type, Any]], Outcome]
"""The blocking form of an :data:`Invoke`, to be called from a pool thread (see
:func:`inline_of`)."""


def inline_of(invoke: Invoke) -> InlineInvoke | None:
    """``invoke``'s blocking form, when it has one (the runtime's invoker of a ``def`` handler
    without message-scoped dependencies: :class:`~streamworker.runtime.invoker.HandlerInvoker`).

    A strategy that already runs blocking database work in a pool thread may call it there for a
    whole batch, one thread hop instead of one per message; the result is the same as awaiting
    ``invoke``."""
    inline: InlineInvoke | None = getattr(invoke, "inline", None)
    return inline


class Strategy(Protocol):
    """Processes one batch of messages of one subscription.

    ``process`` runs the handler for every message through ``invoke`` and makes the effects of the
    messages whose outcome is ACK durable *before* it XACKs exactly those messages. Messages with
    other outcomes must be left pending and their effects undone. When cancelled (shutdown deadline),
    it acks what had finished and re-raises.
    """

    name: str

    async def process(
        self, batch: Sequence[Message[Any]], invoke: Invoke, *, fresh: bool = False
    ) -> list[Outcome]:
        """Handle ``batch``; return one outcome per message, in order.

        ``fresh``: every message was delivered to this consumer by a ``>`` read moments ago
        (well within ``claim_idle_ms``), so no other consumer can have claimed one yet; a
        strategy may skip its ownership check before the handlers (never the one with the ack).
        """
        ...
