"""A test kit for handlers: run an App on a fresh in-process engine, publish, drain, assert.

::

    from streamworker.testing import TestWorker

    async def test_an_order_is_charged() -> None:
        async with TestWorker(app) as worker:
            sent = await worker.publish("orders", OrderPlaced(order_id=1, amount_cents=1250))
            await worker.drain()
            worker.assert_acked(sent)

With pytest the plugin (registered by entry point, :mod:`streamworker.testing.pytest_plugin`)
gives the ``streamworker_run`` fixture, which starts a TestWorker and stops it after the test.

What runs is the real :class:`~streamworker.runtime.worker.Worker` (consume loops, reclaimer,
idempotency strategies, dead-lettering script) on ``engine://memory/<fresh name>``, streamworker's
Redis-compatible engine in this process: no Redis, no network. Two things differ from production,
both to keep tests fast: failed messages are retried without waiting (``retry_backoff_ms=0``,
unless ``retry_backoff_ms=None``; ``Retry(delay_ms=…)`` is still honoured), and the handlers are wrapped to record each call (the message, what it returned
or raised) for the assertions.

Thread and task safety: a TestWorker belongs to the event loop that started it.
"""

from __future__ import annotations

from streamworker.testing.outcomes import Attempt, DrainTimeout, MessageOutcome, Sent
from streamworker.testing.worker import TestWorker

__all__ = [
    "Attempt",
    "DrainTimeout",
    "MessageOutcome",
    "Sent",
    "TestWorker",
]
