"""The pipeline demo: publish orders, run the three stages and the outbox relay, SIGKILL the
worker and the relay in the middle, restart them, and count every stage.

    python examples/pipeline/demo.py [--redis-url URL] [--db-url URL] [--orders N]

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
from collections import Counter
from pathlib import Path

import redis
import sqlalchemy as sa

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

from app import (  # noqa: E402
    BALANCES,
    COUNTED,
    LEDGER,
    ORDERS,
    PAID,
    PAYMENTS,
    TOTAL,
    Order,
    create_tables,
)

from streamworker.producing.producer import SyncProducer  # noqa: E402

ENV = {**os.environ, "PYTHONPATH": str(ROOT), "STREAMWORKER_LOG_LEVEL": "warning"}


def start(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "streamworker", *args],
        cwd=HERE,
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def twice(counts: Counter[int] | dict[int, int]) -> int:
    return sum(1 for n in counts.values() if n > 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--db-url")
    parser.add_argument("--orders", type=int, default=300)
    args = parser.parse_args()
    db_url = args.db_url or f"sqlite:///{tempfile.mkdtemp(prefix='sw-pipeline-')}/shop.db"
    n = args.orders

    subprocess.run(
        [sys.executable, "-m", "streamworker", "migrate", "--db-url", db_url],
        check=True,
        env=ENV,
        stdout=subprocess.DEVNULL,
    )
    create_tables(db_url)
    engine = sa.create_engine(db_url)
    with engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM shop_charges"))
        conn.execute(sa.text("DELETE FROM streamworker_outbox"))
    client = redis.Redis.from_url(args.redis_url)
    client.delete(ORDERS, PAYMENTS, LEDGER, BALANCES, PAID, COUNTED, TOTAL)
    for key in client.scan_iter("{shop}:*"):
        client.delete(key)

    producer = SyncProducer(client)
    duplicates = 0
    for i in range(1, n + 1):
        order = Order(order_id=i, customer=f"customer-{i % 7}", cents=100 + i)
        producer.publish(ORDERS, order, idempotency_key=f"order-{i}")
        if i % 30 == 0:  # a producer retrying after a lost reply: adds nothing
            duplicates += producer.publish(ORDERS, order, idempotency_key=f"order-{i}").duplicate
    print(f"published {n} orders ({duplicates} retried publishes added nothing)")

    run = ("run", "app.py:app", "--redis-url", args.redis_url, "--db-url", db_url)
    relay = ("relay", "--redis-url", args.redis_url, "--db-url", db_url, "--idle-ms", "50")
    worker, relayer = start(*run, "--consumer", "demo-0"), start(*relay)
    try:
        deadline = time.monotonic() + 60
        while int(client.get(TOTAL) or 0) < n // 3:
            if time.monotonic() > deadline:
                raise SystemExit("the pipeline did not get going within 60 s")
            time.sleep(0.02)
        worker.kill()
        relayer.kill()
        worker.wait(10)
        relayer.wait(10)
        print("worker and relay killed with SIGKILL mid-run; restarting both")
        worker, relayer = start(*run, "--consumer", "demo-0"), start(*relay)
        deadline = time.monotonic() + 90
        while int(client.get(TOTAL) or 0) < n or client.xpending(LEDGER, "reporting")["pending"]:
            if time.monotonic() > deadline:
                raise SystemExit(f"the pipeline did not finish within 90 s: {client.get(TOTAL)}")
            time.sleep(0.1)
    finally:
        for proc in (worker, relayer):
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)

    with engine.connect() as conn:
        charges = Counter(
            int(r) for r in conn.execute(sa.text("SELECT order_id FROM shop_charges")).scalars()
        )
        waiting = conn.execute(sa.text("SELECT count(*) FROM streamworker_outbox")).scalar_one()
    engine.dispose()
    payments = Counter(int(f[b"order_id"]) for _, f in client.xrange(PAYMENTS))
    ledger = Counter(int(f[b"order_id"]) for _, f in client.xrange(LEDGER))
    paid = {int(k): int(v) for k, v in client.hgetall(PAID).items()}
    counted = {int(k): int(v) for k, v in client.hgetall(COUNTED).items()}
    balance = sum(int(v) for v in client.hgetall(BALANCES).values())
    expected_balance = sum(100 + i for i in range(1, n + 1))
    print(f"stage 1 (SQL charges): {len(charges)} orders, charged twice: {twice(charges)}")
    print(f"outbox -> payments: {len(payments)} entries, twice: {twice(payments)}, left: {waiting}")
    print(f"stage 2 (Lua balances): {len(paid)} payments applied, twice: {twice(paid)}")
    print(f"balances add up: {'yes' if balance == expected_balance else 'NO'}")
    print(f"stage 2 -> ledger: {len(ledger)} entries, twice: {twice(ledger)}")
    print(f"stage 3 (final count): {client.get(TOTAL).decode()}, counted twice: {twice(counted)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
