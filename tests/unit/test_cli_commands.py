"""The ``streamworker`` command imports only the module of the command it is given."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence

import pytest

from streamworker.cli import _COMMANDS, _command_word, build_parser
from streamworker.cli.produce import stop_on_signal
from tests.support.proc import ROOT


def _words(parser: argparse.ArgumentParser) -> list[str]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return list(sub.choices)


def test_the_table_names_every_command_in_the_order_of_the_help() -> None:
    assert _words(build_parser()) == list(_COMMANDS)


@pytest.mark.parametrize("word", list(_COMMANDS))
def test_a_command_alone_gets_its_own_parser(word: str) -> None:
    assert word in _words(build_parser(word))


def test_a_word_that_is_not_a_command_gets_every_command() -> None:
    assert _words(build_parser("rnu")) == list(_COMMANDS)


@pytest.mark.parametrize("word", list(_COMMANDS))
def test_a_commands_summary_is_the_same_whether_or_not_its_module_is_imported(word: str) -> None:
    def summary(parser: argparse.ArgumentParser) -> str | None:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        (choice,) = (c for c in sub._choices_actions if c.dest == word)
        return choice.help

    assert summary(build_parser(word)) == summary(build_parser(outline=True))


@pytest.mark.parametrize("word", list(_COMMANDS))
def test_every_command_runs_something_and_describes_it(word: str) -> None:
    sub = next(a for a in build_parser(word)._actions if isinstance(a, argparse._SubParsersAction))
    parser = sub.choices[word]
    assert parser.description, f"{word} --help has no description"
    nested = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    runners = [p for a in nested for p in a.choices.values()] if nested else [parser]
    for runner in runners:
        assert callable(runner.get_default("func")), f"{runner.prog} runs nothing"
        assert runner.description, f"{runner.prog} --help has no description"


@pytest.mark.parametrize(
    ("argv", "word"),
    [
        (["engine", "serve"], "engine"),
        (["--bogus", "run", "x:app"], "run"),
        (["-h", "run"], None),
        (["--version"], None),
        ([], None),
    ],
)
def test_the_command_word_is_the_first_word_after_the_top_levels_options(
    argv: list[str], word: str | None
) -> None:
    assert _command_word(argv) == word


_PROBE = """
import contextlib, io, sys
from streamworker.cli import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
    main(sys.argv[1:])
heavy = ("redis", "pydantic", "structlog", "streamworker.app", "streamworker.runtime")
heavy = heavy + tuple(__import__("os").environ.get("PROBE", "").split())
print(" ".join(sorted(m for m in heavy if m in sys.modules)))
"""
_COMMAND_MODULES = sorted({entry.module for entry in _COMMANDS.values()})


def _imported(*argv: str, probe: Sequence[str] = ()) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *argv],
        env={**os.environ, "PROBE": " ".join(probe)},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return set(done.stdout.split())


def test_engine_serve_starts_without_the_worker_runtime_redis_py_or_pydantic() -> None:
    assert _imported("engine", "serve", "--help") == set()


@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["rnu"]])
def test_the_top_level_imports_no_commands_module(argv: list[str]) -> None:
    assert _imported(*argv, probe=_COMMAND_MODULES) == set()


def test_the_package_alone_imports_none_of_them() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import sys, streamworker; print('redis' in sys.modules)"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.strip() == "False"


def test_run_still_gets_everything_it_needs() -> None:
    assert {"redis", "pydantic", "streamworker.app"} <= _imported("run", "--help")


def test_the_relays_stop_signal_takes_no_lock_the_main_thread_may_hold() -> None:
    # The signal can arrive while the main thread is inside stop.wait() holding the event's
    # lock, which is not reentrant: a handler calling stop.set() itself would wait forever.
    stop = threading.Event()
    handler = stop_on_signal(stop)
    with stop._cond:  # type: ignore[attr-defined]  # as inside stop.wait()
        handler(signal.SIGTERM, None)  # returns: it takes no lock here
        assert not stop.is_set()
    assert stop.wait(30), "the stop was never set"
