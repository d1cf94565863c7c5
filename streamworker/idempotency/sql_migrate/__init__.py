"""The documented import path ``streamworker.idempotency.sql_migrate`` (the processed-messages schema
migrations), kept for users' code.

The code lives in :mod:`streamworker.idempotency.sql.migrate`; this module only re-exports it.
Nothing inside streamworker imports it (an import-linter contract in pyproject.toml keeps it so).
"""

from __future__ import annotations

from streamworker.idempotency.sql.migrate import *  # noqa: F403
