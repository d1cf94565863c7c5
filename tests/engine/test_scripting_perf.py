"""Scripting speed against fakeredis (which runs Lua on lupa too), on batched per-message scripts
of the kind streamworker runs: EVALSHA over 100 stream entries.

Both run in this process through redis-py; the timings are interleaved and the best of many
rounds is compared, which keeps the ratio steady on a shared machine. The tests check that both
give the scripts' replies and print the ratio (``-s``); the figures are reported in docs/engine.md
("Lua scripting"), not asserted (speed is a benchmark's to show, not a test's).
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Callable

import pytest
import redis

from streamworker.engine.inproc import forget_engine, sync_client

pytestmark = pytest.mark.slow

fakeredis = pytest.importorskip("fakeredis")

_names = itertools.count()

# The article's check-mark-ack: a processed-ids set, then the XACK.
CHECK_MARK_ACK = """
local res = {}
for i = 3, #ARGV do
  local id = ARGV[i]
  if redis.call('SISMEMBER', KEYS[2], id) == 1 then
    res[#res + 1] = 0
  else
    redis.call('SADD', KEYS[2], id)
    res[#res + 1] = redis.call('XACK', KEYS[1], ARGV[1], id)
  end
end
return res
"""

# streamworker's ownership check (check_ownership / apply_effects): XPENDING per id, then XACK.
OWNERSHIP_ACK = """
local res = {}
for i = 3, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
  if #p == 1 and p[1][2] == ARGV[2] then
    res[#res + 1] = redis.call('XACK', KEYS[1], ARGV[1], ARGV[i])
  else
    res[#res + 1] = 0
  end
end
return res
"""


def _round(r: redis.Redis, sha: str) -> float:
    r.delete("s", "done")
    ids = [r.xadd("s", {"f": "v"}) for _ in range(100)]
    r.xgroup_create("s", "g", id="0")
    r.xreadgroup("g", "c", {"s": ">"})
    start = time.perf_counter()
    out = r.evalsha(sha, 2, "s", "done", "g", "c", *ids)
    elapsed = time.perf_counter() - start
    assert out == [1] * 100
    return elapsed


def _ratio(script: str, rounds: int = 40) -> tuple[float, float, float]:
    """(engine seconds, fakeredis seconds, ratio) per EVALSHA, best of ``rounds``."""
    url = f"engine://memory/perf-{next(_names)}"
    engine = sync_client(url)
    fake = fakeredis.FakeRedis()
    try:
        runs: dict[str, list[float]] = {"engine": [], "fake": []}
        clients: dict[str, tuple[redis.Redis, str]] = {
            "engine": (engine, engine.script_load(script)),
            "fake": (fake, fake.script_load(script)),
        }
        for _ in range(rounds):
            for name, (client, sha) in clients.items():
                runs[name].append(_round(client, sha))
        best: Callable[[list[float]], float] = min
        e, f = best(runs["engine"]), best(runs["fake"])
        print(
            f"engine {e * 1e3:.3f} ms (median {statistics.median(runs['engine']) * 1e3:.3f}), "
            f"fakeredis {f * 1e3:.3f} ms: {f / e:.1f}x"
        )
        return e, f, f / e
    finally:
        engine.close()
        fake.close()
        forget_engine(url)


def test_check_mark_ack_script_timed_beside_fakeredis() -> None:
    """SISMEMBER + SADD + XACK per id over 100 ids (each round checks the replies)."""
    engine_s, fake_s, ratio = _ratio(CHECK_MARK_ACK)
    assert engine_s > 0
    assert fake_s > 0
    assert ratio > 0


def test_ownership_ack_script_timed_beside_fakeredis() -> None:
    """XPENDING + XACK per id over 100 ids (each round checks the replies)."""
    engine_s, fake_s, ratio = _ratio(OWNERSHIP_ACK)
    assert engine_s > 0
    assert fake_s > 0
    assert ratio > 0
