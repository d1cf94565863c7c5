"""Reply values returned by command functions, rendered per protocol by :mod:`.protocol`.

Commands return plain Python values; the encoder (or the in-process adapter) turns them into
RESP2 or RESP3. The mapping is:

=========================  ==========================  ==========================
Python value               RESP2                       RESP3
=========================  ==========================  ==========================
``bytes``                  bulk string                 bulk string
``int`` (not ``bool``)     integer ``:``               integer ``:``
:class:`Status`            simple string ``+``         simple string ``+``
``list`` / ``tuple``       array                       array
:data:`NULL_BULK`          ``$-1``                     ``_``
:data:`NULL_ARRAY`         ``*-1``                     ``_``
:class:`Map`               flat array k1 v1 k2 v2      map ``%``
:class:`Double`            bulk string (``%.17g``)     double ``,``
:class:`SetReply`          array                       set ``~``
:class:`Verbatim`          bulk string                 verbatim ``=`` (``txt:``)
:class:`Push`              array                       push ``>``
:class:`Frames`            each item in turn           each item in turn
:class:`~.errors.CommandError`  error ``-``            error ``-``
=========================  ==========================  ==========================

Commands never branch on the protocol unless Redis does; they build :class:`Map` /
:class:`Double` / :class:`SetReply` where Redis's RESP3 reply differs in shape.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Final, TypeAlias

if TYPE_CHECKING:
    from streamworker.engine.errors import CommandError

__all__ = [
    "EMPTY_ARRAY",
    "NULL_ARRAY",
    "NULL_BULK",
    "OK",
    "PONG",
    "QUEUED",
    "Double",
    "Frames",
    "Map",
    "NullArray",
    "NullBulk",
    "Push",
    "Reply",
    "SetReply",
    "Status",
    "Verbatim",
    "format_double",
    "format_human",
]


class Status:
    """A simple-string reply (``+OK``). ``text`` must not contain CR or LF."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return f"Status({self.text!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Status) and other.text == self.text

    def __hash__(self) -> int:
        return hash(("Status", self.text))


class NullBulk:
    """Type of :data:`NULL_BULK`, the null bulk string (``$-1`` / RESP3 ``_``)."""

    __slots__ = ()
    _instance: NullBulk | None = None

    def __new__(cls) -> NullBulk:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NULL_BULK"

    def __bool__(self) -> bool:
        return False


class NullArray:
    """Type of :data:`NULL_ARRAY`, the null array (``*-1`` / RESP3 ``_``)."""

    __slots__ = ()
    _instance: NullArray | None = None

    def __new__(cls) -> NullArray:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NULL_ARRAY"

    def __bool__(self) -> bool:
        return False


NULL_BULK: Final = NullBulk()
"""The null bulk reply (GET of a missing key)."""

NULL_ARRAY: Final = NullArray()
"""The null array reply (XREAD with nothing to return, EXEC aborted by WATCH)."""


class Map:
    """A map reply: a flat array ``k1 v1 k2 v2`` in RESP2, a ``%`` map in RESP3.

    ``items`` keeps the order given; duplicate keys are kept as given (Redis never sends them).

    ``plain=True`` promises that every key is ``bytes`` and every value is built only of
    ``bytes``, ``int`` and ``list`` objects that are fresh (not shared with engine state):
    an in-process transport may then hand the values over without copying them (XREAD /
    XREADGROUP replies). It changes nothing on the wire.
    """

    __slots__ = ("items", "plain")

    def __init__(self, items: Iterable[tuple[Reply, Reply]] = (), plain: bool = False) -> None:
        self.items: list[tuple[Reply, Reply]] = list(items)
        self.plain = plain

    def __repr__(self) -> str:
        return f"Map({self.items!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Map) and other.items == self.items

    __hash__ = None  # type: ignore[assignment]


class Double:
    """A double reply: bulk text in RESP2 (Redis 7.0's ``%.17g``), ``,`` in RESP3.

    ``text``, when given, is sent instead of ``%.17g`` in both protocols (Redis's
    addReplyHumanLongDouble: GEOPOS coordinates).
    """

    __slots__ = ("text", "value")

    def __init__(self, value: float, text: bytes | None = None) -> None:
        self.value = value
        self.text = text

    def __repr__(self) -> str:
        return f"Double({self.value!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Double) and (
            other.value == self.value or (math.isnan(other.value) and math.isnan(self.value))
        )

    __hash__ = None  # type: ignore[assignment]


