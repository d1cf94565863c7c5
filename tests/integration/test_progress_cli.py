"""Long operator commands as a user runs them: a bar on a terminal (a real pty), plain lines in a
pipe, and ``--json`` for scripts."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
import tempfile

import redis

from tests.integration.test_admin_cli import _dead_letter
from tests.support.proc import ROOT, run_cli


def run_on_a_terminal(*args: str) -> tuple[int, str, str]:
    """Run ``streamworker ARGS`` with stderr on a pseudo-terminal; (exit code, stdout, what the
    terminal showed)."""
    master, slave = pty.openpty()
    # stdout to a file: a pipe nobody reads while the terminal is read would fill and block.
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streamworker", *args],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=slave,
        )
        os.close(slave)
        shown = bytearray()
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            shown += chunk
        os.close(master)
        proc.wait(timeout=60)
        out.seek(0)
        return proc.returncode, out.read().decode(), shown.decode()


def test_replay_on_a_terminal_draws_a_bar_in_place(
    redis_url: str, redis_client: redis.Redis
) -> None:
    _dead_letter(redis_client, 5000)
    code, stdout, shown = run_on_a_terminal(
        "dlq", "replay", "orders", "--all", "--redis-url", redis_url
    )
    assert code == 0, shown
    assert "reading the dead letters... (0s)" in shown  # the spinner while it loads them
    # Part-way bars, redrawn in place on one line, then the full one.
    assert re.search(r"\r\x1b\[K\[#*\.+\] replay \{orders\}:dlq: [\d,]+/5,000 entries", shown)
    assert "\r\x1b[K[########################] replay {orders}:dlq: 5,000/5,000 entries" in shown
    assert "\n" not in shown.rstrip("\r\n")
    assert "replayed 5000, skipped 0" in stdout  # the result stays on stdout
    assert "\r" not in stdout


def test_replay_in_a_pipe_prints_plain_lines_only(
    redis_url: str, redis_client: redis.Redis
) -> None:
    _dead_letter(redis_client, 300)
    result = run_cli("dlq", "replay", "orders", "--all", "--redis-url", redis_url)
    assert result.returncode == 0, result.stderr
    assert "\r" not in result.stderr
    assert "\x1b" not in result.stderr
    lines = result.stderr.splitlines()
    assert lines[0] == "replay {orders}:dlq: reading the dead letters... (0s)"
    assert lines[-1].startswith("replay {orders}:dlq: 300/300 entries (100%")


def test_replay_json_lists_each_moved_entry(redis_url: str, redis_client: redis.Redis) -> None:
    ids = _dead_letter(redis_client, 2)
    result = run_cli("dlq", "replay", "orders", "--all", "--json", "--redis-url", redis_url)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["dead_letter_stream"] == "{orders}:dlq"
    assert data["dry_run"] is False
    assert [r["stream"] for r in data["replayed"]] == ["orders", "orders"]
    new_ids = [r["new_id"] for r in data["replayed"]]
    assert [e[0].decode() for e in redis_client.xrange("orders")[-2:]] == new_ids
    assert data["skipped"] == []
    assert ids  # the originals stay in the stream: replay adds new entries


def test_purge_json_says_how_many_were_deleted(redis_url: str, redis_client: redis.Redis) -> None:
    _dead_letter(redis_client, 3)
    first = redis_client.xrange("{orders}:dlq")[0][0].decode()
    result = run_cli("dlq", "purge", "orders", "--id", first, "--json", "--redis-url", redis_url)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"dead_letter_stream": "{orders}:dlq", "deleted": 1}
    assert redis_client.xlen("{orders}:dlq") == 2
