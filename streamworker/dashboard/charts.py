"""Line charts over time as SVG geometry: paths, a time axis in UTC and a value axis with units.

Pure functions; the ``_macros.html`` ``chart`` macro draws the result. Nothing here is scripted
in the browser (the page's CSP allows no inline script): a live page gets a fresh chart with each
refresh.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

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
    # A second value axis on the right, with its own scale, for the lines given as ``right``.
    unit2: str = ""
    y2_ticks: list[tuple[float, str]] = field(default_factory=list)


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


Series = Sequence[tuple[str, str, Sequence[tuple[float, float | None]]]]


def time_chart(
    title: str,
    unit: str,
    lines: Series,
    t0: float,
    t1: float,
    *,
    right: tuple[str, Series] | None = None,
    width: int = 640,
    height: int = 190,
) -> Chart:
    """Scale ``lines`` ((name, css class, [(unix time, value or None)])) into a chart spanning
    ``t0``..``t1`` (at least a second), values from 0 to four round steps. ``right`` = (unit,
    lines): lines drawn against a second axis on the right with a scale of its own, so a small
    series next to a large one is not flattened to the bottom of the chart."""
    left, right_margin, top, bottom = 52, 52 if right else 30, 22, 24
    span = max(t1 - t0, 1.0)
    plot_w, plot_h = width - left - right_margin, height - top - bottom

    def scale(series: Series) -> float:
        values = [v for _, _, pts in series for _, v in pts if v is not None]
        # Four ticks of a round step: the labels are round numbers too.
        return nice_ceiling(max(values, default=0.0) / 4)

    def draw(series: Series, step_v: float) -> list[Line]:
        vmax = 4 * step_v
        drawn = []
        for name, css, pts in series:
            parts: list[str] = []
            pen_down = False
            last: tuple[float, float] | None = None
            last_value: float | None = None
            for t, v in pts:
                if v is None:
                    pen_down = False
                    continue
                x = round(left + (t - t0) / span * plot_w, 1)
                y = round(top + plot_h - v / vmax * plot_h, 1)
                parts.append(f"{'L' if pen_down else 'M'}{x},{y}")
                pen_down = True
                last, last_value = (x, y), v
            drawn.append(Line(name, css, " ".join(parts), last, last_value))
        return drawn

    def ticks(step_v: float) -> list[tuple[float, str]]:
        return [(round(top + plot_h - i / 4 * plot_h, 1), fmt_number(step_v * i)) for i in range(5)]

    step_left = scale(lines)
    drawn = draw(lines, step_left)
    y2_ticks: list[tuple[float, str]] = []
    unit2 = ""
    all_lines: list[Series] = [lines]
    if right is not None:
        unit2, series2 = right
        step_right = scale(series2)
        drawn += draw(series2, step_right)
        y2_ticks = ticks(step_right)
        all_lines.append(series2)

    step = time_step(span)
    first_tick = math.ceil(t0 / step) * step
    x_ticks = []
    t = first_tick
    while t <= t1 + 1e-6:
        x_ticks.append((round(left + (t - t0) / span * plot_w, 1), fmt_clock(t, step)))
        t += step
    return Chart(
        title=title,
        unit=unit,
        width=width,
        height=height,
        left=left,
        right=right_margin,
        top=top,
        bottom=bottom,
        lines=drawn,
        x_ticks=x_ticks,
        y_ticks=ticks(step_left),
        span_s=round(t1 - t0),
        samples=max((len(pts) for series in all_lines for _, _, pts in series), default=0),
        unit2=unit2,
        y2_ticks=y2_ticks,
    )
