"""``idempotency="lua"`` under SIGKILL: ``streamworker run`` of tests/apps/lua_counters.py in real
subprocesses, killed at chosen points; two live consumers racing on XCLAIMed entries; Redis itself
killed and restarted from its AOF. The worker tests run on one redis-server and on a real 3-master
Redis Cluster (``redis+cluster://``).

Every test ends the same way: each order's field in ``{orders}:applied`` is exactly 1, the ledger
has one entry per order, and the PEL is empty.
"""

from __future__ import annotations

import random
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.support.cluster import sync_client_for, url_and_flush
from tests.support.proc import assert_killed, read_lines, stop_process, streamworker, wait_for
from tests.support.servers import RedisServer

pytestmark = pytest.mark.slow


@pytest.fixture(params=["redis", "cluster"])
def redis_url(request: pytest.FixtureRequest) -> str:
    """Each test runs on one redis-server and on a real 3-master Redis Cluster (flushed)."""
    return url_and_flush(request, request.param)


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    client = sync_client_for(redis_url)
    yield client
    client.close()


APP = "tests/apps/lua_counters.py:app"


def _start(
    redis_url: str, log: Path, consumer: str = "pod-0", **env: str
) -> subprocess.Popen[bytes]:
    return streamworker(
        "run",
        APP,
        "--redis-url",
        redis_url,
        "--consumer",
        consumer,
        env={"SW_TEST_LOG": str(log), "STREAMWORKER_RECONNECT_BACKOFF_MAX_S": "0.5", **env},
    )


def _orders(client: redis.Redis, n: int, start: int = 0) -> list[str]:
    return [client.xadd("orders", {"n": str(i)}).decode() for i in range(start, start + n)]


def _applied(client: redis.Redis) -> dict[str, int]:
    return {k.decode(): int(v) for k, v in client.hgetall("{orders}:applied").items()}


def _pending(client: redis.Redis) -> list[bytes]:
    return [r["message_id"] for r in client.xpending_range("orders", "billing", "-", "+", 1000)]


def _started(log: Path) -> list[str]:
    return [r[1] for r in read_lines(log) if r[0] == "start"]


def _finish_and_check(redis_url: str, client: redis.Redis, ids: list[str], log: Path) -> str:
    """Run a clean worker until every order is applied; check exactly once and an empty PEL."""
    proc = _start(redis_url, log)
    try:
        wait_for(lambda: len(_applied(client)) == len(ids), 30, "every order applied")
        wait_for(lambda: not _pending(client), 30, "empty PEL")
    finally:
        err = stop_process(proc)
    _check_once(client, ids)
    return err


def _check_once(client: redis.Redis, ids: list[str]) -> None:
    assert _applied(client) == dict.fromkeys(ids, 1)
    assert client.get("{orders}:total") == str(len(ids)).encode()
    ledger = [f[b"id"].decode() for _, f in client.xrange("{orders}:ledger")]
    assert sorted(ledger) == sorted(ids)


