"""The timing model: every period and window the runtime and the strategies derive from
``claim_idle_ms``, in one place, each with the invariant it keeps.

``claim_idle_ms`` is the one promise the group's consumers make each other: an entry idle in a
consumer's PEL for longer than that may be claimed (XAUTOCLAIM) by another consumer's reclaimer.
An entry's *lease* is that promise seen from its holder: the entry is the holder's while its idle
time stays below ``claim_idle_ms``. Idle time starts when the read that delivered the entry is
*sent* (the server runs it later, never earlier), and a successful renewal
(``touch_owned.lua``, the reclaimer's renewal of held entries) starts it again. Everything below
keeps one property: **an entry cannot be claimed away while this consumer uses it** (runs its
handler, or commits and acks its effects) unless it checks ownership first.

The fractions, and why each one is safe (``C`` = ``claim_idle_ms``):

* :func:`renew_interval_ms` (C/3): the reclaimer resets the idle time of every entry the
  consume loop holds this often, by time alone (never waiting on a batch, a lock or a database).
* :func:`late_reply_ms` (C/4): a batch whose handlers would start later than this after its read
  was sent is checked first (still mine? touch it). Otherwise its entries' idle time before the
  first renewal is at most C/4 + C/3 = 7C/12, leaving 5C/12 for the renewal's own round trip and
  timer slack (:func:`renewal_slack_ms`).
* :func:`fresh_batch_window_ms` (C/2): a ``>`` batch read less than this ago is *fresh*: no other
  consumer may claim its entries yet, so a strategy may skip its ownership check before the
  handlers (never the one with the ack). It exceeds the late threshold, so a batch checked late
  is never fresh on the strength of its original read (the check restarts its clock).
* :func:`sql_fresh_claim_window_ms` (0.45 C): the SQL strategy's processed rows are claimed
  without an ownership check only if that claim completes within this after a fresh batch
  started, i.e. less than C/2 + 0.45 C = 0.95 C after the read was sent: before anyone else may
  claim those entries, so nobody can have processed, acked and pruned them meanwhile. The 0.05 C
  left covers the moments between the freshness test and the strategy's start.
* :func:`claim_interval_ms` (C/2, 50 ms to 2 s): how often the reclaimer looks for entries idle
  past C; it bounds how late an abandoned entry is picked up, not safety. The 2 s cap bounds how
  long entries another worker released on a graceful stop (:mod:`streamworker.runtime.release`)
  wait, at one XAUTOCLAIM per 2 s.

The ordered loop (``ordered=True``, :mod:`streamworker.runtime.ordering`) has a different kind of
timer, the *partition lock*: a Redis key naming the one consumer that may read a partition, with
a TTL of C (:func:`partition_lock_ttl_ms`). Its holder renews it every third of the TTL
(:func:`partition_lock_renew_interval_ms`) and trusts it for :data:`PARTITION_LOCK_TRUSTED_SHARE`
of the TTL by its own clock from the renewal's send, so it stops before another consumer can
take the partition over.

Pure arithmetic, no I/O; property tests check the invariants for every C from
:data:`MIN_SAFE_CLAIM_IDLE_MS` (tests/unit/test_timing.py).
"""

from __future__ import annotations

MIN_RENEW_INTERVAL_MS = 10
"""The shortest renewal period: a timer finer than this is not kept on a loaded event loop."""

MIN_SAFE_CLAIM_IDLE_MS = 30
"""The smallest ``claim_idle_ms`` for which the invariants hold with the renewal floor
(:data:`MIN_RENEW_INTERVAL_MS`): smaller values are accepted (tests use them to force claims)
but held entries may be claimed away by time."""

LATE_FRACTION = 4
"""A reply later than ``claim_idle_ms / LATE_FRACTION`` after its request was sent is late."""

FRESH_FRACTION = 2
"""A ``>`` batch read less than ``claim_idle_ms / FRESH_FRACTION`` ago is fresh."""

SQL_FRESH_CLAIM_SHARE = 0.45
"""The share of ``claim_idle_ms`` after a fresh batch started within which the SQL strategy's
claim needs no ownership check."""

PARTITION_LOCK_TRUSTED_SHARE = 0.9
"""The share of its TTL a partition lock's holder trusts it for, by its own clock, from the
moment it sent the request that granted or renewed it: the rest absorbs clock-rate differences
and latency."""


def renew_interval_ms(claim_idle_ms: int) -> int:
    """How often held entries get their idle time reset: a third of ``claim_idle_ms``, at least
    :data:`MIN_RENEW_INTERVAL_MS`."""
    return max(MIN_RENEW_INTERVAL_MS, claim_idle_ms // 3)


def late_reply_ms(claim_idle_ms: int) -> float:
    """How long after its send a read or claim reply (or the start of its handlers) is late:
    a quarter of ``claim_idle_ms``."""
    return claim_idle_ms / LATE_FRACTION


def renewal_slack_ms(claim_idle_ms: int) -> float:
    """What is left of ``claim_idle_ms`` for a renewal's own round trip once the latest
    unchecked start (:func:`late_reply_ms`) and a full renewal period have passed."""
    return claim_idle_ms - late_reply_ms(claim_idle_ms) - renew_interval_ms(claim_idle_ms)


def fresh_batch_window_ms(claim_idle_ms: int) -> float:
    """How long after its ``>`` read was sent a batch counts as fresh: half of
    ``claim_idle_ms``."""
    return claim_idle_ms / FRESH_FRACTION


def sql_fresh_claim_window_ms(claim_idle_ms: int) -> float:
    """How long after a fresh batch started the SQL strategy's claim may complete and still need
    no ownership check: 45% of ``claim_idle_ms``."""
    return claim_idle_ms * SQL_FRESH_CLAIM_SHARE


def claim_interval_ms(claim_idle_ms: int) -> int:
    """How often the reclaimer looks for entries idle past ``claim_idle_ms``: half of it, between
    50 ms and 2 s. The cap bounds how long entries another worker released on a graceful stop
    (:mod:`streamworker.runtime.release`) wait, at one XAUTOCLAIM per 2 s."""
    return max(50, min(claim_idle_ms // 2, 2_000))


def pel_hygiene_interval_ms(claim_idle_ms: int) -> int:
    """How often the reclaimer runs its XAUTOCLAIM pass when the consume loop's reads claim
    idle entries themselves (``XREADGROUP … CLAIM``, Redis 8.4+): CLAIM skips entries deleted
    from the stream and leaves them pending, and only XAUTOCLAIM clears them (and claims what
    a quiet stream's blocked read has not). The claim interval, or ``claim_idle_ms`` up to 30 s,
    whichever is longer."""
    return max(claim_interval_ms(claim_idle_ms), min(claim_idle_ms, 30_000))


def partition_lock_ttl_ms(claim_idle_ms: int) -> int:
    """``ordered=True``: how long a partition lock lives unless renewed (``claim_idle_ms``)."""
    return claim_idle_ms


def partition_lock_renew_interval_ms(ttl_ms: int) -> float:
    """How often a partition lock's holder renews it, and others try to take it: a third of its
    TTL, at least :data:`MIN_RENEW_INTERVAL_MS`."""
    return max(float(MIN_RENEW_INTERVAL_MS), ttl_ms / 3)


def partition_lock_trusted_ms(ttl_ms: int) -> float:
    """How long after the send of the request that granted or renewed it a holder trusts its
    partition lock (:data:`PARTITION_LOCK_TRUSTED_SHARE` of the TTL)."""
    return ttl_ms * PARTITION_LOCK_TRUSTED_SHARE
