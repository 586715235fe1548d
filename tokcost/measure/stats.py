"""Spread of repeated timings: min, median, interquartile range and coefficient of variation (no torch).

A prediction error is only worth printing when the measurement is steadier than the error: when the
step times' coefficient of variation (standard deviation / mean) exceeds NOISY_CV, the report says the
machine is too noisy for an error figure instead of printing one.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any

NOISY_CV = 0.10


@dataclass(frozen=True)
class Spread:
    """Summary of one timed figure over its samples (seconds)."""

    n: int
    min: float
    median: float
    q1: float
    q3: float
    cv: float  # population standard deviation / mean; 0 for a single sample

    @property
    def iqr(self) -> float:
        """Interquartile range q3 - q1."""
        return self.q3 - self.q1

    @property
    def noisy(self) -> bool:
        """Too variable for a prediction error to mean anything."""
        return self.cv > NOISY_CV

    def as_dict(self) -> dict[str, Any]:
        """Stable JSON keys, iqr included."""
        return {**asdict(self), "iqr": self.iqr}


def spread(samples: list[float]) -> Spread:
    """min, median, quartiles (inclusive method: exact on small samples) and CV of `samples`."""
    if not samples:
        raise ValueError("no samples")
    xs = sorted(samples)
    if len(xs) == 1:
        return Spread(1, xs[0], xs[0], xs[0], xs[0], 0.0)
    q1, _, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    mean = statistics.fmean(xs)
    cv = statistics.pstdev(xs) / mean if mean > 0 else 0.0
    return Spread(len(xs), xs[0], statistics.median(xs), q1, q3, cv)
