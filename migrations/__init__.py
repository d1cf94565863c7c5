"""streamworker's Alembic environment: the schema of ``idempotency="sql"``.

Installed as ``streamworker.migrations``; run it with ``streamworker migrate --db-url URL`` or
:func:`streamworker.idempotency.sql_migrate.upgrade`.
"""
