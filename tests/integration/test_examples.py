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
