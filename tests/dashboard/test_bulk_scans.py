"""The dashboard's counting scans over a dead-letter stream (count, summary, dead-lettered
again) read it a page of 1000 at a time and say whether they read all of it or stopped at their
limit; against a real redis-server 7.0 and the embedded engine."""

from __future__ import annotations

import time

import redis

from streamworker.dashboard import bulk
from tests.dashboard.conftest import Store
from tests.dashboard.test_data import run

DLQ = "{orders}:dlq"
N = 2_500  # two full pages and a short one


def _fill(client: redis.Redis) -> None:
    """N dead letters: even ones failed with ValueError, odd ones with KeyError."""
    pipe = client.pipeline(transaction=False)
    for i in range(N):
        pipe.xadd(
            DLQ,
            {
                "dlq_stream": "{orders}",
                "dlq_id": f"1-{i}",
                "dlq_group": "billing",
                "dlq_consumer": "c1",
                "dlq_deliveries": "5",
                "dlq_error": "ValueError: bad" if i % 2 == 0 else "KeyError: gone",
                "dlq_handler": "tests.bill",
                "n": str(i),
            },
            id=f"{1_700_000_000_000 + i}-0",
        )
    pipe.execute()


def test_a_count_under_its_limit_reads_every_page(store: Store) -> None:
    _fill(store.client)
    flt = bulk.DeadLetterFilter(error="valueerror")
    assert run(store, lambda c: bulk.count_matching(c, DLQ, flt)) == (N // 2, False)


def test_a_count_that_reaches_its_limit_stops_there_and_says_so(store: Store) -> None:
    _fill(store.client)
    flt = bulk.DeadLetterFilter(error="valueerror")
    # Oldest first: the first 2000 entries, half of them ValueErrors.
    assert run(store, lambda c: bulk.count_matching(c, DLQ, flt, limit=2000)) == (1000, True)


def test_a_summary_reads_the_newest_entries_up_to_its_limit(store: Store) -> None:
    _fill(store.client)
    flt = bulk.DeadLetterFilter(error="keyerror")
    partial = run(store, lambda c: bulk.summarize(c, DLQ, flt, limit=1000))
    assert (partial.looked_at, partial.complete, partial.matched) == (1000, False, 500)
    whole = run(store, lambda c: bulk.summarize(c, DLQ, flt))
    assert (whole.looked_at, whole.complete, whole.matched) == (N, True, N // 2)
    assert whole.reasons == [("KeyError: gone", N // 2), ("ValueError: bad", N // 2)]


def test_dead_lettered_again_counts_the_replays_that_came_back(store: Store) -> None:
    _fill(store.client)
    job = bulk.BulkJob(
        id=1,
        kind="replay",
        dlq=DLQ,
        flt=bulk.DeadLetterFilter(),
        expected=3,
        at_ms=1_700_000_000_000 + 1_000,  # the entries from the 1000th on came after the job
        low="-",
        high="+",
        started_by=None,
        started_at=time.time(),
        replayed_ids={"1-5", "1-1500", "1-2499"},
    )
    assert run(store, lambda c: bulk.dead_lettered_again(c, job)) == (2, True)
