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
from typing import Any

from streamworker import __version__
from streamworker.cli.parsing import CommandParser, unknown_before_command
from streamworker.errors import ConfigError, StreamworkerError

__all__ = ["EXIT_CONFIG", "EXIT_RUNTIME", "build_parser", "main"]

EXIT_RUNTIME = 1
EXIT_CONFIG = 2


# Each command word -> the module that defines it and the function that adds it to the parser.
# Only the module of the command given is imported (`streamworker engine serve` starts without
# the worker runtime, redis-py or pydantic); `--help` and a word that is not a command import
# them all. In the order of `streamworker --help`; tests/unit/test_cli_commands.py checks that
# the words are the ones each function adds.
_COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("streamworker.cli.run", "add_run_command"),
    "migrate": ("streamworker.cli.sql", "add_sql_commands"),
    "prune": ("streamworker.cli.sql", "add_sql_commands"),
    "pending": ("streamworker.cli.pending_dlq", "add_admin_commands"),
    "dlq": ("streamworker.cli.pending_dlq", "add_admin_commands"),
    "engine": ("streamworker.cli.engine", "add_engine_commands"),
    "archive": ("streamworker.cli.archive", "add_archive_command"),
    "backfill": ("streamworker.cli.backfill", "add_backfill_command"),
    "dashboard": ("streamworker.cli.dashboard", "add_dashboard_commands"),
    "publish": ("streamworker.cli.produce", "add_produce_commands"),
    "relay": ("streamworker.cli.produce", "add_produce_commands"),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and docs): every command's, or with ``command``
    (a word of ``_COMMANDS``) only the one that defines it."""
    parser = CommandParser(
        prog="streamworker",
        description="Consume Redis Streams with effectively-once processing.",
    )
    parser.add_argument("--version", action="version", version=f"streamworker {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    words = [command] if command in _COMMANDS else list(_COMMANDS)
    # dict.fromkeys: each module's function once (it adds all of its words), in order.
    for module, name in dict.fromkeys(_COMMANDS[word] for word in words):
        add: Callable[[Any], None] = getattr(importlib.import_module(module), name)
        add(sub)
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
    parser = build_parser(_command_word(words))
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
