"""Line charts over time as SVG geometry: paths, a time axis in UTC and a value axis with units.

Pure functions; the ``_macros.html`` ``chart`` macro draws the result. Nothing here is scripted
in the browser (the page's CSP allows no inline script): a live page gets a fresh chart with each
refresh.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

_TIME_STEPS_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600)


@dataclass(frozen=True, slots=True)
class Line:
    """One series: an SVG path (``M``/``L``; a gap where a value is unknown), and the position of
    its newest point (drawn as a dot, so a series of one sample shows)."""

    name: str
    css: str
    path: str
    last: tuple[float, float] | None
    last_value: float | None


@dataclass(frozen=True, slots=True)
class Chart:
    """A chart ready to draw; ``samples`` is the number of points of the longest line."""

    title: str
    unit: str
    width: int
    height: int
    left: int
    right: int
    top: int
    bottom: int
    lines: list[Line]
    x_ticks: list[tuple[float, str]]
    y_ticks: list[tuple[float, str]]
    span_s: int
    samples: int


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 5 x 10^k that is at least ``value`` (1 for 0 or less)."""
    if value <= 0:
        return 1.0
    exp = math.floor(math.log10(value))
    for m in (1, 2, 5, 10):
        top = m * 10.0**exp
        if top >= value * (1 - 1e-9):
            return top
    return 10.0 ** (exp + 1)


def fmt_number(v: float) -> str:
    """A tick label: integers plainly, ``1.5k``/``2M`` for large ones, two digits for small."""
    if v >= 1_000_000:
        return f"{v / 1_000_000:g}M"
    if v >= 1000:
        return f"{v / 1000:g}k"
    if v == int(v):
        return str(int(v))
    return f"{v:.2g}"


def time_step(span_s: float, max_ticks: int = 6) -> int:
    """A round tick interval giving at most ``max_ticks`` ticks over ``span_s`` seconds."""
    for step in _TIME_STEPS_S:
        if span_s / step <= max_ticks:
            return step
    return _TIME_STEPS_S[-1]


def fmt_clock(t: float, step: int) -> str:
    """``t`` as UTC ``HH:MM`` (or ``HH:MM:SS`` when ticks are less than a minute apart)."""
    return time.strftime("%H:%M:%S" if step < 60 else "%H:%M", time.gmtime(t))


def time_chart(
    title: str,
    unit: str,
    lines: Sequence[tuple[str, str, Sequence[tuple[float, float | None]]]],
    t0: float,
    t1: float,
    *,
    width: int = 640,
    height: int = 190,
) -> Chart:
    """Scale ``lines`` ((name, css class, [(unix time, value or None)])) into a chart spanning
    ``t0``..``t1`` (at least a second), values from 0 to four round steps."""
    left, right, top, bottom = 52, 30, 22, 24
    span = max(t1 - t0, 1.0)
    values = [v for _, _, pts in lines for _, v in pts if v is not None]
    # Four ticks of a round step: the labels are round numbers too.
    step_v = nice_ceiling(max(values, default=0.0) / 4)
    vmax = 4 * step_v
    plot_w, plot_h = width - left - right, height - top - bottom

    def xy(t: float, v: float) -> tuple[float, float]:
        x = left + (t - t0) / span * plot_w
        y = top + plot_h - v / vmax * plot_h
        return round(x, 1), round(y, 1)

    drawn = []
    for name, css, pts in lines:
        parts: list[str] = []
        pen_down = False
        last: tuple[float, float] | None = None
        last_value: float | None = None
        for t, v in pts:
            if v is None:
                pen_down = False
                continue
            x, y = xy(t, v)
            parts.append(f"{'L' if pen_down else 'M'}{x},{y}")
            pen_down = True
            last, last_value = (x, y), v
        drawn.append(Line(name, css, " ".join(parts), last, last_value))

    step = time_step(span)
    first_tick = math.ceil(t0 / step) * step
    x_ticks = []
    t = first_tick
    while t <= t1 + 1e-6:
        x_ticks.append((xy(t, 0)[0], fmt_clock(t, step)))
        t += step
    y_ticks = [(xy(t0, step_v * i)[1], fmt_number(step_v * i)) for i in range(5)]
    return Chart(
        title=title,
        unit=unit,
        width=width,
        height=height,
        left=left,
        right=right,
        top=top,
        bottom=bottom,
        lines=drawn,
        x_ticks=x_ticks,
        y_ticks=y_ticks,
        span_s=round(t1 - t0),
        samples=max((len(pts) for _, _, pts in lines), default=0),
    )
