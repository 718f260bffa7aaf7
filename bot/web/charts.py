"""Bar charts as plain numbers for an SVG template: no script, nothing fetched from elsewhere."""

from __future__ import annotations

from dataclasses import dataclass

WIDTH = 720
HEIGHT = 220
MARGIN_LEFT = 64
MARGIN_BOTTOM = 36
MARGIN_TOP = 12
BAR_GAP = 2


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
class BarChart:
    """Bars scaled into a WIDTH x HEIGHT drawing, with the top of the value axis."""

    bars: list[Bar]
    top: int
    width: int = WIDTH
    height: int = HEIGHT
    left: int = MARGIN_LEFT
    baseline: int = HEIGHT - MARGIN_BOTTOM


def bar_chart(points: list[tuple[str, int]]) -> BarChart:
    """A chart of (label, value) points, left to right; values below zero count as zero."""
    top = max([value for _, value in points] + [1])
    plot_width = WIDTH - MARGIN_LEFT
    plot_height = HEIGHT - MARGIN_BOTTOM - MARGIN_TOP
    slot = plot_width / max(len(points), 1)
    bars = []
    for index, (label, value) in enumerate(points):
        height = plot_height * max(value, 0) / top
        bars.append(
            Bar(
                x=round(MARGIN_LEFT + index * slot + BAR_GAP / 2, 2),
                y=round(HEIGHT - MARGIN_BOTTOM - height, 2),
                width=round(max(slot - BAR_GAP, 1), 2),
                height=round(height, 2),
                label=label,
                value=value,
            )
        )
    return BarChart(bars, top)
