"""The one handler body every framework calls, chosen by ``PROOF_HANDLER`` in the environment.

* ``noop``: nothing;
* ``db``: one ``INSERT`` into ``proof_rows`` in PostgreSQL (``PROOF_PG_URL``), autocommit, the
  way a handler of an at-least-once framework writes its row;
* ``record``: ``HINCRBY {proof}:seen <order_id> 1`` in Redis (``PROOF_REDIS_URL``): a durable
  count of how many times each message was handled, for the crash table;
* ``latency``: ``time.monotonic_ns() - ts`` kept in memory and written to ``PROOF_LATENCY_FILE``
  (one line ``<ts> <latency>`` per message, nanoseconds) when the process exits normally.

The payload is the same for every framework: :func:`payload`.
"""

from __future__ import annotations

import atexit
import os
import time
from collections.abc import Mapping
from typing import Any

SEEN_KEY = "{proof}:seen"
STREAM = "proof"
GROUP = "proof"
PAD = "x" * 64


def payload(i: int) -> dict[str, str]:
    """The message every framework carries: a business id, an amount, a send time, padding."""
    return {
        "order_id": f"o{i:09d}",
        "amount_cents": str(100 + i % 900),
        "ts": str(time.monotonic_ns()),
        "pad": PAD,
    }


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class Handler:
    """Callable as ``await handler(fields)``; holds its own connections, opened lazily."""

    def __init__(self, kind: str | None = None) -> None:
        self.kind = kind or os.environ.get("PROOF_HANDLER", "noop")
        if self.kind not in ("noop", "db", "record", "latency"):
            raise ValueError(f"PROOF_HANDLER: unknown handler {self.kind!r}")
        self._pg: Any = None
        self._redis: Any = None
        self.samples: list[tuple[int, int]] = []
        if self.kind == "latency":
            atexit.register(self.dump)

    async def __call__(self, fields: Mapping[Any, Any]) -> None:
        if self.kind == "noop":
            return
        if self.kind == "latency":
            self.sync_call(fields)
            return
        order_id = _text(fields.get("order_id", fields.get(b"order_id")))
        if self.kind == "record":
            if self._redis is None:
                import redis.asyncio as aioredis

                self._redis = aioredis.Redis.from_url(os.environ["PROOF_REDIS_URL"])
            await self._redis.hincrby(SEEN_KEY, order_id, 1)
            return
        if self._pg is None:
            import psycopg

            self._pg = await psycopg.AsyncConnection.connect(
                os.environ["PROOF_PG_URL"], autocommit=True
            )
        amount = int(_text(fields.get("amount_cents", fields.get(b"amount_cents"))))
        await self._pg.execute(
            "INSERT INTO proof_rows (order_id, amount_cents) VALUES (%s, %s)", (order_id, amount)
        )

    def sync_call(self, fields: Mapping[Any, Any]) -> None:
        """For the latency samples of a sync handler (no I/O involved)."""
        now = time.monotonic_ns()
        ts = int(_text(fields.get("ts", fields.get(b"ts"))))
        self.samples.append((ts, now - ts))

    def dump(self) -> None:
        path = os.environ.get("PROOF_LATENCY_FILE")
        if not path or not self.samples:
            return
        with open(path, "a") as f:
            f.write("".join(f"{ts} {lat}\n" for ts, lat in self.samples))
        self.samples.clear()
