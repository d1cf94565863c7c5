"""The documented import path ``streamworker.codec`` (encoding and decoding message bodies), kept for
users' code.

The code lives in :mod:`streamworker.core.codec`; this module only re-exports it. Nothing inside
streamworker imports it (an import-linter contract in pyproject.toml keeps it so).
"""

from __future__ import annotations

from streamworker.core.codec import *  # noqa: F403
