"""streamworker: consume Redis Streams with effectively-once processing.

The public API::

    from streamworker import App, Message, Depends, Retry, DeadLetter, RateLimited, Effects
    from streamworker import Producer, SyncProducer  # publishing without an App

Everything else is importable from its module but not part of the stable surface.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from streamworker.errors import (
    ConfigError,
    ConnectionLost,
    DeadLetter,
    PermanentFailure,
    PublishError,
    RateLimited,
    ReplicaWaitTimeout,
    Retry,
    StreamworkerError,
    TargetError,
)
from streamworker.version import __version__

if TYPE_CHECKING:
    from streamworker.app import App, HandlerSpec
    from streamworker.core.deps import Depends
    from streamworker.core.effects import Effects
    from streamworker.core.message import Message
    from streamworker.producing.producer import Producer, Receipt, StreamOptions, SyncProducer
    from streamworker.settings import Settings

# The names whose modules bring in the runtime, redis-py and pydantic are imported when first
# used (PEP 562), so that a command that needs none of them (`streamworker engine serve`) and
# a program that imports one error class start without them.
_LAZY = {
    "App": "streamworker.app",
    "HandlerSpec": "streamworker.app",
    "Depends": "streamworker.core.deps",
    "Effects": "streamworker.core.effects",
    "Message": "streamworker.core.message",
    "Producer": "streamworker.producing.producer",
    "Receipt": "streamworker.producing.producer",
    "StreamOptions": "streamworker.producing.producer",
    "SyncProducer": "streamworker.producing.producer",
    "Settings": "streamworker.settings",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'streamworker' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "App",
    "ConfigError",
    "ConnectionLost",
    "DeadLetter",
    "Depends",
    "Effects",
    "HandlerSpec",
    "Message",
    "PermanentFailure",
    "Producer",
    "PublishError",
    "RateLimited",
    "Receipt",
    "ReplicaWaitTimeout",
    "Retry",
    "Settings",
    "StreamOptions",
    "StreamworkerError",
    "SyncProducer",
    "TargetError",
    "__version__",
]
