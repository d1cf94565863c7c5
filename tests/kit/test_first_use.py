"""What a new user meets first with the test kit and the producer (issue #34, item 7): the
asyncio mode named when it is the problem, SQL handlers tested without a database URL, one
Redis URL for ``app.publish`` and the worker, the producers importable from the package, and
the README's ``Depends`` example closing its resource when the handler raises."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import redis
import sqlalchemy as sa
from sqlalchemy.orm import Session

from streamworker import App, Depends, Message
from streamworker.testing import TestWorker
from tests.support.proc import ROOT

_ASYNC_TEST = """
    from streamworker import App, Message

    app = App("probe")

    @app.handler("orders", group="g")
    async def handle(msg: Message) -> None:
        pass

    async def test_handled(streamworker_run) -> None:
        worker = await streamworker_run(app)
        sent = await worker.publish("orders", fields={"a": "1"})
        await worker.drain()
        worker.assert_acked(sent)
"""


def _pytest_in(directory: Path, *options: str) -> subprocess.CompletedProcess[str]:
    """pytest run in ``directory`` (its own rootdir, no ini file: pytest-asyncio's defaults)."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *options],
        cwd=directory,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_an_async_test_in_strict_mode_is_told_to_set_asyncio_mode_auto(tmp_path: Path) -> None:
    (tmp_path / "test_probe.py").write_text(textwrap.dedent(_ASYNC_TEST))
    result = _pytest_in(tmp_path)
    assert result.returncode == 1
    assert 'set asyncio_mode = "auto"' in result.stdout
    assert "pytest-asyncio (installed)" in result.stdout
    assert "not natively supported" not in result.stdout


def test_the_same_test_passes_once_asyncio_mode_is_auto(tmp_path: Path) -> None:
    (tmp_path / "test_probe.py").write_text(textwrap.dedent(_ASYNC_TEST))
    (tmp_path / "pytest.ini").write_text("[pytest]\nasyncio_mode = auto\n")
    result = _pytest_in(tmp_path)
    assert result.returncode == 0, result.stdout


def _sql_app() -> App:
    app = App("sql-first")

    @app.handler("orders", group="g", idempotency="sql")
    def record(msg: Message, session: Session) -> None:
        session.execute(sa.text("SELECT 1"))

    return app


async def test_sql_handlers_run_without_a_db_url_on_a_temporary_sqlite() -> None:
    worker = TestWorker(_sql_app())
    assert worker.db_url is not None
    assert worker.db_url.startswith("sqlite:///")
    path = Path(worker.db_url.removeprefix("sqlite:///"))
    async with worker:
        sent = await worker.publish("orders", fields={"n": "1"})
        await worker.drain()
        worker.assert_acked(sent)
        assert worker.processed(sent)
    assert not path.parent.exists()  # removed with the worker


def test_publish_sync_reads_streamworker_redis_url_like_the_cli(
    redis_url: str, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STREAMWORKER_REDIS_URL", redis_url)
    app = App("no-url")
    receipt = app.publish_sync("orders", {"n": "1"})
    assert redis_client.xrange("orders") == [(receipt.id.encode(), {b"n": b"1"})]


def test_the_environment_beats_the_apps_default_url_as_in_streamworker_run(
    redis_url: str, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STREAMWORKER_REDIS_URL", redis_url)
    app = App("default-url", redis_url="redis://127.0.0.1:1/0")
    app.publish_sync("orders", {"n": "2"})
    assert redis_client.xlen("orders") == 1


def test_a_bound_url_beats_the_environment(
    redis_url: str, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STREAMWORKER_REDIS_URL", "redis://127.0.0.1:1/0")
    app = App("bound")
    app.use_redis_url(redis_url)  # what `streamworker run` does with its --redis-url
    app.publish_sync("orders", {"n": "3"})
    assert redis_client.xlen("orders") == 1


def test_the_producers_are_importable_from_the_package() -> None:
    import streamworker
    from streamworker import Producer, SyncProducer
    from streamworker.producing.producer import Producer as Defined
    from streamworker.producing.producer import SyncProducer as SyncDefined

    assert Producer is Defined
    assert SyncProducer is SyncDefined
    assert {"Producer", "SyncProducer"} <= set(streamworker.__all__)


def _readme_dependency() -> Any:
    """The README's ``payments_client`` generator, run as the README shows it."""
    readme = (ROOT / "README.md").read_text()
    found = re.search(r"^def payments_client\(\):\n(?:    .*\n|\n)+?(?=\n\S)", readme, re.M)
    assert found is not None, "the README's Depends example moved"

    class PaymentsClient:
        opened: list[PaymentsClient] = []

        def __init__(self) -> None:
            self.closed = False
            PaymentsClient.opened.append(self)

        def close(self) -> None:
            self.closed = True

    namespace: dict[str, Any] = {"PaymentsClient": PaymentsClient}
    exec(found.group(0), namespace)
    return namespace["payments_client"], PaymentsClient.opened


async def test_the_readme_dependency_is_closed_when_the_handler_raises() -> None:
    payments_client, opened = _readme_dependency()
    app = App("readme")

    @app.handler("orders", group="billing", max_deliveries=1)
    async def on_order(msg: Message, payments: Any = Depends(payments_client)) -> None:
        raise RuntimeError("the payment provider said no")

    async with TestWorker(app) as worker:
        sent = await worker.publish("orders", fields={"order_id": "1"})
        await worker.drain()
        worker.assert_dead_lettered(sent, "the payment provider said no")
    assert opened
    assert all(client.closed for client in opened)
