"""The shared rate limit of a handler (``rate_limit="100/s"``): the pure parts, no I/O.

A limit is a number of handler starts per period (``"100/s"``, ``"6000/min"``, ``"10/h"``) and a
*burst*: how many may start at once after an idle time. Workers share it through
``lua/take_permits.lua``, a GCRA (generic cell rate algorithm): one permit every
:attr:`RateLimit.interval_us`, up to ``burst`` at once. In any window of the period at most
``count + burst - 1`` permits are granted, and at most ``count + 2 * (burst - 1)`` start (a worker
asks for its next read's permits while its batch runs); the default burst
(:func:`default_burst`) keeps that within a tenth of the limit over any 1-second window (the
promise is a fifth).

What is here: parsing and checking the option at registration (one clear line when wrong), and
the limit's arithmetic.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from streamworker.errors import ConfigError

_UNITS = {
    "s": 1,
    "sec": 1,
    "second": 1,
    "min": 60,
    "minute": 60,
    "h": 3600,
    "hour": 3600,
}

_RATE_RE = re.compile(r"^\s*(?P<count>\d+(?:\.\d+)?)\s*/\s*(?P<unit>[a-z]+)\s*$")


@dataclass(frozen=True, slots=True)
class RateLimit:
    """At most ``count`` handler starts per ``period_s`` seconds over every worker of the group,
    up to ``burst`` at once after an idle time."""

    count: float
    period_s: int
    burst: int
    text: str
    """The option as written (``"100/s"``), for logs and errors."""

    @property
    def per_second(self) -> float:
        """The limit in starts per second."""
        return self.count / self.period_s

    @property
    def interval_us(self) -> int:
        """Microseconds between two permits (rounded up: the limit is never exceeded by the
        rounding)."""
        return max(1, math.ceil(self.period_s * 1_000_000 / self.count))


def default_burst(per_second: float) -> int:
    """The burst when none is given: a twentieth of a second's worth of the limit, plus one.

    GCRA grants at most ``burst - 1`` permits above the rate in any window, and a worker takes
    its next read's permits at most one batch before they start (so one grant of at most
    ``burst`` may start in a later window): every 1-second window stays within
    ``per_second + 2 * (burst - 1)``, a tenth above the limit."""
    return int(per_second // 20) + 1


def parse_rate_limit(value: object, burst: object = None, *, where: str = "") -> RateLimit | None:
    """The :class:`RateLimit` of ``rate_limit=value`` with ``rate_limit_burst=burst``, or None
    when ``value`` is None (no limit; then a burst is refused). ConfigError with one line
    (naming ``where``) for anything else: a limit is ``"<number>/<unit>"`` with a number > 0 and
    a unit ``s``, ``min`` or ``h`` (``second``/``minute``/``hour`` too); a burst is an
    integer >= 1."""
    prefix = f"{where}: " if where else ""
    if value is None:
        if burst is not None:
            raise ConfigError(
                f"{prefix}rate_limit_burst needs rate_limit (e.g. rate_limit='100/s')"
            )
        return None
    match = _RATE_RE.match(value) if isinstance(value, str) else None
    unit = match.group("unit") if match else ""
    if match is None or unit not in _UNITS:
        raise ConfigError(
            f"{prefix}rate_limit must be a number per unit like '100/s', '6000/min' or '10/h', "
            f"not {value!r}"
        )
    count = float(match.group("count"))
    if count <= 0:
        raise ConfigError(f"{prefix}rate_limit must be above 0 per {unit}, not {value!r}")
    period_s = _UNITS[unit]
    per_second = count / period_s
    if burst is None:
        burst = default_burst(per_second)
    elif isinstance(burst, bool) or not isinstance(burst, int) or burst < 1:
        raise ConfigError(f"{prefix}rate_limit_burst must be an integer >= 1, got {burst!r}")
    return RateLimit(count=count, period_s=period_s, burst=burst, text=match.string.strip())
