"""A pytest plugin that records how long each phase of each test took, for
``scripts/test_timings.py`` (the per-folder table in ``tests/README.md``).

Off unless ``STREAMWORKER_TEST_TIMINGS`` names a file: then one JSON line per test phase
(``nodeid``, ``when`` — setup, call or teardown — ``duration_s`` and ``outcome``) is appended to it.
Setup time is where shared servers start, so it is kept apart from the test's own time.
"""

from __future__ import annotations

import json
import os
from typing import IO

import pytest

_ENV = "STREAMWORKER_TEST_TIMINGS"
_sink: IO[str] | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _sink
    path = os.environ.get(_ENV)
    # Under pytest-xdist each worker appends its own lines; one line per write keeps them whole.
    # The controller hears every worker's reports again: it writes none of them.
    controller = getattr(config, "workerinput", None) is None and bool(
        config.getoption("numprocesses", None)
    )
    if path and _sink is None and not controller:
        _sink = open(path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 (kept for the run)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if _sink is None:
        return
    _sink.write(
        json.dumps(
            {
                "nodeid": report.nodeid,
                "when": report.when,
                "duration_s": round(report.duration, 4),
                "outcome": report.outcome,
            }
        )
        + "\n"
    )


def pytest_unconfigure(config: pytest.Config) -> None:
    global _sink
    if _sink is not None:
        _sink.close()
        _sink = None
