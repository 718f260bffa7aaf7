"""Percentiles and medians of timing samples."""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def percentile(samples: Sequence[float], fraction: float) -> float:
    """The sample at this fraction of the sorted samples (nearest rank)."""
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(fraction * len(ordered) + 0.5) - 1))
    return ordered[index]


def summary_us(samples_ns: Sequence[int]) -> dict[str, float]:
    """p50 and p99 in microseconds."""
    micros = [s / 1000 for s in samples_ns]
    return {
        "p50_us": round(percentile(micros, 0.50), 1),
        "p99_us": round(percentile(micros, 0.99), 1),
    }


def median_of(runs: Sequence[dict[str, float]]) -> dict[str, float]:
    """Each figure as the median over several runs."""
    return {key: round(statistics.median(run[key] for run in runs), 1) for key in runs[0]}
