"""Machinery of the chaos suite (tests/chaos/): ``streamworker run`` workers to kill, pause and
restart, a producer that survives server restarts, and the fault executor.

Workers write their logs to files, not pipes: a pipe nobody reads would fill up and block them.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import redis

from tests.support.journal import read_records
from tests.support.proc import ROOT

if TYPE_CHECKING:
    from tests.chaos.schedule import Action

T = TypeVar("T")

# The one line ``streamworker run`` prints when Redis, or the database of its SQL handlers, does
# not answer at start-up (exit code 1).
FAIL_FAST = (
    "streamworker: error: cannot reach Redis at ",
    "streamworker: error: cannot reach the database ",
)

# What a client may see while a server restarts: refused or dropped connections, replies that
# never come, and Redis answering LOADING while it replays its append-only file.
TRANSIENT = (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError)


def restartable_port() -> int:
    """A free loopback port below the kernel's ephemeral range, for a server restarted on the same
    port: while it is down, no client's outgoing connection (and no ``free_port()`` of another
    test) can be handed that port, as could happen with one from the ephemeral range."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    rng = random.SystemRandom()
    for _ in range(200):
        port = rng.randrange(max(1024, low - 12000), low)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free loopback port below {low}")


class ChaosLog:
    """The run's narrative: printed (pytest shows it on failure) and written to a file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.started = time.monotonic()
        self._lock = threading.Lock()

    def __call__(self, line: str) -> None:
        text = f"[{time.monotonic() - self.started:7.2f}s] {line}"
        with self._lock:
            print(text, flush=True)
            with self.path.open("a") as f:
                f.write(text + "\n")

    def text(self) -> str:
        return self.path.read_text() if self.path.exists() else ""


class Workers:
    """``count`` ``streamworker run`` processes, consumers ``chaos-0`` …, each restartable under
    its own stable consumer name (so a restart finds its own pending entries)."""

    def __init__(
        self,
        app: str,
        count: int,
        workdir: Path,
        *,
        redis_url: str,
        db_url: str | None,
        env: dict[str, str],
        log: ChaosLog,
    ) -> None:
        self.app = app
        self.count = count
        self.dir = workdir
        self.redis_url = redis_url
        self.db_url = db_url
        self.env = env
        self.log = log
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * count
        self.expected_dead: set[int] = set()  # killed by the plan, not yet restarted
        self.unexpected: list[str] = []  # exits the plan did not cause
        self.fail_fast_restarts = 0  # start-ups that found a server down (see check)
        self._stderr_at = [0] * count  # where the current run's stderr begins

    def stderr_path(self, i: int) -> Path:
        return self.dir / f"worker-{i}.stderr"

    def handled_path(self, i: int) -> Path:
        return self.dir / f"worker-{i}.handled"

    def start(self, i: int) -> None:
        running = self.procs[i]
        # One process per consumer name: a second one would share its PEL and its log files.
        assert running is None or running.poll() is not None, f"worker {i} is still running"
        args = [sys.executable, "-m", "streamworker", "run", self.app]
        args += ["--redis-url", self.redis_url, "--consumer", f"chaos-{i}"]
        if self.db_url:
            args += ["--db-url", self.db_url]
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "STREAMWORKER_LOG_FORMAT": "json",
            "SW_CHAOS_LOG": str(self.handled_path(i)),
            **self.env,
        }
        with self.stderr_path(i).open("ab") as err:
            self._stderr_at[i] = err.tell()
            self.procs[i] = subprocess.Popen(
                args, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err
            )
        self.expected_dead.discard(i)

    def start_all(self) -> None:
        for i in range(self.count):
            self.start(i)

    def kill(self, i: int) -> None:
        self.check()  # first: it may replace procs[i]
        proc = self.procs[i]
        assert proc is not None
        proc.kill()
        proc.wait(30)
        self.expected_dead.add(i)

    def wait_busy(self, i: int, timeout_s: float = 5.0) -> bool:
        """Wait until worker ``i`` starts a handler; False when none started within
        ``timeout_s``."""
        path = self.handled_path(i)
        size = path.stat().st_size if path.exists() else 0
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if path.exists() and path.stat().st_size > size:
                return True
            time.sleep(0.003)
        return False

    def pause(self, i: int) -> bool:
        """SIGSTOP worker ``i`` as soon as it starts a handler, so it holds a batch of claimed
        entries; True when it was caught in a batch."""
        caught = self.wait_busy(i)
        self.check()
        proc = self.procs[i]
        assert proc is not None
        proc.send_signal(signal.SIGSTOP)
        return caught

    def resume(self, i: int) -> None:
        proc = self.procs[i]
        assert proc is not None
        proc.send_signal(signal.SIGCONT)

    def resume_all(self) -> None:
        """SIGCONT every worker (harmless for a running one): nothing stays stopped."""
        for proc in self.procs:
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGCONT)

    def run_output(self, i: int) -> str:
        """Worker ``i``'s stderr since its last start."""
        with self.stderr_path(i).open("rb") as f:
            f.seek(self._stderr_at[i])
            return f.read().decode(errors="replace")

    def check(self) -> None:
        """Restart workers that exited without the plan killing them, as a supervisor would;
        record the exit unless it is the documented fail-fast of a start-up that found Redis or
        the database down (``streamworker run`` checks both once before it starts, then
        reconnects forever)."""
        for i, proc in enumerate(self.procs):
            if proc is None or i in self.expected_dead or proc.poll() is None:
                continue
            output = self.run_output(i)
            last = output.strip().splitlines()[-1] if output.strip() else ""
            if proc.returncode == 1 and last.startswith(FAIL_FAST):
                self.fail_fast_restarts += 1
                self.log(f"worker {i} started while a server was down ({last}); restarting it")
            else:
                self.unexpected.append(
                    f"worker {i} exited with {proc.returncode}: {output[-3000:]}"
                )
                self.log(f"UNEXPECTED: worker {i} exited with {proc.returncode}; restarting it")
            time.sleep(0.1)
            self.start(i)

    def wait_started(self, timeout_s: float = 120) -> None:
        """Wait until every worker's current run has started consuming (its signal handlers are
        installed by then: a SIGTERM earlier would kill the interpreter mid-import)."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.check()
            waiting = [i for i in range(self.count) if '"worker_started"' not in self.run_output(i)]
            if not waiting:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"workers {waiting} did not start within {timeout_s}s")
            time.sleep(0.1)

    def stop_all(self, timeout_s: float = 60) -> dict[int, int | None]:
        """SIGTERM (after SIGCONT) every worker; their exit codes."""
        codes: dict[int, int | None] = {}
        for proc in self.procs:
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.send_signal(signal.SIGTERM)
        for i, proc in enumerate(self.procs):
            if proc is None:
                continue
            try:
                codes[i] = proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
                codes[i] = None
        self.log(f"workers stopped, exit codes {codes}")
        return codes

    def kill_all(self) -> None:
        for proc in self.procs:
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(10)

    def handled(self) -> list[list[str]]:
        """Every handler call of every worker: [id, n, kind, delivery_count, consumer]."""
        rows: list[list[str]] = []
        for i in range(self.count):
            path = self.handled_path(i)
            if path.exists():
                rows += read_records(path)
        return rows

    def events(self) -> Counter[str]:
        """How often each log event happened, over every worker's stderr."""
        seen: Counter[str] = Counter()
        for i in range(self.count):
            path = self.stderr_path(i)
            if not path.exists():
                continue
            for line in path.read_text(errors="replace").splitlines():
                try:
                    event = json.loads(line).get("event")
                except (ValueError, AttributeError):
                    continue
                if isinstance(event, str):
                    seen[event] += 1
        return seen


