"""The ``streamworker`` command: the composition root (flags -> Settings -> objects).

One module per command family (:mod:`.run`, :mod:`.sql`, :mod:`.pending_dlq`, :mod:`.engine`,
:mod:`.archive`, :mod:`.backfill`, :mod:`.dashboard`, :mod:`.produce`); this one builds the
top-level parser, importing only the module of the command given, and turns errors into exit
codes.

Errors a user can fix (bad target, bad URL, unreachable Redis) print one line and exit non-zero:
2 for a command line or configuration that cannot work, 1 for a failure at run time. One rule
for every command: an unknown flag gets that (sub)command's usage and the error, exit 2; a
stream or group that does not exist gets one line naming it, exit 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import NamedTuple

from streamworker import __version__
from streamworker.cli.parsing import CommandParser, unknown_before_command
from streamworker.errors import ConfigError, StreamworkerError

__all__ = ["EXIT_CONFIG", "EXIT_RUNTIME", "build_parser", "main"]

EXIT_RUNTIME = 1
EXIT_CONFIG = 2


class _Entry(NamedTuple):
    module: str  # the module that defines the command
    arguments: str  # its function that adds the command's arguments to an empty subparser
    summary: str  # the line `streamworker --help` shows


# Every command, in the order of `streamworker --help`. Only the module of the command given is
# imported (`streamworker engine serve` starts without the worker runtime, redis-py or
# pydantic); the top-level help and a word that is not a command import none of them.
# tests/unit/test_cli_commands.py builds each one.
_COMMANDS: dict[str, _Entry] = {
    "run": _Entry(
        "streamworker.cli.run", "run_arguments", "run an App's handlers until SIGTERM/SIGINT"
    ),
    "migrate": _Entry(
        "streamworker.cli.sql",
        "migrate_arguments",
        "create or upgrade the tables of idempotency='sql' in a database",
    ),
    "prune": _Entry(
        "streamworker.cli.sql",
        "prune_arguments",
        "delete processed rows whose messages can no longer be redelivered",
    ),
    "pending": _Entry(
        "streamworker.cli.pending_dlq",
        "pending_arguments",
        "show a group's pending entries per consumer, with the oldest entry's age",
    ),
    "dlq": _Entry(
        "streamworker.cli.pending_dlq",
        "dlq_arguments",
        "list, show, replay or purge dead letters",
    ),
    "engine": _Entry(
        "streamworker.cli.engine",
        "engine_arguments",
        "the embedded Redis 7.0-compatible stream engine",
    ),
    "archive": _Entry(
        "streamworker.cli.archive",
        "archive_arguments",
        "archive a stream to Parquet on Spark (then --trim what everyone is done with)",
    ),
    "backfill": _Entry(
        "streamworker.cli.backfill",
        "backfill_arguments",
        "run an idempotency='sql' handler over a stream's entries on Spark, exactly once",
    ),
    "dashboard": _Entry(
        "streamworker.cli.dashboard",
        "dashboard_arguments",
        "serve a web dashboard of streams, groups, pending entries and dead letters",
    ),
    "publish": _Entry(
        "streamworker.cli.produce",
        "publish_arguments",
        "add one entry to a stream (typed like app.publish)",
    ),
    "relay": _Entry(
        "streamworker.cli.produce",
        "relay_arguments",
        "move transactional-outbox rows to their streams, each exactly once",
    ),
}


def build_parser(command: str | None = None, *, outline: bool = False) -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and docs).

    Every command with its arguments; with ``command`` (a word of ``_COMMANDS``) that one alone;
    with ``outline``, or a ``command`` that is not one, every command's name and summary only
    (what the top-level help and argparse's "invalid choice" need), importing no command's
    module.
    """
    parser = CommandParser(
        prog="streamworker",
        description="Consume Redis Streams with effectively-once processing.",
    )
    parser.add_argument("--version", action="version", version=f"streamworker {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    outline = outline or (command is not None and command not in _COMMANDS)
    for word, entry in _COMMANDS.items():
        if command in _COMMANDS and word != command:
            continue
        cmd = sub.add_parser(word, help=entry.summary)
        if not outline:
            add: Callable[[argparse.ArgumentParser], None] = getattr(
                importlib.import_module(entry.module), entry.arguments
            )
            add(cmd)
    return parser


def _command_word(words: Sequence[str]) -> str | None:
    # The top level takes options without values only (-h, --version), so its first word that
    # is not an option is the command; none when the top level's help comes first (it lists
    # every command).
    for word in words:
        if word in ("-h", "--help"):
            return None
        if not word.startswith("-"):
            return word
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``streamworker`` console script."""
    words = sys.argv[1:] if argv is None else list(argv)
    word = _command_word(words)
    parser = build_parser(word, outline=word is None)
    unknown = unknown_before_command(parser, words)
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    args = parser.parse_args(words)
    try:
        return int(args.func(args))
    except ConfigError as exc:
        print(f"streamworker: error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except StreamworkerError as exc:
        print(f"streamworker: error: {exc}", file=sys.stderr)
        return EXIT_RUNTIME
    except KeyboardInterrupt:
        return 130
