"""The streamworker pytest plugin (registered as ``pytest11`` entry point ``streamworker``).

Fixtures:

* ``streamworker_run`` — ``worker = await streamworker_run(app, **options)`` starts a
  :class:`~streamworker.testing.TestWorker` (a real worker on a fresh in-process engine) and stops
  it after the test. Options are TestWorker's (``redis_url``, ``db_url``, ``retry_backoff_ms``…).
* ``streamworker_db_url`` — the database of ``idempotency="sql"`` handlers: a fresh SQLite file
  per test, migrated when a worker starts. Override this fixture in your ``conftest.py`` to test
  against your own database (e.g. a PostgreSQL URL).

The async fixture needs pytest-asyncio (``pip install 'streamworker[testing]'``) running ``async
def`` tests: set ``asyncio_mode = "auto"`` under ``[tool.pytest.ini_options]`` (or mark each test
``@pytest.mark.asyncio``). In pytest-asyncio's default strict mode an unmarked ``async def`` test
is not run by it, and pytest's own error then blames a missing plugin; this plugin says what is
wrong instead (:func:`pytest_pyfunc_call`).

Importing this module imports nothing of streamworker's runtime: the plugin loads in every pytest
session of an environment where streamworker is installed.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from streamworker.app import App
    from streamworker.testing import TestWorker

_asyncio_fixture: Any
try:
    from pytest_asyncio import fixture as _asyncio_fixture
except ImportError:  # pragma: no cover - exercised only without pytest-asyncio
    _asyncio_fixture = None


# Markers by which an async framework's plugin claims an ``async def`` test.
_ASYNC_MARKERS = ("asyncio", "anyio", "trio")

_STRICT_MODE = (
    "{name} is an async def test, but pytest-asyncio (installed) runs only tests marked "
    '@pytest.mark.asyncio in its strict mode; set asyncio_mode = "auto" under '
    "[tool.pytest.ini_options] in pyproject.toml (or asyncio_mode = auto in pytest.ini), or "
    "mark the test"
)


def _asyncio_mode(config: pytest.Config) -> str | None:
    """pytest-asyncio's mode (``"strict"`` or ``"auto"``), None without pytest-asyncio."""
    if _asyncio_fixture is None:
        return None
    try:
        given = config.getoption("asyncio_mode", default=None) or config.getini("asyncio_mode")
    except ValueError:  # the option is not registered: pytest-asyncio is not active
        return None
    return str(given or "strict").lower()


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> None:
    """Fail an unclaimed ``async def`` test with the real reason.

    An ``async def`` test that no async plugin claimed (no asyncio/anyio/trio marker) would fail
    with pytest's "async def functions are not natively supported ... install a suitable
    plugin", even with pytest-asyncio installed, when it runs in strict mode. Say so, and how
    to fix it. Everything else is left to the other hooks.
    """
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return
    if any(pyfuncitem.get_closest_marker(m) is not None for m in _ASYNC_MARKERS):
        return
    if _asyncio_mode(pyfuncitem.config) == "strict":
        pytest.fail(_STRICT_MODE.format(name=pyfuncitem.nodeid), pytrace=False)


@pytest.fixture
def streamworker_db_url(tmp_path: Path) -> str:
    """A fresh SQLite database file for ``idempotency="sql"`` handlers (override to use yours)."""
    return f"sqlite:///{tmp_path / 'streamworker-test.db'}"


async def _runner(
    request: pytest.FixtureRequest,
) -> AsyncIterator[Callable[..., Awaitable[TestWorker]]]:
    from streamworker.testing import TestWorker

    started: list[TestWorker] = []

    async def run(app: App, **options: Any) -> TestWorker:
        sql = any(s.idempotency == "sql" for s in app.handlers)
        if sql and "db_url" not in options and not app.db_url:
            options["db_url"] = request.getfixturevalue("streamworker_db_url")
        worker = TestWorker(app, **options)
        await worker.start()
        started.append(worker)
        return worker

    yield run
    errors: list[BaseException] = []
    for worker in reversed(started):
        try:
            await worker.stop()
        except Exception as exc:
            errors.append(exc)
    if errors:
        raise errors[0]


if _asyncio_fixture is not None:
    streamworker_run = _asyncio_fixture(_runner, name="streamworker_run")
else:  # pragma: no cover

    @pytest.fixture
    def streamworker_run() -> None:
        """Needs pytest-asyncio."""
        pytest.fail("streamworker_run needs pytest-asyncio: pip install 'streamworker[testing]'")
