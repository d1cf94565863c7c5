"""The issue's failover scenario with a producer that waits for a replica: through
``redis+sentinel://``, a keyed producer with ``wait_replicas=1`` and a worker with Lua, SQL
(PostgreSQL) and at-least-once handlers; the replica lags (SIGSTOP ~1.5 s), the primary is
SIGKILLed, the Sentinels promote the replica, the old primary comes back as a replica.

Counted on the new primary: every publish that returned is there exactly once (a publish whose
wait timed out, or whose connection was lost, is published again with the same key: a keyed
publish is safe to repeat), every entry's Lua and SQL effects applied once, nothing pending,
nothing dead-lettered. The counts are printed.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from streamworker.errors import ConnectionLost, ReplicaWaitTimeout
from streamworker.producer import SyncProducer
from streamworker.redisio import open_sync_redis
from tests.apps import ha_mixed
from tests.support.ha import (
    Run,
    assert_once_and_clean,
    handled_by_all,
    nothing_pending,
    wait_started,
)
from tests.support.proc import wait_for
from tests.support.sentinel import SentinelSetup

pytestmark = pytest.mark.slow

KEYS = 400
LAG_S = 1.5
RETRY_PAUSE_S = 0.05


class KeyedProducer(threading.Thread):
    """Publishes keys k0…k{KEYS-1} in order with ``wait_replicas=1``; a key whose publish did
    not return (wait timed out, connection lost) is published again until it returns."""

    def __init__(self, url: str) -> None:
        super().__init__(name="keyed-producer", daemon=True)
        self.url = url
        self.acked: dict[str, str] = {}  # key -> entry id the publish returned
        self.timeouts = 0
        self.unsafe = 0  # timeouts that said publishing again was not safe
        self.lost = 0
        self.duplicates = 0
        self.error: BaseException | None = None
        self._halt = threading.Event()

    def run(self) -> None:
        try:
            producer = SyncProducer(
                open_sync_redis(self.url, socket_timeout_s=5),
                wait_replicas=1,
                wait_timeout_ms=300,
            )
            for n in range(KEYS):
                key = f"k{n}"
                while not self._halt.is_set():
                    try:
                        receipt = producer.publish(
                            ha_mixed.STREAM, {"n": n, "key": key}, idempotency_key=key
                        )
                    except ReplicaWaitTimeout as exc:
                        self.timeouts += 1
                        self.unsafe += not exc.retry_safe
                    except ConnectionLost:
                        self.lost += 1
                    else:
                        self.duplicates += receipt.duplicate
                        self.acked[key] = receipt.id
                        break
                    self._halt.wait(RETRY_PAUSE_S)  # a backoff between attempts
        except BaseException as exc:  # reported by the test
            self.error = exc

    def halt(self) -> None:
        self._halt.set()


def test_every_publish_that_waited_for_a_replica_survives_the_failover_once(
    own_sentinel_setup: SentinelSetup, ha_db: str, tmp_path: Path
) -> None:
    setup = own_sentinel_setup
    run = Run(setup.url, ha_db, tmp_path)
    producer = KeyedProducer(setup.url)
    try:
        wait_started(run, setup.primary.client())
        producer.start()
        wait_for(lambda: len(producer.acked) >= 50, 30, "the producer to get going")
        setup.lag_replica()
        setup.clog_replication()
        lagged_at = time.monotonic()
        wait_for(lambda: time.monotonic() - lagged_at >= LAG_S, LAG_S + 5, "the replica to lag")
        setup.kill_primary()
        setup.resume_replica()
        new = setup.wait_for_failover().client()
        setup.bring_back_old_primary()  # publishes that wait for a replica can return again
        wait_for(lambda: len(producer.acked) == KEYS or producer.error is not None, 120, "all keys")
        assert producer.error is None, repr(producer.error)
        assert producer.unsafe == 0, "a keyed publish's timeout said repeating it was unsafe"

        entries = new.xrange(ha_mixed.STREAM)
        per_key = Counter(fields[b"key"].decode() for _, fields in entries)
        ids = [entry_id.decode() for entry_id, _ in entries]
        print(
            f"\nwait_replicas=1 through a failover: {len(producer.acked)} publishes returned, "
            f"{producer.timeouts} waits timed out and {producer.lost} connections were lost "
            f"(each published again: {producer.duplicates} found already there), "
            f"{sum(1 for k in producer.acked if per_key[k] == 0)} lost, "
            f"{sum(1 for v in per_key.values() if v > 1)} twice"
        )
        assert [k for k in producer.acked if per_key[k] == 0] == [], "a returned publish lost"
        assert [k for k, v in per_key.items() if v > 1] == [], "a key added twice"
        wait_for(lambda: handled_by_all(run, new, ids), 120, "every entry handled")
        wait_for(lambda: nothing_pending(new), 30, "nothing pending")
        assert run.proc.poll() is None, "the worker stopped"
        assert_once_and_clean(run, new, ids)
        print(f"worker: {len(ids)} entries, Lua and SQL effects once each, nothing pending")
    finally:
        producer.halt()
        producer.join(10)
        run.stop()
