"""The summary of a validation run: the leave-one-source-out headline, then every group the physics treats apart.

Headline (issue 19): each source predicted by a fit that never read it; the median of the per-source medians of
|error| (every publication counts once), the pooled median and 90th percentile over rows, per engine, and how many
left-out rows fall inside their 80% band (a band computed without their source: bands.coverage). Then the same
held-out errors, beside the shipped fit's in-sample error and the untuned ceiling's, per engine era, GPU family,
class of rows, source and metric.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from tokcost.engine.workload import is_weight_only, resolve_precision
from tokcost.models.spec import ModelSpec
from tokcost.profiles import Band
from tokcost.validation.bands import Residual, cell_band
from tokcost.validation.compare import RowResult, percentile, workload_of
from tokcost.validation.families import family_of

LONG_CONTEXT_TOKENS = 8192  # a prompt from here on: attention and the KV cache weigh as much as the weights


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


@dataclass(frozen=True, slots=True)
class GroupStats:
    """|error| of one group of used rows: held out (LOSO), the shipped fit's, the ceiling's; band and ceiling checks."""

    group: str
    rows: int
    held_out_median: float | None
    held_out_p90: float | None
    fit_median: float
    ceiling_median: float
    inside_band: int | None  # held-out rows inside their band (None: no row is held out)
    violations: int


@dataclass(frozen=True, slots=True)
class Headline:
    """Leave-one-source-out, as issue 19 asks for it."""

    sources: int
    rows: int
    median_of_source_medians: float
    pooled_median: float
    pooled_p90: float
    inside_band: int
    by_engine: dict[str, tuple[int, int, float]]  # engine -> (rows, sources, median |error|)


@dataclass(frozen=True, slots=True)
class Summary:
    """Rows used and excluded, ceiling violations, the headline (None without held-out predictions), the groups."""

    rows_total: int
    rows_used: int
    excluded: tuple[str, ...]
    violations: tuple[str, ...]
    headline: Headline | None
    groups: tuple[GroupStats, ...]


def held_out_bands(results: Sequence[RowResult]) -> dict[str, tuple[Band | None, float]]:
    """Each held-out row's band computed without its own source (bands.cell_band), and its time ratio (predicted
    time / measured time) that the band's low and high bound."""
    residuals = {r.row.id: _residual(r) for r in results if r.held_out is not None and r.used}
    out = {}
    for source in sorted({r.source for r in residuals.values()}):
        others = [x for x in residuals.values() if x.source != source]
        for rid, x in residuals.items():
            if x.source == source:
                out[rid] = (cell_band(others, engine=x.engine, era=x.era, platform=x.platform), math.exp(x.log_ratio))
    return out


def inside_bands(results: Sequence[RowResult]) -> dict[str, bool]:
    """Whether each held-out row falls inside its band computed without its own source."""
    return {rid: band is not None and band.low <= ratio <= band.high
            for rid, (band, ratio) in held_out_bands(results).items()}  # fmt: skip


def _residual(r: RowResult) -> Residual:
    assert r.held_out is not None
    return Residual(r.cell.engine, r.cell.era, r.cell.platform, r.row.source_id, math.log(r.time_ratio(r.held_out)))


def row_classes(r: RowResult, models: Mapping[str, ModelSpec]) -> list[str]:
    """The classes of rows the physics treats differently that `r` belongs to (reported so none can hide)."""
    model, row = models[r.row.model], r.row
    weight_only = is_weight_only(resolve_precision(model, workload_of(row)))
    members = {
        "class: tensor parallel (TP > 1)": row.tp > 1,
        "class: MoE": model.moe is not None,
        "class: weight-only (dequantizing kernels)": weight_only,
        f"class: long context (prompt >= {LONG_CONTEXT_TOKENS:,})": row.prompt_tokens >= LONG_CONTEXT_TOKENS,
        "class: queued (more sequences than run at once: waves)": r.waves > 1,
        "harness: client-side (HTTP benchmark)": row.measured_at == "client",
    }
    return [name for name, member in members.items() if member]


def group_stats(group: str, results: Sequence[RowResult], inside: Mapping[str, bool]) -> GroupStats:
    """The statistics of one group."""
    held = [abs(e) for r in results if (e := r.held_out_error) is not None]
    return GroupStats(
        group=group, rows=len(results), held_out_median=_median(held),
        held_out_p90=percentile(held, 90) if held else None,
        fit_median=statistics.median(abs(r.error) for r in results),
        ceiling_median=statistics.median(abs(r.ceiling_error) for r in results),
        inside_band=sum(inside.get(r.row.id, False) for r in results) if held else None,
        violations=sum(r.violation for r in results),
    )  # fmt: skip


def headline(results: Sequence[RowResult], inside: Mapping[str, bool]) -> Headline | None:
    """The leave-one-source-out figures (None when no row has a held-out prediction)."""
    held = [r for r in results if r.held_out_error is not None]
    if not held:
        return None
    by_source: dict[str, list[float]] = {}
    for r in held:
        by_source.setdefault(r.row.source_id, []).append(abs(r.held_out_error or 0.0))
    errors = [abs(r.held_out_error or 0.0) for r in held]
    engines = {}
    for engine in sorted({r.cell.engine for r in held}):
        mine = [r for r in held if r.cell.engine == engine]
        engines[engine] = (len(mine), len({r.row.source_id for r in mine}),
                           statistics.median(abs(r.held_out_error or 0.0) for r in mine))  # fmt: skip
    return Headline(
        sources=len(by_source), rows=len(held),
        median_of_source_medians=statistics.median(statistics.median(v) for v in by_source.values()),
        pooled_median=statistics.median(errors), pooled_p90=percentile(errors, 90),
        inside_band=sum(inside.get(r.row.id, False) for r in held), by_engine=engines,
    )  # fmt: skip


def summarize(results: Sequence[RowResult], models: Mapping[str, ModelSpec]) -> Summary:
    """The headline and the statistics per engine era, GPU family, class, source and metric."""
    used = [r for r in results if r.used]
    inside = inside_bands(used)
    selections: list[tuple[str, list[RowResult]]] = [("all rows", used)]
    keys: list[tuple[str, Callable[[RowResult], str]]] = [
        ("engine", lambda r: r.engine),
        ("platform", lambda r: r.cell.platform),
        ("family", lambda r: family_of(r.row.gpu) or r.row.gpu),
    ]
    for label, key in keys:
        for value in sorted({key(r) for r in used}):
            selections.append((f"{label}: {value}", [r for r in used if key(r) == value]))
    classes = {r.row.id: row_classes(r, models) for r in used}
    names = dict.fromkeys(name for r in used for name in classes[r.row.id])
    selections += [(name, [r for r in used if name in classes[r.row.id]]) for name in names]
    for label, attr in (("source", "source_id"), ("metric", "metric")):
        for value in sorted({getattr(r.row, attr) for r in used}):
            selections.append((f"{label}: {value}", [r for r in used if getattr(r.row, attr) == value]))
    return Summary(
        rows_total=len(results),
        rows_used=len(used),
        excluded=tuple(r.row.id for r in results if not r.used),
        violations=tuple(r.row.id for r in used if r.violation),
        headline=headline(used, inside),
        groups=tuple(group_stats(name, members, inside) for name, members in selections if members),
    )
