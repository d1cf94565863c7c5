"""What a Sentinel failover does to plain, acknowledged XADDs (no waiting for a replica): the
issue's scenario, measured.

A primary, one replica, three Sentinels (quorum 2, down-after 1000 ms). A producer XADDs 32 KB
entries to the primary, one at a time, at most ~250 a second; the replica is SIGSTOPped for about 1.5 s
(it lags: what the primary sent it piles up in socket buffers and in the primary's replica output
buffer), then the primary is SIGKILLed and the replica resumed; the Sentinels promote it.

Counted on the new primary: acknowledged entries missing (lost with the old primary), and every
entry that survived compared byte for byte with what was acknowledged. The loss is printed (the
docs quote it as the reason for ``wait_replicas``); the assertions are that it is measured and
that no surviving entry is damaged or made up.
"""

from __future__ import annotations

import hashlib
import threading
import time

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.support.proc import wait_for
from tests.support.sentinel import SentinelSetup

pytestmark = pytest.mark.slow

STREAM = "{ha}:loss"
ENTRY_BYTES = 32 * 1024
LAG_S = 1.5
PACE_S = 0.004  # at most ~250 entries (8 MB) a second


class Producer(threading.Thread):
    """XADDs numbered 32 KB entries until an error (the primary is gone) or :meth:`halt`."""

    def __init__(self, client: redis.Redis) -> None:
        super().__init__(name="xadd-producer", daemon=True)
        self.client = client
        self.acked: dict[str, str] = {}  # id -> sha256 of the payload
        self.error: str | None = None
        self._halt = threading.Event()

    def run(self) -> None:
        n = 0
        while not self._halt.is_set():
            payload = (f"{n:08d}".encode() * (ENTRY_BYTES // 8))[:ENTRY_BYTES]
            try:
                entry_id = self.client.xadd(STREAM, {"n": str(n), "payload": payload})
            except redis.RedisError as exc:
                self.error = f"{type(exc).__name__}: {exc}"
                return
            self.acked[entry_id.decode()] = hashlib.sha256(payload).hexdigest()
            n += 1
            # Paced like an application, not a flood: unpaced, the primary's replica output
            # buffer passes its limit while the replica is stopped and the link is dropped,
            # which is another scenario (a full resync).
            self._halt.wait(PACE_S)

    def halt(self) -> None:
        self._halt.set()


def test_plain_acknowledged_xadds_lost_in_a_failover_are_measured_and_survivors_are_intact(
    own_sentinel_setup: SentinelSetup,
) -> None:
    setup = own_sentinel_setup
    producer = Producer(
        # No retries: a resent XADD whose first reply was lost would add an entry twice.
        redis.Redis(
            host="127.0.0.1", port=setup.primary.port, socket_timeout=5, retry=Retry(NoBackoff(), 0)
        )
    )
    producer.start()
    wait_for(lambda: len(producer.acked) >= 20, 20, "the producer to get going")
    setup.lag_replica()
    stopped_at = time.monotonic()
    acked_before_lag = len(producer.acked)
    wait_for(lambda: time.monotonic() - stopped_at >= LAG_S, LAG_S + 5, "the replica to lag")
    setup.kill_primary()
    setup.resume_replica()
    producer.join(10)
    producer.halt()
    new_primary = setup.wait_for_failover()

    acked = producer.acked
    kept = {
        entry_id.decode(): hashlib.sha256(fields[b"payload"]).hexdigest()
        for entry_id, fields in new_primary.client().xrange(STREAM)
    }
    lost = sorted(set(acked) - set(kept))
    print(
        f"\nplain XADD through a failover: {len(acked)} acknowledged "
        f"({len(acked) - acked_before_lag} while the replica lagged {LAG_S} s), "
        f"{len(lost)} lost, {len(acked) - len(lost)} kept"
    )
    assert producer.error is not None, "the producer never saw the primary go"
    assert [i for i in kept if i not in acked] == [], "entries nobody acknowledged appeared"
    assert [i for i, digest in kept.items() if acked[i] != digest] == [], "a kept entry changed"
    # What is lost is a tail: the replica applied a prefix of what the primary acknowledged.
    last_kept = max((_id_key(i) for i in kept), default=(0, 0))
    assert [i for i in lost if _id_key(i) < last_kept] == [], "a hole among the kept entries"


def _id_key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq)
