"""``streamworker run --processes N`` in real subprocesses against a real redis-server: the
supervisor's children, their names, restarts, signals, the shared endpoint."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import redis
import redis.asyncio as aioredis
from prometheus_client.parser import text_string_to_metric_families

from streamworker.io.keys import consumer_name_key
from streamworker.runtime.names import ConsumerNames
from tests.support.proc import (
    children_by_consumer,
    kill_when,
    process_gone,
    read_lines,
    run_cli,
    streamworker,
    wait_for,
)
from tests.support.servers import free_port

APP = "tests/apps/recorder.py:app"


def _start(
    redis_url: str, log: Path, processes: int, *extra: str, **env: str
) -> subprocess.Popen[bytes]:
    return streamworker(
        "run",
        APP,
        "--redis-url",
        redis_url,
        "--consumer",
        "pod",
        "--processes",
        str(processes),
        *extra,
        env={"SW_TEST_LOG": str(log), **env},
    )


def _finish(proc: subprocess.Popen[bytes], timeout: float = 60) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=timeout)
    except Exception:
        proc.kill()
        raise
    return proc.returncode, err.decode(errors="replace")


def _stop(proc: subprocess.Popen[bytes]) -> tuple[int, str]:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    return _finish(proc)


def _done(log: Path) -> list[str]:
    return [r[1] for r in read_lines(log) if r[0] == "done"]


def _started(log: Path) -> list[list[str]]:
    return [r for r in read_lines(log) if r[0] == "start"]


def _pending(client: redis.Redis, consumer: str | None = None) -> list[str]:
    rows = client.xpending_range("orders", "billing", "-", "+", 10_000, consumername=consumer)
    return [r["message_id"].decode() for r in rows]


def _orders(client: redis.Redis, n: int) -> list[str]:
    return [client.xadd("orders", {"n": f"m{i}"}).decode() for i in range(n)]


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, ""


def _events(err: str, event: str) -> list[dict[str, object]]:
    out = []
    for line in err.splitlines():
        if f'"{event}"' in line:
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


def test_each_process_consumes_under_its_own_name_and_metrics_sum_them(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    log = tmp_path / "run.log"
    ids = _orders(redis_client, 90)
    port = free_port()
    proc = _start(
        redis_url, log, 3, "--metrics-port", str(port), SW_TEST_SLEEP_S="0.05", SW_TEST_BATCH="3"
    )
    try:
        wait_for(lambda: len(_done(log)) == 90, 60, "90 done")
        wait_for(lambda: not _pending(redis_client), 20, "empty PEL")
        status, text = _get(port, "/metrics")
    finally:
        code, err = _stop(proc)
    assert code == 0, err
    assert sorted(_done(log)) == sorted(ids)
    by_consumer: dict[str, int] = {}
    for row in _started(log):
        by_consumer[row[4]] = by_consumer.get(row[4], 0) + 1
    assert sorted(by_consumer) == ["pod-0", "pod-1", "pod-2"]
    assert status == 200
    acked = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "streamworker_messages_total":
                acked[sample.labels["outcome"]] = (
                    acked.get(sample.labels["outcome"], 0) + sample.value
                )
    # One series per label set, summed over the children (90 = the sum of their counts).
    assert acked["acked"] == 90 == sum(by_consumer.values())
    # The gauges read from Redis are served once, not once per child.
    assert text.count('streamworker_pending_messages{group="billing",stream="orders"}') == 1
    assert text.count("streamworker_build_info{") == 1
    # process_* of the supervisor and of each child, one series each.
    for process in ("supervisor", "pod-0", "pod-1", "pod-2"):
        assert f'process_resident_memory_bytes{{process="{process}"}}' in text


def test_a_child_killed_with_sigkill_is_restarted_and_drains_its_own_backlog(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    log = tmp_path / "run.log"
    ids = _orders(redis_client, 40)
    proc = _start(redis_url, log, 2, SW_TEST_SLEEP_S="0.3", SW_TEST_BATCH="5")
    try:
        wait_for(lambda: any(r[4] == "pod-1" for r in _started(log)), 30, "pod-1 started")
        victim = children_by_consumer(proc.pid)["pod-1"]
        # Frozen while it holds a batch, then killed; an XACK it sent just before may still
        # land, so what it left behind is read once it is gone.
        kill_when(victim, lambda: _pending(redis_client, "pod-1"))
        wait_for(lambda: process_gone(victim), 10, "pod-1 dead")
        held = _pending(redis_client, "pod-1")
        wait_for(
            lambda: children_by_consumer(proc.pid).get("pod-1") not in (None, victim),
            20,
            "pod-1 restarted",
        )
        wait_for(lambda: len(set(_done(log))) == 40, 60, "every order done")
        wait_for(lambda: not _pending(redis_client), 20, "empty PEL")
        record = redis_client.hgetall(consumer_name_key("orders", "billing", "pod-1"))
    finally:
        code, err = _stop(proc)
    assert code == 0, err
    assert set(_done(log)) == set(ids)
    # The restarted child took its name over at once and re-read exactly its own backlog.
    replays = [r for r in _started(log) if r[3] == "2"]
    assert {r[1] for r in replays} == set(held)
    assert {r[4] for r in replays} == {"pod-1"}
    assert int(record[b"pid"]) != victim
    crashed = _events(err, "process_crashed")
    assert [(e["consumer"], e["how"]) for e in crashed] == [("pod-1", "signal SIGKILL")]
    assert not _events(err, "consumer_name_waiting")


def test_sigterm_to_the_supervisor_stops_every_child_after_its_message_in_hand(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    log = tmp_path / "run.log"
    ids = _orders(redis_client, 12)
    proc = _start(redis_url, log, 2, SW_TEST_SLEEP_S="1.0", SW_TEST_BATCH="3")
    try:
        wait_for(lambda: len({r[4] for r in _started(log)}) == 2, 30, "both children started")
        proc.send_signal(signal.SIGTERM)
        code, err = _finish(proc)
    finally:
        proc.kill()
    assert code == 0, err
    started = [r[1] for r in _started(log)]
    done = _done(log)
    # In-flight messages were finished (and acked); nothing else was; nothing is lost.
    assert sorted(started) == sorted(done)
    pending = _pending(redis_client)
    assert not set(done) & set(pending)
    assert set(done) | set(pending) | set(_undelivered(redis_client)) == set(ids)
    assert len(_events(err, "process_stopped")) == 2
    assert not redis_client.keys("*consumer:billing:*"), "names released by the graceful stops"


def test_a_second_signal_makes_every_child_leave_at_once(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    log = tmp_path / "run.log"
    ids = _orders(redis_client, 4)
    proc = _start(redis_url, log, 2, SW_TEST_SLEEP_S="30", SW_TEST_BATCH="1")
    try:
        wait_for(lambda: len({r[4] for r in _started(log)}) == 2, 30, "both children started")
        proc.send_signal(signal.SIGTERM)
        time.sleep(1.0)
        assert proc.poll() is None, "the children are finishing their 30 s messages"
        proc.send_signal(signal.SIGTERM)
        code, err = _finish(proc, timeout=20)
    finally:
        proc.kill()
    # The supervisor says it was forced (128 + SIGTERM); nothing was done, so nothing acked.
    assert code == 128 + signal.SIGTERM, err
    assert _done(log) == []
    assert sorted(_pending(redis_client)) == sorted(r[1] for r in _started(log))
    assert set(_pending(redis_client)) <= set(ids)
    assert err.count('"shutdown_forced"') >= 1


def _undelivered(client: redis.Redis) -> list[str]:
    info = client.xinfo_groups("orders")[0]
    last = info["last-delivered-id"].decode()
    return [i.decode() for i, _ in client.xrange("orders", f"({last}", "+")]


def test_children_stop_gracefully_when_the_supervisor_is_killed(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    log = tmp_path / "run.log"
    _orders(redis_client, 10)
    proc = _start(redis_url, log, 2, SW_TEST_SLEEP_S="0.5", SW_TEST_BATCH="2")
    try:
        wait_for(lambda: len({r[4] for r in _started(log)}) == 2, 30, "both children started")
        children = children_by_consumer(proc.pid)
        assert sorted(children) == ["pod-0", "pod-1"]
        proc.send_signal(signal.SIGKILL)
        _, err = _finish(proc)
        wait_for(lambda: all(process_gone(p) for p in children.values()), 30, "children gone")
    finally:
        proc.kill()
    # Stopped by SIGTERM (parent death), not killed: each finished its message and released
    # its consumer name.
    assert sorted(_done(log)) == sorted(r[1] for r in _started(log))
    assert not redis_client.keys("*consumer:billing:*")
    assert err.count('"shutdown_requested"') == 2


def test_a_child_configuration_error_stops_everything_with_exit_2_and_no_restart(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    # pod-1 belongs to a live single worker: the supervisor's pod-1 must not steal it, and must
    # not be restarted in a loop either.
    log = tmp_path / "run.log"
    ttl = {"STREAMWORKER_CONSUMER_NAME_TTL_MS": "1500"}
    holder = streamworker(
        "run",
        APP,
        "--redis-url",
        redis_url,
        "--consumer",
        "pod-1",
        env={"SW_TEST_LOG": str(log), **ttl},
    )
    try:
        wait_for(
            lambda: redis_client.exists(consumer_name_key("orders", "billing", "pod-1")),
            30,
            "pod-1 held",
        )
        proc = _start(redis_url, log, 2, **ttl)
        code, err = _finish(proc)
    finally:
        _stop(holder)
    assert code == 2, err
    last = err.strip().splitlines()[-1]
    assert last.startswith(
        "streamworker: error: process 1 (pod-1) exited with a configuration error: "
        "consumer name 'pod-1' is in use by a live process"
    ), last
    assert [e["consumer"] for e in _events(err, "process_started")].count("pod-1") == 1
    assert not _events(err, "process_crashed")


def test_readyz_is_503_naming_the_child_that_is_not_ready_until_it_is(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    # A record of pod-1 left by a process on another host: pod-1 waits for it to expire.
    async def hold() -> None:
        client = aioredis.Redis.from_url(redis_url)
        names = ConsumerNames(
            client, "pod-1", [("orders", "billing")], ttl_ms=6000, host="elsewhere", pid=4242
        )
        await names.acquire()
        await client.aclose()

    redis_client.xgroup_create("orders", "billing", id="0", mkstream=True)
    asyncio.run(hold())
    log = tmp_path / "run.log"
    port = free_port()
    proc = _start(redis_url, log, 2, "--metrics-port", str(port))
    try:

        def pod0_ready_pod1_not() -> bool:
            status, body = _get(port, "/readyz")
            if status != 503:
                return False
            details = json.loads(body)
            return details["failing"] == ["pod-1"] and details["processes"]["pod-0"]["ok"]

        wait_for(pod0_ready_pod1_not, 30, "503 naming pod-1 only")
        status, body = _get(port, "/healthz")
        assert status == 200, body
        wait_for(lambda: _get(port, "/readyz")[0] == 200, 30, "ready once pod-1 has its name")
        ready = json.loads(_get(port, "/readyz")[1])
    finally:
        code, err = _stop(proc)
    assert code == 0, err
    assert sorted(ready["processes"]) == ["pod-0", "pod-1"]
    assert all(p["ok"] for p in ready["processes"].values())


def test_unreachable_redis_exits_1_in_one_line_before_any_child_starts() -> None:
    result = run_cli(
        "run", APP, "--redis-url", f"redis://127.0.0.1:{free_port()}/0", "--processes", "2"
    )
    assert result.returncode == 1
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith("streamworker: error: cannot reach Redis at redis://127.0.0.1:")
    )
    assert "process_started" not in result.stderr


def test_processes_1_runs_the_worker_itself_under_the_unsuffixed_name(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    log = tmp_path / "run.log"
    _orders(redis_client, 3)
    proc = _start(redis_url, log, 1)
    try:
        wait_for(lambda: len(_done(log)) == 3, 30, "3 done")
        assert children_by_consumer(proc.pid) == {}
    finally:
        code, err = _stop(proc)
    assert code == 0, err
    assert {r[4] for r in _started(log)} == {"pod"}
    assert "supervisor_started" not in err
