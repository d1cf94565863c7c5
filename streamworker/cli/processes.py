"""``streamworker run --processes N``: a supervisor process and N worker processes.

The supervisor starts N ``streamworker run`` children (fresh interpreters, not forks: no event
loop, client or lock is inherited half-used), each with a consumer name of its own and stable
across restarts, ``NAME-0 … NAME-{N-1}``: a restarted child reads its own pending entries first,
as a restarted single worker does, and takes its name record over at once (same host, old pid
gone: :mod:`streamworker.runtime.names`).

* **Crashes.** A child that ends while the supervisor is not stopping is started again after a
  capped backoff per slot (reset once it has run for :data:`STABLE_AFTER_S`). A child that exits
  2 (a configuration that cannot work, or its consumer name held by another live process) is not:
  the supervisor stops the others and exits 2 with the child's one-line message.
* **Signals.** SIGTERM/SIGINT are forwarded to every child (a graceful stop: each finishes the
  batch in hand within ``shutdown_timeout_s``); a second signal is forwarded again (the children
  leave at once, acking nothing more). Children run in a process group of their own, so a
  Ctrl-C on the terminal reaches them once, through the supervisor, not twice.
* **Supervisor killed.** Each child asks the kernel for SIGTERM when its parent dies
  (``prctl(PR_SET_PDEATHSIG)`` on Linux; elsewhere a thread watches the parent pid), so it stops
  gracefully instead of running on as an orphan.
* **One endpoint.** The children write their counters and histograms to a temporary
  ``PROMETHEUS_MULTIPROC_DIR``; the supervisor serves them summed on ``--metrics-port``
  (``MultiProcessCollector``), together with the gauges read from Redis (once, not per child)
  and the ``process_*`` metrics of every process, labelled ``process``.
  Each child serves its probes on a private loopback port it writes to the run directory;
  ``/healthz`` and ``/readyz`` of the supervisor ask every child and answer 200 only when each
  does, naming the children in the details.

Exit code: 0 when every child stopped cleanly, 2 for a child's configuration error, 128+signal
when a second signal forced the stop, else 1 (some child ended with an error during the stop).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import structlog
from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector
from prometheus_client.core import Metric
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.registry import Collector
from pydantic import SecretStr

from streamworker.app import App
from streamworker.errors import ConfigError
from streamworker.io.redisio import open_sync_redis
from streamworker.observability.health import HealthServer
from streamworker.observability.metrics import GroupStateCollector
from streamworker.observability.state import read_group_states
from streamworker.runtime.backoff import Backoff
from streamworker.settings import Settings

EXIT_CONFIG = 2
RESTART_BACKOFF_INITIAL_S = 0.5
RESTART_BACKOFF_MAX_S = 30.0
STABLE_AFTER_S = 30.0
"""A child that ran this long before it crashed is restarted after the initial delay again."""
_POLL_S = 0.1
_PROBE_TIMEOUT_S = 2.0
_PR_SET_PDEATHSIG = 1


def process_consumer_name(base: str, index: int) -> str:
    """The consumer name of child ``index``: ``BASE-INDEX``, the same on every restart."""
    return f"{base}-{index}"


def child_exit_reason(returncode: int) -> str:
    """How a child ended, for logs: ``exit 1``, ``signal SIGKILL``."""
    if returncode < 0:
        try:
            return f"signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"signal {-returncode}"
    return f"exit {returncode}"


def aggregate_probes(
    results: dict[str, tuple[bool, dict[str, Any]]],
) -> tuple[bool, dict[str, Any]]:
    """The supervisor's probe answer from each child's ``(ok, details)``, by consumer name: ok
    only when every child is; the details list each child and name the failing ones."""
    failing = sorted(name for name, (ok, _) in results.items() if not ok)
    details: dict[str, Any] = {
        "processes": {name: {"ok": ok, **d} for name, (ok, d) in sorted(results.items())}
    }
    if failing:
        details["failing"] = failing
    return not failing, details


class ProcessesCollector(Collector):
    """prometheus_client's ``process_*`` metrics (CPU, memory, fds, start time) of several
    processes, one series each, labelled ``process`` (``supervisor``, ``NAME-0``, …):
    ``live()`` gives the (label, pid) pairs at scrape time. Linux (``/proc``) only, like
    ProcessCollector; a process gone meanwhile is left out."""

    def __init__(self, live: Callable[[], Sequence[tuple[str, int]]]) -> None:
        self._live = live

    def describe(self) -> list[Metric]:  # keeps registration from calling collect()
        return []

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        for label, pid in self._live():
            one = ProcessCollector(pid=_constant(pid), registry=None)
            for family in one.collect():
                merged = families.get(family.name)
                if merged is None:
                    merged = Metric(family.name, family.documentation, family.type)
                    families[family.name] = merged
                for sample in family.samples:
                    merged.add_sample(
                        sample.name, {**sample.labels, "process": label}, sample.value
                    )
        yield from families.values()


def _constant(pid: int) -> Callable[[], int]:
    return lambda: pid


# ---------------------------------------------------------------------------------------------
# The child's side


@dataclass(frozen=True, slots=True)
class ChildLink:
    """What a child knows of its supervisor (the hidden ``--supervisor-*`` flags)."""

    run_dir: Path
    index: int
    supervisor_pid: int

    def probe_file(self) -> Path:
        return probe_file(self.run_dir, self.index)

    def error_file(self) -> Path:
        return error_file(self.run_dir, self.index)

    def stop_with_parent(self) -> None:
        """Get SIGTERM (a graceful stop) when the supervisor dies, however it dies."""
        if sys.platform.startswith("linux"):
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
                _watch_parent(self.supervisor_pid)
        else:
            _watch_parent(self.supervisor_pid)
        # The supervisor may have died before the request above: then nobody will send it.
        if os.getppid() != self.supervisor_pid:
            os.kill(os.getpid(), signal.SIGTERM)

    def publish_probe_port(self, port: int) -> None:
        """Tell the supervisor where this child's probes are (atomically: write, then rename)."""
        path = self.probe_file()
        tmp = path.with_suffix(".tmp")
        tmp.write_text(f"{os.getpid()} {port}\n")
        tmp.replace(path)

    def report_error(self, message: str) -> None:
        """Leave this child's last error for the supervisor (it repeats exit-2 messages)."""
        with contextlib.suppress(OSError):
            self.error_file().write_text(message + "\n")


