"""Shared by the benchmarks that time one Worker draining a pre-filled stream (tracing,
rate limit): fill the stream, run the worker until the group has nothing left, time it."""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid

import redis.asyncio as aioredis

from streamworker.runtime.worker import Worker


async def prefill(client: aioredis.Redis, stream: str, messages: int) -> None:
    """``stream`` emptied, then ``messages`` small entries added in one pipeline."""
    await client.delete(stream)
    pipe = client.pipeline(transaction=False)
    for i in range(messages):
        pipe.xadd(stream, {"n": str(i), "payload": "x" * 32})
    await pipe.execute()


async def drain(client: aioredis.Redis, worker: Worker, stream: str) -> tuple[float, float]:
    """Run ``worker`` until the first group of ``stream`` has no lag and nothing pending, then
    stop it; returns (wall-clock seconds, this process's CPU seconds) from its start."""
    started = time.perf_counter()
    cpu_started = time.process_time()
    task = asyncio.ensure_future(worker.run(install_signal_handlers=False))
    while True:
        await asyncio.sleep(0.002)
        try:
            groups = await client.xinfo_groups(stream)
        except Exception:
            continue
        if groups and groups[0]["pending"] == 0 and groups[0]["lag"] == 0:
            break
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu_started
    worker.stop()
    await task
    return elapsed, cpu


def drain_arguments(description: str | None) -> argparse.ArgumentParser:
    """A parser with the options every draining benchmark has: ``--redis-url`` (default a fresh
    in-process engine), ``--messages``, ``--batch``, ``--rounds``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--redis-url", default=f"engine://memory/bench-{uuid.uuid4().hex[:8]}")
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    return parser
