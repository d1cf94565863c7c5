"""The chaos suite's seed and log.

One seed per session: ``STREAMWORKER_CHAOS_SEED=N`` replays a run; otherwise a fresh one is drawn,
except under CI (``CI=true``), which runs :data:`CI_SEED` so that its verdict can be reproduced.
It is printed in the terminal summary; each test's chaos log (seed, plan, faults as performed,
what the workers saw) is attached to its report and printed with its captured output when it fails.
"""

from __future__ import annotations

import os
import random
import re
import shutil
from collections.abc import Callable, Generator, Iterator
from pathlib import Path

import pytest

from tests.chaos.schedule import SEED_ENV, seed_from_env
from tests.support.chaos import ChaosLog
from tests.support.servers import in_ci

LOG_DIR_ENV = "STREAMWORKER_CHAOS_LOG_DIR"

CI_SEED = 20261122
"""The plan CI runs (any seed must pass; run the suite locally for fresh ones)."""

_used_seed: list[int] = []
_results: list[str] = []
_LOG_KEY = pytest.StashKey[ChaosLog]()


@pytest.fixture(scope="session")
def chaos_seed() -> int:
    """The session's seed: ``STREAMWORKER_CHAOS_SEED``, :data:`CI_SEED` under CI, or a fresh
    random one."""
    try:
        seed = seed_from_env()
    except ValueError as exc:
        pytest.fail(str(exc), pytrace=False)
    if seed is None:
        seed = CI_SEED if in_ci() else random.SystemRandom().randrange(1_000_000)
    _used_seed.append(seed)
    return seed


@pytest.fixture
def chaos_log(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ChaosLog]:
    """The test's chaos log (``chaos.log`` in its temp dir), attached to its report. With
    ``STREAMWORKER_CHAOS_LOG_DIR`` set, the log and the workers' logs are copied there after the
    test (a CI artifact), in a directory named after the test."""
    log = ChaosLog(tmp_path / "chaos.log")
    request.node.stash[_LOG_KEY] = log
    yield log
    keep = os.environ.get(LOG_DIR_ENV)
    if keep:
        target = Path(keep) / re.sub(r"[^\w.-]+", "_", request.node.name)
        target.mkdir(parents=True, exist_ok=True)
        for path in [log.path, *tmp_path.glob("worker-*")]:
            shutil.copy(path, target / path.name)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    log = item.stash.get(_LOG_KEY, None)
    if log is not None and report.when == "call":
        report.sections.append(("chaos log", f"{log.path}\n{log.text()}"))
    return report


@pytest.fixture
def chaos_result() -> Callable[[str], None]:
    """Record a one-line result (counts of a scenario) for the terminal summary."""
    return _results.append


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for line in _results:
        terminalreporter.write_line(line)
    if _used_seed:
        seed = _used_seed[0]
        terminalreporter.write_line(f"chaos seed: {seed} (replay: {SEED_ENV}={seed})")
