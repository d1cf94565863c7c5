"""The test kit's runner: :class:`TestWorker`, an App on a fresh in-process engine."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import shutil
import tempfile
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import redis
import redis.asyncio as aioredis

from streamworker.app import App, HandlerSpec
from streamworker.core.codec import encode_for
from streamworker.io.redisio import as_text, open_redis, open_sync_redis
from streamworker.observability.metrics import Metrics
from streamworker.runtime.worker import Worker, WorkerOptions
from streamworker.testing.database import sync_url, upgrade_schema
from streamworker.testing.outcomes import Attempt, DrainTimeout, MessageOutcome, Sent, explain
from streamworker.testing.recorder import Recorder


def _id_key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


class TestWorker:
    """Runs ``app`` for a test: a real Worker on a fresh in-process engine (or ``redis_url``).

    Args:
        app: the App under test (not modified: the worker runs a copy of its handlers).
        redis_url: default a fresh ``engine://memory/<unique name>``, dropped on :meth:`stop`.
            A real ``redis://`` URL works too (the test owns that database).
        db_url: the database of ``idempotency="sql"`` handlers (default the App's, else a
            fresh SQLite file removed on stop); migrated on start unless ``migrate=False``.
        consumer: the consumer name.
        retry_backoff_ms: the backoff of failed messages in this worker (default 0: retried at
            once, so a failing handler reaches ``max_deliveries`` within a drain, with
            ``claim_idle_ms`` capped at 600 ms); None keeps each handler's own settings.
        tracer_provider: an OpenTelemetry TracerProvider: run with tracing on, spans there
            (e.g. the SDK's with an InMemorySpanExporter, to test your traces).
    """

    __test__ = False  # not a test class, whatever pytest's name rules say

    def __init__(
        self,
        app: App,
        *,
        redis_url: str | None = None,
        db_url: str | None = None,
        consumer: str = "test-0",
        retry_backoff_ms: int | None = 0,
        migrate: bool = True,
        tracer_provider: Any = None,
    ) -> None:
        self.app = app
        self._own_engine = redis_url is None
        self.redis_url = redis_url or f"engine://memory/streamworker-test-{uuid.uuid4().hex[:12]}"
        self.db_url = db_url or app.db_url
        self._own_db: Path | None = None
        if not self.db_url and any(s.idempotency == "sql" for s in app.handlers):
            # SQL handlers need a database: a fresh SQLite file, migrated on start, removed
            # on stop.
            self._own_db = Path(tempfile.mkdtemp(prefix="streamworker-test-"))
            self.db_url = f"sqlite:///{self._own_db / 'streamworker-test.db'}"
        self.consumer = consumer
        self._recorder = Recorder()
        self._migrate = migrate
        self._tracer_provider = tracer_provider
        copy = App(app.name, redis_url=self.redis_url, db_url=self.db_url)
        for spec in app.handlers:
            changes: dict[str, Any] = {"func": self._recorder.wrap(spec)}
            if retry_backoff_ms is not None:
                changes["retry_backoff_ms"] = retry_backoff_ms
                changes["retry_backoff_max_ms"] = retry_backoff_ms
            # The specs were checked when ``app`` registered them: the copies go in as they are.
            copy.add_spec(dataclasses.replace(spec, **changes))
        self.specs = copy.handlers
        self.metrics = Metrics()
        self._worker: Worker | None = None
        self._task: asyncio.Future[Any] | None = None
        self.client: aioredis.Redis = open_redis(self.redis_url)
        self.sync_client: redis.Redis = open_sync_redis(self.redis_url)
        self._copy = copy

    # --- life cycle ------------------------------------------------------------------------------

    async def start(self) -> TestWorker:
        """Start the worker in this event loop (migrating the SQL database first)."""
        if self._task is not None:
            return self
        if self.db_url and self._migrate and any(s.idempotency == "sql" for s in self.specs):
            await asyncio.to_thread(upgrade_schema, self.db_url)
        self._worker = Worker(
            self._copy,
            WorkerOptions(
                redis_url=self.redis_url,
                consumer=self.consumer,
                shutdown_timeout_s=5.0,
                reconnect_backoff_initial_s=0.01,
                reconnect_backoff_max_s=0.2,
                strategy_options=self._strategy_options(),
                tracing=self._tracer_provider is not None,
                tracer_provider=self._tracer_provider,
            ),
            self.metrics,
        )
        self._task = asyncio.ensure_future(self._worker.run(install_signal_handlers=False))
        return self

    def _strategy_options(self) -> dict[str, object]:
        """The SQL handlers' database (pruned hourly: a test never waits for it)."""
        if not any(s.idempotency == "sql" for s in self.specs):
            return {}
        from streamworker.idempotency.sql import SqlOptions  # SQLAlchemy: only when needed

        return {"sql": SqlOptions(db_url=self.db_url, prune_interval_s=3600.0)}

    async def stop(self) -> None:
        """Stop the worker (finishing the batch in hand) and drop the engine it ran on. Raises
        what the worker raised, if it failed."""
        try:
            if self._worker is not None and self._task is not None:
                if not self._task.done():
                    self._worker.stop()
                await self._task
        finally:
            self._task = None
            with contextlib.suppress(Exception):
                await self.client.aclose()
            with contextlib.suppress(Exception):
                self.sync_client.close()
            if self._own_engine:
                from streamworker.engine.inproc import forget_engine

                forget_engine(self.redis_url)
            if self._own_db is not None:
                shutil.rmtree(self._own_db, ignore_errors=True)

    async def __aenter__(self) -> TestWorker:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # --- producing -------------------------------------------------------------------------------

    def _spec_for(self, stream: str, group: str | None = None) -> HandlerSpec | None:
        found = [s for s in self.specs if s.stream == stream and group in (None, s.group)]
        return found[0] if found else None

    async def publish(
        self,
        stream: str,
        body: Any = None,
        *,
        fields: Mapping[str, str | bytes | int | float] | None = None,
    ) -> Sent:
        """XADD one message to ``stream``; returns its :class:`Sent` (stream and id).

        ``body`` (a pydantic model, dataclass or mapping) is encoded exactly as the stream's
        handler decodes it (its ``body_field`` included, see
        :func:`streamworker.core.codec.encode_for`); ``fields`` are added as they are (alone they
        make the whole entry, e.g. to send a body that fails validation).
        """
        entry: dict[Any, Any] = {}
        if body is not None:
            spec = self._spec_for(stream)
            entry.update(
                encode_for(
                    body,
                    model=None if spec is None else spec.model,
                    body_field=None if spec is None else spec.body_field,
                )
            )
        if fields:
            entry.update(fields)
        if not entry:
            raise ValueError("publish needs a body or fields (a stream entry has at least one)")
        entry_id = await self.client.xadd(stream, entry)
        return Sent(stream, as_text(entry_id, errors="replace"))

    # --- waiting ---------------------------------------------------------------------------------

    def _work_left(self) -> dict[str, str]:
        """(stream/group) -> what is left, for every subscription with work left."""
        left: dict[str, str] = {}
        client = self.sync_client
        for spec in self.specs:
            key = f"{spec.stream}/{spec.group}"
            try:
                groups = client.xinfo_groups(spec.stream)
            except redis.ResponseError:
                left[key] = "the stream does not exist yet"
                continue
            info = next(
                (g for g in groups if as_text(g["name"], errors="replace") == spec.group), None
            )
            if info is None:
                left[key] = "the group does not exist yet"
                continue
            pending = int(info["pending"])
            lag = info.get("lag")
            if lag is None:  # Redis cannot tell: compare the last ids
                last = as_text(
                    client.xinfo_stream(spec.stream)["last-generated-id"], errors="replace"
                )
                delivered = as_text(info["last-delivered-id"], errors="replace")
                lag = 0 if _id_key(delivered) >= _id_key(last) else 1
            if pending or int(lag):
                left[key] = f"lag {int(lag)}, pending {pending}"
        return left

    async def drain(self, timeout_s: float = 10.0) -> None:
        """Wait until every group of the App has nothing left: no lag, nothing pending.

        Every message published before is then acked or dead-lettered. Raises what the worker
        raised if it stopped, and :class:`DrainTimeout` (an AssertionError naming the groups and
        their pending entries) after ``timeout_s``: a handler that blocks, or a ``Retry`` with a
        long delay.
        """
        if self._task is None:
            raise RuntimeError("start the TestWorker first (async with TestWorker(app) as worker)")
        deadline = time.monotonic() + timeout_s
        while True:
            if self._task.done():
                self._task.result()  # raises the worker's error
                raise RuntimeError("the worker stopped before the drain finished")
            left = self._work_left()
            if not left:
                return
            if time.monotonic() >= deadline:
                raise DrainTimeout(self._describe_left(left, timeout_s))
            await asyncio.sleep(0.005)

    def _describe_left(self, left: dict[str, str], timeout_s: float) -> str:
        lines = [f"drain timed out after {timeout_s}s:"]
        paused = {
            f"{c.spec.stream}/{c.spec.group}": c.batches.paused
            for c in (self._worker.consumers if self._worker is not None else [])
            if c.batches.paused is not None
        }
        for key, what in left.items():
            stream, _, group = key.partition("/")
            lines.append(f"  {key}: {what}")
            if key in paused:
                # The handler waits for the schema: the last error is the pause's, whichever
                # statement (the handler's or the flush after it) met it.
                lines.append(f"    handler paused: {paused[key]}")
            with contextlib.suppress(redis.ResponseError):
                for row in self.sync_client.xpending_range(stream, group, "-", "+", 5):
                    mid = as_text(row["message_id"], errors="replace")
                    tries = self._recorder.calls.get((stream, group, mid), [])
                    if not tries:
                        last = "handler not called"
                    else:
                        last = tries[-1].error or "the handler returned"
                    lines.append(
                        f"    {mid}: delivered {int(row['times_delivered'])} time(s); last: {last}"
                    )
        return "\n".join(lines)

    # --- outcomes --------------------------------------------------------------------------------

    def _group_for(self, sent: Sent, group: str | None) -> HandlerSpec:
        found = [s for s in self.specs if s.stream == sent.stream and group in (None, s.group)]
        if not found:
            raise AssertionError(f"no handler of this App reads {sent.stream!r} (group {group})")
        if len(found) > 1:
            names = ", ".join(s.group for s in found)
            raise AssertionError(f"{sent.stream!r} has several groups ({names}): pass group=")
        return found[0]

    def attempts(self, sent: Sent, *, group: str | None = None) -> list[Attempt]:
        """Every handler call for ``sent`` in its group, oldest first."""
        spec = self._group_for(sent, group)
        return list(self._recorder.calls.get((sent.stream, spec.group, sent.id), []))

    def outcome(self, sent: Sent, *, group: str | None = None) -> MessageOutcome:
        """Where ``sent`` stands for its group (``group`` is needed when several read it)."""
        spec = self._group_for(sent, group)
        attempts = tuple(self._recorder.calls.get((sent.stream, spec.group, sent.id), []))
        client = self.sync_client
        for _dlq_id, raw in client.xrange(spec.dead_letter_stream) or []:
            fields = {
                as_text(k, errors="replace"): as_text(v, errors="replace")
                for k, v in (raw or {}).items()
            }
            if (
                fields.get("dlq_id") == sent.id
                and fields.get("dlq_stream") == sent.stream
                and fields.get("dlq_group") == spec.group
            ):
                return MessageOutcome(
                    sent, spec.group, "dead_lettered", attempts, fields.get("dlq_error")
                )
        try:
            rows = client.xpending_range(sent.stream, spec.group, sent.id, sent.id, 1)
            groups = client.xinfo_groups(sent.stream)
        except redis.ResponseError:
            return MessageOutcome(sent, spec.group, "undelivered", attempts)
        if rows:
            return MessageOutcome(sent, spec.group, "pending", attempts)
        info = next((g for g in groups if as_text(g["name"], errors="replace") == spec.group), None)
        if info is None or _id_key(as_text(info["last-delivered-id"], errors="replace")) < _id_key(
            sent.id
        ):
            return MessageOutcome(sent, spec.group, "undelivered", attempts)
        return MessageOutcome(sent, spec.group, "acked", attempts)

    def assert_acked(self, sent: Sent, *, group: str | None = None) -> MessageOutcome:
        """``sent`` was acked by its group (handled, or found to be a duplicate)."""
        out = self.outcome(sent, group=group)
        if out.status != "acked":
            raise AssertionError(explain(out, "acked"))
        return out

    def assert_dead_lettered(
        self, sent: Sent, reason: str | None = None, *, group: str | None = None
    ) -> MessageOutcome:
        """``sent`` is in its dead-letter stream; ``reason``, when given, is part of its
        ``dlq_error`` (e.g. ``"DeadLetter: no amount"`` or ``"body failed validation"``)."""
        out = self.outcome(sent, group=group)
        if out.status != "dead_lettered":
            raise AssertionError(explain(out, "dead-lettered"))
        if reason is not None and reason not in (out.reason or ""):
            raise AssertionError(
                f"{sent} was dead-lettered with {out.reason!r}, which does not contain {reason!r}"
            )
        return out

    def assert_retried(
        self, sent: Sent, times: int | None = None, *, group: str | None = None
    ) -> MessageOutcome:
        """The handler failed for ``sent`` and it was delivered again: ``times`` retries, when
        given, means ``times + 1`` deliveries in all."""
        out = self.outcome(sent, group=group)
        retries = out.deliveries - 1
        if retries < 1 or (times is not None and retries != times):
            expected = "retried" if times is None else f"retried {times} time(s)"
            raise AssertionError(
                f"{sent} was {expected}? its handler saw {out.deliveries} delivery(ies): "
                + "; ".join(f"#{a.delivery_count}: {a.error or 'ok'}" for a in out.attempts)
            )
        return out

    def effects(self, sent: Sent, *, group: str | None = None) -> Any:
        """What the handler returned for ``sent`` in its last successful call (the ``Effects``
        of an ``idempotency="lua"`` handler), or None."""
        ok = [a for a in self.attempts(sent, group=group) if a.error is None]
        return ok[-1].result if ok else None

    def assert_effects_applied(self, sent: Sent, *, group: str | None = None) -> Any:
        """``sent`` was acked and its handler returned Effects: with ``idempotency="lua"`` they
        were applied in the script that acked it (both or neither). Returns the Effects."""
        spec = self._group_for(sent, group)
        if spec.idempotency != "lua":
            raise AssertionError(
                f"{spec.name} has idempotency={spec.idempotency!r}; only 'lua' applies Effects"
            )
        self.assert_acked(sent, group=group)
        effects = self.effects(sent, group=group)
        if effects is None or not len(effects):
            raise AssertionError(f"{sent} was acked, but its handler returned no effects")
        return effects

    # --- SQL -------------------------------------------------------------------------------------

    def sql_rows(self, table: str, **where: Any) -> list[dict[str, Any]]:
        """The rows of ``table`` in the worker's database (``column=value`` filters), as dicts."""
        if not self.db_url:
            raise AssertionError("this TestWorker has no database (db_url)")
        import sqlalchemy as sa

        engine = sa.create_engine(sync_url(self.db_url))
        try:
            meta = sa.MetaData()
            tbl = sa.Table(table, meta, autoload_with=engine)
            query = sa.select(tbl)
            for column, value in where.items():
                query = query.where(tbl.c[column] == value)
            with engine.connect() as conn:
                return [dict(row._mapping) for row in conn.execute(query)]
        finally:
            engine.dispose()

    def processed(self, sent: Sent, *, group: str | None = None) -> bool:
        """True when ``sent`` has its processed row (``idempotency="sql"``): its handler's
        writes committed."""
        from streamworker.idempotency.sql import sortable_id

        spec = self._group_for(sent, group)
        rows = self.sql_rows(
            "streamworker_processed_messages",
            group_name=spec.group,
            stream=sent.stream,
            message_id=sortable_id(sent.id),
        )
        return bool(rows)
