"""``streamworker dashboard``: a web dashboard for streams, consumer groups, PELs and dead letters.

Needs the ``dashboard`` extra (Starlette, uvicorn, Jinja2). :func:`create_app` builds the ASGI app
from a :class:`DashboardConfig`; :mod:`.data` is the read side, :mod:`.actions` the write side,
:mod:`.security` the token, session and CSRF rules.
"""

from __future__ import annotations

from streamworker.dashboard.app import DashboardConfig, create_app

__all__ = ["DashboardConfig", "create_app"]
