"""The gate a subscription's handler starts pass: its shared rate limit and the group's pause.

**The limit** (``rate_limit="100/s"``): before each read the consume loop asks
``lua/take_permits.lua`` for as many permits as the read's COUNT would be and reads only as
many entries as it was granted, so a worker never holds messages that wait for the limit
(nothing read ages toward ``claim_idle_ms``, no delivery is counted for waiting). With none
granted it waits for the time the script names. Permits a read did not use (it brought fewer
entries) are handed back. The reclaimer's retries and claims take permits the same way. The
script keeps one key per handler and group, in the stream's hash tag; it reads the server's
clock, so the workers' clocks do not matter.

**The pause** (a handler raised :class:`~streamworker.errors.RateLimited`): the worker pauses
the handler at once (the rest of its batch is not started), and a key with the pause's time to
live tells every other worker: a limited handler's script call sees it; a handler without a
limit looks for it at most every :data:`PAUSE_POLL_S` before a read. The paused messages are
handed back uncounted (:func:`streamworker.runtime.release.uncount_deliveries`) and retried
when the pause is over.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis
import structlog

from streamworker.app import HandlerSpec
from streamworker.errors import ConnectionLost
from streamworker.io.keys import rate_limit_key, rate_pause_key
from streamworker.io.redisio import LuaScript, connection_errors
from streamworker.observability.metrics import Metrics
from streamworker.runtime.loop import StopSignal

_TAKE = LuaScript("take_permits")

PAUSE_POLL_S = 1.0
"""A handler without a rate limit looks for the group's pause at most this often (one PTTL
before a read): another worker's RateLimited reaches it within this."""

_MAX_SLEEP_S = 1.0
"""A wait for permits wakes at least this often (liveness: the loop is alive and waiting)."""


class HandlerPause:
    """This worker's view of the handler's pause, on the monotonic clock. Set from the event loop
    or a handler thread (one float written: no lock needed)."""

    __slots__ = ("until",)

    def __init__(self) -> None:
        self.until = 0.0
        """Monotonic time the pause ends (0.0: never paused)."""

    def pause_for(self, ms: int) -> None:
        """Pause for ``ms`` from now, unless already paused longer."""
        self.until = max(self.until, time.monotonic() + ms / 1000)

    def left_s(self) -> float:
        """Seconds left of the pause (0.0 when not paused)."""
        if not self.until:
            return 0.0
        return max(0.0, self.until - time.monotonic())


class RateGate:
    """The permits of one subscription (``spec``): its shared limit, if it has one, and the
    pause. Use from one event loop."""

    def __init__(
        self,
        spec: HandlerSpec,
        client: aioredis.Redis,
        metrics: Metrics,
        pause: HandlerPause | None = None,
    ) -> None:
        self.limit = spec.rate_limit
        self.pause = pause or HandlerPause()
        self._client = client
        # One limit for a handler over all its partitions: the logical stream's hash tag.
        stream = spec.partition_of or spec.stream
        self._keys = [rate_limit_key(stream, spec.group), rate_pause_key(stream, spec.group)]
        self._args: list[str | int] = (
            [self.limit.interval_us, self.limit.burst] if self.limit is not None else [1, 1]
        )
        labels = {"stream": spec.stream, "group": spec.group, "handler": spec.name}
        self._limited_s = metrics.rate_limited.labels(**labels)
        self._allowance = (
            metrics.rate_allowance.labels(**labels) if self.limit is not None else None
        )
        self._next_poll = 0.0
        self._last_allowance: object = None
        self._log = structlog.get_logger("streamworker.ratelimit").bind(
            stream=spec.stream, group=spec.group, handler=spec.name
        )

    @property
    def limited(self) -> bool:
        """True when the handler has a shared rate limit (reads are sized by permits)."""
        return self.limit is not None

    async def take(self, want: int) -> tuple[int, float]:
        """Ask once, without waiting: ``(granted, wait_s)``, the permits granted (at most
        ``want``; ``want`` itself for a handler without a limit that is not paused) and, when
        none, the seconds until one may be. Raises ConnectionLost when Redis does not answer."""
        left = self.pause.left_s()
        if left > 0:
            return 0, left
        if self.limit is None:
            if time.monotonic() < self._next_poll:
                return want, 0.0
            self._next_poll = time.monotonic() + PAUSE_POLL_S
            async with connection_errors():
                pttl = int(await self._client.pttl(self._keys[1]))
            if pttl > 0:
                self.pause.pause_for(pttl)
                return 0, pttl / 1000
            return want, 0.0
        reply = await _TAKE(self._client, self._keys, ["take", *self._args, max(1, want), ""])
        granted, wait_us, allowance = (int(x) for x in reply)
        assert self._allowance is not None
        self._allowance.set(max(0, allowance))
        return granted, wait_us / 1_000_000

    def take_command(self, want: int) -> tuple[Any, ...]:
        """:meth:`take` as a raw command (for a pipeline: the read that asks for the next
        read's permits in the same write); its reply goes to :meth:`granted`."""
        return (b"EVALSHA", _TAKE.sha, 2, *self._keys, "take", *self._args, max(1, want), "")

    def granted(self, reply: Any) -> int:
        """The permits a :meth:`take_command` reply granted: 0 for none, an error (a server
        that lost the script: the next :meth:`take` loads it) or no reply."""
        if type(reply) is not list or len(reply) != 3:
            return 0
        allowance = reply[2]
        if allowance != self._last_allowance and self._allowance is not None:
            self._last_allowance = allowance
            self._allowance.set(max(0, int(allowance)))
        return max(0, int(reply[0]))

    async def acquire(
        self, want: int, signal: StopSignal, turned: Callable[[], None] | None = None
    ) -> int:
        """Wait until at least one permit is granted and return how many (at most ``want``), or
        0 once ``signal`` says stop. The time waited counts in
        ``streamworker_rate_limited_seconds_total``; ``turned`` is called after every sleep (the
        loop is alive, waiting on purpose)."""
        waited_from: float | None = None
        try:
            while not signal.stopping():
                granted, wait_s = await self.take(want)
                if granted:
                    return granted
                if waited_from is None:
                    waited_from = time.monotonic()
                    self._log.debug("rate_limit_waiting", wait_s=round(wait_s, 4))
                await signal.sleep(min(max(wait_s, 0.001), _MAX_SLEEP_S))
                if turned is not None:
                    turned()
            return 0
        finally:
            if waited_from is not None:
                self._limited_s.inc(time.monotonic() - waited_from)

    async def give_back(self, unused: int) -> None:
        """Hand back permits granted but not used (a read brought fewer entries than its
        COUNT). Best effort: a permit not handed back is a start the limit counts that never
        happened (the limit errs on the safe side)."""
        if self.limit is None or unused <= 0:
            return
        with contextlib.suppress(ConnectionLost):
            reply = await _TAKE(self._client, self._keys, ["give", *self._args, unused, ""])
            assert self._allowance is not None
            self._allowance.set(max(0, int(reply[2])))

    async def pause_group(self, ms: int) -> None:
        """Pause the handler for ``ms`` here (at once) and in every worker of the group (the
        pause key; a longer pause already set is kept). Raises ConnectionLost when Redis does
        not answer (this worker's pause holds anyway)."""
        self.pause.pause_for(ms)
        if ms <= 0:
            return
        await _TAKE(self._client, self._keys, ["pause", *self._args, ms, ""])
        if self._allowance is not None:
            self._allowance.set(0)
