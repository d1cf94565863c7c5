"""Real servers for tests: redis-server processes on free loopback ports in temp dirs."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
import redis


def in_ci(environ: Mapping[str, str] | None = None) -> bool:
    """True under CI (CI=true): a missing service is then a failure, never a skip."""
    env = os.environ if environ is None else environ
    return env.get("CI", "").lower() in ("1", "true", "yes")


def missing_service(what: str) -> None:
    """Fail (in CI) or skip (locally) because ``what`` is not installed."""
    hint = "run `make services` (scripts/install-services.sh) to install it"
    if in_ci():
        pytest.fail(f"{what} is not installed; CI must have it ({hint})", pytrace=False)
    pytest.skip(f"{what} is not installed ({hint})")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


PORT_ATTEMPTS = 3


class PortInUse(RuntimeError):
    """A server could not bind its port: something else took it first."""


class RedisServer:
    """A redis-server child process; ``restart()`` keeps the port and the data directory."""

    def __init__(
        self,
        workdir: Path,
        *,
        port: int | None = None,
        appendonly: bool = False,
        extra_args: Sequence[str] = (),
        start_timeout_s: float = 10.0,
    ) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            missing_service("redis-server")
        self.binary = str(binary)
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        # A port picked here may be taken between free_port() and the bind (by another pytest
        # process under xdist, or any other program): then the first start picks another.
        self._may_repick_port = port is None
        self.appendonly = appendonly
        self.extra_args = list(extra_args)
        self.start_timeout_s = start_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=10)

    def start(self) -> RedisServer:
        for _ in range(PORT_ATTEMPTS - 1):
            try:
                return self._start()
            except PortInUse:
                if not self._may_repick_port:
                    raise
                self.port = free_port()
        return self._start()

    def _start(self) -> RedisServer:
        args = [
            self.binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.dir),
            "--save",
            "",
            "--daemonize",
            "no",
            "--logfile",
            str(self.dir / "redis.log"),
            "--protected-mode",
            "yes",
        ]
        if self.appendonly:
            args += ["--appendonly", "yes", "--appendfsync", "always"]
        else:
            args += ["--appendonly", "no"]
        args += self.extra_args
        log_path = self.dir / "redis.log"
        log_from = log_path.stat().st_size if log_path.exists() else 0
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                log = ""
                if log_path.exists():
                    with log_path.open("rb") as f:
                        f.seek(log_from)
                        log = f.read().decode(errors="replace")[-2000:]
                if "Address already in use" in log:
                    raise PortInUse(f"redis-server: port {self.port} is taken: {log}")
                raise RuntimeError(f"redis-server exited at start: {log}")
            try:
                # Whoever answers must be this process: another server on a port taken
                # meanwhile would otherwise be used (and flushed) in its place.
                with self.client() as c:
                    if int(c.info("server")["process_id"]) == self.proc.pid:
                        self._may_repick_port = False  # restart() keeps the port from now on
                        return self
            except (redis.ConnectionError, redis.BusyLoadingError):
                pass
            time.sleep(0.02)
        raise RuntimeError(f"redis-server did not answer within {self.start_timeout_s:g} s")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None

    def restart(self) -> RedisServer:
        self.stop()
        return self.start()
