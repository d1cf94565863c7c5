"""The pure parts of ``idempotency="sql"``: stored ids, the retention rule, handler registration."""

from __future__ import annotations

import pytest
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from streamworker import App, ConfigError, Depends, Message
from streamworker.core.deps import ProvidedParam
from streamworker.idempotency.sql import (
    RetentionCut,
    SqlDatabase,
    retention_cut,
    sortable_id,
    stream_id,
)


def test_sortable_id_orders_like_stream_ids() -> None:
    ids = ["9-0", "10-0", "10-2", "10-10", "1700000000000-0", "18446744073709551615-1"]
    assert sorted(ids, key=sortable_id) == ids
    assert sorted(sortable_id(i) for i in ids) == [sortable_id(i) for i in ids]


def test_sortable_id_round_trips() -> None:
    assert stream_id(sortable_id("1700000000000-42")) == "1700000000000-42"
    assert sortable_id("5-1") == "00000000000000000005-00000000000000000001"


@pytest.mark.parametrize(
    "entry_id",
    [
        "0-0",
        "1-1",
        "1700000000000-3",
        "18446744073709551615-18446744073709551615",
        "007-01",  # leading zeros: stored as the number they spell
        "000000000000000000000000007-1",  # longer than 20 digits with its zeros
        "١٢-3",  # digits of another script: int() reads them
    ],
)
def test_sortable_id_is_the_zero_padded_number_pair(entry_id: str) -> None:
    ms, _, seq = entry_id.partition("-")
    assert sortable_id(entry_id) == f"{int(ms):020d}-{int(seq):020d}"
    assert stream_id(sortable_id(entry_id)) == f"{int(ms)}-{int(seq)}"


@pytest.mark.parametrize("bad", ["x-1", "00000000000000000005-0000000000000000000a", "5"])
def test_stream_id_rejects_what_is_not_a_stored_id(bad: str) -> None:
    with pytest.raises(ValueError, match="invalid literal for int"):
        stream_id(bad)


@pytest.mark.parametrize("bad", ["", "5", "a-1", "5-", "-1", "5-1-2"])
def test_sortable_id_rejects_what_is_not_an_entry_id(bad: str) -> None:
    with pytest.raises(ValueError, match="not a stream entry id"):
        sortable_id(bad)


def test_retention_keeps_everything_from_the_oldest_pending_entry() -> None:
    assert retention_cut("20-0", "7-3") == RetentionCut(sortable_id("7-3"), inclusive=False)


def test_retention_with_an_empty_pel_prunes_up_to_the_last_delivered_id() -> None:
    assert retention_cut("20-0", None) == RetentionCut(sortable_id("20-0"), inclusive=True)


def test_retention_prunes_nothing_before_the_first_delivery() -> None:
    assert retention_cut("0-0", None) is None


def test_sql_handler_gets_a_session_parameter() -> None:
    app = App("t")

    @app.handler("s", group="g", idempotency="sql")
    def handle(msg: Message, session: Session) -> None: ...

    assert dict(app.handlers[0].plan.params)["session"] == ProvidedParam(Session)


def test_session_reaches_dependencies_too() -> None:
    def repo(session: Session) -> Session:
        return session

    app = App("t")

    @app.handler("s", group="g", idempotency="sql")
    def handle(msg: Message, r: Session = Depends(repo)) -> None: ...

    assert app.handlers[0].plan.params[1][0] == "r"


def test_async_handler_asking_for_a_sync_session_is_a_config_error() -> None:
    app = App("t")
    with pytest.raises(ConfigError, match="AsyncSession"):

        @app.handler("s", group="g", idempotency="sql")
        async def handle(msg: Message, session: Session) -> None: ...


def test_sync_handler_asking_for_an_async_session_is_a_config_error() -> None:
    app = App("t")
    with pytest.raises(ConfigError, match="def handler gets a Session"):

        @app.handler("s", group="g", idempotency="sql")
        def handle(msg: Message, session: AsyncSession) -> None: ...


def test_sql_handler_with_concurrency_is_a_config_error() -> None:
    app = App("t")
    with pytest.raises(ConfigError, match="concurrency must be 1"):
        app.handler("s", group="g", idempotency="sql", concurrency=4)


def test_session_without_sql_idempotency_has_no_source() -> None:
    app = App("t")
    with pytest.raises(ConfigError, match="no source"):

        @app.handler("s", group="g")
        def handle(msg: Message, session: Session) -> None: ...


@pytest.mark.parametrize(
    ("url", "error"),
    [
        ("mysql://u@h/db", "supports postgresql"),
        ("sqlite://", "in-memory"),
        ("sqlite:///:memory:", "in-memory"),
        ("not a url", "invalid database URL"),
    ],
)
def test_unsupported_database_urls_are_config_errors(url: str, error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        SqlDatabase(url)


def test_postgres_urls_get_psycopg_3_for_both_engines() -> None:
    db = SqlDatabase("postgresql://u:secret@db/app")
    assert db.sync_engine.url.drivername == "postgresql+psycopg"
    assert db.async_engine.url.drivername == "postgresql+psycopg"
    assert "secret" not in repr(db)
