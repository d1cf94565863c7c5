"""The documented import path ``streamworker.idempotency.outbox`` (the transactional outbox), kept for
users' code.

The code lives in :mod:`streamworker.idempotency.sql.outbox`; this module only re-exports it.
Nothing inside streamworker imports it (an import-linter contract in pyproject.toml keeps it so).
"""

from __future__ import annotations

from streamworker.idempotency.sql.outbox import *  # noqa: F403
