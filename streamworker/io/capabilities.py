"""What a server can do for the worker beyond Redis 7.0, asked once per server.

The answer comes from the server's own command table, never from its version string (forks,
managed services and the embedded engine report versions that say little): ``COMMAND INFO``
for whole commands (XNACK, XACKDEL, XCFGSET), ``COMMAND DOCS``'s ``arguments`` for options of
commands every server has (``CLAIM`` and ``MAXCOUNT`` on XREADGROUP, ``IDMP`` on XADD). A server
that cannot be asked (COMMAND renamed or denied, down at start-up, a reply lost) gets the 7.0
paths, which work everywhere. On Redis Cluster every node is asked, and a path is used only
when all of them have it (a key may live on any node).

The paths (:class:`ServerPaths`), and what each one replaces:

============  ==========================================  ======================================
path          when the server has it                      otherwise
============  ==========================================  ======================================
``claim``     ``XREADGROUP … CLAIM`` (Redis 8.4+): idle    XAUTOCLAIM by the reclaimer, on a
              entries of dead consumers ride in the       timer (kept on both paths, less often
              consume loop's ``>`` reads                  with CLAIM, for deleted entries)
``xnack``     ``XNACK`` (8.8+): a graceful stop hands     the XCLAIM emulation
              back what it did not start
``idmp``      ``XADD … IDMP`` and ``XCFGSET`` (8.6+):      the marker script
              keyed publishes (the producers ask too,
              :mod:`streamworker.producing.idmp`)
``ackdel``    ``XACKDEL`` (8.2+; Valkey 9.2+)             ``retention="acked"`` is refused
``read_caps`` ``MAXCOUNT``/``MAXSIZE`` on reads (8.10+)   (reported only)
============  ==========================================  ======================================
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import Any, cast

import redis.asyncio as aioredis
import redis.asyncio.cluster as aiocluster
import redis.exceptions as rex

from streamworker.errors import ConnectionLost
from streamworker.io.redisio import as_text, connection_errors, is_cluster_client

__all__ = [
    "ServerPaths",
    "option_tokens",
    "paths_from_replies",
    "probe_requests",
    "probe_server",
]

_COMMANDS = ("XNACK", "XACKDEL", "XDELEX", "XCFGSET")
_DOCUMENTED = ("XREADGROUP", "XADD")


@dataclass(frozen=True, slots=True)
class ServerPaths:
    """Which of the post-7.0 stream paths a server offers (all False: Redis 7.0's)."""

    claim: bool = False
    """``XREADGROUP … CLAIM min-idle-time``."""
    xnack: bool = False
    """``XNACK``."""
    idmp: bool = False
    """``XADD … IDMP pid iid`` with ``XCFGSET``."""
    ackdel: bool = False
    """``XACKDEL`` and ``XDELEX`` with ``KEEPREF|DELREF|ACKED``."""
    read_caps: bool = False
    """``MAXCOUNT`` and ``MAXSIZE`` on XREAD / XREADGROUP."""

    def both(self, other: ServerPaths) -> ServerPaths:
        """The paths both servers offer (Redis Cluster: every node must have a path)."""
        return ServerPaths(
            **{name: value and getattr(other, name) for name, value in asdict(self).items()}
        )

    def fields(self) -> dict[str, bool]:
        """As the ``server_paths`` log event's fields."""
        return asdict(self)


def _pairs(reply: Any) -> list[tuple[Any, Any]] | None:
    """A map reply's pairs: RESP3's dict, or RESP2's flat ``k1 v1 k2 v2`` list (None if
    neither)."""
    if isinstance(reply, Mapping):
        return list(reply.items())
    if isinstance(reply, list | tuple) and len(reply) % 2 == 0:
        return list(zip(reply[::2], reply[1::2], strict=True))
    return None


def _tokens(doc: Any) -> Iterator[str]:
    """Every ``token`` in a COMMAND DOCS entry's argument tree (RESP2 flat pairs or RESP3
    maps, nested blocks included)."""
    for key, value in _pairs(doc) or ():
        name = as_text(key, errors="replace") if isinstance(key, bytes | str) else ""
        if name == "token" and isinstance(value, bytes | str):
            yield as_text(value, errors="replace").upper()
        elif name == "arguments" and isinstance(value, list | tuple):
            for argument in value:
                yield from _tokens(argument)


def option_tokens(reply: Any) -> dict[str, set[str]]:
    """COMMAND DOCS's reply as command name -> the option tokens its arguments list."""
    return {
        as_text(name, errors="replace").upper(): set(_tokens(doc))
        for name, doc in _pairs(reply) or ()
    }


def paths_from_replies(info: Any, docs: Any) -> ServerPaths:
    """The paths, from the raw replies of ``COMMAND INFO XNACK XACKDEL XDELEX XCFGSET`` (one entry per
    name, nil for a command the server lacks) and ``COMMAND DOCS XREADGROUP XADD``. Pure."""
    rows = list(info) if isinstance(info, list | tuple) else []
    has = {name: i < len(rows) and bool(rows[i]) for i, name in enumerate(_COMMANDS)}
    tokens = option_tokens(docs)
    read = tokens.get("XREADGROUP", set())
    add = tokens.get("XADD", set())
    return ServerPaths(
        claim="CLAIM" in read,
        xnack=has["XNACK"],
        idmp="IDMP" in add and has["XCFGSET"],
        ackdel=has["XACKDEL"] and has["XDELEX"],
        read_caps="MAXCOUNT" in read,
    )


def probe_requests() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The two commands a probe sends (``execute_command`` arguments), whose raw replies
    :func:`paths_from_replies` reads: for callers that do their own I/O (the producers)."""
    # "COMMAND INFO" as one word: redis-py's COMMAND parsers fail on the nil of an unknown name,
    # and reshape DOCS; redis-py splits the word on the wire.
    return ("COMMAND INFO", *_COMMANDS), ("COMMAND DOCS", *_DOCUMENTED)


async def _ask(client: aioredis.Redis, **target: Any) -> ServerPaths:
    info_call, docs_call = probe_requests()
    info = await client.execute_command(*info_call, **target)  # type: ignore[no-untyped-call]
    docs = await client.execute_command(*docs_call, **target)  # type: ignore[no-untyped-call]
    return paths_from_replies(info, docs)


async def probe_server(client: aioredis.Redis) -> ServerPaths:
    """Ask the server (every node of a Redis Cluster) which paths it offers. Never raises for
    a server that cannot be asked: it gets :class:`ServerPaths` () (Redis 7.0's paths)."""
    try:
        async with connection_errors():
            if is_cluster_client(client):
                cluster = cast(aiocluster.RedisCluster, client)
                nodes = cluster.get_nodes()
                if not nodes:
                    return ServerPaths()
                found = [await _ask(client, target_nodes=node) for node in nodes]
                paths = found[0]
                for other in found[1:]:
                    paths = paths.both(other)
                return paths
            return await _ask(client)
    except (rex.ResponseError, ConnectionLost):
        return ServerPaths()
