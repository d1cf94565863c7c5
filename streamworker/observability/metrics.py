"""Prometheus metrics of one worker, in a registry of its own (no process-global state).

The names are part of streamworker's public interface (dashboards and alerts are written against
them). Counters and histograms, recorded by the runtime, labelled ``stream``, ``group`` and
``handler`` (the handler's name: two Apps, or two versions of one during a rollout, may consume
one stream in one group):

* ``streamworker_messages_total{…,outcome}`` — one count per message and outcome:
  ``acked`` (handled and acknowledged), ``duplicate`` (already processed: acked without running
  the handler), ``failed`` (the handler raised; left pending for a retry), ``retried`` (the
  handler raised ``Retry``; left pending), ``dead_lettered``, ``deleted`` (deleted from the
  stream while pending: acked unprocessed).
* ``streamworker_handler_duration_seconds`` — handler run time.
* ``streamworker_batch_size`` — messages per processed batch.
* ``streamworker_ack_latency_seconds`` — from a batch's read (or claim) to its XACK.
* ``streamworker_claimed_total{…,source}`` — entries taken by the reclaimer:
  ``source="self"`` (this consumer's own retries) or ``"others"`` (taken over from other consumers).
* ``streamworker_dedup_hits_total{…,strategy}`` — duplicates caught by the idempotency
  strategy (``sql``/``lua``); the same events as ``outcome="duplicate"``, by strategy.
* ``streamworker_idempotency_errors_total{…,strategy}`` — the idempotency store (the
  database) failed a batch; nothing of it was acked.
* ``streamworker_reconnects_total`` — connection outages the consume loop recovered from: one per
  outage, however many attempts it took (Redis answered again).
* ``streamworker_reconnect_attempts_total`` — every failed attempt during those outages (a 15 s
  outage is one reconnect and about ten attempts with the default backoff).

Publishing with ``wait_replicas`` (labelled ``operation``: ``publish``, ``publish_many``,
``relay``, ``dlq_replay``, ``spark_commit``, ``archive_trim``; see
:mod:`streamworker.io.replicawait`):

* ``streamworker_publish_wait_seconds{operation}`` — from sending a write to its replicas'
  acknowledgement (the write and its WAIT are one round trip), timed-out waits included.
* ``streamworker_publish_wait_timeouts_total{operation}`` — writes that fewer replicas than asked
  acknowledged within ``wait_timeout_ms`` (ReplicaWaitTimeout: on the primary, not yet safe from a
  failover).

Delayed delivery (labelled ``stream``; see :mod:`streamworker.producing.delayed`), recorded by the
worker's mover every ``delayed_poll_ms``:

* ``streamworker_delayed_messages{stream}`` — entries waiting in the stream's delayed set (ZCARD).
* ``streamworker_delayed_moved_total{stream}`` — delayed entries this worker moved in when due.

Shared rate limits (``rate_limit=``, and the pause after ``RateLimited``; labelled ``stream``,
``group``, ``handler``; see :mod:`streamworker.runtime.ratelimit`):

* ``streamworker_rate_limited_seconds_total`` — time this worker's reads of the handler waited
  for a permit of its shared rate limit or for its pause to end.
* ``streamworker_rate_limit_allowance`` — permits of the shared limit left to the group right
  now, as of this worker's last request (0 while paused).

Process-wide: ``streamworker_build_info{version,python}`` (always 1), and prometheus_client's
process and platform collectors (``process_resident_memory_bytes``, ``process_cpu_seconds_total``,
``process_open_fds``, ``python_info``, …).

Gauges, read from Redis when scraped (see :class:`GroupStateCollector`):

* ``streamworker_group_lag{stream,group}`` — entries not yet delivered to the group (XINFO GROUPS
  ``lag``; absent while Redis cannot tell).
* ``streamworker_pending_messages{stream,group}`` — delivered, not yet acknowledged (the PEL).
* ``streamworker_oldest_pending_age_seconds{stream,group}`` — age of the oldest pending entry.
* ``streamworker_consumers{stream,group}`` — consumers the group knows.
* ``streamworker_dead_letter_messages{stream,dead_letter_stream}`` — entries in the dead-letter stream.
* ``streamworker_work_left{stream,group}`` — lag + pending: every entry the group still has to
  finish. The autoscaling signal: lag alone misses stuck pending entries, pending alone misses the
  undelivered backlog.
"""

