"""The fit on every row, then again with each source left out (and each GPU family): values stored, re-priced later.

`fit_folds` fits once on every used row (the shipped profiles) and once per fold: with one source's rows left out
(leave-one-source-out, LOSO: each source predicted by a fit that never read it) and with one GPU family's rows left
out (leave-one-family-out). A fold frees the full fit's free parameters that its own rows still identify (2 sources
left of the 3 the full fit needs: space.py), and starts where the full fit starts, at the priors' centres: a fold
warm-started from the full fit would carry the left-out source's pull along every direction its own rows leave flat
(when this was chosen, the median of per-source medians read 13.7% warm-started from the full fit's values and
offsets, 15.1% from the priors). A free value that one left-out source moves past issue 19's limit goes back to its
parent or prior, and the full fit and the folds run again (`fit_folds`, STABILITY_ROUNDS at most). What is stored
(folds.json, written by scripts/fit_expected.py) is, per fold, every cell's parameter values (the fold's fitted
values, or the parents' and priors' they fall back to) and the digest of the rows they were fitted on; `tokcost
validate` writes each fold's values into the cell's shipped profile and re-prices the left-out rows with the engine.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tokcost.errors import SpecError
from tokcost.profiles import ENGINES
from tokcost.validation.cases import COST_KEYS, Case, Pricer
from tokcost.validation.data import Row
from tokcost.validation.families import family_of
from tokcost.validation.fit import FitResult, fit_identified
from tokcost.validation.space import FOLD_MIN_SOURCES, Space

FOLDS = Path(__file__).resolve().parent / "folds.json"
DIGITS = 5  # significant digits stored: far below any figure printed
CellValues = dict[str, dict[str, float]]  # "vllm@v1" -> {"m.gemv": 0.81, "step_us": 312.0, ...}
STABILITY_ROUNDS = 6  # refits after sending back the values one source moves far (each: a full fit and its folds)
FRACTION_MOVE = 0.1  # issue 19: dropping one source moves no shared efficiency by more than this ...
COST_MOVE = 2.0  # ... nor a host cost by more than this factor


def rows_digest(rows: Sequence[Row]) -> str:
    """SHA-256 (first 12 hex digits) of every field of every row: a change of any row means a refit."""
    payload = [r.model_dump(mode="json") for r in sorted(rows, key=lambda r: r.id)]
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode("utf-8")).hexdigest()[:12]


def _round(value: float) -> float:
    return float(f"{value:.{DIGITS}g}")


def split_cell(prefix: str) -> tuple[str, str]:
    """('llama.cpp', 'graphs') for 'llama.cpp.graphs': the engine is the longest built-in name it starts with."""
    engine = max((e for e in ENGINES if prefix.startswith(e + ".")), key=len, default=prefix.split(".", 1)[0])
    return engine, prefix[len(engine) + 1 :]


def cell_values(space: Space, values: Mapping[str, float]) -> CellValues:
    """Every era-level parameter's value, by cell label (`vllm@v1`) and key."""
    out: CellValues = {}
    for name, p in space.params.items():
        if p.level == "era":
            engine, era = split_cell(name[: -len(p.key) - 1])
            out.setdefault(f"{engine}@{era}", {})[p.key] = _round(values[name])
    return {k: dict(sorted(v.items())) for k, v in sorted(out.items())}


@dataclass(frozen=True)
class Folds:
    """The full fit and every fold, as stored: values by cell, the rows' digest."""

    digest: str
    full: CellValues
    loso: dict[str, CellValues]  # left-out source -> cell values
    logo: dict[str, CellValues]  # left-out GPU family -> cell values

    def to_json(self) -> str:
        """The file's text."""
        body = {"generated_by": "scripts/fit_expected.py", "rows_digest": self.digest, "full": self.full,
                "leave_one_source_out": self.loso, "leave_one_family_out": self.logo}  # fmt: skip
        return json.dumps(body, indent=1, sort_keys=False) + "\n"


