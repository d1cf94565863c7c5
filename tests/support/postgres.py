"""A real PostgreSQL 15 for tests: initdb + postgres on a free loopback port, in a temp dir.

initdb refuses to run as root; as root (CI, containers) every server command runs as the
``postgres`` system user through ``runuser``, with a data directory that user owns (outside
pytest's root-only temp tree).
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg

from tests.support.servers import PORT_ATTEMPTS, PortInUse, free_port, missing_service

PG_BIN_GLOB = "/usr/lib/postgresql/15/bin"


def find_pg_bin() -> Path | None:
    """The directory of PostgreSQL 15's initdb/postgres, if installed."""
    for candidate in [PG_BIN_GLOB, *sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)]:
        if Path(candidate, "initdb").exists() and Path(candidate, "postgres").exists():
            return Path(candidate)
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


class PostgresServer:
    """One postgres process. ``stop``/``start`` keep the data directory and the port.

    Args:
        durable: keep fsync and synchronous_commit on (benchmarks); tests turn them off for speed
            (crashing the *server* is not what they test).
    """

    def __init__(self, *, durable: bool = False, port: int | None = None) -> None:
        bin_dir = find_pg_bin()
        if bin_dir is None:
            missing_service("PostgreSQL (initdb/postgres)")
        assert bin_dir is not None
        self.bin = bin_dir
        self.durable = durable
        self.port = port or free_port()
        self._may_repick_port = port is None  # as RedisServer: a port taken meanwhile
        self.dir = Path(tempfile.mkdtemp(prefix="sw-pg-"))
        self.data = self.dir / "data"
        self.proc: subprocess.Popen[bytes] | None = None
        self._as_postgres = os.geteuid() == 0
        if self._as_postgres:
            shutil.chown(self.dir, "postgres", "postgres")
        self._run(
            [
                str(self.bin / "initdb"),
                "-D",
                str(self.data),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            ]
        )

    def _cmd(self, args: list[str]) -> list[str]:
        return ["runuser", "-u", "postgres", "--", *args] if self._as_postgres else args

    def _run(self, args: list[str]) -> None:
        result = subprocess.run(self._cmd(args), capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"{args[0]} failed: {result.stderr or result.stdout}")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def connect(self, database: str = "postgres") -> psycopg.Connection:
        return psycopg.connect(
            host="127.0.0.1", port=self.port, user="postgres", dbname=database, autocommit=True
        )

    def start(self) -> PostgresServer:
        for _ in range(PORT_ATTEMPTS - 1):
            try:
                return self._start()
            except PortInUse:
                if not self._may_repick_port:
                    raise
                self.port = free_port()
        return self._start()

    def _start(self) -> PostgresServer:
        settings = [
            "-p",
            str(self.port),
            "-k",
            str(self.dir),
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            "max_connections=200",
            "-c",
            "shared_buffers=64MB",
        ]
        if not self.durable:
            settings += ["-c", "fsync=off", "-c", "synchronous_commit=off"]
            settings += ["-c", "full_page_writes=off"]
        log_path = self.dir / "postgres.log"
        log_from = log_path.stat().st_size if log_path.exists() else 0
        log = open(log_path, "ab")  # noqa: SIM115 - the child keeps it
        self.proc = subprocess.Popen(
            self._cmd([str(self.bin / "postgres"), "-D", str(self.data), *settings]),
            stdout=log,
            stderr=log,
        )
        log.close()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                with log_path.open("rb") as f:
                    f.seek(log_from)
                    tail = f.read().decode(errors="replace")[-2000:]
                if "Address already in use" in tail:
                    raise PortInUse(f"postgres: port {self.port} is taken: {tail}")
                raise RuntimeError(f"postgres exited at start: {tail}")
            try:
                # The answer must come from this server, not one that took the port meanwhile.
                with self.connect() as conn:
                    row = conn.execute("SHOW data_directory").fetchone()
                if row is not None and Path(row[0]).resolve() == self.data.resolve():
                    self._may_repick_port = False  # stop/start keep the port from now on
                    return self
            except psycopg.OperationalError:
                pass
            time.sleep(0.05)
        raise RuntimeError("postgres did not accept connections within 30 s")

    def stop(self, sig: int = signal.SIGINT) -> None:
        """SIGINT is PostgreSQL's fast shutdown (clients are disconnected); SIGQUIT is immediate."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            # Signal the postmaster itself: runuser does not forward every signal.
            try:
                pid = int((self.data / "postmaster.pid").read_text().split()[0])
                os.kill(pid, sig)
            except (OSError, ValueError, IndexError):
                self.proc.send_signal(sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None

    def create_database(self, name: str) -> str:
        with self.connect() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def terminate_backends(self, database: str) -> int:
        """Drop every client connection to ``database`` (as a server crash would, for them)."""
        with self.connect() as conn:
            row = conn.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid()",
                (database,),
            ).fetchone()
        return int(row[0]) if row else 0

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
