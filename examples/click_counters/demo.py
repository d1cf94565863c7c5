"""The click-counters demo: produce clicks (some sent twice by a retrying producer), run the
worker and kill it with SIGKILL in the middle of a batch, run it again, count; then rewind the
group to the start of the stream (a replay) and show that the counters do not move.

    python examples/click_counters/demo.py [--redis-url URL] [--clicks N]
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import redis

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

from app import TOP, TOTAL, VIEWS, visitors  # noqa: E402

PAGES = ["home", "pricing", "docs", "blog", "about"]
DUPLICATES = 20

# Wraps the strategy's apply script so that the first worker dies right before its third batch's
# script: that batch's handlers have run, its effects are not applied and it is not acked. A
# stand-in for a crash at that moment. Demo code, not library code.
_KILLER = """
import os, signal, runpy
from streamworker.idempotency import lua
_apply, _n = lua.LuaStrategy._apply, [0]
async def _apply_or_die(self, keys, args, next_read):
    _n[0] += 1
    if _n[0] == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    return await _apply(self, keys, args, next_read)
lua.LuaStrategy._apply = _apply_or_die
runpy.run_module("streamworker", run_name="__main__")
"""


def worker(redis_url: str, *, crash: bool) -> subprocess.Popen[bytes]:
    args = ["run", "app.py:app", "--redis-url", redis_url, "--consumer", "demo-0"]
    args += ["--log-level", "warning"]
    cmd = (
        [sys.executable, "-c", _KILLER, *args]
        if crash
        else [sys.executable, "-m", "streamworker", *args]
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "STREAMWORKER_LOG_FORMAT": "console"}
    return subprocess.Popen(cmd, cwd=HERE, env=env, stderr=subprocess.DEVNULL)


def counters(client: redis.Redis) -> dict[str, object]:
    """Everything the handler writes, as plain values."""
    return {
        "total": int(client.get(TOTAL) or 0),
        "views": {k.decode(): int(v) for k, v in client.hgetall(VIEWS).items()},
        "visitors": {p: client.scard(visitors(p)) for p in PAGES},
        "top": [(m.decode(), s) for m, s in client.zrevrange(TOP, 0, -1, withscores=True)],
    }


def wait_until_done(client: redis.Redis, timeout_s: float = 60) -> None:
    """Until the group has delivered the last entry and nothing is pending."""
    last = client.xinfo_stream("clicks")["last-generated-id"]
    deadline = time.monotonic() + timeout_s
    while True:
        (group,) = client.xinfo_groups("clicks")
        if group["last-delivered-id"] == last and group["pending"] == 0:
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"the worker did not finish within {timeout_s} s")
        time.sleep(0.1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--clicks", type=int, default=1000)
    args = parser.parse_args()
    client = redis.Redis.from_url(args.redis_url)
    client.delete("clicks", TOTAL, VIEWS, TOP, "{clicks}:dlq", "{clicks}:dedup:counters")
    client.delete(*(visitors(p) for p in PAGES))

    rng = random.Random(7)
    clicks = [
        {"click_id": f"c{i:05d}", "page": rng.choice(PAGES), "user": f"u{rng.randrange(60)}"}
        for i in range(args.clicks)
    ]
    resent = set(rng.sample(range(args.clicks), DUPLICATES))
    entries = 0
    for i, click in enumerate(clicks):
        client.xadd("clicks", click)
        entries += 1
        if i in resent:  # the producer timed out waiting for the reply and sent it again
            client.xadd("clicks", click)
            entries += 1
    print(
        f"produced {entries} clicks ({args.clicks} distinct click ids: {DUPLICATES} sent twice "
        f"by a retrying producer)"
    )
    expected = {
        "total": args.clicks,
        "views": dict(Counter(c["page"] for c in clicks)),
        "visitors": {p: len({c["user"] for c in clicks if c["page"] == p}) for p in PAGES},
    }

    first = worker(args.redis_url, crash=True)
    first.wait(60)
    print(
        f"worker 1 killed with {signal.Signals(-first.returncode).name} before its 3rd batch's "
        "script (its handlers had run)"
    )
    print(f"pending after the crash: {client.xpending('clicks', 'counters')['pending']}")

    second = worker(args.redis_url, crash=False)
    try:
        wait_until_done(client)
        after_run = counters(client)
        print(f"total clicks counted: {after_run['total']}")
        print("views: " + ", ".join(f"{p}={n}" for p, n in sorted(after_run["views"].items())))  # type: ignore[attr-defined]
        print("top page: {} ({:.0f} clicks)".format(*after_run["top"][0]))  # type: ignore[index]
        ok = {k: after_run[k] for k in expected} == expected
        print(f"counters match the distinct clicks: {'yes' if ok else 'NO'}")

        # A replay: rewind the group to the start of the stream. Every entry is delivered again;
        # the PEL no longer knows them (they were acked), but their click ids are within
        # dedup_window_ms, so each is acked without its effects.
        client.xgroup_setid("clicks", "counters", "0")
        wait_until_done(client)
        after_replay = counters(client)
        same = after_replay == after_run
        print(
            f"replayed {entries} entries (XGROUP SETID clicks counters 0): "
            f"counters unchanged: {'yes' if same else 'NO'}"
        )
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(30)
    print(f"pending after the run: {client.xpending('clicks', 'counters')['pending']}")
    return 0 if ok and same else 1


if __name__ == "__main__":
    sys.exit(main())
