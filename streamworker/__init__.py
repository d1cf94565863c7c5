"""streamworker: consume Redis Streams with effectively-once processing.

The public API::

    from streamworker import App, Message, Depends, Retry, DeadLetter, RateLimited, Effects
    from streamworker import Producer, SyncProducer  # publishing without an App

Everything else is importable from its module but not part of the stable surface.
"""

from __future__ import annotations

from streamworker.app import App, HandlerSpec
from streamworker.core.deps import Depends
from streamworker.core.effects import Effects
from streamworker.core.message import Message
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
from streamworker.producing.producer import Producer, Receipt, StreamOptions, SyncProducer
from streamworker.settings import Settings
from streamworker.version import __version__

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
