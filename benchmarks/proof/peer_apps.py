"""The peers' application objects, built from the environment like a user's module would be.

* ``taskiq_broker``: taskiq-redis ``RedisStreamBroker`` on stream ``proof``, group ``proof``,
  run with ``taskiq worker benchmarks.proof.peer_apps:taskiq_broker``;
* :func:`streaq_worker`: a streaq ``Worker`` with task ``proof_task``.

Both are configured like the others: reads of ``PROOF_BATCH`` (100) messages, up to that many in
flight, a stable consumer name (``PROOF_CONSUMER``), reclaim of idle entries after
``PROOF_CLAIM_IDLE_MS`` (5 s; taskiq's default is 10 minutes, streaq's 60 s).
"""

from __future__ import annotations

import functools
import os
from typing import Any

from taskiq_redis import RedisStreamBroker

from benchmarks.proof.handlers import GROUP, STREAM, Handler

BATCH = int(os.environ.get("PROOF_BATCH", "100"))
CONSUMER = os.environ.get("PROOF_CONSUMER", "c1")
CLAIM_IDLE_MS = int(os.environ.get("PROOF_CLAIM_IDLE_MS", "5000"))
_URL = os.environ.get("PROOF_REDIS_URL", "redis://127.0.0.1:6379/0")
HANDLER = Handler()

taskiq_broker = RedisStreamBroker(
    _URL,
    queue_name=STREAM,
    consumer_group_name=GROUP,
    consumer_name=CONSUMER,
    consumer_id="0",
    xread_block=1000,
    xread_count=BATCH,
    idle_timeout=CLAIM_IDLE_MS,
    unacknowledged_batch_size=BATCH,
    unacknowledged_lock_timeout=CLAIM_IDLE_MS / 1000,
)


@taskiq_broker.task(task_name="proof_task")
async def taskiq_task(payload: dict[str, str]) -> None:
    await HANDLER(payload)


def taskiq_encode(payload: dict[str, str]) -> bytes:
    """The bytes ``taskiq_task.kiq(payload)`` would put in the entry's ``data`` field."""
    message = taskiq_task.kicker()._prepare_message(payload)
    return taskiq_broker.formatter.dumps(message).message


@functools.cache
def streaq_worker(url: str | None = None) -> Any:
    """The streaq Worker on ``url`` (default: ``PROOF_REDIS_URL``)."""
    from streaq import Worker

    worker = Worker(
        redis_url=url or _URL,
        concurrency=BATCH,
        prefetch=BATCH,
        queue_name="proof",
        idle_timeout=CLAIM_IDLE_MS / 1000,
        id=CONSUMER,
    )

    @worker.task(name="proof_task")
    async def proof_task(payload: dict[str, str]) -> None:
        await HANDLER(payload)

    worker.proof_task = proof_task  # type: ignore[attr-defined]
    return worker
