"""Fit "expected" = hardware x engine once, on the train sources of validation/published.yaml, and write it where used.

Writes, and nothing else: the `achievable:` block of every GPU spec in a fitted family (every other byte of the
file is kept), the fitted keys of every engine profile (tokcost/specs/engines/*.yaml: kernels, fixed costs, source
and fit digest; name, notes and the scheduler defaults are kept), and the block between `<!-- fit:start -->` and
`<!-- fit:end -->` in validation/README.md (split, fitted values, errors before and after, per engine, family,
class and source, and the multinode rows). `--check` writes nothing and exits 1 if any file would change.

Usage: python scripts/fit_expected.py [--check]
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from tokcost.cli.validate_cmd import load_specs
from tokcost.hardware.spec import Achievable, GpuSpec
from tokcost.models.spec import ModelSpec
from tokcost.profiles import ENGINES, GENERIC, EngineProfile
from tokcost.validation.cases import candidate_profile, engine_values, prepare
from tokcost.validation.compare import RowResult, compare_rows
from tokcost.validation.data import HELD_OUT_SOURCES, Row, load_rows
from tokcost.validation.families import FAMILIES, family_of
from tokcost.validation.fit import FitResult, fit
from tokcost.validation.report import fit_markdown

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tokcost" / "validation" / "published.yaml"
SPECS = ROOT / "tokcost" / "specs" / "gpus"
ENGINE_SPECS = ROOT / "tokcost" / "specs" / "engines"
VALIDATION_README = ROOT / "validation" / "README.md"
FIT_BLOCK = re.compile(r"(<!-- fit:start -->\n)(.*?)(<!-- fit:end -->)", re.S)
ACHIEVABLE_BLOCK = re.compile(r"^achievable:\n(?:[ \t].*\n)*", re.M)  # the key and its indented lines
ENGINE_KEY_ORDER = ("name", "source", "kernels", "step_overhead_us", "request_overhead_us", "collective_overhead_us",
                    "max_running_sequences", "chunk_tokens", "scheduler_steps", "scheduler_tiers", "scheduler_source",
                    "fit", "notes")  # fmt: skip


@dataclass(frozen=True)
class Fitted:
    """The fit and the specs it produces."""

    result: FitResult
    rows: list[Row]
    models: dict[str, ModelSpec]
    gpus: dict[str, GpuSpec]  # every GPU the rows name, with its family's fitted fractions
    engines: dict[str, EngineProfile]  # every profile, fitted


def achievable_of(result: FitResult, family: str) -> Achievable:
    """A family's hardware block: its two fractions, no fixed cost (those are the engines'), the link's latency."""
    informed = {p: result.informed.get(f"gpu.{family}.{p}", 0) for p in ("bandwidth", "compute")}
    how = ", ".join(
        f"{p} {'fitted' if f'gpu.{family}.{p}' in result.free else 'at its start (too few rows inform it)'}"
        f" ({informed[p]} informing rows)"
        for p in informed
    )
    source = (
        f"Fitted by scripts/fit_expected.py with the engine profiles (hardware x engine), on the train sources of "
        f"tokcost/validation/published.yaml (train digest {result.data_digest}; {result.train_rows} train rows, "
        f"{result.train_rows_by_family.get(family, 0)} on {family}: {', '.join(FAMILIES[family])}; held out: "
        f"{', '.join(sorted(HELD_OUT_SOURCES))}). {how}. The fraction is what a typical engine reaches on this family "
        "(the engines' efficiencies are held to 1 by a weak prior, so the split between hardware and engine is a "
        "convention; the product is what the rows fix). Fixed costs live in the engine profiles; collectives use "
        "the link's own latency. Members without rows of their own inherit the family's values. Errors and "
        "caveats: validation/README.md."
    )
    return Achievable(
        bandwidth=result.value(f"gpu.{family}.bandwidth"),
        compute=result.value(f"gpu.{family}.compute"),
        basis="fitted",
        rows=result.train_rows_by_family.get(family, 0),
        source=source,
    )


def profile_of(result: FitResult, engine: str, base: EngineProfile) -> EngineProfile:
    """An engine's profile from the fit: fitted efficiencies (those left at 1 are omitted) and fixed costs."""
    values = engine_values(result.values, engine)
    names = sorted(values)
    free = [n for n in names if f"{engine}.{n}" in result.free]
    fixed = [n for n in names if f"{engine}.{n}" not in result.free]
    rows = result.train_rows_by_engine.get(engine, 0)
    kernels_note = (
        "kernels at the identity by construction (the reference of the product); " if engine == "generic" else ""
    )
    fit_text = (
        f"scripts/fit_expected.py, train digest {result.data_digest}: {rows} of {result.train_rows} train rows are "
        f"{engine}'s; {kernels_note}fitted: {', '.join(free) or 'nothing'}; left at their start (fewer than 3 train "
        f"rows inform them): {', '.join(fixed) or 'none'}. Split, errors and caveats: validation/README.md."
    )
    sources = result.train_sources_by_engine.get(engine, ())
    source = (
        f"Fitted on published {engine} measurements of the train sources ({', '.join(sources) or 'none'}); "
        "each row's source and quote are in tokcost/validation/published.yaml."
    )
    return candidate_profile(base, values).model_copy(update={"source": source, "fit": fit_text})


