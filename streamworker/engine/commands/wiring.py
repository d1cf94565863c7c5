"""What the command modules lend the engine's core (:class:`~..core.CommandLayer`).

:mod:`..core` sits below the command modules and imports none of them; the engine package
(``streamworker/engine/__init__.py``) plugs :data:`COMMAND_MODULES` in once, so that every
:class:`~..core.Engine` gets its dispatch table, its ACL LOG entries and its ``save``
schedule from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamworker.engine.commands import load_commands, streams_r8
from streamworker.engine.commands.connection import log_denial
from streamworker.engine.commands.rdb import scheduled_save

if TYPE_CHECKING:
    from streamworker.engine.context import Ctx
    from streamworker.engine.core import Engine
    from streamworker.engine.table import CommandSpec
    from streamworker.engine.versions import RedisVersion

__all__ = ["COMMAND_MODULES", "CommandModules"]


class CommandModules:
    """The engine's :class:`~..core.CommandLayer`: the commands of this package."""

    __slots__ = ()

    def build_table(self, version: RedisVersion) -> dict[bytes, CommandSpec]:
        """Every command module's entries (fresh copies), plus the 8.x ones for an 8.x
        ``version``."""
        table = load_commands()
        if version.is_redis8:
            # The 8.x commands and option parsers go into this engine's table only: the 7.0
            # dispatch path stays the code it was, with no version test on it.
            streams_r8.install(table, version)
        return table

    def log_denial(self, ctx: Ctx, reason: int, context: str, obj: bytes, shown: Ctx) -> None:
        """An ACL LOG entry (:func:`.connection.log_denial`)."""
        log_denial(ctx, reason, context, obj, shown=shown)

    def cron(self, engine: Engine) -> None:
        """Start a BGSAVE when a ``save`` point is reached (:func:`.rdb.scheduled_save`)."""
        if engine.config.get("save"):
            scheduled_save(engine)


COMMAND_MODULES = CommandModules()
"""The one instance the engine package plugs in."""
