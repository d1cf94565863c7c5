"""``pytest -n 2 --dist loadgroup`` with tests/support/xdist_scopes.py: the tests of one costly
server run on one worker, so do the tests of a module-scoped fixture; the rest are spread."""

from __future__ import annotations

import os
import re
from collections import defaultdict
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

_ROOT = Path(__file__).resolve().parents[2]

_CONFTEST = """
import pytest

pytest_plugins = ["tests.support.xdist_scopes"]


@pytest.fixture
def redis_cluster():
    return "a cluster"


@pytest.fixture(params=["redis", "cluster"])
def backend(request):
    return request.param


@pytest.fixture(scope="module")
def shared():
    return "one per module"
"""

_TESTS = """
import time

import pytest


@pytest.mark.parametrize("i", range(8))
def test_on_the_cluster(redis_cluster, i):
    time.sleep(0.05)


@pytest.mark.parametrize("i", range(4))
def test_on_each_backend(backend, i):
    time.sleep(0.05)


@pytest.mark.parametrize("i", range(16))
def test_alone(i):
    time.sleep(0.05)
"""

_MODULE = """
import time

import pytest


@pytest.mark.parametrize("i", range(8))
def test_sharing_a_module_fixture(shared, i):
    time.sleep(0.05)
"""


def _workers_by_test(pytester: pytest.Pytester) -> dict[str, str]:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makeconftest(_CONFTEST)
    pytester.makepyfile(test_grouped=_TESTS, test_module=_MODULE)
    env_path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(_ROOT), env_path) if p)
    try:
        result = pytester.runpytest_subprocess(
            "-n", "2", "--dist", "loadgroup", "-v", "-p", "no:cacheprovider"
        )
    finally:
        os.environ["PYTHONPATH"] = env_path
    result.assert_outcomes(passed=40)
    ran = {}
    for line in result.outlines:
        match = re.match(r"\[(gw\d)\] .*PASSED (\S+)", line)
        if match:
            ran[match.group(2)] = match.group(1)
    assert len(ran) == 40, result.outlines
    return ran


@pytest.mark.slow  # two xdist workers start: some 15 s, kept out of make test-fast
def test_groups_and_module_fixtures_stay_on_one_worker_and_the_rest_is_spread(
    pytester: pytest.Pytester,
) -> None:
    ran = _workers_by_test(pytester)
    units: dict[str, set[str]] = defaultdict(set)
    for nodeid, worker in ran.items():
        if "cluster" in nodeid:  # test_on_the_cluster[...] and test_on_each_backend[cluster-...]
            units["cluster"].add(worker)
        elif "test_module.py" in nodeid:
            units["module"].add(worker)
        else:
            units["alone"].add(worker)
    assert len(units["cluster"]) == 1, ran
    assert len(units["module"]) == 1, ran
    # The single tests go to both workers: the split is fine-grained where nothing is shared.
    assert units["alone"] == {"gw0", "gw1"}, ran