def run_fit() -> Fitted:
    """Load the rows, specs and profiles; fit on the train sources; the specs and profiles it produces."""
    rows = load_rows(DATA)
    models, gpus = load_specs(rows, str(DATA))
    bases = {name: load_engine_base(name) for name in ENGINES}
    result = fit(prepare(rows, models, gpus, bases))
    fitted_gpus = {}
    for name, gpu in gpus.items():
        family = family_of(name)
        fitted_gpus[name] = (
            gpu if family is None else gpu.model_copy(update={"achievable": achievable_of(result, family)})
        )
    engines = {name: profile_of(result, name, bases[name]) for name in ENGINES}
    return Fitted(result, rows, models, fitted_gpus, engines)


def load_engine_base(name: str) -> EngineProfile:
    """The profile as shipped (its name, notes and scheduler defaults are kept; the rest is refitted)."""
    path = ENGINE_SPECS / f"{name}.yaml"
    if not path.is_file():
        return GENERIC.model_copy(update={"name": name, "source": "to be fitted", "fit": ""})
    return EngineProfile.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))


def achievable_yaml(ach: Achievable) -> str:
    """The `achievable:` block as YAML, keys in schema order, None left out."""
    return yaml.safe_dump({"achievable": ach.model_dump(exclude_none=True)}, sort_keys=False, width=120,
                          allow_unicode=True)  # fmt: skip


def replace_achievable(text: str, ach: Achievable) -> str:
    """The spec text with only its `achievable:` block replaced (appended when it has none)."""
    block = achievable_yaml(ach)
    if ACHIEVABLE_BLOCK.search(text) is None:
        return text + ("" if text.endswith("\n") else "\n") + block
    return ACHIEVABLE_BLOCK.sub(lambda _: block, text, count=1)


def engine_yaml(profile: EngineProfile) -> str:
    """A profile as YAML: its keys in a fixed order, empty ones left out."""
    data = profile.model_dump(mode="json", exclude_none=True)
    data["kernels"] = {k: v for k, v in data["kernels"].items() if v not in ({}, 1.0)}
    ordered = {k: data[k] for k in ENGINE_KEY_ORDER if k in data and data[k] not in ("", {}, [])}
    return yaml.safe_dump(ordered, sort_keys=False, width=120, allow_unicode=True)


def priced(fitted: Fitted) -> list[RowResult]:
    """Every row under the fitted specs and profiles."""
    return compare_rows(fitted.rows, fitted.models, fitted.gpus, fitted.engines)


def planned_writes(fitted: Fitted) -> dict[Path, str]:
    """Every file the fit rewrites, with its new text."""
    writes = {}
    for members in FAMILIES.values():
        for gpu in members:
            path = SPECS / f"{gpu}.yaml"
            family = family_of(gpu)
            if path.is_file() and family is not None:
                writes[path] = replace_achievable(
                    path.read_text(encoding="utf-8"), achievable_of(fitted.result, family)
                )
    for name, profile in fitted.engines.items():
        writes[ENGINE_SPECS / f"{name}.yaml"] = engine_yaml(profile)
    readme = VALIDATION_README.read_text(encoding="utf-8")
    if FIT_BLOCK.search(readme) is None:
        raise SystemExit(f"{VALIDATION_README}: no <!-- fit:start --> ... <!-- fit:end --> markers")
    body = fit_markdown(fitted.result, fitted.rows, fitted.models, fitted.gpus, fitted.engines)
    writes[VALIDATION_README] = FIT_BLOCK.sub(lambda m: m.group(1) + body + m.group(3), readme, count=1)
    return writes


def main(argv: list[str]) -> int:
    """Fit, print, and write (or with --check, report whether anything would change)."""
    fitted = run_fit()
    writes = planned_writes(fitted)
    print(writes[VALIDATION_README].split("<!-- fit:start -->")[1].split("<!-- fit:end -->")[0])
    changed = [p for p, text in writes.items() if not p.is_file() or p.read_text(encoding="utf-8") != text]
    if "--check" in argv:
        for path in changed:
            print(f"out of date: {path.relative_to(ROOT)}")
        return 1 if changed else 0
    for path in changed:
        path.write_text(writes[path], encoding="utf-8")
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