from __future__ import annotations

import bisect
import collections
import platform
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


def observe_many(histogram: Any, values: Sequence[float]) -> None:
    """Record ``values`` in a labelled Histogram child, as ``observe`` of each would, with one
    update per bucket touched instead of two locked updates per value (the consume loop records
    a handler duration per message).

    Uses prometheus_client's Histogram internals (``_upper_bounds``, ``_buckets``, ``_sum``);
    falls back to ``observe`` per value where they are not there. The unit tests compare both.
    """
    if not values:
        return
    bounds = getattr(histogram, "_upper_bounds", None)
    buckets = getattr(histogram, "_buckets", None)
    total = getattr(histogram, "_sum", None)
    if bounds is None or buckets is None or total is None or len(bounds) != len(buckets):
        for value in values:
            histogram.observe(value)
        return
    amount = sum(values)
    if amount == amount:
        # No NaN among the values (one would make the sum NaN): each goes to the first bucket
        # whose bound is >= it, as observe's "amount <= bound" picks it. Counted per bucket, not
        # per value: with the values sorted (in C), those up to a bound are found by one
        # bisection, and a bucket holds those up to its bound less those up to the one before.
        # Handler durations mostly share a bucket or two, so the loop ends after a few bounds.
        ordered = sorted(values)
        left = len(ordered)
        below = 0
        for i, bound in enumerate(bounds):
            upto = bisect.bisect_right(ordered, bound)
            if upto > below:
                buckets[i].inc(upto - below)
                below = upto
                if below == left:
                    break
    else:
        # NaN counts in the sum but in no bucket, as with observe.
        counts = collections.Counter(bisect.bisect_left(bounds, v) for v in values if v == v)
        for i, n in counts.items():
            buckets[i].inc(n)
    total.inc(amount)


OUTCOMES = ("acked", "duplicate", "failed", "retried", "dead_lettered", "deleted")

_LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
    60,
)


SUBSCRIPTION_LABELS = ("stream", "group", "handler")


class Outage:
    """Counts one subscription's connection outages: :meth:`attempt` on every failed attempt,
    :meth:`recovered` once Redis answers again (counted only when an outage was open). Used from
    the consume loop's task only."""

    __slots__ = ("_attempts", "_open", "_recovered")

    def __init__(self, attempts: Any, recovered: Any) -> None:
        self._attempts = attempts
        self._recovered = recovered
        self._open = False

    def attempt(self) -> None:
        """A connection attempt failed (the loop backs off and tries again)."""
        self._attempts.inc()
        self._open = True

    def recovered(self) -> None:
        """Redis answered: close the outage, if one was open."""
        if self._open:
            self._open = False
            self._recovered.inc()


