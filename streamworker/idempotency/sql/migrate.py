"""Bring a database's streamworker schema up to date: what ``streamworker migrate`` runs.

The Alembic environment is ``migrations/`` in the repository, installed as
``streamworker.migrations``; its version table is ``streamworker_alembic_version``, apart from an
application's own ``alembic_version``.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from streamworker.idempotency.sql import VERSION_TABLE, SqlDatabase


def migrations_dir() -> Path:
    """The directory holding ``env.py`` and ``versions/``."""
    return Path(str(resources.files("streamworker.migrations")))


def alembic_config(db: SqlDatabase) -> Config:
    """An Alembic Config for streamworker's environment on ``db`` (no ini file needed)."""
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    # Percent signs in a password would be taken for ini interpolation.
    url = db.url.set(drivername=db.sync_engine.url.drivername)
    config.set_main_option(
        "sqlalchemy.url", url.render_as_string(hide_password=False).replace("%", "%%")
    )
    return config


def head() -> str:
    """The newest revision streamworker ships."""
    script = ScriptDirectory.from_config(_script_config())
    revision = script.get_current_head()
    assert revision is not None
    return revision


def _script_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    return config


def current(db: SqlDatabase) -> str | None:
    """The revision ``db`` is at (None: never migrated). Blocking."""
    with db.sync_engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
        return context.get_current_revision()


def upgrade(db: SqlDatabase, revision: str = "heads") -> tuple[str | None, str | None]:
    """Upgrade ``db`` to ``revision`` (default: the newest); returns (before, after). Idempotent.

    Runs in one transaction on PostgreSQL (and as far as SQLite's DDL allows there). Blocking.
    """
    before = current(db)
    config = alembic_config(db)
    with db.sync_engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, revision)
    return before, current(db)
