"""``streamworker run --tracing`` sends spans to the tracer provider the App's module set up."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import redis
from opentelemetry.sdk.trace import TracerProvider

from streamworker.tracing import inject_traceparent
from tests.support.proc import streamworker, wait_for


def _spans(path: Path) -> list[dict[str, int | str]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def _done(client: redis.Redis) -> bool:
    try:
        groups = client.xinfo_groups("jobs")
    except redis.ResponseError:
        return False
    return bool(groups) and groups[0]["lag"] == 0 and groups[0]["pending"] == 0


def test_run_with_tracing_exports_a_linked_span_per_message(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    spans = tmp_path / "spans.jsonl"
    producer = TracerProvider().get_tracer("producer")
    with producer.start_as_current_span("place order"):
        redis_client.xadd("jobs", dict(inject_traceparent({"n": "1"})))
    redis_client.xadd("jobs", {"n": "2"})  # no context: a span without a link
    proc = streamworker(
        "run", "tests/apps/traced.py:app", "--redis-url", redis_url, "--tracing",
        env={"SW_TEST_SPANS": str(spans)},
    )  # fmt: skip
    try:
        wait_for(lambda: len([s for s in _spans(spans) if s["name"] == "process jobs"]) == 2)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    processed = [s for s in _spans(spans) if s["name"] == "process jobs"]
    assert sorted(s["links"] for s in processed) == [0, 1]
    assert proc.returncode == 0


def test_run_without_tracing_exports_nothing(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    spans = tmp_path / "spans.jsonl"
    redis_client.xadd("jobs", {"n": "1"})
    proc = streamworker(
        "run", "tests/apps/traced.py:app", "--redis-url", redis_url,
        env={"SW_TEST_SPANS": str(spans)},
    )  # fmt: skip
    try:
        wait_for(lambda: _done(redis_client), what="the message handled")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    assert _spans(spans) == []
