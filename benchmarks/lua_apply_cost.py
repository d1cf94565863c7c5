"""What the Lua strategy's apply script costs redis-server per batch, and its parts.

For a batch of plain messages (no effects, no business keys: a handler whose effects are
elsewhere, or none), ``lua/apply_effects.lua`` checks that the caller still owns every entry
(one XPENDING over the batch's range, filtered by the consumer) and XACKs them. At-least-once
sends the XACK alone. This runs each on a real redis-server for the same batches and reads the
server's own time per call (``INFO commandstats``), so the machine's load moves it little:

* ``apply_effects.lua`` as the worker calls it;
* its parts, each as a script of its own: an empty script, the XPENDING alone, the XPENDING and
  the list compared with the layout, an XACK of the layout's ids from Lua;
* a plain ``XACK`` of the same ids (what ``idempotency="none"`` sends).

Usage: ``python -m benchmarks.lua_apply_cost [--batch 100] [--batches 300] [--rounds 5]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import redis

from streamworker.io.luasource import lua_source
from tests.support.servers import RedisServer

_PARTS = {
    "empty script": "return 0",
    "XPENDING alone": (
        "redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[6], ARGV[7], 10000, ARGV[2]) return 0"
    ),
    "XPENDING + list compared": """
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[6], ARGV[7], 10000, ARGV[2])
local l = {}
for i = 1, #p do l[i] = p[i][1] end
local space = string.find(ARGV[8], ' ', 1, true)
if table.concat(l, ' ') == string.sub(ARGV[8], space + 1) then return 0 end
return 1""",
    "XACK from Lua": """
local ids = {}
for t in string.gmatch(string.sub(ARGV[8], string.find(ARGV[8], ' ', 1, true) + 1), '[^ ]+') do
  ids[#ids + 1] = t
end
redis.call('XACK', KEYS[1], ARGV[1], unpack(ids))
return 0""",
}


def _batch(client: redis.Redis, size: int) -> list[str]:
    pipe = client.pipeline(transaction=False)
    for _ in range(size):
        pipe.xadd("s", {"a": "1", "b": "2", "c": "3"})
    pipe.execute()
    reply = client.xreadgroup("g", "c", {"s": ">"}, count=size)
    return [entry_id.decode() for entry_id, _ in reply[0][1]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    apply = lua_source("apply_effects")
    server = RedisServer(Path(tempfile.mkdtemp(prefix="sw-lua-cost-"))).start()
    try:
        client = redis.Redis(port=server.port)
        scripts = {"apply_effects.lua": client.script_load(apply)}
        scripts.update({name: client.script_load(src) for name, src in _PARTS.items()})
        client.xgroup_create("s", "g", id="0", mkstream=True)
        times: dict[str, list[float]] = {name: [] for name in [*scripts, "plain XACK"]}
        for _ in range(args.rounds):
            for name in times:
                client.config_resetstat()
                for _ in range(args.batches):
                    ids = _batch(client, args.batch)
                    if name == "plain XACK":
                        client.xack("s", "g", *ids)
                        continue
                    layout = " ".join([str(len(ids)), *ids])
                    client.evalsha(
                        scripts[name], 2, "s", "rec", "g", "c", 0, "", 0, ids[0], ids[-1], layout
                    )
                    if name not in ("apply_effects.lua", "XACK from Lua"):
                        client.xack("s", "g", *ids)
                stats = client.info("commandstats")
                key = "cmdstat_xack" if name == "plain XACK" else "cmdstat_evalsha"
                times[name].append(float(stats[key]["usec_per_call"]))
                client.xtrim("s", maxlen=0)
        print(
            f"redis-server {client.info('server')['redis_version']}, batches of {args.batch}, "
            f"{args.batches} per round, {args.rounds} rounds; server µs per call (commandstats)"
        )
        print("| call | µs per batch, median (min-max) | µs per message |")
        print("|---|---:|---:|")
        for name, values in times.items():
            median = statistics.median(values)
            print(
                f"| {name} | {median:.1f} ({min(values):.1f}-{max(values):.1f}) | "
                f"{median / args.batch:.2f} |"
            )
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
