"""The documented import path ``streamworker.redisio`` (Redis clients by URL), kept for users' code.

The code lives in :mod:`streamworker.io.redisio`; this module only re-exports it. Nothing inside
streamworker imports it (an import-linter contract in pyproject.toml keeps it so).
"""

from __future__ import annotations

from streamworker.io.redisio import *  # noqa: F403