class Metrics:
    """The worker's metrics. prometheus_client objects are thread-safe, so this is too.

    ``process_collectors=False`` leaves out the process and platform collectors (they read
    ``/proc`` on each scrape).
    """

    def __init__(
        self, registry: CollectorRegistry | None = None, *, process_collectors: bool = True
    ) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        if process_collectors:
            # Not prometheus_client's process-global instances: each registry gets its own.
            ProcessCollector(registry=r)
            PlatformCollector(registry=r)
        from streamworker.version import __version__

        self.build_info = Gauge(
            "streamworker_build_info",
            "streamworker's version and the Python running it (always 1).",
            ["version", "python"],
            registry=r,
            # Under --processes every child writes it; the supervisor serves one series, not
            # one per pid (the default in prometheus_client's multiprocess mode).
            multiprocess_mode="max",
        )
        self.build_info.labels(version=__version__, python=platform.python_version()).set(1)
        self.messages = Counter(
            "streamworker_messages",
            "Messages processed, by outcome.",
            [*SUBSCRIPTION_LABELS, "outcome"],
            registry=r,
        )
        self.handler_duration = Histogram(
            "streamworker_handler_duration_seconds",
            "Time spent in the handler per message.",
            SUBSCRIPTION_LABELS,
            registry=r,
            buckets=_LATENCY_BUCKETS,
        )
        self.batch_size = Histogram(
            "streamworker_batch_size",
            "Messages per processed batch.",
            SUBSCRIPTION_LABELS,
            registry=r,
            buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000),
        )
        self.ack_latency = Histogram(
            "streamworker_ack_latency_seconds",
            "Time from a batch's read or claim to its XACK.",
            SUBSCRIPTION_LABELS,
            registry=r,
            buckets=_LATENCY_BUCKETS,
        )
        self.claimed = Counter(
            "streamworker_claimed",
            "Entries claimed by the reclaimer, by source.",
            [*SUBSCRIPTION_LABELS, "source"],
            registry=r,
        )
        self.retained_deleted = Counter(
            "streamworker_retention_deleted",
            "Entries deleted from the stream by retention='acked' once no group needed them.",
            SUBSCRIPTION_LABELS,
            registry=r,
        )
        self.dedup_hits = Counter(
            "streamworker_dedup_hits",
            "Duplicates caught by the idempotency strategy.",
            [*SUBSCRIPTION_LABELS, "strategy"],
            registry=r,
        )
        self.idempotency_errors = Counter(
            "streamworker_idempotency_errors",
            "Batches the idempotency store failed.",
            [*SUBSCRIPTION_LABELS, "strategy"],
            registry=r,
        )
        self.late_batches = Counter(
            "streamworker_late_batches",
            "Batches whose handlers would have started later than a quarter of claim_idle_ms "
            "after their read or claim was sent, checked for ownership first.",
            SUBSCRIPTION_LABELS,
            registry=r,
        )
        self.database_timeouts = Counter(
            "streamworker_database_timeouts",
            "Database calls that passed the batch deadline (db_deadline_s): the connection was "
            "thrown away and the batch retried on a fresh one.",
            SUBSCRIPTION_LABELS,
            registry=r,
        )
        self.reconnects = Counter(
            "streamworker_reconnects",
            "Connection outages the consume loop recovered from (one per outage).",
            SUBSCRIPTION_LABELS,
            registry=r,
        )
        self.reconnect_attempts = Counter(
            "streamworker_reconnect_attempts",
            "Failed connection attempts during outages.",
            SUBSCRIPTION_LABELS,
            registry=r,
        )
        self.publish_wait = Histogram(
            "streamworker_publish_wait_seconds",
            "Time from sending a write to its replicas' acknowledgement (wait_replicas).",
            ["operation"],
            registry=r,
            buckets=_LATENCY_BUCKETS,
        )
        self.publish_wait_timeouts = Counter(
            "streamworker_publish_wait_timeouts",
            "Writes fewer replicas than asked acknowledged within wait_timeout_ms.",
            ["operation"],
            registry=r,
        )
        self.delayed_messages = Gauge(
            "streamworker_delayed_messages",
            "Delayed entries not yet due or not yet moved into the stream (ZCARD of its delayed "
            "set, as of this worker's last move).",
            ["stream"],
            registry=r,
        )
        self.delayed_moved = Counter(
            "streamworker_delayed_moved",
            "Delayed entries this worker moved into their stream when due.",
            ["stream"],
            registry=r,
        )
        self.rate_limited = Counter(
            "streamworker_rate_limited_seconds",
            "Time the handler's reads waited for a permit of its shared rate limit or for its "
            "pause (RateLimited) to end.",
            SUBSCRIPTION_LABELS,
            registry=r,
        )
        self.rate_allowance = Gauge(
            "streamworker_rate_limit_allowance",
            "Permits of the handler's shared rate limit left to the group right now, as of this "
            "worker's last request (0 while paused).",
            SUBSCRIPTION_LABELS,
            registry=r,
            multiprocess_mode="livemax",
        )
        self.failovers = Counter(
            "streamworker_failovers",
            "Primary changes this worker saw: a Sentinel named another primary, or the primary "
            "at a managed address answered READONLY (it was demoted).",
            registry=r,
        )

    def observe_replica_wait(self, operation: str, seconds: float, timed_out: bool) -> None:
        """Record one replica wait (a :class:`streamworker.io.replicawait.WaitObserver`: pass it as
        a producer's ``wait_observer``). Thread-safe."""
        self.publish_wait.labels(operation=operation).observe(seconds)
        if timed_out:
            self.publish_wait_timeouts.labels(operation=operation).inc()

    def observe_delayed(self, stream: str, moved: int, delayed: int) -> None:
        """Record one move of delayed entries (:class:`streamworker.producing.delayed.DelayedMover`)."""
        self.delayed_moved.labels(stream=stream).inc(moved)
        self.delayed_messages.labels(stream=stream).set(delayed)

    def prime(self, stream: str, group: str, handler: str) -> None:
        """Create every labelled series of a subscription at 0, so rates work from the first
        scrape and dashboards show zeros instead of gaps."""
        for outcome in OUTCOMES:
            self.messages.labels(stream=stream, group=group, handler=handler, outcome=outcome)
        for source in ("self", "others"):
            self.claimed.labels(stream=stream, group=group, handler=handler, source=source)
        self.reconnects.labels(stream=stream, group=group, handler=handler)
        self.reconnect_attempts.labels(stream=stream, group=group, handler=handler)

    def outage(self, stream: str, group: str, handler: str) -> Outage:
        """The outage counter of one subscription."""
        labels = {"stream": stream, "group": group, "handler": handler}
        return Outage(self.reconnect_attempts.labels(**labels), self.reconnects.labels(**labels))