class Producer(threading.Thread):
    """XADDs ``messages`` (explicit ids, in order) spread over ``duration_s``.

    Explicit ids make a retry after a lost reply safe: the producer looks the id up first, and an
    id the server already has is not added again (an auto id would add a second entry).
    """

    def __init__(
        self,
        connect: Callable[[], redis.Redis],
        stream: str,
        messages: list[tuple[str, dict[str, str]]],
        duration_s: float,
        log: ChaosLog,
        timeout_s: float = 120,
    ) -> None:
        super().__init__(name="chaos-producer", daemon=True)
        self.connect = connect
        self.stream = stream
        self.messages = messages
        self.duration_s = duration_s
        self.log = log
        self.timeout_s = timeout_s
        self.error: BaseException | None = None
        self.retries = 0

    def run(self) -> None:
        try:
            self._produce()
        except BaseException as exc:  # reported by the test
            self.error = exc
            self.log(f"producer failed: {exc!r}: {exc}")

    def _produce(self) -> None:
        client = self.connect()
        start = time.monotonic()
        deadline = start + self.timeout_s
        step = self.duration_s / max(1, len(self.messages))
        for k, (entry_id, fields) in enumerate(self.messages):
            delay = start + k * step - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            while True:
                try:
                    if not client.xrange(self.stream, entry_id, entry_id):
                        client.xadd(self.stream, fields, id=entry_id)
                    break
                except redis.ResponseError as exc:
                    # redis-py retries a command whose connection broke: when the first XADD
                    # was applied and only its reply lost, the retry finds the id taken.
                    if "equal or smaller" not in str(exc):
                        raise
                    if not client.xrange(self.stream, entry_id, entry_id):
                        raise
                    self.retries += 1
                    break
                except TRANSIENT:
                    if time.monotonic() > deadline:
                        raise
                    self.retries += 1
                    client.close()
                    time.sleep(0.05)
                    client = self.connect()
        client.close()
        self.log(f"producer: {len(self.messages)} messages written ({self.retries} retries)")


def run_actions(
    actions: list[Action], perform: Callable[[Action], str], log: ChaosLog, tick: Callable[[], None]
) -> None:
    """Perform each action at its time (from now), calling ``tick`` while waiting."""
    start = time.monotonic()
    for action in actions:
        while time.monotonic() - start < action.at_s:
            tick()
            time.sleep(min(0.05, max(0.0, action.at_s - (time.monotonic() - start))))
        late = time.monotonic() - start - action.at_s
        log(f"fault {action.verb} (planned t={action.at_s:.2f}s, {late:+.2f}s): {perform(action)}")


def retrying(fn: Callable[[], T], timeout_s: float = 60) -> T:
    """``fn()``, retried while the server is restarting."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return fn()
        except TRANSIENT:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