def _watch_parent(pid: int) -> None:
    def watch() -> None:
        while os.getppid() == pid:
            time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="streamworker-parent-watch", daemon=True).start()


def probe_file(run_dir: Path, index: int) -> Path:
    """Where child ``index`` writes ``PID PORT`` of its private probe server."""
    return run_dir / f"probe-{index}.port"


def error_file(run_dir: Path, index: int) -> Path:
    """Where child ``index`` writes the message of the error it exits with."""
    return run_dir / f"error-{index}.txt"


# ---------------------------------------------------------------------------------------------
# The supervisor


@dataclass
class _Slot:
    index: int
    name: str
    backoff: Backoff
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    restart_at: float | None = None
    last_code: int | None = None
    restarts: int = 0
    history: list[int] = field(default_factory=list)


def child_environment(
    settings: Settings, run_dir: Path, metrics_dir: Path, base: dict[str, str]
) -> dict[str, str]:
    """The environment of every child: ``base`` with the supervisor's resolved settings as
    ``STREAMWORKER_*`` (so flags given to the supervisor hold for the children, and URLs with
    passwords stay out of ``ps``), without the endpoint and process-count settings (those are the
    supervisor's), and the multiprocess metrics directory."""
    env = {k: v for k, v in base.items() if not k.startswith("STREAMWORKER_")}
    skip = {"consumer", "metrics_port", "metrics_host", "processes"}
    for name, value in settings.model_dump().items():
        if name in skip or value is None:
            continue
        if isinstance(value, SecretStr):  # its str() is a mask; the child needs the secret
            value = value.get_secret_value()
        text = ("true" if value else "false") if isinstance(value, bool) else str(value)
        env[f"STREAMWORKER_{name.upper()}"] = text
    env["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)
    return env


class Supervisor:
    """Runs ``processes`` children of ``streamworker run TARGET`` until a signal; see the module
    docstring. Use from the main thread (it installs signal handlers); :meth:`run` once."""

    def __init__(
        self,
        app: App,
        target: str,
        settings: Settings,
        *,
        processes: int,
        base_consumer: str,
        redis_url: str,
    ) -> None:
        if processes < 1:
            raise ConfigError("--processes must be at least 1")
        if redis_url.split("://", 1)[0].lower() == "engine":
            # engine:// runs the engine inside the process: N children would be N engines.
            raise ConfigError(
                "--processes needs a server the processes share; engine:// runs an engine inside "
                "each process: serve it with `streamworker engine serve` and use its redis:// URL"
            )
        self.app = app
        self.target = target
        self.settings = settings
        self.redis_url = redis_url
        self.slots = [
            _Slot(
                i,
                process_consumer_name(base_consumer, i),
                Backoff(RESTART_BACKOFF_INITIAL_S, RESTART_BACKOFF_MAX_S),
            )
            for i in range(processes)
        ]
        self._signals: list[int] = []
        self._stopping = False
        self._config_error: str | None = None
        self._log = structlog.get_logger("streamworker.supervisor").bind(app=app.name)
        self._run_dir = Path(tempfile.mkdtemp(prefix="streamworker-"))
        self._metrics_dir = self._run_dir / "metrics"
        self._metrics_dir.mkdir()
        self._env = child_environment(settings, self._run_dir, self._metrics_dir, dict(os.environ))
        self._probe_client: Any = None
        self._probe_lock = threading.Lock()
        self.registry = CollectorRegistry()
        MultiProcessCollector(self.registry, path=str(self._metrics_dir))  # type: ignore[no-untyped-call]
        self.registry.register(
            GroupStateCollector(lambda: read_group_states(self._probe(), self.app.handlers))
        )
        self.registry.register(ProcessesCollector(self._processes))
        PlatformCollector(registry=self.registry)

    def _processes(self) -> list[tuple[str, int]]:
        live = [("supervisor", os.getpid())]
        for slot in list(self.slots):
            proc = slot.proc
            if proc is not None:
                live.append((slot.name, proc.pid))
        return live

    # -- probes (HTTP threads) ---------------------------------------------------------------

    def _probe(self) -> Any:
        with self._probe_lock:
            if self._probe_client is None:
                self._probe_client = open_sync_redis(self.redis_url, socket_timeout_s=2.0)
            return self._probe_client

    def _ask_children(self, path: str, *, restarting_ok: bool) -> tuple[bool, dict[str, Any]]:
        if self._stopping:
            return False, {"shutting_down": True}
        results: dict[str, tuple[bool, dict[str, Any]]] = {}
        for slot in list(self.slots):
            proc = slot.proc
            if proc is None or proc.poll() is not None:
                results[slot.name] = (restarting_ok, {"restarting": True})
                continue
            port = self._probe_port(slot.index, proc.pid)
            if port is None:
                # Not serving yet: it is importing the app or taking its consumer name.
                results[slot.name] = (path == "/healthz", {"starting": True, "pid": proc.pid})
                continue
            ok, details = _get_json(port, path)
            results[slot.name] = (ok, {"pid": proc.pid, **details})
        return aggregate_probes(results)

    def _probe_port(self, index: int, pid: int) -> int | None:
        try:
            child_pid, port = probe_file(self._run_dir, index).read_text().split()
        except (OSError, ValueError):
            return None
        return int(port) if int(child_pid) == pid else None

    def liveness(self) -> tuple[bool, dict[str, Any]]:
        """``/healthz``: every live child is live; a slot waiting for its restart does not fail
        it (the supervisor is handling that)."""
        return self._ask_children("/healthz", restarting_ok=True)

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        """``/readyz``: every child is running and ready."""
        return self._ask_children("/readyz", restarting_ok=False)

    # -- the main loop -----------------------------------------------------------------------

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals.append(signum)

    def run(self) -> int:
        """Start the children, supervise them until a signal or a configuration error, and
        return the exit code (raises ConfigError with a child's message for the latter)."""
        server: HealthServer | None = None
        previous = {
            sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)
        }
        try:
            if self.settings.metrics_port is not None:
                server = HealthServer(self.registry, self.liveness, self.readiness)
                try:
                    port = server.start(self.settings.metrics_host, self.settings.metrics_port)
                except OSError as exc:
                    raise ConfigError(
                        f"cannot serve metrics on {self.settings.metrics_host}:"
                        f"{self.settings.metrics_port}: {exc}"
                    ) from None
                self._log.info(
                    "http_endpoint_started",
                    host=self.settings.metrics_host,
                    port=port,
                    paths=["/metrics", "/healthz", "/readyz"],
                )
            self._log.info(
                "supervisor_started",
                processes=len(self.slots),
                consumers=[s.name for s in self.slots],
            )
            for slot in self.slots:
                self._start(slot)
            return self._loop()
        finally:
            self._kill_leftovers()
            if server is not None:
                server.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            with self._probe_lock:
                if self._probe_client is not None:
                    self._probe_client.close()
            shutil.rmtree(self._run_dir, ignore_errors=True)

    def _loop(self) -> int:
        handled = 0
        while True:
            while handled < len(self._signals):
                self._forward(self._signals[handled], first=handled == 0)
                handled += 1
            now = time.monotonic()
            for slot in self.slots:
                self._check(slot, now)
            if self._stopping and all(s.proc is None for s in self.slots):
                break
            time.sleep(_POLL_S)
        if self._config_error is not None:
            raise ConfigError(self._config_error)
        if len(self._signals) >= 2:
            return 128 + self._signals[1]
        codes = {s.name: s.last_code for s in self.slots}
        clean = all(code in (0, None) for code in codes.values())
        self._log.info(
            "supervisor_stopped",
            exits={n: child_exit_reason(c) for n, c in codes.items() if c is not None},
        )
        return 0 if clean else 1

    def _forward(self, signum: int, *, first: bool) -> None:
        name = signal.Signals(signum).name
        if first:
            self._stopping = True
            self._log.info(
                "shutdown_requested", signal=name, timeout_s=self.settings.shutdown_timeout_s
            )
        else:
            self._log.warning("shutdown_forced", signal=name)
        self._signal_children(signum)

    def _signal_children(self, signum: int) -> None:
        for slot in self.slots:
            slot.restart_at = None
            if slot.proc is not None and slot.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    slot.proc.send_signal(signum)

    def _check(self, slot: _Slot, now: float) -> None:
        if slot.proc is None:
            if slot.restart_at is not None and now >= slot.restart_at and not self._stopping:
                slot.restart_at = None
                slot.restarts += 1
                self._start(slot)
            return
        code = slot.proc.poll()
        if code is None:
            return
        pid = slot.proc.pid
        slot.proc = None
        slot.last_code = code
        # The dead child's live gauges go; its counters stay (the sums must not go back).
        mark_process_dead(pid, str(self._metrics_dir))  # type: ignore[no-untyped-call]
        with contextlib.suppress(OSError):
            probe_file(self._run_dir, slot.index).unlink()
        message = _read_error(error_file(self._run_dir, slot.index))
        if self._stopping:
            self._log.info(
                "process_stopped", consumer=slot.name, pid=pid, how=child_exit_reason(code)
            )
            return
        if code == EXIT_CONFIG:
            self._config_error = (
                f"process {slot.index} ({slot.name}) exited with a configuration error: "
                f"{message or 'see its log'}"
            )
            self._log.error("process_config_error", consumer=slot.name, pid=pid, error=message)
            self._stopping = True
            self._signal_children(signal.SIGTERM)
            return
        if now - slot.started_at >= STABLE_AFTER_S:
            slot.backoff.reset()
        delay = slot.backoff.next_delay()
        slot.restart_at = now + delay
        self._log.warning(
            "process_crashed",
            consumer=slot.name,
            pid=pid,
            how=child_exit_reason(code),
            error=message,
            restart_in_s=round(delay, 3),
        )

    def _start(self, slot: _Slot) -> None:
        with contextlib.suppress(OSError):
            error_file(self._run_dir, slot.index).unlink()
        argv = [
            sys.executable,
            "-m",
            "streamworker",
            "run",
            self.target,
            "--consumer",
            slot.name,
            "--supervisor-dir",
            str(self._run_dir),
            "--process-index",
            str(slot.index),
            "--supervisor-pid",
            str(os.getpid()),
        ]
        # A process group of its own: a terminal's Ctrl-C reaches the children through the
        # supervisor only (once), not directly as well (which would count as a second signal).
        slot.proc = subprocess.Popen(argv, env=self._env, process_group=0)
        slot.started_at = time.monotonic()
        self._log.info(
            "process_started", consumer=slot.name, pid=slot.proc.pid, restarts=slot.restarts
        )

    def _kill_leftovers(self) -> None:
        """On the way out after an unexpected error: stop what still runs, then reap it."""
        live = [s.proc for s in self.slots if s.proc is not None and s.proc.poll() is None]
        for proc in live:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
        deadline = time.monotonic() + self.settings.shutdown_timeout_s + 5
        for proc in live:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _read_error(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _get_json(port: int, path: str) -> tuple[bool, dict[str, Any]]:
    try:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{port}{path}", timeout=_PROBE_TIMEOUT_S
        ) as resp:
            body = resp.read()
            status = resp.status
    except urllib.error.HTTPError as exc:
        body, status = exc.read(), exc.code
    except OSError as exc:
        return False, {"error": f"probe unreachable: {type(exc).__name__}: {exc}"}
    try:
        details = json.loads(body)
    except ValueError:
        details = {"error": body.decode(errors="replace")[:200]}
    details.pop("ok", None)
    return status == 200, details
