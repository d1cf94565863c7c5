"""Alembic environment for streamworker's own tables.

Usable from the ``alembic`` command (``alembic -c migrations/alembic.ini upgrade head`` with
``sqlalchemy.url`` set) and programmatically: :func:`streamworker.idempotency.sql_migrate.upgrade`
passes an open Connection in ``config.attributes["connection"]``.

The version is kept in its own table, ``streamworker_alembic_version``, so these migrations never
touch an application's ``alembic_version``.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, engine_from_config, pool

import streamworker.idempotency.outbox  # noqa: F401  (adds the outbox table to metadata)
from streamworker.idempotency.sql import VERSION_TABLE, metadata

config = context.config


def _configure(connection: Connection | None = None, url: str | None = None) -> None:
    context.configure(
        connection=connection,
        url=url,
        target_metadata=metadata,
        version_table=VERSION_TABLE,
        literal_binds=connection is None,
        # SQLite cannot ALTER most things in place; batch mode recreates tables when needed.
        render_as_batch=True,
    )


def run_offline() -> None:
    """Emit the SQL (``alembic upgrade head --sql``) instead of running it."""
    _configure(url=config.get_main_option("sqlalchemy.url"))
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection=connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = engine_from_config(
        config.get_section(config.config_ini_section) or {},
        prefix="sqlalchemy.",
        poolclass=pool.NullPool,
    )
    with engine.connect() as conn:
        _configure(connection=conn)
        with context.begin_transaction():
            context.run_migrations()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
