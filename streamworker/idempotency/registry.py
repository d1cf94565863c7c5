"""The idempotency strategies by name, imported when first asked for.

The strategies shipped with streamworker are listed here; another package adds one by an entry
point in the ``streamworker.strategies`` group (``name = "package.module:PLUGIN"``), or a program
by :func:`register` before it registers handlers. A plug-in's module (and whatever it needs, e.g.
SQLAlchemy) is imported only when a handler asks for it.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from streamworker.errors import ConfigError
from streamworker.extras import require_extra
from streamworker.idempotency.base import StrategyPlugin

_BUILTIN: dict[str, str] = {
    "none": "streamworker.idempotency.none:PLUGIN",
    "sql": "streamworker.idempotency.sql.plugin:PLUGIN",
    "lua": "streamworker.idempotency.lua:PLUGIN",
}
# The optional extra a built-in strategy needs: checked before its module is imported, so a
# missing one is a ConfigError naming ``pip install 'streamworker[extra]'``, not an ImportError.
_EXTRA: dict[str, str] = {"sql": "sql"}
_ENTRY_POINT_GROUP = "streamworker.strategies"

_registered: dict[str, StrategyPlugin] = {}
_loaded: dict[str, StrategyPlugin] = {}


def _locations() -> dict[str, str]:
    found = dict(_BUILTIN)
    for ep in entry_points(group=_ENTRY_POINT_GROUP):
        found.setdefault(ep.name, ep.value)
    return found


def names() -> tuple[str, ...]:
    """Every strategy name that can be asked for, the built-in ones first."""
    return tuple(dict.fromkeys([*_BUILTIN, *_registered, *_locations()]))


def register(plugin: StrategyPlugin) -> None:
    """Make ``plugin`` available as ``idempotency=plugin.name`` (replacing one of that name)."""
    _registered[plugin.name] = plugin
    _loaded.pop(plugin.name, None)


def unregister(name: str) -> None:
    """Forget a plug-in :func:`register` added (the built-in of that name, if any, comes back)."""
    _registered.pop(name, None)
    _loaded.pop(name, None)


def get(name: str) -> StrategyPlugin:
    """The plug-in called ``name``; ConfigError if there is none."""
    plugin = _registered.get(name) or _loaded.get(name)
    if plugin is not None:
        return plugin
    location = _BUILTIN.get(name) or _locations().get(name)
    if location is None:
        raise ConfigError(f"idempotency must be one of {', '.join(names())}, not {name!r}")
    if name in _EXTRA and location == _BUILTIN[name]:
        require_extra(_EXTRA[name], f"idempotency={name!r}")
    module_name, _, attr = location.partition(":")
    loaded: StrategyPlugin = getattr(importlib.import_module(module_name), attr or "PLUGIN")
    _loaded[name] = loaded
    return loaded
