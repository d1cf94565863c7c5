"""The dashboard's Starlette app: pages, actions, security headers, the background sampler.

:func:`create_app` is the factory; ``streamworker dashboard`` serves it with uvicorn.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import jinja2
import redis
import redis.asyncio as aioredis
import redis.exceptions as rex
import structlog
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Receive, Scope, Send

from streamworker import admin
from streamworker.dashboard import actions, data
from streamworker.dashboard.security import (
    SESSION_COOKIE,
    Session,
    Sessions,
    check_bind,
    same_origin,
    token_matches,
)
from streamworker.errors import StreamworkerError
from streamworker.redisio import CONNECTION_ERRORS, open_redis, open_sync_redis

PARTIAL_HEADER = "x-dashboard-partial"
_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
_ACTIONS = ("replay", "purge", "claim", "delete-consumer")
_FORM_FIELDS = ("key", "id", "stream", "group", "consumer", "target", "min_idle_ms")


@dataclass(frozen=True, slots=True)
class DashboardConfig:
    """How the dashboard runs. ``token`` guards every page when set; actions need
    ``allow_actions`` and a token. ``allowed_hosts`` is the Host header allow-list (DNS
    rebinding), None for any."""

    redis_url: str
    bind: str = "127.0.0.1"
    token: str | None = None
    allow_actions: bool = False
    refresh_ms: int = 3000
    sample_interval_s: float = 5.0
    allowed_hosts: tuple[str, ...] | None = None


class _SecurityHeaders:
    """Adds CSP, frame and sniffing protections to every response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [
                    (b"content-security-policy", _CSP.encode()),
                    (b"x-frame-options", b"DENY"),
                    (b"x-content-type-options", b"nosniff"),
                    (b"referrer-policy", b"same-origin"),
                    (b"cache-control", b"no-store"),
                ]
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, with_headers)


def fmt_age(ms: int | None) -> str:
    """Milliseconds as a short duration (``850ms``, ``12.5s``, ``3.0m``, ``1.2h``, ``2.0d``)."""
    if ms is None:
        return "\u2013"
    if ms < 1000:
        return f"{ms}ms"
    seconds = ms / 1000
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.1f}s"


