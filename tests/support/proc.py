"""Running ``streamworker`` as a user would: a real subprocess."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support.journal import read_records
from tests.support.waiting import wait_until as wait_for

__all__ = [
    "ROOT",
    "assert_killed",
    "children_by_consumer",
    "kill_when",
    "process_gone",
    "read_lines",
    "run_cli",
    "stop_process",
    "streamworker",
    "wait_for",
]

ROOT = Path(__file__).resolve().parents[2]


def streamworker(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.Popen[bytes]:
    """Start ``streamworker ARGS`` (via ``python -m streamworker``) with JSON logs on stderr."""
    full_env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "STREAMWORKER_LOG_FORMAT": "json",
        **(env or {}),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "streamworker", *args],
        cwd=cwd or ROOT,
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def run_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run ``streamworker ARGS`` to completion and capture its output as text."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "streamworker", *args],
        cwd=ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def read_lines(path: Path) -> list[list[str]]:
    """The whole records a test app appended to ``path`` (:mod:`tests.support.journal`)."""
    return read_records(path)


def run_app(
    app: str, url: str, consumer: str, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """``streamworker run APP --redis-url URL --consumer CONSUMER`` (a test app of tests/apps),
    with a short reconnect backoff and ``env`` on top."""
    return streamworker(
        "run",
        app,
        "--redis-url",
        url,
        "--consumer",
        consumer,
        env={"STREAMWORKER_RECONNECT_BACKOFF_MAX_S": "0.5", **(env or {})},
    )


def stop_process(proc: subprocess.Popen[bytes], timeout_s: float = 60) -> str:
    """SIGTERM ``proc`` if it still runs, SIGKILL it after ``timeout_s``; return its stderr."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return err.decode(errors="replace")


def assert_killed(proc: subprocess.Popen[bytes]) -> None:
    """``proc`` ended by SIGKILL (a crash point it was told to stop at)."""
    proc.wait(30)
    assert proc.returncode == -signal.SIGKILL


def children_by_consumer(parent: int) -> dict[str, int]:
    """The live child processes of ``parent`` that run ``streamworker run``, by their
    ``--consumer`` (how a test finds the children of ``run --processes N``)."""
    found: dict[str, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if int(fields[1]) != parent or fields[0] == "Z" or b"--consumer" not in argv:
            continue
        found[argv[argv.index(b"--consumer") + 1].decode()] = int(entry.name)
    return found


def process_gone(pid: int) -> bool:
    """``pid`` has exited (or is a zombie nobody reaped yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rfind(")") + 2 :].split()[0] in ("Z", "X")


def kill_when(pid: int, check, timeout_s: float = 20.0) -> object:  # type: ignore[no-untyped-def]
    """SIGKILL ``pid`` at a moment ``check()`` is truthy while it is frozen (SIGSTOP), so what
    ``check`` saw is what the process leaves behind; returns that value."""
    deadline = time.monotonic() + timeout_s
    while True:
        os.kill(pid, signal.SIGSTOP)
        seen = check()
        if seen:
            os.kill(pid, signal.SIGKILL)
            return seen
        os.kill(pid, signal.SIGCONT)
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {check}")
        time.sleep(0.01)
