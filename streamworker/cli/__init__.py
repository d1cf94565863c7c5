"""The ``streamworker`` command: the composition root (flags -> Settings -> objects).

One module per command family (:mod:`.run`, :mod:`.sql`, :mod:`.admin`, :mod:`.engine`,
:mod:`.archive`, :mod:`.backfill`, :mod:`.dashboard`, :mod:`.produce`); this one builds the
top-level parser and turns errors into exit codes.

Errors a user can fix (bad target, bad URL, unreachable Redis) print one line and exit non-zero:
2 for a command line or configuration that cannot work, 1 for a failure at run time. One rule
for every command: an unknown flag gets that (sub)command's usage and the error, exit 2; a
stream or group that does not exist gets one line naming it, exit 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from streamworker import __version__
from streamworker.cli.archive import add_archive_command
from streamworker.cli.backfill import add_backfill_command
from streamworker.cli.common import CommandParser, unknown_before_command
from streamworker.cli.dashboard import add_dashboard_commands
from streamworker.cli.engine import add_engine_commands
from streamworker.cli.pending_dlq import add_admin_commands
from streamworker.cli.produce import add_produce_commands
from streamworker.cli.run import add_run_command
from streamworker.cli.sql import add_sql_commands
from streamworker.errors import ConfigError, StreamworkerError

__all__ = ["EXIT_CONFIG", "EXIT_RUNTIME", "build_parser", "main"]

EXIT_RUNTIME = 1
EXIT_CONFIG = 2


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and docs)."""
    parser = CommandParser(
        prog="streamworker",
        description="Consume Redis Streams with effectively-once processing.",
    )
    parser.add_argument("--version", action="version", version=f"streamworker {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    add_run_command(sub)
    add_sql_commands(sub)
    add_admin_commands(sub)
    add_engine_commands(sub)
    add_archive_command(sub)
    add_backfill_command(sub)
    add_dashboard_commands(sub)
    add_produce_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``streamworker`` console script."""
    parser = build_parser()
    words = sys.argv[1:] if argv is None else list(argv)
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
