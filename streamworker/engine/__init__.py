"""streamworker's embedded Redis 7.0-compatible engine.

``Engine`` executes commands in-process; :mod:`.inproc` plugs it under redis-py
(``engine://memory`` URLs); :mod:`.protocol` is the sans-I/O RESP2/RESP3 codec.
"""

from __future__ import annotations

from streamworker.engine.context import Blocked, ClientState, Ctx
from streamworker.engine.core import Engine
from streamworker.engine.errors import CommandError

__all__ = ["Blocked", "ClientState", "CommandError", "Ctx", "Engine"]
