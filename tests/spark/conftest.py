"""One SparkSession for every Spark test: ``local[2,4]`` (2 threads, 4 attempts per task, so task
retries happen), bound to 127.0.0.1, with the workers on this interpreter."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.servers import missing_service

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def spark_env() -> dict[str, str]:
    """The environment a Spark driver (and its Python workers) needs in tests."""
    path = os.environ.get("PYTHONPATH", "")
    return {
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYTHONPATH": f"{ROOT}{os.pathsep}{path}" if path else ROOT,
    }


def build_session(app_name: str) -> Any:
    """A ``local[2,4]`` session for tests (also used by the crash test's driver subprocess)."""
    from pyspark.sql import SparkSession

    os.environ.update(spark_env())
    spark = (
        SparkSession.builder.master("local[2,4]")
        .appName(app_name)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.streaming.stopTimeout", "60s")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    from streamworker.spark import register

    register(spark)
    return spark


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The shared session; fails under CI=true when Java or PySpark is missing."""
    if shutil.which("java") is None:
        missing_service("java (openjdk-17-jre-headless)")
    if importlib.util.find_spec("pyspark") is None:
        missing_service("pyspark (pip install -e '.[dev]')")
    session = build_session("streamworker-tests")
    yield session
    session.stop()
