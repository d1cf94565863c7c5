"""The high-availability tests' worker: ``streamworker run`` of tests/apps/ha_mixed.py (a Lua,
an SQL and an at-least-once handler on one stream) and the counts every failover test ends with."""

from __future__ import annotations

import re
import subprocess
import urllib.request
from collections import Counter
from pathlib import Path

import redis
import sqlalchemy as sa

from streamworker.idempotency.sql import SqlDatabase
from streamworker.idempotency.sql.migrate import upgrade
from tests.apps import ha_mixed
from tests.support.proc import stop_process, streamworker, wait_for
from tests.support.servers import free_port

APP = "tests/apps/ha_mixed.py:app"
GROUPS = ("lua", "sql", "plain")
DLQ = f"{ha_mixed.STREAM}:dlq"


def prepare_db(postgres_url: str) -> str:
    """``postgres_url`` with streamworker's schema and the app's ``ha_effects`` table."""
    db = SqlDatabase(postgres_url)
    upgrade(db)
    db.sync_engine.dispose()
    engine = sa.create_engine(postgres_url)
    ha_mixed.Base.metadata.create_all(engine)
    engine.dispose()
    return postgres_url


class Run:
    """A ``streamworker run`` of the HA app with its metrics port and its at-least-once log."""

    def __init__(self, url: str, db_url: str, tmp_path: Path) -> None:
        self.log = tmp_path / "plain.log"
        self.db_url = db_url
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] = streamworker(
            "run", APP, "--redis-url", url, "--metrics-port", str(self.port),
            env={"STREAMWORKER_DB_URL": db_url, "SW_HA_LOG": str(self.log)},
        )  # fmt: skip
        self.stderr = ""

    def stop(self) -> str:
        self.stderr = stop_process(self.proc)
        return self.stderr

    def metric(self, name: str) -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
            text = r.read().decode()
        match = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
        return float(match.group(1)) if match else 0.0

    def plain_calls(self) -> Counter[str]:
        if not self.log.exists():
            return Counter()
        return Counter(self.log.read_text().split())

    def sql_rows(self) -> Counter[str]:
        engine = sa.create_engine(self.db_url)
        try:
            with engine.connect() as c:
                rows = c.execute(sa.select(ha_mixed.Effect.message_id)).scalars().all()
        finally:
            engine.dispose()
        return Counter(rows)


def publish(client: redis.Redis, n: int, tag: str) -> list[str]:
    return [client.xadd(ha_mixed.STREAM, {"n": str(i), "tag": tag}).decode() for i in range(n)]


def handled_by_all(run: Run, client: redis.Redis, ids: list[str]) -> bool:
    applied = client.hgetall(ha_mixed.APPLIED)
    lua = all(applied.get(i.encode()) for i in ids)
    sql = run.sql_rows()
    plain = run.plain_calls()
    return lua and all(sql[i] for i in ids) and all(plain[i] for i in ids)


def nothing_pending(client: redis.Redis) -> bool:
    return all(client.xpending(ha_mixed.STREAM, g)["pending"] == 0 for g in GROUPS)


def assert_once_and_clean(run: Run, client: redis.Redis, after: list[str]) -> None:
    applied = {k.decode(): int(v) for k, v in client.hgetall(ha_mixed.APPLIED).items()}
    assert [k for k, v in applied.items() if v > 1] == [], "a Lua effect applied twice"
    assert [k for k, v in run.sql_rows().items() if v > 1] == [], "an SQL effect applied twice"
    for i in after:
        assert applied.get(i) == 1
    assert client.xlen(DLQ) == 0, client.xrange(DLQ)
    assert nothing_pending(client)


def wait_started(run: Run, client: redis.Redis) -> None:
    def groups_exist() -> bool:
        try:
            return len(client.xinfo_groups(ha_mixed.STREAM)) == len(GROUPS)
        except redis.ResponseError:
            return False

    wait_for(groups_exist, 60, "the worker to create its groups")
