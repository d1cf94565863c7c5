"""examples/spark_pipeline runs on the shared session and prints what its README says."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.spark.conftest import ROOT

pytestmark = pytest.mark.slow


@pytest.mark.timeout(900)  # two JVMs on a loaded 2-core machine
def test_the_spark_pipeline_example(
    spark: Any,
    redis_client: redis.Redis,
    redis_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    spec = importlib.util.spec_from_file_location(
        "spark_pipeline_example", Path(ROOT) / "examples/spark_pipeline/pipeline.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.run(spark, redis_url, tmp_path, 1_000)
    out = capsys.readouterr().out
    for line in (
        "produced 1000 orders on shop:orders",
        "backfill: ok 998, failed 2",
        "backfill run again: duplicate 998",
        "invoices: 998, dead letters: 2",
        "copied: 1000 entries",
        "batch 0 replayed (1000 entries read again): 1000 entries",
        "archived: 1000 entries in 1 batch(es)",
        "trimmed: 490 entries; left: 510; still pending: 10",
    ):
        assert line in out, out
