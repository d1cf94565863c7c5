"""Every variant: what it guarantees, how its stream is pre-filled, how its consumer starts.

A variant's consumer is always a subprocess in a session of its own (so ``kill -9`` reaches the
whole process group, taskiq's worker children included).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from benchmarks.proof.handlers import GROUP, STREAM, payload

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable


@dataclass(frozen=True)
class Variant:
    name: str
    guarantee: str
    kind: str  # "streamworker", "raw", "peer"
    mode: str = ""  # streamworker: none | lua | sql
    database: str = ""  # sql: postgresql | sqlite
    consumer_kind: str = ""  # benchmarks.proof.consumers KIND, or "taskiq"
    stream: str = STREAM
    group: str = GROUP
    exactly_once: bool = False
    extra_env: dict[str, str] = field(default_factory=dict)

    def command(self) -> list[str]:
        if self.kind == "streamworker":
            return [PY, "-m", "streamworker", "run", "benchmarks.proof.swapp:app"]
        if self.consumer_kind == "taskiq":
            return [
                PY,
                "-m",
                "taskiq",
                "worker",
                "benchmarks.proof.peer_apps:taskiq_broker",
                "--workers",
                "1",
                "--max-async-tasks",
                os.environ.get("PROOF_BATCH", "100"),
                "--max-prefetch",
                "0",
                "--ack-type",
                "when_executed",
                "--no-configure-logging",
                "--shutdown-timeout",
                "5",
            ]
        return [PY, "-m", "benchmarks.proof.consumers", self.consumer_kind]


AT_LEAST_ONCE = "at-least-once: acked after the handler; a crash re-delivers what was in flight"

VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in [
        Variant(
            "raw-textbook",
            "at-least-once (XREADGROUP COUNT 1, handler, XACK per message); no reclaim",
            "raw",
            consumer_kind="raw-textbook",
        ),
        Variant(
            "raw-batched",
            "at-least-once (XREADGROUP COUNT n, handlers, one XACK); own PEL re-read at start",
            "raw",
            consumer_kind="raw-batched",
        ),
        Variant(
            "sw-none",
            "streamworker idempotency='none': " + AT_LEAST_ONCE + "; own PEL first, reclaim",
            "streamworker",
            mode="none",
        ),
        Variant(
            "sw-lua",
            "streamworker idempotency='lua': effects + XACK in one script: exactly-once effects",
            "streamworker",
            mode="lua",
            exactly_once=True,
        ),
        Variant(
            "sw-sql-sqlite",
            "streamworker idempotency='sql' on SQLite: rows + processed marker in one transaction",
            "streamworker",
            mode="sql",
            database="sqlite",
            exactly_once=True,
        ),
        Variant(
            "sw-sql-pg",
            "streamworker idempotency='sql' on PostgreSQL: rows + processed marker in one "
            "transaction",
            "streamworker",
            mode="sql",
            database="postgresql",
            exactly_once=True,
        ),
        Variant(
            "taskiq",
            "taskiq-redis RedisStreamBroker, ack when executed: at-least-once; per-message XACK; "
            "XAUTOCLAIM after idle_timeout (default 10 min; 5 s here)",
            "peer",
            consumer_kind="taskiq",
        ),
        Variant(
            "streaq",
            "streaq Worker: at-least-once; XAUTOCLAIM after idle_timeout (default 60 s; 5 s "
            "here), XACK+XDEL per task, result kept per task",
            "peer",
            consumer_kind="streaq",
            stream="streaq:proof:queues:normal",
            group="workers",
        ),
        Variant(
            "faststream",
            "FastStream StreamSub(group, consumer): at-least-once while running; XACK per "
            "message; reads only '>' so its own PEL is never re-read after a restart",
            "peer",
            consumer_kind="faststream",
        ),
        Variant(
            "rsq",
            "redis-stream-queue StreamConsumer: at-least-once; XACK per batch; XAUTOCLAIM after "
            "min_idle_claim_ms (default 10 s; 5 s here)",
            "peer",
            consumer_kind="rsq",
        ),
    ]
}

THROUGHPUT_ORDER = list(VARIANTS)
PEERS = [v.name for v in VARIANTS.values() if v.kind == "peer"]


@dataclass
class Env:
    """Where the servers are, shared by every run."""

    redis_url: str
    pg_url: str  # SQLAlchemy URL (postgresql+psycopg://...)
    sqlite_url: str
    workdir: Path
    batch: int = 100
    claim_idle_ms: int = 5000

    def libpq_url(self) -> str:
        return self.pg_url.replace("postgresql+psycopg://", "postgresql://")

    def db_url(self, variant: Variant) -> str:
        return self.sqlite_url if variant.database == "sqlite" else self.pg_url

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.redis_url)


def _fields_for(variant: Variant) -> Callable[[dict[str, str]], dict[str, Any]]:
    if variant.consumer_kind == "rsq":
        from benchmarks.proof.consumers import rsq_encode

        return lambda p: {"data": rsq_encode(p)}
    if variant.consumer_kind == "taskiq":
        from benchmarks.proof.peer_apps import taskiq_encode

        return lambda p: {"data": taskiq_encode(p)}
    return lambda p: p


def reset(env: Env, variant: Variant) -> None:
    """An empty Redis with the variant's group created at 0 (so a pre-filled stream is read)."""
    client = env.client()
    try:
        client.flushall()
        client.xgroup_create(variant.stream, variant.group, id="0", mkstream=True)
    finally:
        client.close()


