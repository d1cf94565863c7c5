"""The metrics model: handler labels, outage counting, build info, process collectors."""

from __future__ import annotations

from streamworker import __version__
from streamworker.observability.metrics import Metrics


def test_two_handlers_on_one_stream_and_group_count_apart() -> None:
    metrics = Metrics()
    for handler in ("v1.on_order", "v2.on_order"):
        metrics.prime("orders", "billing", handler)
    metrics.messages.labels(
        stream="orders", group="billing", handler="v2.on_order", outcome="acked"
    ).inc(3)
    get = metrics.registry.get_sample_value
    labels = {"stream": "orders", "group": "billing", "outcome": "acked"}
    assert get("streamworker_messages_total", {**labels, "handler": "v1.on_order"}) == 0
    assert get("streamworker_messages_total", {**labels, "handler": "v2.on_order"}) == 3


def test_an_outage_counts_once_when_it_ends_and_every_attempt_apart() -> None:
    metrics = Metrics()
    labels = {"stream": "s", "group": "g", "handler": "h"}
    outage = metrics.outage(**labels)
    outage.recovered()  # no outage open: nothing to count
    for _ in range(9):
        outage.attempt()
    outage.recovered()
    outage.recovered()
    get = metrics.registry.get_sample_value
    assert get("streamworker_reconnect_attempts_total", labels) == 9
    assert get("streamworker_reconnects_total", labels) == 1


def test_build_info_and_process_metrics_are_exported() -> None:
    metrics = Metrics()
    names = {s.name for family in metrics.registry.collect() for s in family.samples}
    assert {"process_resident_memory_bytes", "process_open_fds", "python_info"} <= names
    info = [
        s
        for family in metrics.registry.collect()
        for s in family.samples
        if s.name == "streamworker_build_info"
    ]
    assert [(s.labels["version"], s.value) for s in info] == [(__version__, 1.0)]


def test_process_collectors_can_be_left_out() -> None:
    metrics = Metrics(process_collectors=False)
    names = {s.name for family in metrics.registry.collect() for s in family.samples}
    assert "process_resident_memory_bytes" not in names


def _scrape(port: int, accept: str | None) -> tuple[str, str]:
    import urllib.request

    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics")
    if accept:
        request.add_header("Accept", accept)
    with urllib.request.urlopen(request, timeout=5) as resp:
        return resp.headers["Content-Type"], resp.read().decode()


def test_metrics_endpoint_serves_openmetrics_with_exemplars_when_asked() -> None:
    from streamworker.observability.health import HealthServer

    metrics = Metrics(process_collectors=False)
    metrics.messages.labels(stream="s", group="g", handler="h", outcome="acked").inc(
        1, exemplar={"trace_id": "ab" * 16}
    )
    server = HealthServer(metrics.registry, lambda: (True, {}), lambda: (True, {}))
    port = server.start("127.0.0.1", 0)
    try:
        plain_type, plain = _scrape(port, None)
        open_type, openmetrics = _scrape(port, "application/openmetrics-text; version=1.0.0")
    finally:
        server.stop()
    assert plain_type.startswith("text/plain")
    assert "trace_id" not in plain  # the classic format has no exemplars
    assert open_type.startswith("application/openmetrics-text")
    assert f'# {{trace_id="{"ab" * 16}"}} 1.0' in openmetrics
