"""Keyed publishes by the server's own idempotency: ``XADD … IDMP`` (Redis 8.6+).

Where the server has IDMP (:class:`streamworker.io.capabilities.ServerPaths` ``.idmp``, asked
once per producer), a publish with ``idempotency_key=`` runs ``publish_idmp.lua`` instead of
``publish_once.lua``: the server remembers the key with the entry it added, and no marker key is
written. The receipt is the same on both paths (a retry: the first entry's id, ``duplicate=True``).

How the producer's settings map onto the stream's IDMP settings:

* producer id (``pid``): :data:`PRODUCER_ID` for every producer, so that a retry from another
  process (or another :class:`~streamworker.producing.producer.Producer`) is caught, as the
  marker script catches it; the idempotent id (``iid``) is the idempotency key itself.
* ``idempotency_window_ms`` -> ``IDMP-DURATION``: whole seconds, rounded up
  (:func:`duration_s`); a window above 86,400 s (the most IDMP keeps) keeps the marker script.
* ``IDMP-MAXSIZE``: :data:`MAXSIZE` (10,000, the most IDMP keeps per producer id). A stream
  remembers the last 10,000 keys published to it within the window, not every key of the
  window: a retry after more than 10,000 later keyed publishes to the same stream adds a second
  entry. Producers of more keys per window than that should pass ``use_idmp=False``.
* a marker the marker script left for the key (written before the server had IDMP, by a
  producer with ``use_idmp=False``, or by a delayed publish) still makes the publish a duplicate:
  the script reads it (never writes it), so switching to IDMP loses no retry. The other way
  round does not hold: the marker script does not see keys IDMP remembers, so producers of one
  stream should not mix ``use_idmp=False`` and the default on a server with IDMP; nor do the
  outbox relay's markers (``relay_outbox.lua``) see them.
* the settings are set with ``XCFGSET`` only when the stream's are lower (never lowered), since
  XCFGSET makes the stream forget every key it holds: a retry of a publish made before the
  change adds a second entry. That happens once per stream (at its first keyed publish, when
  nothing is remembered yet), and again only when a producer asks for a longer window.

Delayed publishes (``delay_ms``/``deliver_at``) and publishes with an explicit ``id=`` keep the
marker script (the first schedules, and the IDMP pages do not say that IDMP takes an explicit
id); Redis Cluster clients keep it too (not probed).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from streamworker.io.keys import in_stream_slot
from streamworker.io.redisio import LuaScript

if TYPE_CHECKING:
    from streamworker.producing.producer import Xadd

__all__ = [
    "MAXSIZE",
    "MAX_DURATION_S",
    "PRODUCER_ID",
    "PUBLISH_IDMP",
    "duration_s",
    "route",
    "script_call",
]

PRODUCER_ID = "streamworker"
"""The IDMP producer id of every keyed publish (one per stream's IDMP map)."""

MAX_DURATION_S = 86_400
"""The longest IDMP-DURATION a server accepts (XCFGSET's page: 1-86,400 seconds)."""

MAXSIZE = 10_000
"""IDMP-MAXSIZE set on a stream: the most a server accepts (XCFGSET's page: 1-10,000)."""

PUBLISH_IDMP = LuaScript("publish_idmp")


def duration_s(window_ms: int) -> int | None:
    """``IDMP-DURATION`` for an idempotency window: whole seconds, rounded up, so that a key is
    never forgotten sooner than asked (1 ms -> 1 s, 1,001 ms -> 2 s); None for a window above
    86,400 s, which IDMP cannot keep. Pure."""
    seconds = max(1, -(-window_ms // 1000))
    return seconds if seconds <= MAX_DURATION_S else None


def route(x: Xadd, idmp: bool) -> Xadd:
    """``x`` as the producer sends it: a keyed, undelayed add with a generated id and a window
    IDMP can keep goes by IDMP when the server has it (``idmp``); anything else as planned."""
    if (
        idmp
        and x.marker is not None
        and x.due_ms is None
        and x.id == "*"
        and duration_s(x.window_ms) is not None
    ):
        return replace(x, idmp=True)
    return x


def _iid(x: Xadd) -> str:
    # The plan keeps the key only inside its marker's name ({S}:published:KEY).
    assert x.marker is not None
    prefix = in_stream_slot(x.stream, "published:")
    return x.marker[len(prefix) :] if x.marker.startswith(prefix) else x.marker


def script_call(x: Xadd) -> tuple[LuaScript, list[str], list[str | bytes | int]]:
    """The ``publish_idmp.lua`` call of a routed add (KEYS: the stream, and the marker the
    marker script would write, read only)."""
    duration = duration_s(x.window_ms)
    # route() sends no other
    assert duration is not None
    assert x.marker is not None
    trim = [x.trim, "~" if x.approximate else "=", x.threshold] if x.trim else []
    args: list[str | bytes | int] = [PRODUCER_ID, _iid(x), duration, MAXSIZE, len(trim), *trim]
    for name, value in x.fields.items():
        args += [name, value]
    return PUBLISH_IDMP, [x.stream, x.marker], args