def fmt_bytes(n: int | None) -> str:
    """A byte count in B/KiB/MiB/GiB."""
    if n is None:
        return "\u2013"
    size = float(n)
    for unit in ("B", "KiB", "MiB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


def link(path: str, **params: Any) -> str:
    """``path`` with the non-empty ``params`` as a query string."""
    query = {k: v for k, v in params.items() if v is not None and v != ""}
    return f"{path}?{urlencode(query)}" if query else path


def chart(
    series: list[tuple[float, int, int | None]], width: int = 560, height: int = 140
) -> dict[str, Any]:
    """Polyline points for pending and lag over time, scaled into a ``width`` x ``height`` box
    (the left margin holds the scale's labels)."""
    left, pad = 34, 6
    empty = {"width": width, "height": height, "left": left, "pad": pad, "top_y": pad}
    if not series:
        return {
            **empty,
            "pending": "",
            "lag": "",
            "last": None,
            "max": 0,
            "span_s": 0,
            "samples": 0,
        }
    t0, t1 = series[0][0], series[-1][0]
    span = max(t1 - t0, 1.0)
    top = max([max(p, lag or 0) for _, p, lag in series] + [1])
    scale = 10 ** math.floor(math.log10(top))
    top = math.ceil(top / scale) * scale

    def xy(t: float, v: int) -> tuple[float, float]:
        x = left + (t - t0) / span * (width - left - pad)
        y = height - pad - v / top * (height - 2 * pad)
        return round(x, 1), round(y, 1)

    def points(values: list[tuple[float, int]]) -> str:
        return " ".join("{},{}".format(*xy(t, v)) for t, v in values)

    last_t, last_pending, _ = series[-1]
    return {
        **empty,
        "pending": points([(t, p) for t, p, _ in series]),
        "lag": points([(t, lag) for t, _, lag in series if lag is not None]),
        "last": xy(last_t, last_pending),
        "max": top,
        "span_s": round(t1 - t0),
        "samples": len(series),
    }


class Dashboard:
    """The app's state: clients, sessions, flash notices, history. One per app."""

    def __init__(self, config: DashboardConfig) -> None:
        check_bind(config.bind, config.token, config.allow_actions)
        self.config = config
        self.client: aioredis.Redis | None = None
        self.sync_client: redis.Redis | None = None
        self.sessions = Sessions()
        self.notices: dict[str, list[str]] = {}
        self.history = data.History()
        self.log = structlog.get_logger("streamworker.dashboard")
        env = jinja2.Environment(
            loader=jinja2.PackageLoader("streamworker.dashboard", "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )
        env.filters["age"] = fmt_age
        env.filters["bytes"] = fmt_bytes
        env.globals["link"] = link
        self.templates = Jinja2Templates(env=env)

    @property
    def actions_enabled(self) -> bool:
        """Whether this dashboard may change anything."""
        return self.config.allow_actions and bool(self.config.token)

    def conn(self) -> aioredis.Redis:
        """The asyncio client (opened on first use, in the serving loop)."""
        if self.client is None:
            self.client = open_redis(self.config.redis_url, socket_timeout_s=10.0)
        return self.client

    def sync_conn(self) -> redis.Redis:
        """The sync client the :mod:`streamworker.admin` functions take."""
        if self.sync_client is None:
            self.sync_client = open_sync_redis(self.config.redis_url)
        return self.sync_client

    async def close(self) -> None:
        """Close the clients."""
        if self.client is not None:
            await self.client.aclose()
            self.client = None
        if self.sync_client is not None:
            self.sync_client.close()
            self.sync_client = None

    async def sample_forever(self) -> None:
        """Record the groups of recently viewed streams every ``sample_interval_s``."""
        while True:
            await asyncio.sleep(self.config.sample_interval_s)
            for stream in self.history.watched_streams():
                try:
                    self.history.record(await data.list_groups(self.conn(), stream))
                except (data.NotFound, rex.ResponseError):
                    continue
                except CONNECTION_ERRORS:
                    continue

    # --- requests ------------------------------------------------------------------------------

    def session(self, request: Request) -> Session | None:
        """The request's session (None without one)."""
        return self.sessions.get(request.cookies.get(SESSION_COOKIE))

    def render(
        self, request: Request, name: str, context: dict[str, Any], status_code: int = 200
    ) -> Response:
        """Render a page (or only its live part, for the refresh script)."""
        session = self.session(request)
        partial = request.headers.get(PARTIAL_HEADER) == "1"
        # Notices show on the next full page; a refresh in between must not swallow them.
        notices = self.notices.pop(session.id, []) if session and not partial else []
        full = {
            "partial": partial,
            "session": session,
            "login_required": bool(self.config.token),
            "actions": self.actions_enabled and session is not None,
            "refresh_ms": self.config.refresh_ms,
            "notices": notices,
            "redis_url": redact_url(self.config.redis_url),
            **context,
        }
        return self.templates.TemplateResponse(request, name, full, status_code=status_code)

    def notice(self, session: Session, text: str) -> None:
        """Show ``text`` on the session's next page."""
        self.notices.setdefault(session.id, []).append(text)


def redact_url(url: str) -> str:
    """``url`` with its password, if any, replaced by ``***`` (for pages and logs)."""
    if "@" not in url or "://" not in url:
        return url
    scheme, rest = url.split("://", 1)
    creds, host = rest.rsplit("@", 1)
    user = creds.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}" if ":" in creds else url


def _int(value: str | None, default: int | None = None) -> int | None:
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise data.NotFound(f"not a number: {value!r}") from None


def _param(request: Request, name: str) -> str:
    value = request.query_params.get(name)
    if not value:
        raise data.NotFound(f"missing parameter {name!r}")
    return value


def _local_next(value: str | None) -> str:
    # Only paths on this site: "//evil.example" and "https://…" would leave it.
    if value and value.startswith("/") and not value.startswith("//") and "\\" not in value:
        return value
    return "/"


Handler = Callable[[Dashboard, Request], Awaitable[Response]]


def create_app(config: DashboardConfig) -> Starlette:
    """The dashboard as an ASGI app. Raises ConfigError for an unsafe configuration."""
    dash = Dashboard(config)

    def page(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            if config.token and dash.session(request) is None:
                target = link("/login", next=request.url.path + _query(request))
                return RedirectResponse(target, status_code=303)
            try:
                return await handler(dash, request)
            except data.NotFound as exc:
                return dash.render(request, "error.html", {"message": str(exc)}, 404)
            except rex.ResponseError as exc:  # e.g. WRONGTYPE: a key that is not a stream
                return dash.render(request, "error.html", {"message": f"Redis said: {exc}"}, 400)
            except CONNECTION_ERRORS as exc:
                return dash.render(
                    request,
                    "error.html",
                    {"message": f"cannot reach Redis: {type(exc).__name__}: {exc}"},
                    503,
                )

        return endpoint

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        sampler = asyncio.create_task(dash.sample_forever())
        try:
            yield
        finally:
            sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sampler
            await dash.close()

    middleware = [Middleware(_SecurityHeaders)]
    if config.allowed_hosts is not None:
        middleware.append(
            Middleware(TrustedHostMiddleware, allowed_hosts=list(config.allowed_hosts))
        )
    routes = [
        Route("/", page(_streams_page)),
        Route("/stream", page(_stream_page)),
        Route("/entries", page(_entries_page)),
        Route("/entry", page(_entry_page)),
        Route("/group", page(_group_page)),
        Route("/dlq", page(_dlq_page)),
        Route("/dead-letter", page(_dead_letter_page)),
        Route("/confirm", page(_confirm_page)),
        Route("/actions/{action}", _action_endpoint(dash), methods=["POST"]),
        Route("/login", _login_endpoint(dash), methods=["GET", "POST"]),
        Route("/logout", _logout_endpoint(dash), methods=["POST"]),
        Mount("/static", StaticFiles(packages=[("streamworker.dashboard", "static")])),
    ]
    app = Starlette(routes=routes, middleware=middleware, lifespan=lifespan)
    app.state.dashboard = dash
    return app


def _query(request: Request) -> str:
    return f"?{request.url.query}" if request.url.query else ""


# --- pages -------------------------------------------------------------------------------------


async def _streams_page(dash: Dashboard, request: Request) -> Response:
    streams, cut = await data.list_streams(dash.conn())
    return dash.render(request, "streams.html", {"streams": streams, "cut": cut})


async def _stream_page(dash: Dashboard, request: Request) -> Response:
    name = _param(request, "stream")
    client = dash.conn()
    summary = await data.stream_summary(client, name)
    groups = await data.list_groups(client, name)
    dash.history.watch(name)
    dash.history.record(groups)
    charts = {g.name: chart(dash.history.series(name, g.name)) for g in groups}
    dlq = data.dlq_of(name)
    dlq_length = int(await client.xlen(dlq)) if await client.exists(dlq) else None
    return dash.render(
        request,
        "stream.html",
        {"s": summary, "groups": groups, "charts": charts, "dlq": dlq, "dlq_length": dlq_length},
    )


async def _entries_page(dash: Dashboard, request: Request) -> Response:
    name = _param(request, "stream")
    page = await data.entries_page(
        dash.conn(),
        name,
        before=request.query_params.get("before"),
        count=_int(request.query_params.get("count")),
    )
    return dash.render(request, "entries.html", {"stream": name, "page": page})


async def _entry_page(dash: Dashboard, request: Request) -> Response:
    name = _param(request, "stream")
    entry = await data.get_entry(dash.conn(), name, _param(request, "id"))
    return dash.render(request, "entry.html", {"stream": name, "entry": entry})


async def _group_page(dash: Dashboard, request: Request) -> Response:
    stream = _param(request, "stream")
    group = _param(request, "group")
    client = dash.conn()
    summary = await data.get_group(client, stream, group)
    try:
        report = await asyncio.to_thread(admin.pending_report, dash.sync_conn(), stream, group)
    except StreamworkerError as exc:
        raise data.NotFound(str(exc)) from None
    consumer = request.query_params.get("consumer") or None
    pel = await data.pending_page(
        client,
        stream,
        group,
        after=request.query_params.get("after"),
        count=_int(request.query_params.get("count")),
        consumer=consumer,
    )
    dash.history.watch(stream)
    dash.history.record([summary])
    return dash.render(
        request,
        "group.html",
        {
            "g": summary,
            "consumers": data.consumers_from_report(report),
            "pel": pel,
            "consumer": consumer,
            "chart": chart(dash.history.series(stream, group)),
        },
    )


async def _dlq_page(dash: Dashboard, request: Request) -> Response:
    key = _param(request, "key")
    page = await data.dead_letter_page(
        dash.conn(),
        key,
        before=request.query_params.get("before"),
        count=_int(request.query_params.get("count")),
    )
    length = int(await dash.conn().xlen(key))
    return dash.render(request, "dlq.html", {"key": key, "page": page, "length": length})


async def _dead_letter_page(dash: Dashboard, request: Request) -> Response:
    key = _param(request, "key")
    entry = await data.get_dead_letter(dash.conn(), key, _param(request, "id"))
    return dash.render(request, "dead_letter.html", {"key": key, "d": entry})


async def _confirm_page(dash: Dashboard, request: Request) -> Response:
    action = _param(request, "action")
    if action not in _ACTIONS:
        raise data.NotFound(f"no action {action!r}")
    if not dash.actions_enabled:
        return dash.render(
            request,
            "error.html",
            {"message": "actions are off: start the dashboard with --allow-actions and a token"},
            403,
        )
    q = request.query_params
    context: dict[str, Any] = {"action": action, "fields": {}}
    if action in ("replay", "purge"):
        key, entry_id = _param(request, "key"), _param(request, "id")
        context["d"] = await data.get_dead_letter(dash.conn(), key, entry_id)
        context["fields"] = {"key": key, "id": entry_id}
    else:
        stream, group, consumer = (
            _param(request, "stream"),
            _param(request, "group"),
            _param(request, "consumer"),
        )
        await data.get_group(dash.conn(), stream, group)
        context["fields"] = {"stream": stream, "group": group, "consumer": consumer}
        if action == "claim":
            context["target"] = q.get("target", "")
            context["min_idle_ms"] = _int(q.get("min_idle_ms"), 0)
    context["back"] = _back(action, context["fields"])
    return dash.render(request, "confirm.html", context)


# --- actions and login -------------------------------------------------------------------------


def _action_endpoint(dash: Dashboard) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        action = request.path_params["action"]
        client_host = request.client.host if request.client else None
        form = await request.form()
        # Only the known fields, cut short: they go into the log as keys of their own.
        fields = {k: str(v)[:300] for k, v in form.items() if k in _FORM_FIELDS}

        def refuse(status: int, reason: str) -> Response:
            dash.log.warning(
                "dashboard_action_refused",
                action=action,
                reason=reason,
                client=client_host,
                **fields,
            )
            return PlainTextResponse(f"refused: {reason}\n", status_code=status)

        if not dash.actions_enabled:
            return refuse(403, "actions are off (start with --allow-actions and a token)")
        if action not in _ACTIONS:
            return refuse(404, f"no action {action!r}")
        session = dash.session(request)
        if session is None:
            return refuse(403, "not logged in: no valid session token")
        if not same_origin(
            request.headers.get("origin"),
            request.headers.get("referer"),
            request.url.scheme,
            request.headers.get("host"),
        ):
            return refuse(403, "cross-site request (Origin/Referer is not this dashboard)")
        csrf = form.get("csrf")
        if not isinstance(csrf, str) or not token_matches(csrf, session.csrf):
            return refuse(403, "missing or wrong CSRF token")
        if form.get("confirm") != "yes":
            return refuse(400, "not confirmed")
        try:
            outcome, back = await _perform(dash, action, fields)
        except CONNECTION_ERRORS as exc:
            dash.log.warning(
                "dashboard_action_failed",
                action=action,
                error=str(exc),
                client=client_host,
                **fields,
            )
            return PlainTextResponse(f"cannot reach Redis: {exc}\n", status_code=503)
        except (actions.ActionFailed, data.NotFound) as exc:
            dash.log.warning(
                "dashboard_action_failed",
                action=action,
                error=str(exc),
                client=client_host,
                **fields,
            )
            dash.notice(session, str(exc))
            return RedirectResponse(_back(action, fields), status_code=303)
        dash.log.info(
            "dashboard_action_done", action=action, outcome=outcome, client=client_host, **fields
        )
        dash.notice(session, outcome)
        return RedirectResponse(back, status_code=303)

    return endpoint


def _need(fields: dict[str, str], *names: str) -> list[str]:
    missing = [n for n in names if not fields.get(n)]
    if missing:
        raise data.NotFound(f"missing form field(s): {', '.join(missing)}")
    return [fields[n] for n in names]


def _back(action: str, fields: dict[str, str]) -> str:
    if action in ("replay", "purge"):
        return link("/dlq", key=fields.get("key"))
    if fields.get("stream") and fields.get("group"):
        return link("/group", stream=fields["stream"], group=fields["group"])
    return "/"


async def _perform(dash: Dashboard, action: str, fields: dict[str, str]) -> tuple[str, str]:
    back = _back(action, fields)
    if action == "replay":
        key, entry_id = _need(fields, "key", "id")
        return await actions.replay_dead_letter(dash.sync_conn(), key, entry_id), back
    if action == "purge":
        key, entry_id = _need(fields, "key", "id")
        return await actions.purge_dead_letter(dash.sync_conn(), key, entry_id), back
    stream, group, consumer = _need(fields, "stream", "group", "consumer")
    if action == "claim":
        min_idle = _int(fields.get("min_idle_ms"), 0) or 0
        if min_idle < 0:
            raise actions.ActionFailed("min idle time must be 0 or more")
        outcome = await actions.claim_entries(
            dash.conn(), stream, group, consumer, fields.get("target", "").strip(), min_idle
        )
        return outcome, back
    return await actions.delete_consumer(dash.conn(), stream, group, consumer), back


def _login_endpoint(dash: Dashboard) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        token = dash.config.token
        next_url = _local_next(request.query_params.get("next"))
        if token is None:
            return RedirectResponse("/", status_code=303)
        if request.method == "GET":
            return dash.render(request, "login.html", {"next": next_url, "error": None})
        form = await request.form()
        next_url = _local_next(str(form.get("next") or "/"))
        client_host = request.client.host if request.client else None
        if not same_origin(
            request.headers.get("origin"),
            request.headers.get("referer"),
            request.url.scheme,
            request.headers.get("host"),
        ):
            dash.log.warning("dashboard_login_refused", reason="cross-site", client=client_host)
            return PlainTextResponse("refused: cross-site login\n", status_code=403)
        given = form.get("token")
        if not isinstance(given, str) or not token_matches(given, token):
            dash.log.warning("dashboard_login_refused", reason="wrong token", client=client_host)
            # A wrong guess costs a second: no fast brute force over the network.
            await asyncio.sleep(1.0)
            return dash.render(
                request, "login.html", {"next": next_url, "error": "wrong token"}, 403
            )
        session = dash.sessions.open()
        dash.log.info("dashboard_login_succeeded", client=client_host)
        response = RedirectResponse(next_url, status_code=303)
        response.set_cookie(
            SESSION_COOKIE,
            session.id,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            path="/",
        )
        return response

    return endpoint


def _logout_endpoint(dash: Dashboard) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        if same_origin(
            request.headers.get("origin"),
            request.headers.get("referer"),
            request.url.scheme,
            request.headers.get("host"),
        ):
            dash.sessions.close(request.cookies.get(SESSION_COOKIE))
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(SESSION_COOKIE, path="/")
        return response

    return endpoint
