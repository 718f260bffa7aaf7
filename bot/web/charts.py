"""Bar charts as plain numbers for an SVG template: no script, nothing fetched from elsewhere.

A chart is drawn for one width (the page draws one for a desktop and one for a phone, and its
style shows the one that fits). Its axis labels never overlap and are never cut off: the value
axis's margin grows with its top value, and of the bars' labels only as many are shown as fit
side by side at the width, always the last (today) and then every so many days back."""

from __future__ import annotations

import math
from dataclasses import dataclass

WIDTH = 720
NARROW_WIDTH = 330  # fits a 390 px phone inside the page's and the card's padding
HEIGHT = 220
MARGIN_BOTTOM = 36
MARGIN_TOP = 12
MARGIN_RIGHT = 24  # room for half of the last bar's label
BAR_GAP = 2
# The axis labels' font (11 px, see base.html): an upper bound of one character's width, and
# the least room between two labels.
CHAR_WIDTH = 7
LABEL_GAP = 10


@dataclass(frozen=True)
class Bar:
    """One bar: where it is drawn, and what it stands for."""

    x: float
    y: float
    width: float
    height: float
    label: str
    value: int


@dataclass(frozen=True)
class Tick:
    """A label under the bars, centred at x."""

    x: float
    text: str


@dataclass(frozen=True)
class BarChart:
    """Bars scaled into a width x HEIGHT drawing, with the top of the value axis (and its text)
    and the labels under the bars."""

    bars: list[Bar]
    top: int
    ticks: list[Tick]
    width: int = WIDTH
    height: int = HEIGHT
    left: int = 0
    baseline: int = HEIGHT - MARGIN_BOTTOM

    @property
    def top_text(self) -> str:
        return f"{self.top:,}"


def bar_chart(points: list[tuple[str, int]], *, width: int = WIDTH, tick: int = 5) -> BarChart:
    """A chart of (label, value) points, left to right, width wide; values below zero count as
    zero. The labels under the bars are each point's label from character `tick` on (a day
    2026-11-30 as 11-30)."""
    top = max([value for _, value in points] + [1])
    left = CHAR_WIDTH * len(f"{top:,}") + 2 * LABEL_GAP
    plot_width = width - left - MARGIN_RIGHT
    plot_height = HEIGHT - MARGIN_BOTTOM - MARGIN_TOP
    slot = plot_width / max(len(points), 1)
    bars = []
    for index, (label, value) in enumerate(points):
        height = plot_height * max(value, 0) / top
        bars.append(
            Bar(
                x=round(left + index * slot + BAR_GAP / 2, 2),
                y=round(HEIGHT - MARGIN_BOTTOM - height, 2),
                width=round(max(slot - BAR_GAP, 1), 2),
                height=round(height, 2),
                label=label,
                value=value,
            )
        )
    longest = max((len(label[tick:]) for label, _ in points), default=0)
    every = max(1, math.ceil((CHAR_WIDTH * longest + LABEL_GAP) / slot))
    shown = range(len(points) - 1, -1, -every)  # the last, and every so many back
    ticks = [
        Tick(round(left + (index + 0.5) * slot, 2), points[index][0][tick:])
        for index in reversed(shown)
    ]
    return BarChart(bars, top, ticks, width=width, left=left)