class SetReply:
    """A set reply: an array in RESP2, a ``~`` set in RESP3 (SMEMBERS)."""

    __slots__ = ("items",)

    def __init__(self, items: Iterable[Reply] = ()) -> None:
        self.items: list[Reply] = list(items)

    def __repr__(self) -> str:
        return f"SetReply({self.items!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SetReply) and other.items == self.items

    __hash__ = None  # type: ignore[assignment]


class Verbatim:
    """A verbatim-text reply (INFO, CLIENT INFO): bulk in RESP2, ``=`` with ``txt:`` in RESP3."""

    __slots__ = ("text",)

    def __init__(self, text: str | bytes) -> None:
        self.text: bytes = text.encode() if isinstance(text, str) else text

    def __repr__(self) -> str:
        return f"Verbatim({self.text!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Verbatim) and other.text == self.text

    __hash__ = None  # type: ignore[assignment]


class Push:
    """An out-of-band message (Pub/Sub ``message``, ``subscribe``...): an array in RESP2, a
    ``>`` push frame in RESP3.

    ``wire`` caches the encoded frame by protocol: one PUBLISH sends the same frame to every
    subscriber, and a transport encodes it once per protocol (the items must not change)."""

    __slots__ = ("items", "wire")

    def __init__(self, items: Iterable[Reply]) -> None:
        self.items: list[Reply] = list(items)
        self.wire: dict[int, bytes] = {}

    def __repr__(self) -> str:
        return f"Push({self.items!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Push) and other.items == self.items

    __hash__ = None  # type: ignore[assignment]


class Frames:
    """Several top-level replies written back to back for one command: SUBSCRIBE a b
    answers one ``subscribe`` frame per channel. Inside EXEC's array they are written in
    place, so the array holds more frames than its length says, as in Redis."""

    __slots__ = ("items",)

    def __init__(self, items: Iterable[Reply]) -> None:
        self.items: list[Reply] = list(items)

    def __repr__(self) -> str:
        return f"Frames({self.items!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Frames) and other.items == self.items

    __hash__ = None  # type: ignore[assignment]


Reply: TypeAlias = (
    "bytes | int | Status | list[Any] | tuple[Any, ...] | NullBulk | NullArray | Map | Double"
    " | SetReply | Verbatim | Push | Frames | CommandError"
)
"""Any value a command may return (nested containers hold Replies)."""

OK: Final = Status("OK")
QUEUED: Final = Status("QUEUED")
PONG: Final = Status("PONG")
EMPTY_ARRAY: Final[tuple[()]] = ()


def format_human(value: float) -> bytes:
    """Format a double as Redis's human-friendly long double text: ``%.17Lf`` without
    trailing zeros (``13.36138933897018433``, ``180``); ``-0`` is ``0``."""
    if not math.isfinite(value):
        return format_double(value)
    text = (b"%.17f" % value).rstrip(b"0").rstrip(b".")
    return b"0" if text == b"-0" else text


def format_double(value: float) -> bytes:
    """Format a double as Redis 7.0 does in replies: ``%.17g``, with ``inf`` / ``-inf``.

    ``1.0 -> b"1"``, ``1.5 -> b"1.5"``, ``0.1 -> b"0.10000000000000001"``.
    """
    if value == math.inf:
        return b"inf"
    if value == -math.inf:
        return b"-inf"
    if value != value:
        return b"nan"
    return b"%.17g" % value
