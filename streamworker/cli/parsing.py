"""The ``streamworker`` parser's rules, kept free of heavy imports: the top-level parser is
built before the command's own module is imported (see :mod:`streamworker.cli`)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

Command = Callable[[argparse.Namespace], int]


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


def runs(parser: argparse.ArgumentParser, command: Command, *, example: str | None = None) -> None:
    """Make ``parser`` run ``command`` (``args.func``), described by ``command``'s docstring.

    The docstring is the text ``--help`` shows under the usage (argparse folds its white space
    into one paragraph); ``example`` is a command line shown after the options.
    """
    parser.description = " ".join((command.__doc__ or "").split()) or None
    if example is not None:
        parser.epilog = f"example: {example}"
    parser.set_defaults(func=command)


def log_flags(parser: argparse.ArgumentParser) -> None:
    """``--log-format`` and ``--log-level``, for the commands that log as a service does."""
    parser.add_argument(
        "--log-format",
        choices=("auto", "json", "console"),
        help="log output (default: console on a terminal, else JSON)",
    )
    parser.add_argument(
        "--log-level", choices=("debug", "info", "warning", "error"), help="default: info"
    )


def redis_url_flag(parser: argparse.ArgumentParser) -> None:
    """``--redis-url``, as the operator commands take it (the environment's when not given)."""
    parser.add_argument("--redis-url", metavar="URL", help="Redis URL (or STREAMWORKER_REDIS_URL)")


def db_url_flag(parser: argparse.ArgumentParser) -> None:
    """``--db-url``, as the operator commands take it (the environment's when not given)."""
    parser.add_argument("--db-url", metavar="URL", help="database URL (or STREAMWORKER_DB_URL)")
