"""The one business table every variant writes to (PostgreSQL, or SQLite for SQL mode)."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class ProofRow(Base):
    __tablename__ = "proof_rows"

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    order_id: Mapped[str] = mapped_column(sa.String(20))
    amount_cents: Mapped[int]


def prepare(url: str) -> None:
    """Create streamworker's ``processed_messages`` (migrations) and ``proof_rows``."""
    import asyncio

    from streamworker.idempotency.sql import SqlDatabase
    from streamworker.idempotency.sql.migrate import upgrade

    db = SqlDatabase(url)
    try:
        upgrade(db)
        Base.metadata.create_all(db.sync_engine)
    finally:
        asyncio.run(db.dispose())


def reset(url: str) -> None:
    """Empty ``proof_rows`` and ``processed_messages``."""
    from streamworker.idempotency.sql import processed_messages

    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.delete(ProofRow.__table__))
            conn.execute(sa.delete(processed_messages))
    finally:
        engine.dispose()


# One pool per database for the whole run: the crash scenario polls the count every few
# milliseconds, and a new connection per poll would make it see 50% late.
_ENGINES: dict[str, sa.Engine] = {}


def _engine(url: str) -> sa.Engine:
    if url not in _ENGINES:
        _ENGINES[url] = sa.create_engine(url)
    return _ENGINES[url]


def count(url: str) -> tuple[int, int]:
    """(rows, distinct order ids) in ``proof_rows``."""
    with _engine(url).connect() as conn:
        rows = conn.execute(sa.select(sa.func.count()).select_from(ProofRow)).scalar_one()
        distinct = conn.execute(
            sa.select(sa.func.count(sa.distinct(ProofRow.order_id)))
        ).scalar_one()
    return int(rows), int(distinct)


def dispose() -> None:
    """Close the pools :func:`count` opened (before the servers stop)."""
    while _ENGINES:
        _ENGINES.popitem()[1].dispose()
