"""The pure parts of ``run --processes``: child names, exit descriptions, probe aggregation and
the children's environment."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from streamworker import App, Message
from streamworker.cli.processes import (
    Supervisor,
    aggregate_probes,
    child_environment,
    child_exit_reason,
    process_consumer_name,
)
from streamworker.errors import ConfigError
from streamworker.settings import Settings


def test_child_names_are_the_base_name_and_the_slot_index() -> None:
    assert [process_consumer_name("pod", i) for i in range(3)] == ["pod-0", "pod-1", "pod-2"]


def test_exit_reasons_name_the_signal_or_the_code() -> None:
    assert child_exit_reason(-signal.SIGKILL) == "signal SIGKILL"
    assert child_exit_reason(1) == "exit 1"


def test_probes_are_ok_only_when_every_child_is_and_name_the_failing_ones() -> None:
    ok, details = aggregate_probes(
        {"pod-0": (True, {"redis": "ok"}), "pod-1": (False, {"starting": True})}
    )
    assert not ok
    assert details["failing"] == ["pod-1"]
    assert details["processes"]["pod-1"] == {"ok": False, "starting": True}
    assert aggregate_probes({"pod-0": (True, {})}) == (True, {"processes": {"pod-0": {"ok": True}}})


def test_children_get_the_resolved_settings_but_not_the_endpoint_or_the_process_count(
    tmp_path: Path,
) -> None:
    settings = Settings(
        redis_url="redis://h:1/0", metrics_port=9100, processes=4, consumer="pod", tracing=True
    )
    env = child_environment(
        settings,
        tmp_path,
        tmp_path / "m",
        {"PATH": "/bin", "STREAMWORKER_METRICS_PORT": "9100", "STREAMWORKER_PROCESSES": "4"},
    )
    assert env["PATH"] == "/bin"
    assert env["STREAMWORKER_REDIS_URL"] == "redis://h:1/0"
    assert env["STREAMWORKER_TRACING"] == "true"
    assert env["PROMETHEUS_MULTIPROC_DIR"] == str(tmp_path / "m")
    for name in ("METRICS_PORT", "METRICS_HOST", "PROCESSES", "CONSUMER"):
        assert f"STREAMWORKER_{name}" not in env


def test_an_in_process_engine_cannot_be_shared_by_several_processes() -> None:
    app = App("a")

    @app.handler("s", group="g")
    async def handle(msg: Message) -> None:
        return None

    with pytest.raises(ConfigError, match="engine serve"):
        Supervisor(
            app,
            "m:app",
            Settings(),
            processes=2,
            base_consumer="pod",
            redis_url="engine://memory",
        )