def prefill(env: Env, variant: Variant, n: int) -> None:
    """Put ``n`` messages (:func:`payload`) on the variant's stream, in its own wire format."""
    if variant.consumer_kind == "streaq":
        asyncio.run(_streaq_prefill(env.redis_url, n))
        return
    encode = _fields_for(variant)
    client = env.client()
    try:
        pipe = client.pipeline(transaction=False)
        for i in range(n):
            pipe.xadd(variant.stream, encode(payload(i)))
            if i % 2000 == 1999:
                pipe.execute()
        pipe.execute()
    finally:
        client.close()


async def _streaq_prefill(url: str, n: int) -> None:
    from benchmarks.proof.peer_apps import streaq_worker

    worker = streaq_worker(url)
    task = worker.proof_task
    async with worker:
        for start in range(0, n, 2000):
            await worker.enqueue_many(
                [task.enqueue(payload(i)) for i in range(start, min(n, start + 2000))]
            )


def produce(env: Env, variant: Variant, client: redis.Redis, batch: list[dict[str, str]]) -> None:
    """XADD one tick's messages (latency runs: streamworker and raw only)."""
    pipe = client.pipeline(transaction=False)
    for p in batch:
        pipe.xadd(variant.stream, p)  # type: ignore[arg-type]
    pipe.execute()


class Consumer:
    """One consumer subprocess of a variant (own session; logs to a file in the workdir)."""

    def __init__(
        self,
        env: Env,
        variant: Variant,
        handler: str,
        *,
        consumer: str = "c1",
        latency_file: Path | None = None,
    ) -> None:
        self.env, self.variant, self.handler = env, variant, handler
        self.consumer = consumer
        self.latency_file = latency_file
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = env.workdir / f"{variant.name}-{handler}-{consumer}.log"

    def environ(self) -> dict[str, str]:
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "PROOF_REDIS_URL": self.env.redis_url,
            "PROOF_PG_URL": self.env.libpq_url(),
            "PROOF_HANDLER": self.handler,
            "PROOF_BATCH": str(self.env.batch),
            "PROOF_CONSUMER": self.consumer,
            "PROOF_CLAIM_IDLE_MS": str(self.env.claim_idle_ms),
            "PROOF_MODE": self.variant.mode,
            "STREAMWORKER_REDIS_URL": self.env.redis_url,
            "STREAMWORKER_CONSUMER": self.consumer,
            "STREAMWORKER_LOG_FORMAT": "json",
            "STREAMWORKER_LOG_LEVEL": "warning",
            "STREAMWORKER_SHUTDOWN_TIMEOUT_S": "10",
            **self.variant.extra_env,
        }
        if self.variant.mode == "sql":
            env["STREAMWORKER_DB_URL"] = self.env.db_url(self.variant)
        if self.latency_file is not None:
            env["PROOF_LATENCY_FILE"] = str(self.latency_file)
        return env

    def start(self) -> Consumer:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                self.variant.command(),
                cwd=ROOT,
                env=self.environ(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        """SIGKILL the whole process group at once (the worker and any children)."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(30)

    def stop(self, timeout_s: float = 20) -> None:
        """SIGTERM (graceful: latency samples are written at exit), SIGKILL if it hangs."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill9()
        # taskiq's worker children may outlive their parent's exit by a moment.
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def tail(self, n: int = 2000) -> str:
        try:
            return self.log.read_text(errors="replace")[-n:]
        except OSError:
            return ""


def group_state(client: redis.Redis, variant: Variant) -> tuple[bool, bool]:
    """(started, drained): the group has delivered something / has delivered every entry of
    the stream and has nothing pending."""
    pipe = client.pipeline(transaction=False)
    pipe.xinfo_stream(variant.stream)
    pipe.xinfo_groups(variant.stream)
    info, groups = pipe.execute()
    last = info["last-generated-id"]
    for g in groups:
        name = g["name"].decode() if isinstance(g["name"], bytes) else g["name"]
        if name == variant.group:
            delivered = g["last-delivered-id"]
            started = delivered not in (b"0-0", "0-0")
            return started, started and delivered == last and int(g["pending"]) == 0
    return False, False


def iter_variants(names: list[str]) -> Iterator[Variant]:
    for name in names:
        if name not in VARIANTS:
            raise SystemExit(f"unknown variant {name!r}; known: {', '.join(VARIANTS)}")
        yield VARIANTS[name]
