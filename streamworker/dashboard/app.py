"""The dashboard's Starlette app: pages, actions, security headers, the background sampler.

:func:`create_app` is the factory; ``streamworker dashboard`` serves it with uvicorn.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
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
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Receive, Scope, Send

from streamworker.dashboard import actions, bulk, data, workers
from streamworker.dashboard.charts import Chart, time_chart
from streamworker.dashboard.history import DEFAULT_MAX_SERIES, UNKNOWN, History
from streamworker.dashboard.overview import Thresholds, overview
from streamworker.dashboard.security import (
    SESSION_COOKIE,
    LoginThrottle,
    Session,
    Sessions,
    check_bind,
    same_origin,
    token_matches,
)
from streamworker.errors import ConfigError, StreamworkerError
from streamworker.io.redisio import (
    CONNECTION_ERRORS,
    is_sentinel_url,
    open_redis,
    open_sync_redis,
    primary_watch,
    redact_url,
)
from streamworker.ops import pending

PARTIAL_HEADER = "x-dashboard-partial"
_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
_ACTIONS = (
    "replay",
    "purge",
    "claim",
    "delete-consumer",
    "bulk-replay",
    "bulk-purge",
    "job-stop",
    "job-resume",
)
_FORM_FIELDS = (
    "key",
    "id",
    "stream",
    "group",
    "consumer",
    "target",
    "min_idle_ms",
    "create_target",
    "error",
    "handler",
    "older_than_s",
    "newer_than_s",
    "expected",
    "job",
)
# How often the sampler re-lists the streams (SCAN) and reads the workers' records, in ticks.
_RESCAN_TICKS = 30
_WORKER_TICKS = 5

_REDIS_ERRORS: tuple[type[BaseException], ...] = (rex.RedisError, *CONNECTION_ERRORS)


@dataclass(frozen=True, slots=True)
class DashboardConfig:
    """How the dashboard runs. ``token`` guards every page when set; actions need
    ``allow_actions`` and a token. ``allowed_hosts`` is the Host header allow-list (DNS
    rebinding), None for any. ``sample_interval_s`` is the history's resolution (it keeps an
    hour of ``history_series`` (stream, group) series); ``login_*`` bound login attempts per
    client address and overall within ``login_window_s``."""

    redis_url: str
    bind: str = "127.0.0.1"
    token: str | None = None
    allow_actions: bool = False
    refresh_ms: int = 3000
    sample_interval_s: float = 1.0
    allowed_hosts: tuple[str, ...] | None = None
    thresholds: Thresholds = field(default_factory=Thresholds)
    history_series: int = DEFAULT_MAX_SERIES
    login_per_client: int = 10
    login_overall: int = 60
    login_window_s: float = 60.0
    bulk_page_pause_s: float = 0.0


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


def pending_chart(history: History, stream: str, group: str, minutes: int = 10) -> Chart:
    """Pending (left axis) and lag (right axis, a scale of its own) of one group over the last
    ``minutes``, from the first sample on: a PEL of 5 stays visible next to a lag of 50,000."""
    now = time.time()
    points = history.samples(stream, group, int(now) - minutes * 60, int(now))
    # The axis ends at the newest sample: the line reaches the right edge.
    t0 = points[0].second if points else now - 1
    t1 = max(points[-1].second if points else now, t0 + 1)
    return time_chart(
        f"pending and lag of {group}",
        "pending (entries)",
        [("pending", "pending", [(p.second, float(p.pending)) for p in points])],
        t0,
        t1,
        right=(
            "lag (entries)",
            [
                (
                    "lag (right axis)",
                    "lag",
                    [(p.second, None if p.lag == UNKNOWN else float(p.lag)) for p in points],
                )
            ],
        ),
    )


def rate_chart(history: History, stream: str, group: str | None, minutes: int) -> Chart:
    """Entries added to the stream, done by the group (acked, dead-lettered included) and
    dead-lettered, per second, over the last ``minutes`` (at most 300 points). Dead letters
    are counted per stream (its dead-letter stream's entries), so on a group's chart the line
    says it is the whole stream's."""
    now = int(time.time())
    rates = history.rates(stream, group, now - minutes * 60, now, buckets=300)
    t0 = rates[0].start if rates else now - 1
    t1 = max(rates[-1].end if rates else now, t0 + 1)
    dead = "dead-lettered" if group is None else "dead-lettered (whole stream, all groups)"
    return time_chart(
        f"throughput of {group or stream}",
        "entries/s",
        [
            ("added", "added", [(r.end, r.added) for r in rates]),
            ("done", "done", [(r.end, r.done) for r in rates]),
            (dead, "dead", [(r.end, r.dead) for r in rates]),
        ],
        t0,
        t1,
    )


class Dashboard:
    """The app's state: clients, sessions, flash notices, history. One per app."""

    def __init__(self, config: DashboardConfig) -> None:
        check_bind(config.bind, config.token, config.allow_actions)
        self.config = config
        self.client: aioredis.Redis | None = None
        self.sync_client: redis.Redis | None = None
        self.sessions = Sessions()
        self.notices: dict[str, list[str]] = {}
        self.history = History(config.history_series)
        self.workers = workers.WorkerMemory()
        self.jobs = bulk.BulkJobs(self.conn, config.bulk_page_pause_s)
        self.throttle = LoginThrottle(
            config.login_per_client, config.login_overall, config.login_window_s
        )
        self._streams: list[str] | None = None
        self._stopping = asyncio.Event()
        self.log = structlog.get_logger("streamworker.dashboard")
        env = jinja2.Environment(
            loader=jinja2.PackageLoader("streamworker.dashboard", "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )
        env.filters["age"] = fmt_age
        env.filters["bytes"] = fmt_bytes
        env.filters["rate"] = fmt_rate
        env.filters["since"] = fmt_since
        env.filters["utc"] = fmt_utc
        env.filters["val"] = data.show_value
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
        """The sync client the :mod:`streamworker.ops.dead_letters` functions take."""
        if self.sync_client is None:
            self.sync_client = open_sync_redis(self.config.redis_url)
        return self.sync_client

    def primary(self) -> str | None:
        """``host:port`` of the primary a Sentinel named to the dashboard's client last; None for
        other URLs (their address is in the URL shown) and before the first request."""
        if self.client is None or not is_sentinel_url(self.config.redis_url):
            return None
        watch = primary_watch(self.client)
        return watch.address if watch is not None else None

    async def close(self) -> None:
        """Stop the bulk jobs (resumable by running them again) and close the clients."""
        await self.jobs.close()
        if self.client is not None:
            await self.client.aclose()
            self.client = None
        if self.sync_client is not None:
            self.sync_client.close()
            self.sync_client = None

    async def sample_forever(self) -> None:
        """Sample every stream once per ``sample_interval_s`` (the history's resolution);
        re-list the streams every 30 ticks and read the workers' records every 5. Returns once
        :meth:`stop_sampling` is called (between samples)."""
        tick = 0
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self.config.sample_interval_s)
            if self._stopping.is_set():
                return
            try:
                await self.sample_all(
                    rescan=tick % _RESCAN_TICKS == 0, read_workers=tick % _WORKER_TICKS == 0
                )
            except _REDIS_ERRORS as exc:
                self.log.debug("dashboard_sample_failed", error=str(exc))
            tick += 1

    def stop_sampling(self) -> None:
        """Make :meth:`sample_forever` return after the sample it is taking."""
        self._stopping.set()

    async def stream_names(self, rescan: bool = False) -> list[str]:
        """The streams to sample (not the dead-letter streams), from the last SCAN."""
        if rescan or self._streams is None:
            names, _ = await data.list_stream_names(self.conn())
            self._streams = [n for n in names if not n.endswith(":dlq")]
        return self._streams

    async def sample_all(self, *, rescan: bool = True, read_workers: bool = True) -> None:
        """One sample of every stream, as many as the history keeps series for."""
        budget = self.history.max_series
        for stream in await self.stream_names(rescan):
            if budget <= 0:
                break
            try:
                budget -= await self.sample_stream(stream, read_workers=read_workers)
            except (data.NotFound, rex.ResponseError):
                continue

    async def sample_stream(self, stream: str, *, read_workers: bool = False) -> int:
        """Record one sample of ``stream``'s groups (or of the stream, without groups); returns
        how many series that is."""
        client = self.conn()
        try:
            info = await client.xinfo_stream(stream)
        except rex.ResponseError as exc:
            raise data.NotFound(f"no stream {stream!r}: {exc}") from None
        added = _counter(info, "entries-added")
        try:
            dead = _counter(await client.xinfo_stream(data.dlq_of(stream)), "entries-added")
        except rex.ResponseError:  # no dead letters yet
            dead = 0
        groups = await data.list_groups(client, stream)
        at = time.time()
        if not groups:
            self.history.record(stream, None, (added, UNKNOWN, dead, 0, UNKNOWN), at)
        for g in groups:
            done = UNKNOWN if g.entries_read is None else g.entries_read - g.pending
            lag = UNKNOWN if g.lag is None else g.lag
            self.history.record(stream, g.name, (added, done, dead, g.pending, lag), at)
            if read_workers:
                await workers.group_consumers(client, stream, g.name, self.workers)
        return max(1, len(groups))

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
            "primary": self.primary(),
            "now_ms": data.now_ms(),
            **context,
        }
        return self.templates.TemplateResponse(request, name, full, status_code=status_code)

    def notice(self, session: Session, text: str) -> None:
        """Show ``text`` on the session's next page."""
        self.notices.setdefault(session.id, []).append(text)


def _counter(info: Any, name: str) -> int:
    value = info.get(name) if isinstance(info, dict) else None
    return UNKNOWN if value is None else int(value)


def fmt_rate(value: float | None) -> str:
    """A per-second rate: a dash when unknown, one decimal below 10/s."""
    if value is None:
        return "\u2013"
    if value < 10:
        return f"{value:.1f}/s"
    return f"{value:,.0f}/s"


def fmt_utc(ms: int | float | None) -> str:
    """A unix time in milliseconds as ``2026-11-28 13:40:01 UTC``; a dash for none."""
    if not ms:
        return "\u2013"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000))


