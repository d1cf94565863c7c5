"""The consumers that are not streamworker, one per process:
``python -m benchmarks.proof.consumers KIND``, configured by the environment (``PROOF_REDIS_URL``,
``PROOF_HANDLER``, ``PROOF_BATCH``, ``PROOF_CONSUMER``, ``PROOF_CLAIM_IDLE_MS``, see
:mod:`benchmarks.proof.handlers`). Runs until SIGTERM/SIGINT.

* ``raw-textbook``: XREADGROUP COUNT 1, the handler, XACK, per message;
* ``raw-batched``: XREADGROUP COUNT n, the handlers, one XACK for the batch;
* ``raw-block``: ``raw-batched`` blocked in XREADGROUP (the latency floor);
* ``faststream``: a FastStream ``RedisBroker`` subscriber on ``StreamSub(group=, consumer=)``;
* ``rsq``: redis-stream-queue's ``StreamConsumer``;
* ``streaq``: a streaq ``Worker`` (task ``proof_task``), see :mod:`benchmarks.proof.peer_apps`.

taskiq runs through its own CLI (``taskiq worker benchmarks.proof.peer_apps:taskiq_broker``).
All of them call the same :class:`benchmarks.proof.handlers.Handler`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
from typing import Any

from benchmarks.proof.handlers import GROUP, STREAM, Handler

BATCH = int(os.environ.get("PROOF_BATCH", "100"))
CONSUMER = os.environ.get("PROOF_CONSUMER", "c1")
CLAIM_IDLE_MS = int(os.environ.get("PROOF_CLAIM_IDLE_MS", "5000"))


def _url() -> str:
    return os.environ["PROOF_REDIS_URL"]


async def _raw(kind: str, stop: asyncio.Event) -> None:
    import redis.asyncio as aioredis

    handler = Handler()
    client = aioredis.Redis.from_url(_url())
    count = 1 if kind == "raw-textbook" else BATCH
    # Own pending entries first (a restart after a crash), then new ones.
    start = "0"
    try:
        while not stop.is_set():
            reply = await client.xreadgroup(
                GROUP, CONSUMER, {STREAM: start}, count=count, block=1000
            )
            entries = reply[0][1] if reply else []
            if start == "0" and not entries:
                start = ">"
                continue
            if not entries:
                continue
            if count == 1:
                for entry_id, fields in entries:
                    await handler(fields)
                    await client.xack(STREAM, GROUP, entry_id)
            else:
                for _, fields in entries:
                    await handler(fields)
                await client.xack(STREAM, GROUP, *[entry_id for entry_id, _ in entries])
    finally:
        await client.aclose()
        handler.dump()


async def _faststream(stop: asyncio.Event) -> None:
    from faststream.redis import RedisBroker, StreamSub

    handler = Handler()
    # Per-message "Received"/"Processed" lines at DEBUG, i.e. not written: no other consumer
    # here logs per message.
    broker = RedisBroker(_url(), log_level=logging.DEBUG)

    @broker.subscriber(stream=StreamSub(STREAM, group=GROUP, consumer=CONSUMER, max_records=BATCH))
    async def on_message(body: dict[str, Any]) -> None:
        await handler(body)

    await broker.start()
    try:
        await stop.wait()
    finally:
        await broker.stop()
        handler.dump()


async def _rsq(stop: asyncio.Event) -> None:
    from redis_stream_queue import ConsumerConfig, StreamClient, StreamConsumer

    handler = Handler()
    client = StreamClient.from_url(_url())

    async def on_batch(messages: list[Any]) -> list[str]:
        for m in messages:
            await handler(m.data)
        return [m.id for m in messages]

    consumer = StreamConsumer(
        client,
        STREAM,
        ConsumerConfig(
            group=GROUP,
            worker_name=CONSUMER,
            batch_size=BATCH,
            block_ms=1000,
            min_idle_claim_ms=CLAIM_IDLE_MS,
        ),
        on_batch,
    )
    task = asyncio.ensure_future(consumer.run())
    await stop.wait()
    consumer.stop()
    try:
        await asyncio.wait_for(task, 10)
    except TimeoutError:
        task.cancel()
    await client.close()
    handler.dump()


def _streaq() -> None:
    from benchmarks.proof.peer_apps import streaq_worker

    logging.getLogger("streaq").setLevel(logging.WARNING)  # it logs every task at INFO
    streaq_worker().run_sync()


def rsq_encode(fields: dict[str, str]) -> bytes:
    """redis-stream-queue's wire format: the JSON of the payload in field ``data``."""
    return json.dumps(fields).encode()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    kind = args[0]
    if kind == "streaq":
        _streaq()
        return 0

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        if kind in ("raw-textbook", "raw-batched", "raw-block"):
            await _raw(kind, stop)
        elif kind == "faststream":
            await _faststream(stop)
        elif kind == "rsq":
            await _rsq(stop)
        else:
            raise SystemExit(f"unknown consumer kind {kind!r}")

    asyncio.run(run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
