"""The documented import path ``streamworker.partitions`` (partitioned streams), kept for users' code.

The code lives in :mod:`streamworker.producing.partitions`; this module only re-exports it. Nothing
inside streamworker imports it (an import-linter contract in pyproject.toml keeps it so).
"""

from __future__ import annotations

from streamworker.producing.partitions import *  # noqa: F403
