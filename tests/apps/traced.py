"""A worker App that sets up OpenTelemetry as a user's module would: spans go to the JSON-lines
file named by SW_TEST_SPANS (the test reads it)."""

from __future__ import annotations

import json
import os

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from streamworker import App, Message


class FileExporter(SpanExporter):
    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: object) -> SpanExportResult:
        with open(self.path, "a", encoding="utf-8") as out:
            for span in spans:  # type: ignore[attr-defined]
                assert isinstance(span, ReadableSpan)
                out.write(json.dumps({"name": span.name, "links": len(span.links)}) + "\n")
        return SpanExportResult.SUCCESS


provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(FileExporter(os.environ["SW_TEST_SPANS"])))
trace.set_tracer_provider(provider)

app = App("traced-cli")


@app.handler("jobs", group="g", block_ms=200)
async def work(msg: Message) -> None:
    pass
