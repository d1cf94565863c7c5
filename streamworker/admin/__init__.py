"""The documented import path ``streamworker.admin`` (the operator tools behind ``streamworker
pending`` and ``streamworker dlq``), kept for users' code.

The code lives in :mod:`streamworker.ops.pending` and :mod:`streamworker.ops.dead_letters`; this
module only re-exports it. Nothing inside streamworker imports it (an import-linter contract in
pyproject.toml keeps it so).
"""

from __future__ import annotations

from streamworker.ops.dead_letters import *  # noqa: F403
from streamworker.ops.pending import *  # noqa: F403
