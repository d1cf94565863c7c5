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
from collections import OrderedDict, deque
from collections.abc import Callable
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


class LoginThrottle:
    """Login attempts per client address and in total, over a sliding ``window_s``.

    A wrong token already costs a second, but parallel attempts each wait their own second, so
    the delay alone does not bound the guessing rate. Attempts are counted when they arrive
    (before the token is compared), so a burst of parallel ones is counted whole: beyond
    ``per_client`` attempts from one address, or ``overall`` from everyone, within the window,
    further attempts are refused at once without looking at the token, until the oldest counted
    attempt leaves the window. A successful login clears its address's count. The overall limit
    means a flood from many addresses can lock everyone out for up to ``window_s``: a guessable
    token is the worse outcome. Memory is bounded: ``max_clients`` addresses (least recently
    seen forgotten first), each with at most ``per_client`` times. Use from one event loop.
    """

    def __init__(
        self,
        per_client: int = 10,
        overall: int = 60,
        window_s: float = 60.0,
        max_clients: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if per_client < 1 or overall < 1 or window_s <= 0:
            raise ConfigError("login throttle limits and window must be positive")
        self.per_client = per_client
        self.overall = overall
        self.window_s = window_s
        self.max_clients = max_clients
        self._clock = clock
        self._clients: OrderedDict[str, deque[float]] = OrderedDict()
        self._all: deque[float] = deque()

    def _trim(self, times: deque[float], now: float) -> None:
        while times and now - times[0] >= self.window_s:
            times.popleft()

    def admit(self, client: str | None) -> tuple[str, float] | None:
        """Count an attempt from ``client``; None when it may go on, else (which limit, seconds
        until an attempt is admitted again). A refused attempt is not counted."""
        now = self._clock()
        key = client or "?"
        self._trim(self._all, now)
        mine = self._clients.get(key)
        if mine is not None:
            self._trim(mine, now)
            if len(mine) >= self.per_client:
                return "client", self.window_s - (now - mine[0])
        if len(self._all) >= self.overall:
            return "overall", self.window_s - (now - self._all[0])
        if mine is None:
            mine = self._clients[key] = deque()
            while len(self._clients) > self.max_clients:
                self._clients.popitem(last=False)
        self._clients.move_to_end(key)
        mine.append(now)
        self._all.append(now)
        return None

    def succeeded(self, client: str | None) -> None:
        """Forget ``client``'s attempts (it knows the token)."""
        self._clients.pop(client or "?", None)
