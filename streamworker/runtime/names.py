"""Consumer names with one live owner.

A consumer name is how a restarted worker finds its own pending entries (its backlog is
``XREADGROUP … 0`` under that name), so two live processes with one name would each replay the
other's in-flight entries and run them twice. Each process therefore owns its name in every
(stream, group) it consumes through a record in Redis, :func:`~streamworker.io.keys.consumer_name_key`:
a hash with a token unique to the process start, its host, pid and start time, and a time to live
of ``ttl_ms`` that the worker renews every third of it.

* **Start.** A free name is taken. A name held by a dead previous run of the same process (same
  host; its pid is gone, or now belongs to a process started at another time, as after a
  container restart) is taken over at once. A name held by anything else is waited for: if its
  record expires (the holder was killed on another host) the name is taken, within one TTL; if
  the holder renews it meanwhile, it is alive and this process refuses to start
  (:class:`~streamworker.errors.ConsumerNameTaken`, exit 2).
* **Running.** A renewal that finds another token means another process took the name while this
  one could not renew (a Redis outage longer than the TTL): this worker stops with the same
  error rather than share the name. A record that merely expired is taken again.
* **Stop.** A graceful stop deletes the record, so the next start takes the name at once.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import redis.asyncio as aioredis
import structlog

from streamworker.errors import ConsumerNameTaken
from streamworker.io.keys import consumer_name_key
from streamworker.io.redisio import LuaScript, as_text

_CLAIM = LuaScript("claim_consumer_name")
_RELEASE = LuaScript("release_consumer_name")

_TAKEN, _RENEWED, _OTHER = 1, 2, 0


def process_start(pid: int) -> str:
    """The start time of process ``pid`` in clock ticks since boot (Linux), or "" when unknown.

    Together with the host and the pid it names one process run: a pid reused by a later process
    (a restarted container is pid 1 again) has another start time."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    # Field 22; the command name (field 2) is in parentheses and may contain spaces.
    fields = stat[stat.rfind(")") + 2 :].split()
    return fields[19] if len(fields) > 19 else ""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(frozen=True, slots=True)
class Holder:
    """Who holds a name, as its record says."""

    token: str
    host: str
    pid: int
    ttl_ms: int

    def describe(self) -> str:
        return f"host {self.host or '?'}, pid {self.pid or '?'}"


