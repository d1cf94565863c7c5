"""A primary with one redis-server replica (``--replicaof``), real processes on loopback. The
primary is a redis-server, or ``streamworker engine serve`` (``primary="engine"``), whose
connections move their replication offset (what WAIT waits for) on writes only, as the Redis
docs describe WAIT; redis-server 7.0 moves it on every command.

The replica can be paused (SIGSTOP) to play a replica that lags or is cut off, and resumed
(SIGCONT); :meth:`Replicated.wait_synced` waits until it has everything the primary wrote.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

from tests.support.engine_server import EngineServerProcess
from tests.support.servers import RedisServer


def _info(client: redis.Redis) -> dict[str, object]:
    return dict(client.info("replication"))


class Replicated:
    """A running primary and replica (see the module docstring); :meth:`stop` ends both."""

    def __init__(
        self, workdir: Path, *, primary: str = "redis", link_timeout_s: float = 10.0
    ) -> None:
        self.primary: RedisServer | EngineServerProcess = (
            RedisServer(workdir / "primary").start()
            if primary == "redis"
            else EngineServerProcess(workdir / "primary").start()
        )
        try:
            self.replica = RedisServer(
                workdir / "replica",
                extra_args=["--replicaof", "127.0.0.1", str(self.primary.port)],
            ).start()
            self._wait_link(link_timeout_s)
        except BaseException:
            self.stop()
            raise

    @property
    def url(self) -> str:
        """The primary's URL."""
        return self.primary.url

    def _wait_link(self, timeout_s: float) -> None:
        """Until the replica reports ``master_link_status:up`` and the primary counts it."""
        deadline = time.monotonic() + timeout_s
        with self.replica.client() as rc, self.primary.client() as pc:
            while time.monotonic() < deadline:
                if (
                    _info(rc).get("master_link_status") == "up"
                    and int(str(_info(pc).get("connected_slaves", 0))) >= 1
                ):
                    return
                time.sleep(0.02)
        raise RuntimeError(f"the replica did not link to the primary within {timeout_s:g} s")

    def wait_synced(self, timeout_s: float = 10.0) -> None:
        """Until the replica acknowledged everything the primary wrote so far."""
        with self.primary.client() as pc:
            if int(pc.execute_command("WAIT", 1, int(timeout_s * 1000))) < 1:
                raise RuntimeError(f"the replica did not catch up within {timeout_s:g} s")

    @contextmanager
    def replica_paused(self) -> Iterator[None]:
        """The replica process stopped (SIGSTOP) inside the block, resumed (SIGCONT) after."""
        proc = self.replica.proc
        assert proc is not None, "the replica is not running"
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        replica = getattr(self, "replica", None)
        if replica is not None:
            if replica.proc is not None:
                # A stopped process ignores SIGTERM until it is continued.
                os.kill(replica.proc.pid, signal.SIGCONT)
            replica.stop()
        self.primary.stop()
