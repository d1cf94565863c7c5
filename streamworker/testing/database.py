"""The test kit's database helpers for ``idempotency="sql"`` handlers."""

from __future__ import annotations


def sync_url(url: str) -> str:
    """The same database through a sync driver (the kit reads rows with plain SQLAlchemy)."""
    return url.replace("+aiosqlite", "").replace("+asyncpg", "+psycopg")


def upgrade_schema(db_url: str) -> None:
    """Create the processed-messages table (the SQL extra is imported only when it is used)."""
    from streamworker.idempotency.sql import SqlDatabase
    from streamworker.idempotency.sql.migrate import upgrade

    db = SqlDatabase(db_url)
    try:
        upgrade(db)
    finally:
        db.sync_engine.dispose()
