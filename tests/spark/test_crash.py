"""SIGKILL of the whole Spark driver process group (Python driver, JVM, Python workers) in the
middle of two streaming queries, then a restart from their checkpoints: the Parquet output and the
Redis sink each hold every source entry exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.spark.conftest import ROOT, spark_env
from tests.spark.test_batch import fill
from tests.support.proc import wait_for

pytestmark = pytest.mark.slow


def committed(ckpt: Path) -> int:
    commits = ckpt / "commits"
    return len([p for p in commits.iterdir() if p.name.isdigit()]) if commits.is_dir() else 0


def driver(url: str, workdir: Path, mode: str) -> subprocess.Popen[bytes]:
    with open(workdir / f"driver-{mode}.log", "wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.spark.crash_driver", url, str(workdir), mode],
            cwd=ROOT,
            env={**os.environ, **spark_env()},
            stdout=subprocess.DEVNULL,
            stderr=log,
            start_new_session=True,  # its own process group: the JVM and workers die with it
        )


@pytest.mark.timeout(900)  # two JVMs on a loaded 2-core machine
def test_killed_driver_restarts_from_checkpoints_and_writes_each_entry_once(
    spark: Any, redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    fill(redis_client, "src", 1000)
    first = driver(redis_url, tmp_path, "forever")
    producing = threading.Event()
    producing.set()

    def produce() -> None:
        # Entries keep coming while the first driver runs, so its queries are always mid-stream
        # when it is killed (250 per second; the cap is never reached within the wait below).
        client = redis.Redis.from_url(redis_url)
        sent = 0
        while producing.is_set() and sent < 50_000:
            for _ in range(25):
                client.xadd("src", {"n": str(1000 + sent)})
                sent += 1
            time.sleep(0.1)
        client.close()

    producer = threading.Thread(target=produce)
    try:
        wait_for(lambda: (tmp_path / "started-forever").exists(), 180, "the first driver")
        producer.start()
        wait_for(
            lambda: min(committed(tmp_path / "ck-parquet"), committed(tmp_path / "ck-redis")) >= 2,
            timeout_s=180,
            what="two committed batches in both queries",
        )
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(60)
        producing.clear()
        if producer.is_alive() or producer.ident is not None:
            producer.join(60)
    ids = [e[0].decode() for e in redis_client.xrange("src")]

    second = driver(redis_url, tmp_path, "available-now")
    try:
        assert second.wait(300) == 0, (tmp_path / "driver-available-now.log").read_text()[-3000:]
    finally:
        if second.poll() is None:
            os.killpg(second.pid, signal.SIGKILL)

    written = [r.id for r in spark.read.parquet(str(tmp_path / "out")).select("id").collect()]
    assert len(written) == len(ids)
    assert set(written) == set(ids)
    copied = redis_client.xrange("copy")
    assert [f[b"n"] for _, f in copied] == [str(i).encode() for i in range(len(ids))]
    assert not redis_client.keys("{copy}:spark:stg:*")
