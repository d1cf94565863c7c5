"""The ``streamworker`` parser's rules, kept free of heavy imports: the top-level parser is
built before the command's own module is imported (see :mod:`streamworker.cli`)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence


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