def test_sigkill_before_the_script_leaves_the_batch_pending_and_it_is_applied_once_on_restart(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    ids = _orders(redis_client, 15)
    proc = _start(redis_url, tmp_path / "run1.log", SW_TEST_KILL="before_script:2")
    assert_killed(proc)
    # Batch 1 applied and acked; batch 2's handlers ran, its script was never sent.
    assert sorted(_applied(redis_client)) == sorted(ids[:5])
    assert _pending(redis_client) == [i.encode() for i in ids[5:10]]
    _finish_and_check(redis_url, redis_client, ids, tmp_path / "run2.log")
    # Redelivered: batch 2's handlers ran again, and its effects applied once.
    assert _started(tmp_path / "run2.log")[:5] == ids[5:10]


def test_sigkill_after_the_script_finds_the_batch_applied_and_acked(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    ids = _orders(redis_client, 15)
    proc = _start(redis_url, tmp_path / "run1.log", SW_TEST_KILL="after_script:2")
    assert_killed(proc)
    # The script applied batch 2 and acked it in one step: nothing of it is left to redeliver.
    # On one server the next read went out behind the script in the same write (redisio's
    # NextRead), so batch 3 is the batch in hand, read and not yet run; Redis Cluster reads it
    # after the reply.
    assert sorted(_applied(redis_client)) == sorted(ids[:10])
    in_hand = [] if "cluster" in redis_url else [i.encode() for i in ids[10:15]]
    assert _pending(redis_client) == in_hand
    _finish_and_check(redis_url, redis_client, ids, tmp_path / "run2.log")
    assert _started(tmp_path / "run2.log") == ids[10:]


def test_sigkill_between_two_handlers_of_a_batch_applies_the_batch_once_on_restart(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    ids = _orders(redis_client, 12)
    # Order 7 is the third message of batch 2: orders 5 and 6 have run, nothing of it applied.
    proc = _start(redis_url, tmp_path / "run1.log", SW_TEST_KILL="handler:7")
    assert_killed(proc)
    assert sorted(_applied(redis_client)) == sorted(ids[:5])
    _finish_and_check(redis_url, redis_client, ids, tmp_path / "run2.log")


def test_xclaim_race_between_two_live_consumers_applies_each_message_once(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """pod-0 is slow with batch 1 when its entries are claimed to pod-1, which starts and runs
    them too: both handlers run, only the owner's script applies."""
    ids = _orders(redis_client, 10)
    log0, log1 = tmp_path / "pod0.log", tmp_path / "pod1.log"
    pod0 = _start(redis_url, log0, "pod-0", SW_TEST_SLEEP_S="0.4")
    pod1 = None
    try:
        wait_for(lambda: read_lines(log0), 20, "pod-0 handling batch 1")
        claimed = redis_client.xclaim("orders", "billing", "pod-1", 0, ids[:5], justid=True)
        assert len(claimed) == 5
        pod1 = _start(redis_url, log1, "pod-1", SW_TEST_SLEEP_S="0.4")
        wait_for(lambda: len(_applied(redis_client)) == 10, 60, "every order applied")
        wait_for(lambda: not _pending(redis_client), 30, "empty PEL")
    finally:
        err0 = stop_process(pod0)
        err1 = stop_process(pod1) if pod1 is not None else ""
    _check_once(redis_client, ids)
    # pod-0 had started batch 1 before the claim: its script found the entries claimed away.
    assert set(_started(log0)) >= set(ids[:5])
    assert err0.count('"message_claimed_away"') + err0.count('"reason": "not_pending"') >= 1, (
        err0[-3000:],
        err1[-3000:],
    )
    ledger_by = {f[b"id"].decode(): f[b"by"] for _, f in redis_client.xrange("{orders}:ledger")}
    assert {ledger_by[i] for i in ids[:5]} == {b"pod-1"}


def test_claims_flying_between_two_live_consumers_never_apply_a_message_twice(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """A storm: two workers, new orders arriving, and the test XCLAIMing pending entries back and
    forth (as stalled leases would) while both process."""
    rng = random.Random(5)
    log0, log1 = tmp_path / "pod0.log", tmp_path / "pod1.log"
    ids = _orders(redis_client, 20)
    pods = [
        _start(redis_url, log0, "pod-0", SW_TEST_SLEEP_S="0.05", SW_TEST_BATCH="4"),
        _start(redis_url, log1, "pod-1", SW_TEST_SLEEP_S="0.05", SW_TEST_BATCH="4"),
    ]
    try:
        wait_for(lambda: read_lines(log0) or read_lines(log1), 20, "the pods at work")
        deadline = time.monotonic() + 6
        while time.monotonic() < deadline:
            if len(ids) < 80:
                ids += _orders(redis_client, 2, start=len(ids))
            for row in redis_client.xpending_range("orders", "billing", "-", "+", 100):
                if rng.random() < 0.5:
                    other = "pod-1" if row["consumer"] == b"pod-0" else "pod-0"
                    redis_client.xclaim(
                        "orders", "billing", other, 0, [row["message_id"]], justid=True
                    )
            time.sleep(0.05)
        time.sleep(1.0)
    finally:
        errs = [stop_process(pod) for pod in pods]
    assert set(_applied(redis_client).values()) <= {1}
    # The race happened: scripts (before or after the handlers) found entries claimed away.
    races = sum(e.count('"message_claimed_away"') for e in errs)
    stranded = [
        r["message_id"] for r in redis_client.xpending_range("orders", "billing", "-", "+", 1000)
    ]
    if stranded:
        redis_client.xclaim("orders", "billing", "pod-0", 0, stranded, justid=True)
    _finish_and_check(redis_url, redis_client, ids, tmp_path / "final.log")
    assert races > 0, "the storm should have claimed entries away from a pod holding them"


def test_redis_killed_and_restarted_from_its_aof_loses_no_order_and_applies_none_twice(
    own_redis: RedisServer, tmp_path: Path
) -> None:
    """SIGKILL of redis-server (AOF, appendfsync always) while the worker applies batches: each
    script's writes and XACK were logged together, so the restart has both or neither."""
    client = own_redis.client()
    ids = _orders(client, 60)
    log = tmp_path / "run.log"
    proc = _start(own_redis.url, log, SW_TEST_SLEEP_S="0.02")
    try:
        wait_for(lambda: len(_applied(client)) >= 10, 30, "some orders applied")
        own_redis.stop(signal.SIGKILL)
        own_redis.start()
        client = own_redis.client()
        wait_for(lambda: len(_applied(client)) == 60, 60, "every order applied after restart")
        wait_for(lambda: not _pending(client), 30, "empty PEL")
    finally:
        stop_process(proc)
    _check_once(client, ids)
