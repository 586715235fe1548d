"""The 80% band around "expected": where a measurement of this engine era falls, from left-out published rows.

A band is two factors on time (profiles.Band): 10% of left-out rows ran faster than `low` x expected's time, 10%
slower than `high` x it (leave-one-source-out residuals: each source predicted by a fit that never read it;
tokcost/validation/bands.py). A time's band is [low x t, high x t]; a rate's is [r / high, r / low]; where the
ceiling of the same figure is given, no end passes it (no run is faster than the ceiling, and a residual of
another era's rows would otherwise put its fast end there: llama.cpp's band on an A40 reached 61.7 tokens/s
beside a ceiling of 45.9). An engine era
with no left-out rows of its own (or a platform it was never measured on) carries its parent's band, widened; a
profile with no band at all (a user's file) gets WIDEST, and says so. Every view (estimate, compare, plan, their
JSON) reads the band through these functions.
"""

from __future__ import annotations

import math

from tokcost.profiles import Band, EngineProfile

# No left-out row speaks for the profile (a user's file, an engine never fitted): a factor of 3 either way.
WIDEST = Band(low=1 / 3, high=3.0, rows=0, sources=0, basis="none: no left-out rows; a factor of 3 either way")


def band_of(engine: EngineProfile, platform: str) -> Band:
    """The band of an engine era on a platform: its own, its era's, or WIDEST."""
    return engine.band_on(platform) or WIDEST


def time_band(seconds: float, band: Band, ceiling_s: float = 0.0) -> tuple[float, float]:
    """(low, high) of a predicted time, neither below the ceiling's time of the same figure."""
    return max(seconds * band.low, ceiling_s), max(seconds * band.high, ceiling_s)


def rate_band(rate: float, band: Band, ceiling: float = math.inf) -> tuple[float, float]:
    """(low, high) of a predicted rate (tokens/s, requests/s): a slower time is a lower rate; neither above the
    ceiling's rate."""
    return min(rate / band.high, ceiling), min(rate / band.low, ceiling)


def covers(measured_time_ratio: float, band: Band) -> bool:
    """Whether a measurement (its time over the predicted time) falls inside the band."""
    return band.low <= measured_time_ratio <= band.high


Figures = dict[str, float | None]


def scenario_band(band: Band, *, times_s: Figures, rates: Figures, ceiling: Figures | None = None
                  ) -> dict[str, tuple[float, float] | None]:  # fmt: skip
    """(low, high) of each named time and rate of one scenario (None where the scenario has none), each bounded by
    the same name in `ceiling` where given."""
    bound = ceiling or {}
    out: dict[str, tuple[float, float] | None] = {}
    for name, seconds in times_s.items():
        out[name] = None if seconds is None else time_band(seconds, band, bound.get(name) or 0.0)
    for name, rate in rates.items():
        out[name] = None if rate is None else rate_band(rate, band, bound.get(name) or math.inf)
    return out