def fmt_since(ms: int | None) -> str:
    """How long ago the unix time ``ms`` (milliseconds) was: ``12.5s ago``; ``never`` for 0."""
    if not ms:
        return "never"
    return fmt_age(max(0, data.now_ms() - ms)) + " ago"


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
            except (ConfigError, ValueError) as exc:  # a bad threshold or filter in the query
                return dash.render(request, "error.html", {"message": str(exc)}, 400)
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
            # A stop flag, not a cancellation: redis-py can turn a cancellation inside a command
            # into a connection error, which the sampler would take for a failed sample.
            dash.stop_sampling()
            _, late = await asyncio.wait({sampler}, timeout=15)
            for task in late:
                task.cancel()
            await dash.close()

    middleware = [Middleware(_SecurityHeaders)]
    if config.allowed_hosts is not None:
        middleware.append(
            Middleware(TrustedHostMiddleware, allowed_hosts=list(config.allowed_hosts))
        )
    routes: list[BaseRoute] = [Route(path, page(handler)) for path, handler in _PAGES]
    routes += [
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


async def _overview_page(dash: Dashboard, request: Request) -> Response:
    thresholds = dash.config.thresholds.with_query(request.query_params)
    rows, cut = await overview(dash.conn(), dash.history, thresholds)
    return dash.render(
        request,
        "overview.html",
        {
            "rows": rows,
            "cut": cut,
            "t": thresholds,
            "custom": thresholds != dash.config.thresholds,
            "history_bytes": dash.history.memory_bytes,
        },
    )


async def _streams_page(dash: Dashboard, request: Request) -> Response:
    streams, cut = await data.list_streams(dash.conn())
    return dash.render(request, "streams.html", {"streams": streams, "cut": cut})


async def _workers_page(dash: Dashboard, request: Request) -> Response:
    client = dash.conn()
    states: list[workers.ConsumerState] = []
    live_by_group: dict[tuple[str, str], str] = {}
    for stream in await dash.stream_names(rescan=True):
        try:
            groups = await data.list_groups(client, stream)
        except data.NotFound:
            continue
        for g in groups:
            try:
                found = await workers.group_consumers(client, stream, g.name, dash.workers)
            except data.NotFound:
                continue
            states += found
            for c in found:
                if c.state == workers.LIVE:
                    live_by_group.setdefault((stream, g.name), c.consumer)
    return dash.render(
        request,
        "workers.html",
        {
            "procs": workers.processes(states),
            "others": workers.dead_or_unknown(states),
            "live_by_group": live_by_group,
        },
    )


_WINDOWS_MIN = (5, 15, 60)


async def _throughput_page(dash: Dashboard, request: Request) -> Response:
    name = _param(request, "stream")
    minutes = _int(request.query_params.get("minutes"), 15) or 15
    if minutes not in _WINDOWS_MIN:
        raise data.NotFound(f"minutes must be one of {', '.join(map(str, _WINDOWS_MIN))}")
    await dash.sample_stream(name)
    groups = await data.list_groups(dash.conn(), name)
    charts = [
        (
            g.name,
            rate_chart(dash.history, name, g.name, minutes),
            pending_chart(dash.history, name, g.name, minutes),
            dash.history.recent_rates(name, g.name),
        )
        for g in groups
    ]
    stream_only = None if groups else rate_chart(dash.history, name, None, minutes)
    return dash.render(
        request,
        "throughput.html",
        {
            "stream": name,
            "charts": charts,
            "stream_only": stream_only,
            "minutes": minutes,
            "windows": _WINDOWS_MIN,
            # The live view follows the history's resolution: the browser fetches fresh charts
            # once a second whatever --refresh-ms says for the other pages.
            "refresh_ms": min(dash.config.refresh_ms, 1000),
        },
    )


async def _stream_page(dash: Dashboard, request: Request) -> Response:
    name = _param(request, "stream")
    client = dash.conn()
    summary = await data.stream_summary(client, name)
    await dash.sample_stream(name)
    groups = await data.list_groups(client, name)
    charts = {g.name: pending_chart(dash.history, name, g.name) for g in groups}
    dlq = data.dlq_of(name)
    dlq_length = int(await client.xlen(dlq)) if await client.exists(dlq) else None
    return dash.render(
        request,
        "stream.html",
        {"s": summary, "groups": groups, "charts": charts, "dlq": dlq, "dlq_length": dlq_length},
    )


async def _jobs_page(dash: Dashboard, request: Request) -> Response:
    return dash.render(request, "jobs.html", {"jobs": dash.jobs.all()})


async def _job_page(dash: Dashboard, request: Request) -> Response:
    found = dash.jobs.get(_int(_param(request, "id")) or 0)
    if found is None:
        raise data.NotFound("no such job (jobs live in the dashboard's memory until it restarts)")
    again, exact = await bulk.dead_lettered_again(dash.conn(), found)
    return dash.render(request, "job.html", {"job": found, "again": again, "again_exact": exact})


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
        report = await asyncio.to_thread(pending.pending_report, dash.sync_conn(), stream, group)
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
    await dash.sample_stream(stream)
    return dash.render(
        request,
        "group.html",
        {
            "g": summary,
            "consumers": data.consumers_from_report(report),
            "pel": pel,
            "consumer": consumer,
            "chart": pending_chart(dash.history, stream, group),
        },
    )


async def _dlq_page(dash: Dashboard, request: Request) -> Response:
    key = _param(request, "key")
    client = dash.conn()
    await data.check_dead_letter_stream(client, key)
    flt = bulk.DeadLetterFilter.from_params(request.query_params)
    before = request.query_params.get("before")
    count = _int(request.query_params.get("count"))
    scanned = None
    if flt.active:
        page, scanned = await bulk.filtered_page(client, key, flt, before=before, count=count)
    else:
        page = await data.dead_letter_page(client, key, before=before, count=count)
    length = int(await client.xlen(key))
    summary = await bulk.summarize(client, key, flt)
    active = [j for j in dash.jobs.all() if j.dlq == key and j.active]
    stream = data.stream_of_dlq(key)
    return dash.render(
        request,
        "dlq.html",
        {
            "key": key,
            "page": page,
            "length": length,
            "flt": flt,
            "fp": flt.params(),
            "scanned": scanned,
            "summary": summary,
            "stream": stream if stream and await client.exists(stream) else None,
            "running": active[0] if active else None,
        },
    )


async def _dead_letter_page(dash: Dashboard, request: Request) -> Response:
    key = _param(request, "key")
    entry = await data.get_dead_letter(dash.conn(), key, _param(request, "id"))
    flt = bulk.DeadLetterFilter.from_params(request.query_params)
    return dash.render(request, "dead_letter.html", {"key": key, "d": entry, "fp": flt.params()})


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
        # The list's filter rides along, so the list comes back filtered after the action.
        context["fields"] = {
            "key": key,
            "id": entry_id,
            **bulk.DeadLetterFilter.from_params(q).params(),
        }
    elif action in ("bulk-replay", "bulk-purge"):
        key = _param(request, "key")
        await data.check_dead_letter_stream(dash.conn(), key)
        flt = bulk.DeadLetterFilter.from_params(q)
        matched, partial = await bulk.count_matching(dash.conn(), key, flt)
        context.update(matched=matched, partial=partial, flt=flt)
        context["fields"] = {"key": key, **flt.params(), "expected": str(matched)}
    elif action in ("job-stop", "job-resume"):
        raise data.NotFound("stop and resume a job from its page")
    else:
        stream, group, consumer = (
            _param(request, "stream"),
            _param(request, "group"),
            _param(request, "consumer"),
        )
        await data.get_group(dash.conn(), stream, group)
        context["fields"] = {"stream": stream, "group": group, "consumer": consumer}
        if action == "claim":
            target = (q.get("target") or "").strip()
            # The last records the dashboard saw, the source's first: a dead worker's record
            # is gone from Redis, but its handler's claim_idle_ms is still the one to use.
            seen = dash.workers.recall(stream, group, consumer)
            remembered = [seen.beat] if seen is not None else []
            remembered += [s.beat for s in dash.workers.of_group(stream, group)]
            known = next((b.claim_idle_ms for b in remembered if b.claim_idle_ms), None)
            try:
                preview = await actions.claim_preview(
                    dash.conn(),
                    stream,
                    group,
                    consumer,
                    target,
                    _int(q.get("min_idle_ms")),
                    known,
                )
            except actions.ActionFailed as exc:
                raise data.NotFound(str(exc)) from None
            context.update(target=target, preview=preview)
            # What is confirmed is what was counted: the target and the minimum idle time.
            context["fields"].update(target=target, min_idle_ms=str(preview.min_idle_ms))
    context["back"] = _back(action, context["fields"])
    return dash.render(request, "confirm.html", context)


# The pages (GET): each path and the function that makes its page; create_app wraps each one in the
# login check and the error pages (page()).
_PAGES: tuple[tuple[str, Handler], ...] = (
    ("/", _overview_page),
    ("/streams", _streams_page),
    ("/workers", _workers_page),
    ("/throughput", _throughput_page),
    ("/jobs", _jobs_page),
    ("/job", _job_page),
    ("/stream", _stream_page),
    ("/entries", _entries_page),
    ("/entry", _entry_page),
    ("/group", _group_page),
    ("/dlq", _dlq_page),
    ("/dead-letter", _dead_letter_page),
    ("/confirm", _confirm_page),
)


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
            outcome, back = await _perform(dash, action, fields, client_host)
        except CONNECTION_ERRORS as exc:
            dash.log.warning(
                "dashboard_action_failed",
                action=action,
                error=str(exc),
                client=client_host,
                **fields,
            )
            return PlainTextResponse(f"cannot reach Redis: {exc}\n", status_code=503)
        except (actions.ActionFailed, data.NotFound, StreamworkerError, ValueError) as exc:
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
    if action in ("replay", "purge", "bulk-replay", "bulk-purge"):
        flt = {k: fields.get(k) for k in ("error", "handler", "older_than_s", "newer_than_s")}
        return link("/dlq", key=fields.get("key"), **flt)
    if action in ("job-stop", "job-resume"):
        return link("/job", id=fields.get("job"))
    if fields.get("stream") and fields.get("group"):
        return link("/group", stream=fields["stream"], group=fields["group"])
    return "/"


async def _perform(
    dash: Dashboard, action: str, fields: dict[str, str], client_host: str | None
) -> tuple[str, str]:
    back = _back(action, fields)
    if action in ("bulk-replay", "bulk-purge"):
        (key,) = _need(fields, "key")
        # Never trust the form: the key must hold dead letters (the job skips any entry that
        # is not one, and its purge checks each entry again in the deleting script).
        await data.check_dead_letter_stream(dash.conn(), key)
        flt = bulk.DeadLetterFilter.from_params(fields)
        expected = _int(fields.get("expected"), 0) or 0
        kind = action.removeprefix("bulk-")
        started = dash.jobs.start(kind, key, flt, expected, client_host)
        return (
            f"started job {started.id}: {kind} of the {expected} dead letters of {key} "
            f"matching {flt.describe()}",
            link("/job", id=started.id),
        )
    if action in ("job-stop", "job-resume"):
        (job_id,) = _need(fields, "job")
        job = dash.jobs.get(_int(job_id) or 0)
        if job is None:
            raise data.NotFound(f"no job {job_id}")
        if action == "job-stop":
            dash.jobs.stop(job)
            return f"job {job.id} stops after the dead letter it is on", back
        dash.jobs.resume(job)
        return f"job {job.id} resumed after {job.cursor or 'the start'}", back
    if action == "replay":
        key, entry_id = _need(fields, "key", "id")
        return await actions.replay_dead_letter(dash.sync_conn(), key, entry_id), back
    if action == "purge":
        key, entry_id = _need(fields, "key", "id")
        return await actions.purge_dead_letter(dash.conn(), key, entry_id), back
    stream, group, consumer = _need(fields, "stream", "group", "consumer")
    if action == "claim":
        min_idle = _int(fields.get("min_idle_ms"), 0) or 0
        if min_idle < 0:
            raise actions.ActionFailed("min idle time must be 0 or more")
        outcome = await actions.claim_entries(
            dash.conn(),
            stream,
            group,
            consumer,
            fields.get("target", "").strip(),
            min_idle,
            create_target=fields.get("create_target") == "yes",
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
        refused = dash.throttle.admit(client_host)
        if refused is not None:
            limit, retry_s = refused
            retry = max(1, int(retry_s + 0.999))
            dash.log.warning(
                "dashboard_login_throttled", limit=limit, retry_after_s=retry, client=client_host
            )
            response = dash.render(
                request,
                "login.html",
                {"next": next_url, "error": f"too many login attempts: try again in {retry} s"},
                429,
            )
            response.headers["retry-after"] = str(retry)
            return response
        given = form.get("token")
        if not isinstance(given, str) or not token_matches(given, token):
            dash.log.warning("dashboard_login_refused", reason="wrong token", client=client_host)
            # A wrong guess costs a second: no fast brute force over the network.
            await asyncio.sleep(1.0)
            return dash.render(
                request, "login.html", {"next": next_url, "error": "wrong token"}, 403
            )
        dash.throttle.succeeded(client_host)
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
