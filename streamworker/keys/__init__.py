"""The documented import path ``streamworker.keys`` (the Redis key names), kept for users' code.

The code lives in :mod:`streamworker.io.keys`; this module only re-exports it. Nothing inside
streamworker imports it (an import-linter contract in pyproject.toml keeps it so).
"""

from __future__ import annotations

from streamworker.io.keys import *  # noqa: F403
