"""examples/spark_pipeline on a real Spark standalone cluster (a master and two one-core workers
started from the installed PySpark), submitted with ``spark-submit --py-files``: the batch read,
the backfill, the exactly-once streaming copy with a forced replay of its last committed batch,
and the archive, with executors on both workers."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from tests.spark.conftest import ROOT
from tests.spark.standalone import StandaloneCluster, daemon_env, spark_home
from tests.support.servers import missing_service

pytestmark = pytest.mark.slow


def build_zips(out: Path) -> list[Path]:
    spec = importlib.util.spec_from_file_location(
        "spark_pipeline_package", Path(ROOT) / "examples/spark_pipeline/package.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    built: list[Path] = module.build(out)
    return built


@pytest.mark.timeout(900)  # three JVM daemons, a driver and two executors on two busy cores
def test_the_pipeline_runs_on_a_standalone_cluster_via_spark_submit(
    redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    if shutil.which("java") is None:
        missing_service("java (openjdk-17-jre-headless)")
    cluster = StandaloneCluster(tmp_path / "spark", workers=2, cores=1, memory="1g").start()
    try:
        zips = build_zips(tmp_path / "dist")
        env = {k: v for k, v in daemon_env().items() if k != "PYTHONPATH"}
        result = subprocess.run(
            [
                str(spark_home() / "bin" / "spark-submit"),
                "--master",
                cluster.master_url,
                "--deploy-mode",
                "client",
                "--conf",
                f"spark.pyspark.python={sys.executable}",
                "--conf",
                f"spark.pyspark.driver.python={sys.executable}",
                "--conf",
                "spark.driver.host=127.0.0.1",
                "--conf",
                "spark.driver.bindAddress=127.0.0.1",
                "--conf",
                "spark.driver.memory=768m",
                "--conf",
                "spark.executor.memory=640m",
                "--conf",
                "spark.executor.cores=1",
                "--conf",
                "spark.cores.max=2",
                "--conf",
                "spark.ui.enabled=false",
                "--conf",
                "spark.task.maxFailures=4",
                "--py-files",
                ",".join(str(z) for z in zips),
                str(Path(ROOT) / "examples/spark_pipeline/pipeline.py"),
                "--redis-url",
                redis_url,
                "--orders",
                "1000",
            ],
            cwd=tmp_path,  # not the repository: the executors get the app from the zip only
            env=env,
            capture_output=True,
            text=True,
            timeout=780,
            check=False,
        )
        assert result.returncode == 0, result.stderr[-5000:]
        out = result.stdout
        for line in (
            f"spark master: {cluster.master_url}",
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
        # Both workers ran an executor of the application.
        for i in range(2):
            apps = list((tmp_path / "spark" / f"worker-{i}").glob("app-*/*/stderr"))
            assert apps, f"no executor ran on worker {i}"
    finally:
        cluster.stop()
    assert cluster.leftovers() == []  # master, workers, executors and their Python workers
