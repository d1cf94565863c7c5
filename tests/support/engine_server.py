"""The engine's RESP server for tests: ``streamworker engine serve`` as a subprocess, or an
:class:`EngineServer` on an event loop in a background thread of the test process."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from streamworker.engine.aof import AppendOnlyFile, open_persistent
from streamworker.engine.core import Engine
from streamworker.engine.server import EngineServer
from tests.support.proc import ROOT
from tests.support.servers import PORT_ATTEMPTS, PortInUse, free_port


class EngineServerProcess:
    """``streamworker engine serve`` in a child process; ``restart()`` keeps port and data."""

    def __init__(
        self,
        workdir: Path | None = None,
        *,
        appendfsync: str = "everysec",
        port: int | None = None,
        requirepass: str | None = None,
        bind: str = "127.0.0.1",
        extra: tuple[str, ...] = (),
    ) -> None:
        self.dir = workdir
        if workdir is not None:
            workdir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self._may_repick_port = port is None  # as RedisServer: a port taken meanwhile
        self.appendfsync = appendfsync
        self.requirepass = requirepass
        self.bind = bind
        self.extra = extra
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = (workdir or Path("/tmp")) / f"engine-serve-{self.port}.log"

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def args(self) -> list[str]:
        args = [
            sys.executable,
            "-m",
            "streamworker",
            "engine",
            "serve",
            "--bind",
            self.bind,
            "--port",
            str(self.port),
            "--appendfsync",
            self.appendfsync,
        ]
        if self.dir is not None:
            args += ["--dir", str(self.dir)]
        if self.requirepass:
            args += ["--requirepass", self.requirepass]
        return args + list(self.extra)

    def client(self, **kwargs: Any) -> redis.Redis:
        kwargs.setdefault("socket_timeout", 10)
        if self.requirepass:
            kwargs.setdefault("password", self.requirepass)
        return redis.Redis(host="127.0.0.1", port=self.port, **kwargs)

    def start(self, timeout_s: float = 30) -> EngineServerProcess:
        for _ in range(PORT_ATTEMPTS - 1):
            try:
                return self._start(timeout_s)
            except PortInUse:
                if not self._may_repick_port:
                    raise
                self.port = free_port()
                self.log_path = self.log_path.with_name(f"engine-serve-{self.port}.log")
        return self._start(timeout_s)

    def _start(self, timeout_s: float) -> EngineServerProcess:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        log_from = self.log_path.stat().st_size if self.log_path.exists() else 0
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen(self.args(), stdout=log, stderr=log, env=env, cwd=ROOT)
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                if "Address already in use" in self.log()[log_from:]:
                    raise PortInUse(f"engine serve: port {self.port} is taken")
                raise RuntimeError(f"engine serve exited at start: {self.log()[-3000:]}")
            try:
                # The answer must come from this process, not from a server that took the port.
                with self.client(socket_timeout=2) as c:
                    if int(c.info("server")["process_id"]) == self.proc.pid:
                        self._may_repick_port = False  # restart() keeps the port from now on
                        return self
            except (redis.ConnectionError, redis.TimeoutError):
                pass
            time.sleep(0.05)
        raise RuntimeError(f"engine serve did not answer within {timeout_s}s: {self.log()[-3000:]}")

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 20) -> int | None:
        """Send ``sig`` and wait; returns the exit code (None if it was not running)."""
        if self.proc is None:
            return None
        proc, self.proc = self.proc, None
        if proc.poll() is None:
            proc.send_signal(sig)
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        return proc.returncode

    def kill(self) -> None:
        """SIGKILL: no flush, no goodbye."""
        self.stop(signal.SIGKILL)

    def restart(self) -> EngineServerProcess:
        self.stop()
        return self.start()


class ThreadedServer:
    """An :class:`EngineServer` on its own event loop in a daemon thread (fast tests that
    talk to it over TCP). ``engine`` and ``aof`` are shared with the test thread."""

    def __init__(
        self,
        engine: Engine | None = None,
        aof: AppendOnlyFile | None = None,
        *,
        requirepass: str | None = None,
        configure: Callable[[Engine], None] | None = None,
    ) -> None:
        self.engine = engine or (aof.engine if aof is not None else Engine())
        self.aof = aof
        if requirepass:
            self.engine.config.set("requirepass", requirepass)
        if configure is not None:
            configure(self.engine)
        self.loop = asyncio.new_event_loop()
        self.server = EngineServer(self.engine, aof, bind="127.0.0.1", port=0)
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(10)
        self.port = self.server.port

    @classmethod
    def persistent(cls, directory: Path, appendfsync: str = "always") -> ThreadedServer:
        aof = open_persistent(directory, appendfsync=appendfsync, auto_flush=False)
        return cls(aof=aof)

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` on the server's loop and return its result."""

        async def run() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(10)

    def client(self, **kwargs: Any) -> redis.Redis:
        kwargs.setdefault("socket_timeout", 10)
        return redis.Redis(host="127.0.0.1", port=self.port, **kwargs)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()
        if self.aof is not None:
            self.aof.close()
