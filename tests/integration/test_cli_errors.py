"""One rule for every ``streamworker`` command's mistakes, as a user meets them (subprocesses):
one line on stderr, no traceback, exit 2, for an unknown flag (with that command's usage), a
stream or group that does not exist, an ``engine:///DIR`` another process holds, and an
in-memory engine where one cannot make sense."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.support.engine_server import EngineServerProcess
from tests.support.proc import run_cli, stop_process, streamworker

APP = "tests/apps/recorder.py:app"


def _one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    """The single error line of a failed command (asserts exit 2 and no traceback)."""
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("streamworker")]
    assert len(lines) == 1, result.stderr
    return lines[0]


# --- unknown flags ----------------------------------------------------------------------------


def test_an_unknown_top_level_flag_is_named_not_only_the_missing_command() -> None:
    line = _one_line_error(run_cli("--bogus"))
    assert line == "streamworker: error: unrecognized arguments: --bogus"


@pytest.mark.parametrize(
    ("command", "usage"),
    [
        (["run", APP], "usage: streamworker run"),
        (["pending", "s", "g"], "usage: streamworker pending"),
        (["dlq", "list", "s"], "usage: streamworker dlq list"),
        (["dlq", "replay", "s", "--all"], "usage: streamworker dlq replay"),
        (["publish", "s", "a=1"], "usage: streamworker publish"),
        (["relay"], "usage: streamworker relay"),
        (["migrate"], "usage: streamworker migrate"),
        (["prune", "s", "g"], "usage: streamworker prune"),
        (["engine", "serve"], "usage: streamworker engine serve"),
        (["dashboard"], "usage: streamworker dashboard"),
    ],
)
def test_an_unknown_flag_gets_that_commands_usage_and_exit_2(
    command: list[str], usage: str
) -> None:
    result = run_cli(*command, "--bogus-flag")
    line = _one_line_error(result)
    assert line.endswith("error: unrecognized arguments: --bogus-flag")
    assert result.stderr.startswith(usage)


# --- missing streams and groups ---------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ["pending", "nosuch", "billing"],
        ["dlq", "list", "nosuch"],
        ["dlq", "show", "nosuch", "1-1"],
        ["dlq", "replay", "nosuch", "--all"],
        ["dlq", "purge", "nosuch", "--id", "1-1"],
        ["prune", "nosuch", "billing", "--db-url", "sqlite:///unused.db"],
    ],
)
def test_a_missing_stream_is_one_line_and_exit_2_for_every_command(
    command: list[str], redis_url: str, redis_client: redis.Redis
) -> None:
    line = _one_line_error(run_cli(*command, "--redis-url", redis_url))
    assert "stream 'nosuch' does not exist" in line


@pytest.mark.parametrize(
    "command",
    [["pending", "orders", "nosuch"], ["prune", "orders", "nosuch", "--db-url", "sqlite:///x.db"]],
)
def test_a_missing_group_is_named_with_the_groups_that_exist(
    command: list[str], redis_url: str, redis_client: redis.Redis
) -> None:
    redis_client.xgroup_create("orders", "billing", id="$", mkstream=True)
    line = _one_line_error(run_cli(*command, "--redis-url", redis_url))
    assert line.endswith("stream 'orders' has no group 'nosuch' (its groups: billing)")


# --- an engine directory another process holds ------------------------------------------------


@pytest.fixture
def held_dir(tmp_path: Path) -> Iterator[Path]:
    """A data directory held by a running ``streamworker engine serve --dir``."""
    data = tmp_path / "data"
    server = EngineServerProcess(data).start()
    yield data
    server.stop()


@pytest.mark.parametrize(
    "command",
    [
        ["publish", "orders", "a=1"],
        ["pending", "orders", "billing"],
        ["dlq", "list", "orders"],
        ["run", APP],
    ],
)
def test_a_command_on_a_held_engine_directory_is_one_line_and_exit_2(
    command: list[str], held_dir: Path
) -> None:
    line = _one_line_error(run_cli(*command, "--redis-url", f"engine://{held_dir}"))
    assert f"data directory {held_dir} is in use by another engine" in line


# --- in-memory engines ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ["publish", "orders", "a=1"],
        ["pending", "orders", "billing"],
        ["dlq", "list", "orders"],
        ["dlq", "replay", "orders", "--all"],
        ["relay", "--db-url", "sqlite:///unused.db"],
        ["prune", "orders", "billing", "--db-url", "sqlite:///unused.db"],
        ["run", APP, "--processes", "2"],
    ],
)
@pytest.mark.parametrize("url", ["engine://memory", "engine://memory/shop"])
def test_commands_that_cannot_work_on_an_in_memory_engine_refuse_it(
    command: list[str], url: str
) -> None:
    line = _one_line_error(run_cli(*command, "--redis-url", url))
    assert "in-memory engine lives only in this process" in line
    assert "streamworker engine serve" in line
    assert "engine:///DIR" in line


def test_run_on_an_in_memory_engine_runs_and_says_once_that_nothing_else_can_reach_it(
    tmp_path: Path,
) -> None:
    proc = streamworker(
        "run", APP, "--redis-url", "engine://memory", env={"SW_TEST_LOG": str(tmp_path / "log")}
    )
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline().decode()
        assert first.startswith("streamworker: warning: engine://memory lives only in this process")
        assert "streamworker engine serve" in first
        # Then the worker starts as usual (its log lines follow; EOF would mean it exited).
        lines = iter(proc.stderr.readline, b"")
        assert any(b"worker_started" in line for line in lines)
    finally:
        err = stop_process(proc)
    assert proc.returncode == 0, err
