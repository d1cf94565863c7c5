"""``streamworker dashboard`` as a user runs it: unsafe command lines fail with one clear line,
and the server answers, here on the embedded engine (``engine://``)."""

from __future__ import annotations

import signal
import socket
import urllib.error
import urllib.request

import pytest

from tests.support.proc import run_cli, streamworker, wait_for
from tests.support.servers import free_port


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--bind", "0.0.0.0"], "refusing to serve the dashboard on 0.0.0.0 without a token"),
        (["--allow-actions"], "--allow-actions needs a token"),
        (["--token", "short"], "at least 8 characters"),
        (["--refresh-ms", "10"], "--refresh-ms must be at least 500"),
        (["--thresholds", "work_left=9/1"], "bad threshold 'work_left=9/1'"),
        (["--history-series", "0"], "--history-series must be between 1 and 10000"),
    ],
    ids=[
        "public-bind-without-token",
        "actions-without-token",
        "short-token",
        "refresh-too-fast",
        "bad-thresholds",
        "no-history",
    ],
)
def test_an_unsafe_command_line_is_refused(args: list[str], message: str) -> None:
    result = run_cli("dashboard", "--redis-url", "engine://memory", "--port", "0", *args)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_the_token_can_come_from_the_environment() -> None:
    result = run_cli(
        "dashboard",
        "--redis-url",
        "engine://memory",
        "--port",
        "0",
        "--allow-actions",
        env={"STREAMWORKER_DASHBOARD_TOKEN": "short"},
    )
    assert result.returncode == 2
    assert "at least 8 characters" in result.stderr  # the environment's token was checked


def test_an_empty_token_in_the_environment_is_no_token() -> None:
    result = run_cli(
        "dashboard",
        "--redis-url",
        "engine://memory",
        "--port",
        "0",
        "--allow-actions",
        env={"STREAMWORKER_DASHBOARD_TOKEN": ""},
    )
    assert result.returncode == 2
    assert "--allow-actions needs a token" in result.stderr


def test_a_port_in_use_is_a_clear_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_cli("dashboard", "--redis-url", "engine://memory", "--port", str(port))
    assert result.returncode == 2
    assert f"cannot serve the dashboard on 127.0.0.1:{port}" in result.stderr


def test_it_serves_the_embedded_engine_and_stops_on_sigterm() -> None:
    port = free_port()
    proc = streamworker("dashboard", "--redis-url", "engine://memory", "--port", str(port))
    pages: list[str] = []

    def fetch() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as r:
                pages.append(r.read().decode())
                return True
        except (urllib.error.URLError, OSError):
            return False

    try:
        wait_for(fetch, 60, "the dashboard answering")
        assert "No streams in this database." in pages[-1]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        assert b"dashboard_started" in (proc.stderr.read() if proc.stderr else b"")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
