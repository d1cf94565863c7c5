"""The issue's failover scenario with a producer that waits for a replica: through
``redis+sentinel://``, a keyed producer with ``wait_replicas=1`` and a worker with Lua, SQL
(PostgreSQL) and at-least-once handlers; the replica lags (SIGSTOP ~1.5 s), the primary is
SIGKILLed, the Sentinels promote the replica, the old primary comes back as a replica. Beside
them the outbox relay (``streamworker relay --wait-replicas 1``) moves rows that are staged in
PostgreSQL all through the failover.

Counted on the new primary: every publish that returned is there exactly once (a publish whose
wait timed out, or whose connection was lost, is published again with the same key: a keyed
publish is safe to repeat), every entry's Lua and SQL effects applied once, nothing pending,
nothing dead-lettered, and every staged outbox row relayed exactly once (the relay deletes a row
only once a replica has its entry, so the failover cannot take back an entry whose row is gone).
The counts are printed.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from streamworker.errors import ConnectionLost, ReplicaWaitTimeout
from streamworker.idempotency.sql import SqlDatabase
from streamworker.idempotency.sql.outbox import pending_rows
from streamworker.idempotency.sql.outbox import publish as stage
from streamworker.io.redisio import open_sync_redis
from streamworker.producing.producer import SyncProducer
from tests.apps import ha_mixed
from tests.support.ha import (
    Run,
    assert_once_and_clean,
    handled_by_all,
    nothing_pending,
    wait_started,
)
from tests.support.proc import stop_process, streamworker, wait_for
from tests.support.sentinel import SentinelSetup

pytestmark = pytest.mark.slow

KEYS = 400
ROWS = 300
RELAYED = "ha:relayed"
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


class Stager(threading.Thread):
    """Stages outbox rows r0…r{ROWS-1} for ``RELAYED``, one transaction each, paced so that
    staging goes on through the failover (the database is not part of it)."""

    def __init__(self, db_url: str) -> None:
        super().__init__(name="outbox-stager", daemon=True)
        self.db = SqlDatabase(db_url)
        self.staged = 0
        self.error: BaseException | None = None
        self._halt = threading.Event()

    def run(self) -> None:
        try:
            for n in range(ROWS):
                if self._halt.is_set():
                    return
                with Session(self.db.sync_engine) as session, session.begin():
                    stage(session, RELAYED, {"row": n})
                self.staged += 1
                self._halt.wait(0.01)
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
    stager = Stager(ha_db)
    relay = streamworker(
        "relay", "--db-url", ha_db, "--redis-url", setup.url,
        "--wait-replicas", "1", "--wait-timeout-ms", "300",
    )  # fmt: skip
    try:
        wait_started(run, setup.primary.client())
        producer.start()
        stager.start()
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

        stager.join(60)
        assert stager.error is None, repr(stager.error)
        assert stager.staged == ROWS
        wait_for(lambda: pending_rows(stager.db) == 0, 120, "the relay to empty the outbox")
        assert relay.poll() is None, "the relay stopped"
        rows = Counter(int(fields[b"row"]) for _, fields in new.xrange(RELAYED))
        missing = [n for n in range(ROWS) if rows[n] == 0]
        twice = [n for n, count in rows.items() if count > 1]
        print(f"outbox: {ROWS} rows relayed, {len(missing)} lost, {len(twice)} twice")
        assert missing == [], "a relayed row whose entry the failover took back"
        assert twice == [], "a row relayed twice"
    finally:
        producer.halt()
        producer.join(10)
        stager.halt()
        stager.join(10)
        stager.db.sync_engine.dispose()
        relay_log = stop_process(relay)
        run.stop()
    assert "Traceback" not in relay_log, relay_log[-3000:]
