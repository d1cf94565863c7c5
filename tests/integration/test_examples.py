"""The examples run and print what their READMEs say."""

from __future__ import annotations

import subprocess
import sys

from tests.support.proc import ROOT


def run_example(script: str, *args: str, expect: tuple[str, ...], timeout: float = 60) -> str:
    """Run ``examples/SCRIPT`` as a user would; assert exit 0 and every expected line; stdout."""
    result = subprocess.run(
        [sys.executable, f"examples/{script}", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for line in expect:
        assert line in result.stdout
    return result.stdout


def test_quickstart_demo_runs_on_the_embedded_engine_by_default() -> None:
    run_example(
        "quickstart/demo.py",
        expect=(
            "(engine://memory)",
            "charged order 1: 12.50 EUR",
            "dead-lettered order 3: DeadLetter: order 3 has no amount",
            "dead-lettered order not-a-number: PermanentFailure: body failed validation",
            "pending after the run: 0",
        ),
    )


def test_quickstart_demo_processes_charges_and_dead_letters(redis_url: str) -> None:
    run_example(
        "quickstart/demo.py",
        "--redis-url",
        redis_url,
        expect=(
            "charged order 1: 12.50 EUR",
            "charged order 4: 49.99 EUR",
            "dead-lettered order 3: DeadLetter: order 3 has no amount",
            "dead-lettered order not-a-number: PermanentFailure: body failed validation",
            "pending after the run: 0",
        ),
    )


def test_sql_orders_demo_charges_every_order_once_across_a_crash_after_commit(
    redis_url: str,
) -> None:
    run_example(
        "sql_orders/demo.py",
        "--redis-url",
        redis_url,
        timeout=120,
        expect=(
            "produced 200 orders (order 7 has no amount)",
            "worker 1 killed with SIGKILL after a commit, before its XACK",
            "pending after the crash: 50",
            "charges: 199 (orders 200, dead-lettered 1)",
            "orders charged twice: 0",
            "pending after the run: 0",
        ),
    )


def test_click_counters_demo_counts_each_click_once_across_a_crash_and_a_replay(
    redis_url: str,
) -> None:
    run_example(
        "click_counters/demo.py",
        "--redis-url",
        redis_url,
        timeout=120,
        expect=(
            "produced 1020 clicks (1000 distinct click ids: 20 sent twice by a retrying producer)",
            "worker 1 killed with SIGKILL before its 3rd batch's script (its handlers had run)",
            "pending after the crash: 100",
            "total clicks counted: 1000",
            "counters match the distinct clicks: yes",
            "replayed 1020 entries (XGROUP SETID clicks counters 0): counters unchanged: yes",
            "pending after the run: 0",
        ),
    )


def run_example_tests(example: str) -> str:
    """Run ``pytest examples/EXAMPLE`` as its README says (the test kit, no Redis)."""
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"examples/{example}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_quickstart_own_tests_pass_with_the_test_kit() -> None:
    assert "3 passed" in run_example_tests("quickstart")


def test_click_counters_own_tests_pass_with_the_test_kit() -> None:
    assert "3 passed" in run_example_tests("click_counters")


def test_sql_orders_own_tests_pass_with_the_test_kit() -> None:
    assert "2 passed" in run_example_tests("sql_orders")


def test_pipeline_demo_reflects_every_order_once_in_every_stage_across_kills(
    redis_url: str,
) -> None:
    out = run_example(
        "pipeline/demo.py",
        "--redis-url",
        redis_url,
        timeout=180,
        expect=(
            "published 300 orders (10 retried publishes added nothing)",
            "worker and relay killed with SIGKILL mid-run; restarting both",
            "stage 1 (SQL charges): 300 orders, charged twice: 0",
            "outbox -> payments: 300 entries, twice: 0, left: 0",
            "stage 2 (Lua balances): 300 payments applied, twice: 0",
            "balances add up: yes",
            "stage 2 -> ledger: 300 entries, twice: 0",
            "stage 3 (final count): 300, counted twice: 0",
        ),
    )
    print(out)
