"""The three scenarios: throughput (pre-fill, then drain), crash (kill -9 at 50%, restart, count)
and latency (a producer at a fixed rate, two consumers blocked in XREADGROUP)."""

from __future__ import annotations

import time
from typing import Any

from benchmarks.proof import db
from benchmarks.proof.handlers import SEEN_KEY, payload
from benchmarks.proof.report import percentile
from benchmarks.proof.variants import Consumer, Env, Variant, group_state, prefill, reset

POLL_S = 0.002


def _reset_all(env: Env, variant: Variant, handler: str) -> None:
    reset(env, variant)
    if handler == "db" or variant.mode == "sql":
        db.reset(env.db_url(variant) if variant.mode == "sql" else env.pg_url)


def _in_db(variant: Variant, handler: str) -> bool:
    """Whether the handler's writes land in SQL (else in the Redis hash ``SEEN_KEY``)."""
    if variant.mode == "sql":
        return handler in ("db", "record")
    return handler == "db" and variant.mode != "lua"  # Lua mode writes an HINCRBY effect


def _written(env: Env, variant: Variant, handler: str) -> tuple[int, int]:
    """(total writes, distinct order ids) of the handler's record of work done."""
    if _in_db(variant, handler):
        return db.count(env.db_url(variant) if variant.mode == "sql" else env.pg_url)
    client = env.client()
    try:
        counts = [int(v) for v in client.hvals(SEEN_KEY)]
    finally:
        client.close()
    return sum(counts), len(counts)


def _distinct(env: Env, variant: Variant, handler: str) -> int:
    if variant.mode == "sql":
        return db.count(env.db_url(variant))[1]
    client = env.client()
    try:
        return int(client.hlen(SEEN_KEY))
    finally:
        client.close()


def throughput(
    env: Env, variant: Variant, handler: str, n: int, timeout_s: float
) -> dict[str, Any]:
    """Pre-fill ``n``, start the consumer, time the drain from the group's first delivery to the
    moment every entry is delivered and acked (polled every 2 ms from outside)."""
    _reset_all(env, variant, handler)
    prefill(env, variant, n)
    result: dict[str, Any] = {"variant": variant.name, "handler": handler, "messages": n}
    consumer = Consumer(env, variant, handler).start()
    client = env.client()
    t0 = None
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            now = time.monotonic()
            started, drained = group_state(client, variant)
            if started and t0 is None:
                t0 = now
            if drained:
                t1 = now
                break
            if not consumer.alive():
                raise RuntimeError(f"consumer exited: {consumer.tail()}")
            if now > deadline:
                raise TimeoutError(f"not drained within {timeout_s:.0f} s: {consumer.tail()}")
            time.sleep(POLL_S)
        assert t0 is not None
        result["seconds"] = max(t1 - t0, 1e-6)
        result["rate"] = n / result["seconds"]
        if handler == "db":
            total, distinct = _written(env, variant, handler)
            result["written"] = total
            if distinct != n:
                result["error"] = f"{distinct} distinct rows written, expected {n}"
    except (RuntimeError, TimeoutError) as exc:
        result["seconds"] = None
        result["rate"] = None
        result["error"] = str(exc)[-500:]
    finally:
        consumer.stop()
        client.close()
    return result


