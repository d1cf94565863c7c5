"""Who may look and who may act: the token, sessions, CSRF tokens and the same-origin check.

With a token configured, every page needs a session, opened by posting the token to ``/login``;
the session cookie is HttpOnly and SameSite=Strict. Actions additionally need ``allow_actions``
and, in the posted form, the session's CSRF token; their Origin (or Referer) must be the
dashboard's own. Sessions live in memory: restarting the dashboard logs everyone out.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass
from urllib.parse import urlsplit

from streamworker.errors import ConfigError

SESSION_COOKIE = "sw_dashboard_session"
MAX_SESSIONS = 1000
SESSION_TTL_S = 12 * 3600.0


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) only accepts connections from this machine."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(bind: str, token: str | None, allow_actions: bool) -> None:
    """Refuse what cannot be safe: a non-loopback bind without a token; actions without a token."""
    if not is_loopback(bind) and not token:
        raise ConfigError(
            f"refusing to serve the dashboard on {bind} without a token: anyone who can reach "
            "it could read every stream; pass --token (or STREAMWORKER_DASHBOARD_TOKEN) or bind "
            "127.0.0.1"
        )
    if allow_actions and not token:
        raise ConfigError(
            "--allow-actions needs a token: pass --token (or set STREAMWORKER_DASHBOARD_TOKEN)"
        )
    if token is not None and len(token) < 8:
        raise ConfigError("the dashboard token must be at least 8 characters long")


@dataclass(frozen=True, slots=True)
class Session:
    """A logged-in browser: its CSRF token and when it was opened."""

    id: str
    csrf: str
    opened: float


class Sessions:
    """Sessions by id, in memory, oldest dropped beyond MAX_SESSIONS. Use from one event loop."""

    def __init__(self, ttl_s: float = SESSION_TTL_S) -> None:
        self._by_id: OrderedDict[str, Session] = OrderedDict()
        self._ttl_s = ttl_s

    def open(self) -> Session:
        """A new session with fresh random id and CSRF token."""
        session = Session(secrets.token_urlsafe(32), secrets.token_urlsafe(32), time.monotonic())
        self._by_id[session.id] = session
        while len(self._by_id) > MAX_SESSIONS:
            self._by_id.popitem(last=False)
        return session

    def get(self, session_id: str | None) -> Session | None:
        """The live session with this id, if any."""
        if not session_id:
            return None
        session = self._by_id.get(session_id)
        if session is None:
            return None
        if time.monotonic() - session.opened > self._ttl_s:
            del self._by_id[session_id]
            return None
        return session

    def close(self, session_id: str | None) -> None:
        """Forget a session (log out)."""
        if session_id:
            self._by_id.pop(session_id, None)


def token_matches(given: str | None, token: str) -> bool:
    """Constant-time comparison of a presented token."""
    return given is not None and hmac.compare_digest(given.encode(), token.encode())


def same_origin(origin: str | None, referer: str | None, scheme: str, host: str | None) -> bool:
    """Whether a POST comes from a page of this dashboard: its Origin (else its Referer) must be
    ``scheme://host``. A request with neither header is refused: browsers send Origin on POST."""
    if not host:
        return False
    expected = f"{scheme}://{host}".lower()
    if origin:
        return origin.lower() == expected
    if referer:
        parts = urlsplit(referer)
        return f"{parts.scheme}://{parts.netloc}".lower() == expected
    return False
