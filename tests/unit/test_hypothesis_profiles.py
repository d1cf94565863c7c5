"""The hypothesis profiles (tests/support/hypothesis_profiles.py): which one a run loads, and that
``ci`` runs every property test with exactly the example count it had before profiles existed
while ``dev`` runs fewer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from tests.support.hypothesis_profiles import (
    CI,
    CI_EXAMPLES,
    DEV,
    examples,
    load_profile,
    profile_name,
)

ROOT = Path(__file__).resolve().parents[2]

# The budgets CI ran on 2026-11-28, before the profiles: the explicit counts, and hypothesis's
# default (100) for the test that names none.
CI_BUDGETS = {
    "tests.engine.test_differential::test_stream_commands_match_redis": 250,
    "tests.engine.test_differential::test_consumer_group_commands_match_redis": 300,
    "tests.engine.test_differential::test_keyspace_and_other_types_match_redis": 200,
    "tests.engine.test_differential::test_bit_commands_match_redis": 150,
    "tests.engine.test_differential::test_geo_commands_match_redis": 150,
    "tests.engine.test_differential::test_hyperloglog_commands_match_redis": 150,
    "tests.engine.test_differential::test_list_commands_match_redis": 150,
    "tests.engine.test_differential::test_list_move_commands_match_redis": 150,
    "tests.engine.test_differential::test_set_algebra_commands_match_redis": 150,
    "tests.engine.test_differential::test_random_and_scan_commands_match_redis": 150,
    "tests.engine.test_differential::test_zset_pop_and_intersection_commands_match_redis": 150,
    "tests.engine.test_differential::test_sort_commands_match_redis": 150,
    "tests.engine.test_differential::test_transactions_match_redis": 200,
    "tests.engine.test_differential::test_argument_errors_match_redis": 200,
    "tests.engine.test_server_fuzz::test_the_parser_does_not_depend_on_how_input_is_split": 400,
    "tests.engine.test_server_fuzz::test_the_server_answers_in_resp_and_survives_any_input": 150,
    "tests.engine.test_extreme_args::test_random_extreme_argument_lists_answer_at_once_as_redis_does": 1000,
    "tests.unit.test_spark_ranges::test_split_covers_exactly_the_interval_once": 100,
}

# Loads the profile as tests/conftest.py does, imports every test module that uses @given and
# prints each property test's max_examples as the module's decorators fixed it.
_BUDGETS_SCRIPT = """
import importlib, json, os, pathlib, sys
from tests.support.hypothesis_profiles import load_profile
load_profile(os.environ)
root = pathlib.Path(sys.argv[1])
budgets = {}
for path in sorted(root.glob("tests/**/test_*.py")):
    if "@given" not in path.read_text(encoding="utf-8"):
        continue
    name = ".".join(path.relative_to(root).with_suffix("").parts)
    module = importlib.import_module(name)
    for attr, value in vars(module).items():
        if callable(value) and hasattr(value, "hypothesis"):
            budgets[f"{name}::{attr}"] = value._hypothesis_internal_use_settings.max_examples
print(json.dumps(budgets))
"""


def _budgets(**env: str) -> dict[str, int]:
    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in ("CI", "HYPOTHESIS_PROFILE", "DIFFERENTIAL_EXAMPLES")
    }
    clean.update(env, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-c", _BUDGETS_SCRIPT, str(ROOT)],
        cwd=ROOT,
        env=clean,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    budgets: dict[str, int] = json.loads(done.stdout)
    return budgets


@pytest.fixture
def restore_profile() -> Iterator[None]:
    """Put back the profile this run loaded (the tests below load others)."""
    before = settings.get_current_profile_name()
    yield
    settings.load_profile(before)


def test_ci_true_picks_the_ci_profile() -> None:
    assert profile_name({"CI": "true"}) == CI


def test_without_ci_the_dev_profile_is_picked() -> None:
    assert profile_name({}) == DEV
    assert profile_name({"CI": "false"}) == DEV


def test_hypothesis_profile_overrides_ci() -> None:
    assert profile_name({"CI": "true", "HYPOTHESIS_PROFILE": DEV}) == DEV
    assert profile_name({"HYPOTHESIS_PROFILE": CI}) == CI


@pytest.mark.usefixtures("restore_profile")
def test_an_unknown_profile_name_is_an_error_that_names_it() -> None:
    with pytest.raises(pytest.UsageError, match="HYPOTHESIS_PROFILE=no-such-profile"):
        load_profile({"HYPOTHESIS_PROFILE": "no-such-profile"})


@pytest.mark.usefixtures("restore_profile")
def test_a_budget_is_kept_exactly_under_ci_and_cut_to_a_quarter_under_dev() -> None:
    load_profile({"CI": "true"})
    assert settings().max_examples == CI_EXAMPLES
    assert [examples(n) for n in (1, 150, 250, 1000)] == [1, 150, 250, 1000]
    load_profile({})
    assert [examples(n) for n in (1, 150, 250, 1000)] == [1, 37, 62, 250]


@pytest.mark.usefixtures("restore_profile")
def test_the_ci_profile_keeps_hypothesis_ci_settings_besides_the_count() -> None:
    load_profile({"CI": "true"})
    assert settings().derandomize is True
    assert settings().database is None
    assert settings().deadline is None


def test_under_ci_every_property_test_runs_the_budget_it_had_before_profiles() -> None:
    ci = _budgets(CI="true")
    assert {name: ci.get(name) for name in CI_BUDGETS} == CI_BUDGETS


def test_under_dev_every_property_test_runs_fewer_examples_than_under_ci() -> None:
    ci = _budgets(CI="true")
    dev = _budgets()
    assert dev.keys() == ci.keys()
    assert [name for name in ci if not dev[name] < ci[name]] == []
