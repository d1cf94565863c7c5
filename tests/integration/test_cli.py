"""The CLI as a user meets it: help, and one clear line for every mistake."""

from __future__ import annotations

from pathlib import Path

from tests.support.proc import run_cli
from tests.support.servers import free_port


def test_help_lists_the_run_command() -> None:
    result = run_cli("--help")
    assert result.returncode == 0
    assert "run" in result.stdout


def test_run_help_documents_the_flags() -> None:
    result = run_cli("run", "--help")
    assert result.returncode == 0
    for flag in ("--redis-url", "--db-url", "--consumer", "--metrics-port", "STREAMWORKER_"):
        assert flag in result.stdout


def _one_line_error(result) -> str:  # type: ignore[no-untyped-def]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("streamworker: error: ")
    return str(lines[0])


def test_unimportable_module_is_one_line_exit_2() -> None:
    result = run_cli("run", "no_such_module_xyz:app")
    assert result.returncode == 2
    assert "cannot import module 'no_such_module_xyz'" in _one_line_error(result)


def test_module_that_fails_on_import_is_reported(tmp_path: Path) -> None:
    bad = tmp_path / "broken.py"
    bad.write_text("raise RuntimeError('half-written module')\n")
    result = run_cli("run", f"{bad}:app")
    assert result.returncode == 2
    assert "RuntimeError: half-written module" in _one_line_error(result)


def test_missing_attribute_is_reported() -> None:
    result = run_cli("run", "tests.apps.recorder:nope")
    assert result.returncode == 2
    assert "has no attribute 'nope'" in _one_line_error(result)


def test_attribute_that_is_not_an_app_is_reported() -> None:
    result = run_cli("run", "tests.apps.recorder:record")
    assert result.returncode == 2
    assert "not a streamworker App" in _one_line_error(result)


def test_missing_file_is_reported() -> None:
    result = run_cli("run", "nowhere/app.py:app")
    assert result.returncode == 2
    assert "no such file" in _one_line_error(result)


def test_bad_url_is_reported() -> None:
    result = run_cli("run", "tests.apps.recorder:app", "--redis-url", "http://127.0.0.1:6379")
    assert result.returncode == 2
    assert "scheme 'http'" in _one_line_error(result)


def test_unreachable_redis_is_one_line_exit_1() -> None:
    port = free_port()
    result = run_cli("run", "tests.apps.recorder:app", "--redis-url", f"redis://127.0.0.1:{port}/0")
    assert result.returncode == 1
    assert f"cannot reach Redis at redis://127.0.0.1:{port}/0" in _one_line_error(result)


def test_bad_setting_from_environment_is_reported() -> None:
    result = run_cli(
        "run", "tests.apps.recorder:app", env={"STREAMWORKER_SHUTDOWN_TIMEOUT_S": "soon"}
    )
    assert result.returncode == 2
    assert "shutdown_timeout_s" in _one_line_error(result)


def test_version() -> None:
    result = run_cli("--version")
    assert result.returncode == 0
    assert result.stdout.startswith("streamworker ")
