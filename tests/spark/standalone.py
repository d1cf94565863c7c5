"""A real Spark standalone cluster for tests: a master and workers started from the installed
PySpark (``spark-class org.apache.spark.deploy.master.Master`` / ``...worker.Worker``) on
loopback and free ports, with little memory, each in its own process group so that stopping it
also ends the executors and Python workers it launched."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

from tests.support.servers import free_port


def spark_home() -> Path:
    """The installed PySpark's directory (it holds ``bin/spark-class`` and the jars)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def daemon_env() -> dict[str, str]:
    """The environment of the master, the workers and spark-submit: loopback only, small
    daemons."""
    return {
        **os.environ,
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_DAEMON_MEMORY": "256m",
        "SPARK_NO_DAEMONIZE": "1",
    }


class StandaloneCluster:
    """``workers`` workers of ``cores`` cores and ``memory`` each, under one master."""

    def __init__(self, workdir: Path, *, workers: int = 2, cores: int = 1, memory: str = "1g"):
        self.workdir = workdir
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.port = free_port()
        self.ui_port = free_port()
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _spawn(self, name: str, *args: str) -> None:
        log = open(self.workdir / f"{name}.log", "wb")  # noqa: SIM115 - the process keeps it
        self.procs.append(
            subprocess.Popen(
                [str(spark_home() / "bin" / "spark-class"), *args],
                env=daemon_env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own group: its executors die with it
            )
        )
        log.close()

    def state(self) -> dict[str, object]:
        """The master's JSON status page."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as r:
            data: dict[str, object] = json.loads(r.read())
        return data

    def alive_workers(self) -> int:
        try:
            return int(str(self.state().get("aliveworkers", 0)))
        except OSError:
            return 0

    def start(self, timeout_s: float = 180.0) -> StandaloneCluster:
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            self._spawn(
                "master",
                "org.apache.spark.deploy.master.Master",
                "--host", "127.0.0.1",
                "--port", str(self.port),
                "--webui-port", str(self.ui_port),
            )  # fmt: skip
            for i in range(self.workers):
                work = self.workdir / f"worker-{i}"
                work.mkdir(exist_ok=True)
                self._spawn(
                    f"worker-{i}",
                    "org.apache.spark.deploy.worker.Worker",
                    self.master_url,
                    "--host", "127.0.0.1",
                    "--port", str(free_port()),
                    "--webui-port", str(free_port()),
                    "--cores", str(self.cores),
                    "--memory", self.memory,
                    "--work-dir", str(work),
                )  # fmt: skip
            deadline = time.monotonic() + timeout_s
            while self.alive_workers() < self.workers:
                if any(p.poll() is not None for p in self.procs):
                    raise RuntimeError(f"a Spark daemon exited early; see {self.workdir}/*.log")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{self.workers} workers not registered in {timeout_s}s")
                time.sleep(0.5)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """SIGTERM every daemon's process group (workers first), SIGKILL what is left."""
        for proc in reversed(self.procs):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for proc in reversed(self.procs):
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # executors and Python workers too
            except ProcessLookupError:
                pass
            proc.wait(10)

    def leftovers(self, timeout_s: float = 20.0) -> list[int]:
        """Process groups of this cluster that still have a process ``timeout_s`` after
        :meth:`stop` (killed processes take a moment to go, and to be reaped)."""
        deadline = time.monotonic() + timeout_s
        while True:
            alive = []
            for proc in self.procs:
                try:
                    os.killpg(proc.pid, 0)
                    alive.append(proc.pid)
                except ProcessLookupError:
                    pass
            if not alive or time.monotonic() > deadline:
                return alive
            time.sleep(0.2)
