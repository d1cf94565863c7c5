"""Optional extras: a clear error, instead of an ImportError traceback, when one is missing."""

from __future__ import annotations

import importlib.util

from streamworker.errors import ConfigError

_EXTRAS = {"sql": ("sqlalchemy", "alembic"), "tracing": ("opentelemetry",)}


def require_extra(extra: str, what: str) -> None:
    """Raise ConfigError naming ``pip install 'streamworker[extra]'`` when a module is missing."""
    missing = [m for m in _EXTRAS[extra] if importlib.util.find_spec(m) is None]
    if missing:
        raise ConfigError(
            f"{what} needs the '{extra}' extra ({', '.join(missing)} not installed): "
            f"pip install 'streamworker[{extra}]'"
        )
