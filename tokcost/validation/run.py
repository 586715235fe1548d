"""A validation run: every row priced with its engine era's shipped profile and with its held-out fold's profile.

The shipped profiles are the engine files' eras (tokcost/specs/engines/*.yaml); a row's cell (cells.cell_of) picks
one. The held-out profile of a row is that era's profile with the values of the fold that left the row's source
out (folds.json), written in by cases.candidate_profile, the fit's own path: so validate re-prices each row under
its fold with the engine, and computes nothing it does not print. The folds apply only to the rows they were
fitted on (the rows' digest); for any other file the held-out column stays empty, and says why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tokcost.eras import builtin_files
from tokcost.hardware.spec import GpuSpec
from tokcost.models.spec import ModelSpec
from tokcost.profiles import EngineProfile
from tokcost.validation.cases import candidate_profile, row_cell
from tokcost.validation.cells import Cell
from tokcost.validation.compare import RowResult, price_row
from tokcost.validation.data import Row
from tokcost.validation.folds import CellValues, Folds, rows_digest

Profiles = dict[tuple[str, str], EngineProfile]


def shipped_profiles() -> Profiles:
    """Every era of every built-in engine, by (engine, era)."""
    return {(name, era): f.profile(era) for name, f in builtin_files().items() for era in f.eras}


def cell_label(cell: Cell) -> str:
    """The cell's key in folds.json (`vllm@v1`)."""
    return f"{cell.engine}@{cell.era}"


def fold_profile(profile: EngineProfile, fold: CellValues, cell: Cell) -> EngineProfile:
    """An era's shipped profile with one fold's values written in (the fit's own candidate path)."""
    return candidate_profile(profile, fold.get(cell_label(cell), {}), cell.platform)


def folds_apply(folds: Folds | None, rows: Sequence[Row]) -> bool:
    """Whether stored folds were fitted on exactly these rows."""
    return folds is not None and folds.digest == rows_digest(rows)


def price_rows(
    rows: Sequence[Row], models: Mapping[str, ModelSpec], gpus: Mapping[str, GpuSpec], profiles: Profiles,
    *, engine: EngineProfile | None = None, folds: Folds | None = None,
) -> list[RowResult]:  # fmt: skip
    """Every row priced: with `engine` for all (no held-out column), else its era's profile and its fold's."""
    out = []
    for row in rows:
        model, gpu = models[row.model], gpus[row.gpu]
        if engine is not None:
            eng = engine.for_layout(row.stage_gpus)  # a split stage runs as its era says (llama.cpp: eager)
            out.append(price_row(row, model, gpu, Cell(eng.name, eng.era, gpu.platform), eng))
            continue
        cell = row_cell(row, gpu)
        profile = profiles[(cell.engine, cell.era)]
        fold = folds.loso.get(row.source_id) if folds is not None and row.exclude is None else None
        held_out = fold_profile(profile, fold, cell) if fold is not None else None
        out.append(price_row(row, model, gpu, cell, profile, held_out))
    return out
