"""Fit the engine profiles on validation/published.yaml, with every fold, and write them where tokcost reads them.

Writes, and nothing else: every era's generated keys in tokcost/specs/engines/*.yaml (values, `basis` per value,
`band`, the file's `fit`: hand-kept keys are untouched), tokcost/validation/folds.json (the full fit's and every
fold's values with the rows' digest), and the block between `<!-- fit:start -->` and `<!-- fit:end -->` in
validation/README.md. The hardware is never fitted: it is the GPU specs' `sustained` blocks. `--check` writes
nothing and exits 1 if any file would change.

Usage: python scripts/fit_expected.py [--check]
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import yaml

from tokcost.bundle import build as build_bundle
from tokcost.bundle import bundle_path
from tokcost.cli.validate_cmd import load_specs
from tokcost.eras import EngineFile, builtin_files
from tokcost.profiles import GENERIC, Band
from tokcost.validation.bands import Residual, cell_band
from tokcost.validation.cases import prepare
from tokcost.validation.compare import RowResult
from tokcost.validation.data import load_rows
from tokcost.validation.folds import FOLDS, FullFit, fit_folds
from tokcost.validation.report import fit_markdown
from tokcost.validation.run import price_rows
from tokcost.validation.writeback import era_fields, era_values, write_era

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tokcost" / "validation" / "published.yaml"
ENGINE_SPECS = ROOT / "tokcost" / "specs" / "engines"
VALIDATION_README = ROOT / "validation" / "README.md"
FIT_BLOCK = re.compile(r"(<!-- fit:start -->\n)(.*?)(<!-- fit:end -->)", re.S)


def residuals(results: list[RowResult]) -> list[Residual]:
    """log(measured time / held-out time) of every row with a held-out prediction."""
    return [Residual(r.cell.engine, r.cell.era, r.cell.platform, r.row.source_id, math.log(r.time_ratio(r.held_out)))
            for r in results if r.held_out is not None]  # fmt: skip


def generic_band(results: list[RowResult]) -> Band:
    """The hardware alone: every row against the identity engine (never fitted, so every row is left out)."""
    got = [
        Residual("generic", "identity", r.cell.platform, r.row.source_id, math.log(r.time_ratio(r.expected)))
        for r in results
        if r.used
    ]  # fmt: skip  (an excluded row is priced, never counted)
    band = cell_band(got, engine="generic", era="identity", platform=None)
    assert band is not None
    return band.model_copy(
        update={
            "basis": f"every published row against the hardware alone ({band.rows} rows, "
            f"{band.sources} sources; nothing fitted, so every row is left out)"
        }
    )


def engine_texts(full: FullFit, bands: dict[tuple[str, str, str | None], Band | None], generic: Band) -> dict[str, str]:
    """Every engine file's new text."""
    values = full.result.values
    out = {}
    for name, f in builtin_files().items():
        data = yaml.safe_load((ENGINE_SPECS / f"{name}.yaml").read_text(encoding="utf-8"))
        for era in f.eras:
            found = era_values(full.space, values, name, era)
            band = generic if name == "generic" else bands.get((name, era, None))
            data["eras"][era] = write_era(data["eras"][era], era_fields(found, band, bands.get((name, era, "rocm"))))
        fitted = sorted({n for n in full.space.free if n.startswith(f"{name}.")})
        if name != "generic":
            data["fit"] = (
                f"scripts/fit_expected.py on tokcost/validation/published.yaml (rows digest "
                f"{full.folds.digest}): {len(fitted)} of this engine's parameters fitted, the rest "
                "labelled in each era's basis (a prior is its range's centre in tokcost/validation/priors.py, with its "
                "source); band: leave-one-source-out residuals (validation/README.md)."
            )
        EngineFile.model_validate(data)  # what is written loads
        out[name] = yaml.safe_dump(data, sort_keys=False, width=120, allow_unicode=True)
    return out


def main(argv: list[str]) -> int:
    """Fit, print, and write (or with --check, report whether anything would change)."""
    rows = load_rows(DATA)
    models, gpus = load_specs(rows, str(DATA))
    profiles = {(n, era): f.profile(era) for n, f in builtin_files().items() for era in f.eras}
    cases = prepare(rows, models, gpus, profiles)
    full = fit_folds(cases, rows, progress=lambda line: print(line, file=sys.stderr))
    # the profiles as fitted, then every row held out with them (the bands come from these residuals)
    texts = engine_texts(full, {}, GENERIC.band or Band(low=0.5, high=2.0))
    files = {n: EngineFile.model_validate(yaml.safe_load(t)) for n, t in texts.items()}
    fitted = {(n, era): f.profile(era) for n, f in files.items() for era in f.eras}
    held = price_rows(rows, models, gpus, fitted, folds=full.folds)
    res = residuals(held)
    bands = {}
    for name, f in files.items():
        for era in f.eras:
            for platform in (None, "rocm"):
                bands[(name, era, platform)] = cell_band(res, engine=name, era=era, platform=platform)
    generic = generic_band(price_rows(rows, models, gpus, fitted, engine=fitted[("generic", "identity")]))
    texts = engine_texts(full, bands, generic)
    shipped = {n: EngineFile.model_validate(yaml.safe_load(t)) for n, t in texts.items()}
    fitted = {(n, era): f.profile(era) for n, f in shipped.items() for era in f.eras}  # as written, bands included
    writes = {ENGINE_SPECS / f"{n}.yaml": t for n, t in texts.items()}
    writes[FOLDS] = full.folds.to_json()
    readme = VALIDATION_README.read_text(encoding="utf-8")
    if FIT_BLOCK.search(readme) is None:
        raise SystemExit(f"{VALIDATION_README}: no <!-- fit:start --> ... <!-- fit:end --> markers")
    body = fit_markdown(full, rows, models, gpus, held, fitted)
    writes[VALIDATION_README] = FIT_BLOCK.sub(lambda m: m.group(1) + body + m.group(3), readme, count=1)
    print(body)
    changed = [p for p, text in writes.items() if not p.is_file() or p.read_text(encoding="utf-8") != text]
    if "--check" in argv:
        for path in changed:
            print(f"out of date: {path.relative_to(ROOT)}")
        return 1 if changed else 0
    for path in changed:
        path.write_text(writes[path], encoding="utf-8")
        print(f"wrote {path.relative_to(ROOT)}")
    if changed:  # the engine files changed: their parsed copy in the built-ins' bundle follows
        bundle_path("specs").write_text(build_bundle("specs"), encoding="utf-8")
        print(f"wrote {bundle_path('specs').relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
