"""Redis I/O shared by the runtime and the strategies: clients by URL, stream replies, Lua scripts.

redis-py's connection errors are converted into :class:`~streamworker.errors.ConnectionLost` here,
so the loops above handle one exception type.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import redis
import redis.asyncio as aioredis
import redis.exceptions as rex

from streamworker.errors import ConfigError, ConnectionLost
from streamworker.settings import validate_redis_url

# redis-py raises these (or subclasses) when the server goes away or does not answer in time.
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    rex.ConnectionError,
    rex.TimeoutError,
    ConnectionError,
    TimeoutError,
    OSError,
)


def open_redis(url: str, *, socket_timeout_s: float | None = None) -> aioredis.Redis:
    """An asyncio redis-py client for ``url``; bytes replies, no connection made yet.

    ``engine://`` URLs resolve to streamworker's embedded engine; everything else to redis-py's own
    ``from_url``. ``socket_timeout_s`` must exceed the longest BLOCK the caller will use.
    """
    validate_redis_url(url)
    if url.startswith("engine:"):
        from streamworker.engine.inproc import async_client  # type: ignore[import-not-found,unused-ignore]

        client: aioredis.Redis = async_client(url)
        return client
    try:
        return aioredis.Redis.from_url(
            url,
            decode_responses=False,
            socket_timeout=socket_timeout_s,
            socket_connect_timeout=5.0,
            socket_keepalive=True,
            health_check_interval=30,
        )
    except ValueError as exc:
        raise ConfigError(f"invalid Redis URL {url!r}: {exc}") from None


def open_sync_redis(url: str, *, socket_timeout_s: float | None = 10.0) -> redis.Redis:
    """A sync redis-py client for ``url`` (bytes replies), for the operator commands."""
    validate_redis_url(url)
    if url.startswith("engine:"):
        from streamworker.engine.inproc import sync_client  # type: ignore[import-not-found,unused-ignore]

        client: redis.Redis = sync_client(url)
        return client
    try:
        return redis.Redis.from_url(
            url, decode_responses=False, socket_timeout=socket_timeout_s, socket_connect_timeout=5.0
        )
    except ValueError as exc:
        raise ConfigError(f"invalid Redis URL {url!r}: {exc}") from None


@contextlib.asynccontextmanager
async def connection_errors() -> AsyncIterator[None]:
    """Convert redis-py connection failures raised inside the block into ConnectionLost."""
    try:
        yield
    except rex.ResponseError:
        raise
    except CONNECTION_ERRORS as exc:
        raise ConnectionLost(f"{type(exc).__name__}: {exc}") from exc


@dataclass(frozen=True, slots=True)
class Entry:
    """One entry from a read: ``fields`` is None when the entry was deleted while pending."""

    id: bytes
    fields: dict[bytes, bytes] | None


def parse_read_reply(reply: Any, stream: bytes) -> list[Entry]:
    """Entries of ``stream`` from an XREAD/XREADGROUP reply, RESP2 or RESP3 shape, as redis-py parsed it.

    A null reply (nothing new) gives an empty list.
    """
    if not reply:
        return []
    if isinstance(reply, dict):  # RESP3: {stream: [entries]}
        items: Any = reply.get(stream)
        if items is None:
            items = reply.get(stream.decode("utf-8", "surrogateescape"), [])
        # redis-py's RESP3 callback wraps each stream's entries in one more list.
        if (
            len(items) == 1
            and isinstance(items[0], list)
            and (not items[0] or not isinstance(items[0][0], bytes))
        ):
            items = items[0]
    else:  # RESP2: [[stream, [entries]], ...]
        items = next((e for name, e in reply if name == stream), [])
    out: list[Entry] = []
    for item in items:
        entry_id, fields = item[0], item[1]
        if fields is not None and not isinstance(fields, dict):
            it = iter(fields)
            fields = dict(zip(it, it, strict=True))
        # A deleted entry comes back with a nil body, which redis-py turns into None or {}; a live
        # entry always has at least one field (XADD requires one).
        out.append(Entry(id=entry_id, fields=fields or None))
    return out


def _lua_source(name: str) -> str:
    return resources.files("streamworker.lua").joinpath(f"{name}.lua").read_text("utf-8")


class LuaScript:
    """A script from ``streamworker/lua/``: loaded once, called by EVALSHA, reloaded on NOSCRIPT."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.source = _lua_source(name)
        self.sha = hashlib.sha1(self.source.encode("utf-8")).hexdigest()

    async def __call__(
        self, client: aioredis.Redis, keys: Sequence[str | bytes], args: Sequence[str | bytes | int]
    ) -> Any:
        """Run the script; a server that lost its script cache (restart, SCRIPT FLUSH) gets it again."""
        async with connection_errors():
            try:
                return await client.evalsha(self.sha, len(keys), *keys, *args)
            except rex.NoScriptError:
                await client.script_load(self.source)
                return await client.evalsha(self.sha, len(keys), *keys, *args)
