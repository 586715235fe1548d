"""The 80% band around "expected": where a measurement of this engine era falls, from left-out published rows.

A band is two factors on time (profiles.Band): 10% of left-out rows ran faster than `low` x expected's time, 10%
slower than `high` x it (leave-one-source-out residuals: each source predicted by a fit that never read it;
tokcost/validation/bands.py). A time's band is [low x t, high x t]; a rate's is [r / high, r / low]. An engine era
with no left-out rows of its own (or a platform it was never measured on) carries its parent's band, widened; a
profile with no band at all (a user's file) gets WIDEST, and says so. Every view (estimate, compare, plan, their
JSON) reads the band through these functions.
"""

from __future__ import annotations

from tokcost.profiles import Band, EngineProfile

# No left-out row speaks for the profile (a user's file, an engine never fitted): a factor of 3 either way.
WIDEST = Band(low=1 / 3, high=3.0, rows=0, sources=0, basis="none: no left-out rows; a factor of 3 either way")


def band_of(engine: EngineProfile, platform: str) -> Band:
    """The band of an engine era on a platform: its own, its era's, or WIDEST."""
    return engine.band_on(platform) or WIDEST


def time_band(seconds: float, band: Band) -> tuple[float, float]:
    """(low, high) of a predicted time."""
    return seconds * band.low, seconds * band.high


def rate_band(rate: float, band: Band) -> tuple[float, float]:
    """(low, high) of a predicted rate (tokens/s, requests/s): a slower time is a lower rate."""
    return rate / band.high, rate / band.low


def covers(measured_time_ratio: float, band: Band) -> bool:
    """Whether a measurement (its time over the predicted time) falls inside the band."""
    return band.low <= measured_time_ratio <= band.high


def scenario_band(band: Band, *, times_s: dict[str, float | None], rates: dict[str, float | None]
                  ) -> dict[str, tuple[float, float] | None]:  # fmt: skip
    """(low, high) of each named time and rate of one scenario (None where the scenario has none)."""
    out: dict[str, tuple[float, float] | None] = {}
    for name, seconds in times_s.items():
        out[name] = None if seconds is None else time_band(seconds, band)
    for name, rate in rates.items():
        out[name] = None if rate is None else rate_band(rate, band)
    return out