@dataclass(frozen=True, slots=True)
class GroupState:
    """What Redis says about one subscription's group, for the gauges."""

    stream: str
    group: str
    dead_letter_stream: str
    lag: int | None
    pending: int
    oldest_pending_ms: int | None  # the oldest pending entry's id timestamp
    consumers: int
    dead_letters: int


class GroupStateCollector(Collector):
    """Gauges read from Redis at scrape time through ``read_states`` (a sync callable that may
    raise; a failed read yields no gauges for that scrape rather than stale values)."""

    def __init__(self, read_states: Callable[[], Sequence[GroupState]]) -> None:
        self._read = read_states

    def describe(self) -> list[Metric]:  # keeps registration from calling collect()
        return []

    def collect(self) -> Iterator[Metric]:
        try:
            states = list(self._read())
        except Exception:  # Redis unreachable: /readyz reports it; no made-up numbers here
            return
        labels = ["stream", "group"]
        lag = GaugeMetricFamily(
            "streamworker_group_lag", "Entries not yet delivered to the group.", labels=labels
        )
        pending = GaugeMetricFamily(
            "streamworker_pending_messages",
            "Entries delivered and not yet acknowledged.",
            labels=labels,
        )
        oldest = GaugeMetricFamily(
            "streamworker_oldest_pending_age_seconds",
            "Age of the oldest pending entry.",
            labels=labels,
        )
        consumers = GaugeMetricFamily(
            "streamworker_consumers", "Consumers in the group.", labels=labels
        )
        work = GaugeMetricFamily(
            "streamworker_work_left",
            "Lag plus pending: entries the group has yet to finish.",
            labels=labels,
        )
        dlq = GaugeMetricFamily(
            "streamworker_dead_letter_messages",
            "Entries in the dead-letter stream.",
            labels=["stream", "dead_letter_stream"],
        )
        now_ms = int(time.time() * 1000)
        seen_dlq: set[str] = set()
        for s in states:
            values = [s.stream, s.group]
            if s.lag is not None:
                lag.add_metric(values, s.lag)
                work.add_metric(values, s.lag + s.pending)
            pending.add_metric(values, s.pending)
            age = (
                0.0 if s.oldest_pending_ms is None else max(0, now_ms - s.oldest_pending_ms) / 1000
            )
            oldest.add_metric(values, age)
            consumers.add_metric(values, s.consumers)
            if s.dead_letter_stream not in seen_dlq:
                seen_dlq.add(s.dead_letter_stream)
                dlq.add_metric([s.stream, s.dead_letter_stream], s.dead_letters)
        yield from (lag, pending, oldest, consumers, work, dlq)