def crash(env: Env, variant: Variant, n: int, settle_s: float, timeout_s: float) -> dict[str, Any]:
    """Pre-fill ``n``, kill -9 the consumer once half the messages are recorded, restart it, wait
    until the group is drained (or ``settle_s`` past the restart plus the reclaim idle time),
    then count duplicates (handled more than once) and losses (never handled)."""
    handler = "record"
    _reset_all(env, variant, handler)
    prefill(env, variant, n)
    result: dict[str, Any] = {"variant": variant.name, "messages": n}
    consumer = Consumer(env, variant, handler).start()
    client = env.client()
    try:
        deadline = time.monotonic() + timeout_s
        while _distinct(env, variant, handler) < n // 2:
            if not consumer.alive():
                raise RuntimeError(f"consumer exited: {consumer.tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"never reached 50% within {timeout_s:.0f} s")
            time.sleep(0.005)
        consumer.kill9()
        result["recorded_at_kill"] = _distinct(env, variant, handler)
        restarted = time.monotonic()
        consumer = Consumer(env, variant, handler).start()
        give_up = restarted + settle_s + env.claim_idle_ms / 1000
        drained = False
        while time.monotonic() < give_up:
            drained = group_state(client, variant)[1]
            if drained and _distinct(env, variant, handler) >= n:
                break
            time.sleep(0.02)
        result["recovery_s"] = time.monotonic() - restarted
        result["drained"] = drained
        total, distinct = _written(env, variant, handler)
        result["handled_total"] = total
        result["duplicates"] = total - distinct
        result["lost"] = n - distinct
        result["pending_left"] = int(client.xpending(variant.stream, variant.group)["pending"])
    except (RuntimeError, TimeoutError) as exc:
        result["error"] = str(exc)[-500:]
    finally:
        consumer.stop()
        client.close()
    return result


def latency(
    env: Env, variant: Variant, rate: int, duration_s: float, warmup_s: float = 1.0
) -> dict[str, Any]:
    """A producer XADDs ``rate`` messages/s for ``duration_s`` (in 1 ms ticks, each message
    stamped with ``time.monotonic_ns()``); two consumers blocked in XREADGROUP record
    ``monotonic_ns() - ts`` when their handler runs. Samples sent in the first ``warmup_s``
    are dropped."""
    reset(env, variant)
    files = [env.workdir / f"lat-{variant.name}-{rate}-{c}.txt" for c in ("c1", "c2")]
    for f in files:
        f.unlink(missing_ok=True)
    consumers = [
        Consumer(env, variant, "latency", consumer=c, latency_file=f)
        for c, f in zip(("c1", "c2"), files, strict=True)
    ]
    result: dict[str, Any] = {"variant": variant.name, "rate": rate, "duration_s": duration_s}
    client = env.client()
    try:
        for c in consumers:
            c.start()
        deadline = time.monotonic() + 60
        while len(client.xinfo_consumers(variant.stream, variant.group)) < 2:
            if time.monotonic() > deadline or not all(c.alive() for c in consumers):
                raise RuntimeError("consumers did not start: " + consumers[0].tail())
            time.sleep(0.05)
        time.sleep(1.0)  # let both settle into XREADGROUP BLOCK
        sent, started = 0, time.monotonic()
        started_ns = time.monotonic_ns()
        i = 0
        while True:
            elapsed = time.monotonic() - started
            if elapsed >= duration_s:
                break
            due = min(int(rate * elapsed), int(rate * duration_s))
            if due > sent:
                pipe = client.pipeline(transaction=False)
                for k in range(due - sent):
                    pipe.xadd(variant.stream, payload(i + k))  # type: ignore[arg-type]
                pipe.execute()
                i += due - sent
                sent = due
            time.sleep(0.0002)
        produced_s = time.monotonic() - started
        stopped = time.monotonic()
        deadline = stopped + 120
        while not group_state(client, variant)[1]:
            if time.monotonic() > deadline:
                raise TimeoutError("consumers did not catch up within 120 s")
            time.sleep(0.01)
        # How far behind the consumers were when the producer stopped (0 when they kept up).
        result["catch_up_s"] = time.monotonic() - stopped
        for c in consumers:
            c.stop()
        pairs: list[tuple[int, int]] = []
        for f in files:
            if f.exists():
                for line in f.read_text().splitlines():
                    ts, lat = line.split()
                    pairs.append((int(ts), int(lat)))
        result["produced"] = sent
        result["achieved_rate"] = sent / produced_s
        result["handled"] = len(pairs)
        cut = started_ns + int(warmup_s * 1e9)
        ms = sorted(lat / 1e6 for ts, lat in pairs if ts >= cut)
        result["samples"] = len(ms)
        result["p50_ms"] = percentile(ms, 50)
        result["p99_ms"] = percentile(ms, 99)
        result["p999_ms"] = percentile(ms, 99.9)
        result["max_ms"] = ms[-1] if ms else None
        if len(pairs) != sent:
            result["error"] = f"handled {len(pairs)} of {sent} produced"
    except (RuntimeError, TimeoutError) as exc:
        result["error"] = str(exc)[-500:]
    finally:
        for c in consumers:
            c.stop()
        client.close()
    return result
