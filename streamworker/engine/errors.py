"""The engine's error type: a Redis error reply carrying its verbatim wire text."""

from __future__ import annotations

__all__ = ["CommandError"]


class CommandError(Exception):
    """A Redis error reply.

    ``text`` is the full wire text without the leading ``-`` and without CRLF, e.g.
    ``"ERR syntax error"`` or ``"WRONGTYPE Operation against a key holding the wrong kind of
    value"``. Texts come from :mod:`streamworker.engine.msgs`. Commands raise it; core turns it
    into the reply (an instance is also a valid reply value).
    """

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    @property
    def code(self) -> str:
        """The error code: the first word of ``text`` (``ERR``, ``WRONGTYPE``, ``NOGROUP``...)."""
        return self.text.split(" ", 1)[0]

    def __repr__(self) -> str:
        return f"CommandError({self.text!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CommandError) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)
