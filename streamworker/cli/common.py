"""What every ``streamworker`` command shares: the parser class that gives each subcommand its
own usage on a bad flag, and the rules about URLs and names every command applies the same way.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import redis

from streamworker.errors import ConfigError, ConnectionLost
from streamworker.io.redisio import as_text, open_sync_redis, redact_url


class CommandParser(argparse.ArgumentParser):
    """An ArgumentParser that refuses arguments it does not know itself, subcommands included.

    argparse hands a subcommand's unknown arguments back to the top-level parser, which then
    prints the top-level usage ("streamworker [-h] COMMAND ...") for a flag mistyped after
    ``run``. Here the (sub)command that was given them says so, with its own usage (exit 2).
    Subparsers made from one of these are of this class too (argparse's default).
    """

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras


def unknown_before_command(parser: argparse.ArgumentParser, argv: Sequence[str]) -> list[str]:
    """The options in ``argv`` before its first word that ``parser`` (the top level) does not
    know: ``streamworker --bogus`` is told about ``--bogus``, not only that a COMMAND is
    missing."""
    known = {opt for action in parser._actions for opt in action.option_strings}
    unknown: list[str] = []
    for word in argv:
        if not word.startswith("-"):
            break
        if word.split("=", 1)[0] not in known:
            unknown.append(word)
    return unknown


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
