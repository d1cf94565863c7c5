"""What every ``streamworker`` command shares: the rules about URLs and names every command
applies the same way (the parser itself is in :mod:`.parsing`).
"""

from __future__ import annotations

import redis

from streamworker.errors import ConfigError, ConnectionLost
from streamworker.io.redisio import as_text, open_sync_redis, redact_url

_IN_MEMORY_PREFIX = "engine://memory"


def is_in_memory_engine(url: str) -> bool:
    """True for ``engine://memory`` and ``engine://memory/NAME``: an engine that lives and dies
    with this process."""
    return url.lower().startswith(_IN_MEMORY_PREFIX)


def refuse_in_memory_engine(url: str, command: str) -> None:
    """ConfigError for ``command`` on an in-memory engine: it would start empty and take what it
    wrote with it when the process exits (an entry published there is gone at once)."""
    if is_in_memory_engine(url):
        raise ConfigError(
            f"{command} on {url}: an in-memory engine lives only in this process, so it starts "
            f"empty and what it writes is gone when the command exits; run `streamworker engine "
            f"serve` and use its redis:// URL, or share a data directory with engine:///DIR"
        )


def operator_client(url: str, command: str) -> redis.Redis:
    """A sync client for an operator command (``pending``, ``dlq``, ``produce``) on ``url``,
    checked with a PING: ConnectionLost in one line when the server cannot be reached,
    ConfigError for an in-memory engine (see :func:`refuse_in_memory_engine`)."""
    refuse_in_memory_engine(url, f"streamworker {command}")
    client = open_sync_redis(url)
    try:
        client.ping()
    except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
        raise ConnectionLost(f"cannot reach Redis at {redact_url(url)}: {exc}") from None
    return client


def require_group(client: redis.Redis, stream: str, group: str) -> None:
    """ConfigError naming what is missing when ``stream`` or its ``group`` does not exist."""
    try:
        groups = client.xinfo_groups(stream)
    except redis.ResponseError:
        if not client.exists(stream):
            raise ConfigError(f"stream {stream!r} does not exist") from None
        raise ConfigError(f"{stream!r} is not a stream") from None
    names = [as_text(g["name"], errors="replace") for g in groups]
    if group not in names:
        known = f" (its groups: {', '.join(sorted(names))})" if names else " (it has no groups)"
        raise ConfigError(f"stream {stream!r} has no group {group!r}{known}")
