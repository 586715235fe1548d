"""Bands from left-out residuals: each engine era's 10th and 90th percentile of measured time / predicted time.

The residuals are leave-one-source-out: a row's prediction comes from a fit that never read its source. A cell's
band pools the rows of the narrowest group that has enough of them from enough sources: the era on that platform,
else the era on every platform, else the engine, else every engine; each step up widens the band by WIDEN in log
(what a parent says of a child it never measured is less sure). A band always holds 1 (the expectation itself).
`coverage` asks, source by source, whether each left-out row falls inside the band computed without that source.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tokcost.profiles import Band
from tokcost.validation.compare import percentile

MIN_ROWS = 15
MIN_SOURCES = 2
WIDEN = 1.25  # per level fallen back, on the band's log half-widths
QUANTILES = (10.0, 90.0)


@dataclass(frozen=True, slots=True)
class Residual:
    """One left-out row: its cell, its source, log(measured time / predicted time)."""

    engine: str
    era: str
    platform: str
    source: str
    log_ratio: float


def _band(residuals: Sequence[Residual], level: int, basis: str) -> Band:
    values = [r.log_ratio for r in residuals]
    low, high = (percentile(values, q) for q in QUANTILES)
    widen = WIDEN**level
    low, high = min(low, 0.0) * widen, max(high, 0.0) * widen
    return Band(low=round(math.exp(low), 4), high=round(math.exp(high), 4), rows=len(values),
                sources=len({r.source for r in residuals}), basis=basis)  # fmt: skip


def _enough(residuals: Sequence[Residual]) -> bool:
    return len(residuals) >= MIN_ROWS and len({r.source for r in residuals}) >= MIN_SOURCES


def cell_band(residuals: Iterable[Residual], *, engine: str, era: str, platform: str | None) -> Band | None:
    """The band of one cell (platform None: the era on every platform), from the narrowest group with enough rows."""
    rows = list(residuals)
    groups = [
        (
            f"{engine}@{era} on {platform}",
            [r for r in rows if (r.engine, r.era, r.platform) == (engine, era, platform)],
        ),
        (f"{engine}@{era}", [r for r in rows if (r.engine, r.era) == (engine, era)]),
        (engine, [r for r in rows if r.engine == engine]),
        ("every engine", rows),
    ]
    if platform is None:
        groups = groups[1:]
    for level, (name, members) in enumerate(groups):
        if _enough(members):
            how = "its own left-out rows" if level == 0 else f"widened x{WIDEN**level:.3g} from {name}'s"
            return _band(members, level, f"{name}: {len(members)} left-out rows, "
                                         f"{len({r.source for r in members})} sources ({how})")  # fmt: skip
    return None


def coverage(residuals: Sequence[Residual]) -> tuple[int, int]:
    """(rows inside their band, rows): each source's rows against bands computed without that source."""
    inside = 0
    for source in sorted({r.source for r in residuals}):
        others = [r for r in residuals if r.source != source]
        for r in (r for r in residuals if r.source == source):
            band = cell_band(others, engine=r.engine, era=r.era, platform=r.platform)
            if band is not None and band.low <= math.exp(r.log_ratio) <= band.high:
                inside += 1
    return inside, len(residuals)
