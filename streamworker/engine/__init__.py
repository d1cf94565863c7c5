"""streamworker's embedded Redis 7.0-compatible engine.

``Engine`` executes commands in-process; :mod:`.inproc` plugs it under redis-py
(``engine://memory`` URLs); :mod:`.protocol` is the sans-I/O RESP2/RESP3 codec.

This module is also where the engine's layers meet: :mod:`.core` imports none of the command
modules above it, and gets them here (:func:`.core.plug_commands`), before any of its names
can be imported.
"""

from __future__ import annotations

from streamworker.engine.commands.wiring import COMMAND_MODULES
from streamworker.engine.context import Blocked, ClientState, Ctx
from streamworker.engine.core import Engine, plug_commands
from streamworker.engine.errors import CommandError

plug_commands(COMMAND_MODULES)

__all__ = ["Blocked", "ClientState", "CommandError", "Ctx", "Engine"]
