"""OpenTelemetry spans of the worker, captured with the SDK's in-memory exporter."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import SpanKind, StatusCode
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics
from sqlalchemy.orm import Session

from streamworker import App, DeadLetter, Effects, Message, Retry
from streamworker.runtime.worker import Worker, WorkerOptions
from streamworker.testing import TestWorker
from streamworker.tracing import inject_traceparent, xadd_traced
from tests.kit import apps


@dataclasses.dataclass
class Job:
    n: int


app = App("traced")
job_tracer: list[trace.Tracer] = []


@app.handler("jobs", group="g", max_deliveries=2)
def work(msg: Message[Job]) -> None:
    # A sync handler runs in a pool thread: its own spans are still children of the message's.
    with job_tracer[0].start_as_current_span("charge card"):
        if msg.body.n == 13:
            raise ValueError("unlucky")
        if msg.body.n == 7 and msg.delivery_count == 1:
            raise Retry(delay_ms=0)


lua_app = App("traced-lua")


@lua_app.handler("clicks", group="counters", idempotency="lua")
async def count(msg: Message[apps.Click]) -> Effects:
    return Effects().incrby("{clicks}:total", 1)


sql_app = App("traced-sql")


@sql_app.handler("orders", group="ledger", idempotency="sql")
def book(msg: Message[apps.Order], session: Session) -> None:
    if msg.body.amount_cents <= 0:
        raise DeadLetter("no amount")
    session.add(apps.Charge(order_id=msg.body.order_id))


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    memory = InMemorySpanExporter()
    yield memory
    memory.clear()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> TracerProvider:
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    job_tracer[:] = [tp.get_tracer("test")]
    return tp


def _named(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def _children(spans: tuple[ReadableSpan, ...], parent: ReadableSpan) -> list[str]:
    pid = parent.context.span_id
    return sorted(s.name for s in spans if s.parent is not None and s.parent.span_id == pid)


async def test_the_consumer_span_links_to_the_producer_span_and_follows_the_conventions(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    async with TestWorker(app, tracer_provider=provider) as worker:
        entry_id = await xadd_traced(worker.client, "jobs", {"n": "1"}, tracer_provider=provider)
        await worker.drain()
    spans = exporter.get_finished_spans()
    (send,) = _named(spans, "send jobs")
    (process,) = _named(spans, "process jobs")
    assert send.kind is SpanKind.PRODUCER
    assert process.kind is SpanKind.CONSUMER
    assert [link.context.span_id for link in process.links] == [send.context.span_id]
    assert process.parent is None  # linked, not a child: a new trace per delivery
    attrs = dict(process.attributes or {})
    assert attrs["messaging.system"] == "redis"
    assert attrs["messaging.destination.name"] == "jobs"
    assert attrs["messaging.message.id"] == entry_id
    assert attrs["messaging.consumer.group.name"] == "g"
    assert attrs["messaging.redis.message.delivery_count"] == 1
    assert attrs["streamworker.outcome"] == "acked"


async def test_the_handlers_own_spans_are_children_of_the_message_span_in_a_thread(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    async with TestWorker(app, tracer_provider=provider) as worker:
        await worker.publish("jobs", Job(1))
        await worker.drain()
    spans = exporter.get_finished_spans()
    (process,) = _named(spans, "process jobs")
    assert _children(spans, process) == ["charge card", "streamworker.ack"]


async def test_an_exception_is_recorded_on_the_message_span(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    async with TestWorker(app, tracer_provider=provider) as worker:
        await worker.publish("jobs", Job(13))
        await worker.drain()
    processes = _named(exporter.get_finished_spans(), "process jobs")
    assert [p.attributes["messaging.redis.message.delivery_count"] for p in processes] == [1, 2]
    for span in processes:
        assert span.status.status_code is StatusCode.ERROR
        (event,) = [e for e in span.events if e.name == "exception"]
        assert event.attributes["exception.type"] == "ValueError"
        assert event.attributes["exception.message"] == "unlucky"
        assert "Traceback" in event.attributes["exception.stacktrace"]
    assert [p.attributes["streamworker.outcome"] for p in processes] == ["failed", "dead_lettered"]


async def test_a_retry_is_an_event_not_an_error(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    async with TestWorker(app, tracer_provider=provider) as worker:
        await worker.publish("jobs", Job(7))
        await worker.drain()
    first, second = _named(exporter.get_finished_spans(), "process jobs")
    assert first.status.status_code is StatusCode.UNSET
    assert [e.name for e in first.events] == ["retry_requested"]
    assert first.attributes["streamworker.outcome"] == "retried"
    assert second.attributes["streamworker.outcome"] == "acked"


async def test_lua_commit_and_ack_are_one_script(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    async with TestWorker(lua_app, tracer_provider=provider) as worker:
        await worker.publish("clicks", apps.Click(page="/", user="u"))
        await worker.drain()
    spans = exporter.get_finished_spans()
    (process,) = _named(spans, "process clicks")
    assert _children(spans, process) == ["streamworker.ack", "streamworker.idempotency.commit"]
    (commit,) = _named(spans, "streamworker.idempotency.commit")
    (ack,) = _named(spans, "streamworker.ack")
    assert (commit.start_time, commit.end_time) == (ack.start_time, ack.end_time)
    assert commit.attributes["streamworker.idempotency"] == "lua"


async def test_sql_commit_comes_before_the_ack(
    provider: TracerProvider, exporter: InMemorySpanExporter, streamworker_db_url: str
) -> None:
    apps.create_tables(streamworker_db_url)
    async with TestWorker(sql_app, tracer_provider=provider, db_url=streamworker_db_url) as w:
        await w.publish("orders", apps.Order(order_id=1, amount_cents=5))
        bad = await w.publish("orders", apps.Order(order_id=2, amount_cents=0))
        await w.drain()
    spans = exporter.get_finished_spans()
    ok, dead = _named(spans, "process orders")
    (commit,) = _named(spans, "streamworker.idempotency.commit")
    (ack,) = _named(spans, "streamworker.ack")
    assert commit.parent.span_id == ok.context.span_id
    assert commit.end_time <= ack.start_time <= ack.end_time <= ok.end_time
    assert dead.attributes["messaging.message.id"] == bad.id
    assert dead.status.status_code is StatusCode.ERROR
    assert _children(spans, dead) == []  # dead-lettered: no commit, no ack of its own


async def test_counters_and_the_handler_histogram_carry_the_trace_id_as_exemplar(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    async with TestWorker(app, tracer_provider=provider) as worker:
        await worker.publish("jobs", Job(1))
        await worker.drain()
        text = openmetrics(worker.metrics.registry).decode()
    (process,) = _named(exporter.get_finished_spans(), "process jobs")
    trace_id = f"{process.context.trace_id:032x}"
    acked = next(
        line
        for line in text.splitlines()
        if line.startswith("streamworker_messages_total{") and 'outcome="acked"' in line
    )
    assert acked.split(" # ")[0].endswith(" 1.0")  # the exemplar did not count
    assert f'trace_id="{trace_id}"' in acked
    assert any(
        line.startswith("streamworker_handler_duration_seconds_bucket{") and trace_id in line
        for line in text.splitlines()
    )


def test_inject_traceparent_adds_nothing_without_a_span() -> None:
    assert inject_traceparent({"n": "1"}) == {"n": "1"}


def test_inject_traceparent_writes_the_current_span_context(provider: TracerProvider) -> None:
    with provider.get_tracer("t").start_as_current_span("produce") as span:
        fields = inject_traceparent({"n": "1"})
    ctx = span.get_span_context()
    version, trace_id, span_id, flags = fields["traceparent"].split("-")
    assert (version, trace_id, span_id) == ("00", f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}")
    assert int(flags, 16) & 1  # sampled


def test_without_tracing_the_handlers_run_unwrapped() -> None:
    # The no-tracing path: nothing of streamworker.tracing is set up, no wrapper to call.
    worker = Worker(app, WorkerOptions(redis_url="engine://memory/untraced", consumer="c"))
    assert worker._tracing is None
    assert app.handlers[0].func is work


def test_tracing_without_the_extra_says_which_extra_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib.util

    from streamworker.errors import ConfigError

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "opentelemetry" else real(name, *a),
    )
    options = WorkerOptions(redis_url="engine://memory/untraced", consumer="c", tracing=True)
    with pytest.raises(ConfigError, match=r"pip install 'streamworker\[tracing\]'"):
        Worker(app, options)


unsampled_app = App("traced-unsampled")
seen_contexts: list[dict[str, str]] = []


@unsampled_app.handler("pings", group="g", max_deliveries=1)
async def ping(msg: Message) -> None:
    seen_contexts.append(inject_traceparent({}))
    if msg.fields.get("fail"):
        raise ValueError("boom")


async def test_an_unsampled_message_span_is_still_current_for_what_the_handler_publishes(
    exporter: InMemorySpanExporter,
) -> None:
    # Not sampled: nothing is exported, but the handler runs with the message's span current,
    # so what it publishes carries that trace, marked not sampled, and downstream consumers
    # that follow their parent's decision drop it too; a failure is still handled.
    tp = TracerProvider(sampler=ALWAYS_OFF)
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    seen_contexts.clear()
    async with TestWorker(unsampled_app, tracer_provider=tp) as worker:
        await worker.publish("pings", {"n": "1"})
        await worker.publish("pings", {"n": "2", "fail": "1"})
        await worker.drain()
    assert exporter.get_finished_spans() == ()
    assert len(seen_contexts) == 2
    trace_ids = set()
    for fields in seen_contexts:
        version, trace_id, _, flags = fields["traceparent"].split("-")
        assert version == "00"
        assert int(trace_id, 16) != 0
        assert not int(flags, 16) & 1  # not sampled
        trace_ids.add(trace_id)
    assert len(trace_ids) == 2  # each message its own trace
    assert trace.get_current_span() is trace.INVALID_SPAN  # nothing left current after
