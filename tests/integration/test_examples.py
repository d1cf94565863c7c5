"""The examples run and print what their READMEs say."""

from __future__ import annotations

import subprocess
import sys

from tests.support.proc import ROOT


def test_quickstart_demo_processes_charges_and_dead_letters(redis_url: str) -> None:
    result = subprocess.run(
        [sys.executable, "examples/quickstart/demo.py", "--redis-url", redis_url],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for line in (
        "charged order 1: 12.50 EUR",
        "charged order 4: 49.99 EUR",
        "dead-lettered order 3: DeadLetter: order 3 has no amount",
        "dead-lettered order not-a-number: PermanentFailure: body failed validation",
        "pending after the run: 0",
    ):
        assert line in out


def test_sql_orders_demo_charges_every_order_once_across_a_crash_after_commit(
    redis_url: str,
) -> None:
    result = subprocess.run(
        [sys.executable, "examples/sql_orders/demo.py", "--redis-url", redis_url],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for line in (
        "produced 200 orders (order 7 has no amount)",
        "worker 1 killed with SIGKILL after a commit, before its XACK",
        "pending after the crash: 50",
        "charges: 199 (orders 200, dead-lettered 1)",
        "orders charged twice: 0",
        "pending after the run: 0",
    ):
        assert line in result.stdout