class ConsumerNames:
    """This process's records for ``consumer`` in every (stream, group) of ``subscriptions``.

    The record doubles as the worker's heartbeat (the dashboard's workers page reads it): fixed
    fields ``consumer, host, pid, pid_start, version, handlers, started_at_ms``, and on every
    write ``beat_at_ms`` plus what ``stats()`` returns (the worker gives ``last_batch_at_ms,
    in_flight, processed, failed``), and per record the handler's ``claim_idle_ms`` when given
    (``claim_idle_ms`` maps (stream, group) to it). Use from one event loop. ``host`` and ``pid`` are
    parameters for tests; by default they describe this process.
    """

    def __init__(
        self,
        client: aioredis.Redis,
        consumer: str,
        subscriptions: Sequence[tuple[str, str]],
        *,
        ttl_ms: int,
        handlers: Sequence[str] = (),
        version: str = "",
        host: str | None = None,
        pid: int | None = None,
        stats: Callable[[], Mapping[str, int]] = dict,
        claim_idle_ms: Mapping[tuple[str, str], int] | None = None,
    ) -> None:
        self.consumer = consumer
        self.ttl_ms = ttl_ms
        self._client = client
        self.host = host if host is not None else socket.gethostname()
        self.pid = pid if pid is not None else os.getpid()
        self._start = process_start(self.pid)
        self.token = f"{self.host}:{self.pid}:{uuid.uuid4().hex}"
        self._subs = sorted(set(subscriptions))
        self._fields: list[str | int] = [
            "consumer",
            consumer,
            "host",
            self.host,
            "pid",
            self.pid,
            "pid_start",
            self._start,
            "version",
            version,
            "handlers",
            ",".join(dict.fromkeys(handlers)),
            "started_at_ms",
            int(time.time() * 1000),
        ]
        self._stats = stats
        # Per record: the handler's claim_idle_ms, so the dashboard's claim can default to it.
        self._per_key: dict[str, list[str | int]] = {
            consumer_name_key(stream, group, consumer): ["claim_idle_ms", ms]
            for (stream, group), ms in (claim_idle_ms or {}).items()
        }
        self._log = structlog.get_logger("streamworker.names").bind(consumer=consumer)

    @property
    def renew_interval_s(self) -> float:
        """How often :meth:`renew` must run: a third of the TTL."""
        return max(0.05, self.ttl_ms / 3000)

    def key(self, stream: str, group: str) -> str:
        """The record of this name in (stream, group)."""
        return consumer_name_key(stream, group, self.consumer)

    async def _call(self, key: str, replace: str = "") -> tuple[int, Holder | None]:
        live: list[str | int] = ["beat_at_ms", int(time.time() * 1000)]
        for name, value in self._stats().items():
            live += [name, value]
        reply = await _CLAIM(
            self._client,
            [key],
            [self.token, self.ttl_ms, replace, *self._fields, *self._per_key.get(key, ()), *live],
        )
        state = int(reply[0])
        if state != _OTHER:
            return state, None
        token, host, pid = (as_text(v) for v in reply[2:5])
        return state, Holder(token, host, int(pid) if pid.isdigit() else 0, int(reply[1]))

    async def _previous_run_of_this_process(self, key: str, holder: Holder) -> bool:
        """True when ``holder`` is a dead earlier run on this host (its pid is gone, or belongs to
        a process started at another time)."""
        if holder.host != self.host or not holder.pid:
            return False
        if not _pid_alive(holder.pid) and holder.pid != self.pid:
            return True
        recorded = as_text(await self._client.hget(key, "pid_start") or b"")
        current = self._start if holder.pid == self.pid else process_start(holder.pid)
        return bool(recorded) and bool(current) and recorded != current

    async def acquire(self, stopping: Callable[[], bool] = lambda: False) -> None:
        """Take every record (see the module docstring). Raises ConsumerNameTaken when a live
        process owns the name, ConnectionLost when Redis cannot be reached."""
        for stream, group in self._subs:
            await self._acquire_one(stream, group, stopping)

    async def _acquire_one(self, stream: str, group: str, stopping: Callable[[], bool]) -> None:
        key = self.key(stream, group)
        _, holder = await self._call(key)
        if holder is None:
            return
        if await self._previous_run_of_this_process(key, holder):
            _, other = await self._call(key, replace=holder.token)
            if other is None:
                self._log.info(
                    "consumer_name_taken_over", stream=stream, group=group, dead=holder.describe()
                )
                return
            holder = other
        # Wait for the record to expire (a holder killed elsewhere) or to be renewed (alive).
        self._log.warning(
            "consumer_name_waiting",
            stream=stream,
            group=group,
            holder=holder.describe(),
            wait_ms=holder.ttl_ms,
        )
        seen = holder
        seen_at = time.monotonic()
        first_ttl_ms = max(holder.ttl_ms, 0)
        poll_s = min(0.25, self.ttl_ms / 6000)
        while not stopping():
            await asyncio.sleep(poll_s)
            _, now_holder = await self._call(key)
            if now_holder is None:
                self._log.info("consumer_name_taken", stream=stream, group=group)
                return
            # A dead holder's record only counts down; one renewed (or taken by yet another
            # process) belongs to a live process. A renewal shows as a jump of about a third of
            # the holder's TTL (its own setting, at least what was first seen of it); a sixth
            # absorbs slow round trips without missing the jump.
            expected_ms = seen.ttl_ms - (time.monotonic() - seen_at) * 1000
            slack_ms = max(100.0, min(self.ttl_ms, first_ttl_ms) / 6)
            if now_holder.token != seen.token or now_holder.ttl_ms > expected_ms + slack_ms:
                raise self._taken(stream, group, now_holder)
            seen, seen_at = now_holder, time.monotonic()

    def _taken(self, stream: str, group: str, holder: Holder) -> ConsumerNameTaken:
        return ConsumerNameTaken(
            f"consumer name {self.consumer!r} is in use by a live process ({holder.describe()}) "
            f"in stream {stream!r} group {group!r}; give this worker its own name with "
            f"--consumer NAME (or STREAMWORKER_CONSUMER)"
        )

    async def renew(self) -> None:
        """Renew every record. Raises ConsumerNameTaken when another process took one over,
        ConnectionLost when Redis cannot be reached."""
        for stream, group in self._subs:
            state, holder = await self._call(self.key(stream, group))
            if holder is not None:
                raise self._taken(stream, group, holder)
            if state == _TAKEN:
                self._log.warning("consumer_name_retaken", stream=stream, group=group)

    async def release(self) -> None:
        """Delete the records this process owns (a graceful stop)."""
        for stream, group in self._subs:
            await _RELEASE(self._client, [self.key(stream, group)], [self.token])
