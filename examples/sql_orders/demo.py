"""The exactly-once demo: produce orders, run the worker, kill it with SIGKILL right after a
batch committed and before its XACK (the worst moment), restart it, and count.

    python examples/sql_orders/demo.py [--redis-url URL] [--db-url URL]

Without --db-url it uses a SQLite file in a temporary directory.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis
import sqlalchemy as sa

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

from app import create_tables  # noqa: E402

# Wraps the strategy's XACK so that the first worker dies right after its second commit: a
# stand-in for a crash (or a lost connection) at the worst moment. Demo code, not library code.
_KILLER = """
import os, signal, runpy
from streamworker.idempotency import sql
_xack, _n = sql.SqlStrategy._xack, [0]
async def _xack_or_die(self, ids, next_read):
    _n[0] += 1
    if _n[0] == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    await _xack(self, ids, next_read)
sql.SqlStrategy._xack = _xack_or_die
runpy.run_module("streamworker", run_name="__main__")
"""


def worker(redis_url: str, db_url: str, *, crash: bool) -> subprocess.Popen[bytes]:
    args = [
        "run",
        "app.py:app",
        "--redis-url",
        redis_url,
        "--db-url",
        db_url,
        "--consumer",
        "demo-0",
        "--log-level",
        "warning",
    ]
    cmd = (
        [sys.executable, "-c", _KILLER, *args]
        if crash
        else [sys.executable, "-m", "streamworker", *args]
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "STREAMWORKER_LOG_FORMAT": "console"}
    return subprocess.Popen(cmd, cwd=HERE, env=env, stderr=subprocess.DEVNULL)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--db-url")
    parser.add_argument("--orders", type=int, default=200)
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="sw-sql-orders-")
    db_url = args.db_url or f"sqlite:///{tmp}/orders.db"

    subprocess.run(
        [sys.executable, "-m", "streamworker", "migrate", "--db-url", db_url],
        check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    create_tables(db_url)
    engine = sa.create_engine(db_url)
    with engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM charges"))
    client = redis.Redis.from_url(args.redis_url)
    client.delete("orders", "{orders}:dlq")
    for i in range(1, args.orders + 1):
        client.xadd("orders", {"order_id": str(i), "amount_cents": str(0 if i == 7 else 100 + i)})
    print(f"produced {args.orders} orders (order 7 has no amount)")

    first = worker(args.redis_url, db_url, crash=True)
    first.wait(60)
    print(
        f"worker 1 killed with {signal.Signals(-first.returncode).name} after a commit, "
        "before its XACK"
    )
    pending = client.xpending("orders", "billing")["pending"]
    print(f"pending after the crash: {pending}")

    second = worker(args.redis_url, db_url, crash=False)
    try:
        deadline = time.monotonic() + 60
        while client.xpending("orders", "billing")["pending"] or client.xlen("{orders}:dlq") < 1:
            if time.monotonic() > deadline:
                raise SystemExit("the worker did not finish within 60 s")
            time.sleep(0.1)
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(30)

    with engine.connect() as conn:
        charges = conn.execute(sa.text("SELECT count(*) FROM charges")).scalar_one()
        twice = conn.execute(
            sa.text(
                "SELECT count(*) FROM (SELECT order_id FROM charges GROUP BY order_id "
                "HAVING count(*) > 1) AS d"
            )
        ).scalar_one()
    engine.dispose()
    print(f"charges: {charges} (orders {args.orders}, dead-lettered {client.xlen('{orders}:dlq')})")
    print(f"orders charged twice: {twice}")
    print(f"pending after the run: {client.xpending('orders', 'billing')['pending']}")
    return 0 if charges == args.orders - 1 and twice == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