def load_folds(path: Path = FOLDS) -> Folds:
    """The stored folds; an error names the file when it is missing or not what the fit writes."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return Folds(data["rows_digest"], data["full"], data["leave_one_source_out"], data["leave_one_family_out"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SpecError(str(path), f"not the folds scripts/fit_expected.py writes ({exc}); rerun it") from None


@dataclass(frozen=True)
class FullFit:
    """The fit on every row, its parameter space, and the folds."""

    result: FitResult
    space: Space
    folds: Folds


def _fold(cases: Sequence[Case], keep: Callable[[Case], bool], space_all: Space, pricer: Pricer
          ) -> tuple[CellValues, dict[str, float]]:  # fmt: skip
    """One fold: fitted on the cases `keep` accepts from the priors' centres (as the full fit), every cell's values
    resolved over the whole space, and every parameter's value by name."""
    train = [c for c in cases if keep(c)]
    space = Space(train)  # the full fit's free parameters that 2 of their sources still identify on these rows
    space.gate(train, pricer, min_sources=FOLD_MIN_SOURCES, within=space_all.free)
    result = fit_identified(train, space, pricer, rounds=1)
    z = {n: math.log(result.values[n]) for n in result.free}
    values, _ = space_all.resolve(z)
    return cell_values(space_all, values), values


def _not_source(source: str) -> Callable[[Case], bool]:
    return lambda c: c.row.source_id != source


def _not_family(family: str) -> Callable[[Case], bool]:
    return lambda c: (family_of(c.gpu.name) or c.gpu.name) != family


def moves_far(key: str, full: float, left: float) -> bool:
    """Issue 19's limit: an efficiency moved by more than FRACTION_MOVE, a host cost by more than COST_MOVE x."""
    return max(left / full, full / left) > COST_MOVE if key in COST_KEYS else abs(left - full) > FRACTION_MOVE


def fit_folds(cases: Sequence[Case], rows: Sequence[Row], *, progress: Callable[[str], None] = lambda _: None,
              rounds: int = STABILITY_ROUNDS) -> FullFit:  # fmt: skip
    """The full fit and every LOSO and leave-one-family-out fold (see the module docstring). A free value that
    leaving one source out moves past issue 19's limit is not identified by the rows as a whole (one source sets
    it): it goes back to its parent's value or prior centre (space.demote, as a flat spread does) and the full fit
    and the folds run again, at most `rounds` times; `space.unstable` names what this sent back."""
    pricer = Pricer()
    space = Space(cases)
    space.gate(cases, pricer)
    for attempt in range(rounds + 1):
        full = fit_identified(cases, space, pricer)
        progress(f"full fit: {len(full.free)} free parameters, {full.iterations} iterations")
        loso, by_name = {}, {}
        for source in sorted({c.row.source_id for c in cases}):
            loso[source], by_name[source] = _fold(cases, _not_source(source), space, pricer)
            progress(f"left out {source}")
        far = sorted({n for n in space.free for values in by_name.values()
                      if moves_far(space.params[n].key, full.values[n], values[n])})  # fmt: skip
        if not far or attempt == rounds:
            break
        progress(f"one source moves {len(far)} free values past issue 19's limit, so they are not identified: "
                 f"{', '.join(far)}; fitting again without them")  # fmt: skip
        space.demote(far, unstable=True)
    logo = {}
    for family in sorted({family_of(c.gpu.name) or c.gpu.name for c in cases}):
        logo[family], _ = _fold(cases, _not_family(family), space, pricer)
        progress(f"left out the {family} family")
    folds = Folds(rows_digest(rows), cell_values(space, full.values), loso, logo)
    return FullFit(full, space, folds)


SHARED = ("fitted", "engine", "all engines")  # the values rows set (a prior moves with nothing)


def unstable(folds: Folds, basis: Mapping[str, Mapping[str, str]]) -> list[tuple[str, str, str, float, float]]:
    """(left-out source, cell, key, full value, fold value) for each fitted value that one source moves by more
    than FRACTION_MOVE (an efficiency) or COST_MOVE (a host cost, in us); `basis`: each cell's, by its label."""
    out = []
    for source, fold in sorted(folds.loso.items()):
        for label, values in sorted(folds.full.items()):
            for key, full in sorted(values.items()):
                if basis.get(label, {}).get(key) not in SHARED:
                    continue
                left = fold[label][key]
                if moves_far(key, full, left):
                    out.append((source, label, key, full, left))
    return out
