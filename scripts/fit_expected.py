"""Fit tokcost's "expected" model on the train split of validation/published.yaml and write it where it is used.

Prints the fitted values and the errors before and after; rewrites only the `achievable:` block of each GPU
spec in a fitted family (every other byte of the file is kept) and the block between `<!-- fit:start -->` and
`<!-- fit:end -->` in validation/README.md. `--check` writes nothing and exits 1 if any file would change.

Usage: python scripts/fit_expected.py [--check]
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from tokcost.cli.validate_cmd import load_specs
from tokcost.hardware.spec import Achievable
from tokcost.validation.compare import GroupStats, RowResult, compare_rows, group_stats
from tokcost.validation.data import load_rows
from tokcost.validation.fit import (
    FAMILIES,
    FAMILY_PARAMS,
    MIN_FAMILY_ROWS,
    MIN_INFORMATIVE_ROWS,
    SHARED_PARAMS,
    STARTING,
    FitResult,
    family_of,
    fit,
    prepare,
    with_achievable,
)

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tokcost" / "validation" / "published.yaml"
SPECS = ROOT / "tokcost" / "specs" / "gpus"
VALIDATION_README = ROOT / "validation" / "README.md"
FIT_BLOCK = re.compile(r"(<!-- fit:start -->\n)(.*?)(<!-- fit:end -->)", re.S)
ACHIEVABLE_BLOCK = re.compile(r"^achievable:\n(?:[ \t].*\n)*", re.M)  # the key and its indented lines


@dataclass(frozen=True)
class Report:
    """The fit and the errors of the three models it is compared with, row by row."""

    result: FitResult
    rows_total: int
    untuned: list[RowResult]  # ceiling: fractions 1, no overhead
    starting: list[RowResult]  # the hand-set values the specs carried before any fit
    fitted: list[RowResult]


def run_fit() -> Report:
    """Load the rows and specs, fit on the train split, and price every row under each model."""
    rows = load_rows(DATA)
    models, gpus = load_specs(rows, str(DATA))
    result = fit(prepare(rows, models, gpus))
    starting = {n: g.model_copy(update={"achievable": STARTING}) if family_of(n) else g for n, g in gpus.items()}
    fitted = compare_rows(rows, models, with_achievable(gpus, result))
    untuned = [RowResult(r.row, r.split, r.ceiling, r.ceiling) for r in fitted]
    return Report(result, len(rows), untuned, compare_rows(rows, models, starting), fitted)


def stats(results: list[RowResult], split: str, family: str | None = None) -> GroupStats:
    """|error| statistics of the used rows of one split (and family)."""
    chosen = [r for r in results if r.used and r.split == split and (family is None or family_of(r.row.gpu) == family)]
    return group_stats(split, chosen)


def how_fitted(res: FitResult, family: str, name: str) -> str:
    """Where one value of a family came from: own rows, pooled, shared or fixed."""
    fam = next(f for f in res.families if f.family == family)
    if name in res.fixed:
        return "fixed"
    if name in SHARED_PARAMS:
        return "shared"
    return "own" if name in fam.own else "pooled"


def source_of(report: Report, family: str) -> str:
    """The provenance written into achievable.source: how, on what, and how well the fit did."""
    res = report.result
    fam = next(f for f in res.families if f.family == family)
    parts = {kind: [n for n in (*FAMILY_PARAMS, *SHARED_PARAMS) if how_fitted(res, family, n) == kind]
             for kind in ("own", "pooled", "shared", "fixed")}  # fmt: skip
    how = "; ".join(f"{kind}: {', '.join(names)}" for kind, names in parts.items() if names)
    test = stats(report.fitted, "test")
    return (
        f"Fitted by scripts/fit_expected.py on the train split of validation/published.yaml ({res.train_rows} of "
        f"{report.rows_total} rows; train digest {res.data_digest}; {fam.train_rows} {family} train rows). Where "
        f"each value comes from ({how}): own = the {family} train rows, pooled = every train row, shared = one "
        "value for every family fitted over every train row, fixed = not fitted. Objective: mean |log(predicted / "
        "measured)|, coordinate search on bounded grids (fractions 0.10-1.00 by 0.01; request overhead 0-50 ms; "
        f"all-reduce latency 0-100 us). Held-out error over all families: median {test.median_abs_error:.1%}, "
        f"p90 {test.p90_abs_error:.1%} on {test.rows} rows never seen by the fit. Written to every {family} GPU "
        f"({', '.join(FAMILIES[family])}); members without rows of their own inherit the family's values. "
        "Split, errors and caveats: validation/README.md."
    )


def achievable_of(report: Report, gpu: str) -> Achievable | None:
    """The block to write for one built-in GPU, provenance included; None outside every family."""
    ach = report.result.achievable_of(gpu)
    family = family_of(gpu)
    if ach is None or family is None:
        return None
    return ach.model_copy(update={"source": source_of(report, family)})


def achievable_yaml(ach: Achievable) -> str:
    """The `achievable:` block as YAML, keys in schema order, a null weight-only fraction left out."""
    data = ach.model_dump(exclude_none=True)
    return yaml.safe_dump({"achievable": data}, sort_keys=False, width=120, allow_unicode=True)


def replace_achievable(text: str, ach: Achievable) -> str:
    """The spec text with only its `achievable:` block replaced (appended when it has none)."""
    block = achievable_yaml(ach)
    if ACHIEVABLE_BLOCK.search(text) is None:
        return text + ("" if text.endswith("\n") else "\n") + block
    return ACHIEVABLE_BLOCK.sub(lambda _: block, text, count=1)


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.1%}"


def fit_markdown(report: Report) -> str:
    """The generated part of validation/README.md: fitted values, errors before and after, per family."""
    res = report.result
    lines = [
        f"Train digest `{res.data_digest}` ({res.train_rows} train rows of {report.rows_total}). "
        "Regenerate with `python scripts/fit_expected.py`. Each value says where it comes from: *own* (the "
        "family's train rows), *pooled* (every train row), *shared* (one value for every family, fitted over "
        "every train row, each row under its family's other values), *fixed* (not fitted).",
        "",
        "| family | train rows | bandwidth | weight-only quant bandwidth | compute | step overhead (us) | "
        "request overhead (ms) | all-reduce latency (us) |",
        "|:---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    units = {"step_overhead_us": 1.0, "request_overhead_us": 1e-3, "allreduce_latency_us": 1.0}
    names = ("bandwidth", "weight_only_quant_bandwidth", "compute", *units)

    def cell(a: Achievable, name: str, how: str) -> str:
        value = getattr(a, name)
        text = "-" if value is None else f"{value:.2f}" if name not in units else f"{value * units[name]:g}"
        return f"{text} ({how})"

    for f in res.families:
        cells = " | ".join(cell(f.achievable, n, how_fitted(res, f.family, n)) for n in names)
        lines.append(f"| {f.family} | {f.train_rows} | {cells} |")
    pooled_how = {n: "fixed" if n in res.fixed else "shared" if n in SHARED_PARAMS else "pooled" for n in names}
    cells = " | ".join(cell(res.pooled, n, pooled_how[n]) for n in names)
    lines.append(f"| (pooled) | {res.train_rows} | {cells} |")
    counts = {f.family: dict(f.informative) for f in res.families}
    overall = dict(res.informative)
    lines += [
        "",
        f"Train rows that inform each parameter (a fifth of its range moves their prediction by 5% or more; "
        f"a family fits a parameter on its own rows from {MIN_INFORMATIVE_ROWS}, and from {MIN_FAMILY_ROWS} train "
        "rows in all):",
        "",
        "| parameter | " + " | ".join(FAMILIES) + " | all train rows |",
        "|:---|" + "---:|" * (len(FAMILIES) + 1),
    ]
    for n in (*FAMILY_PARAMS, *SHARED_PARAMS):
        per_family = " | ".join(str(counts[f][n]) if n in counts[f] else "-" for f in FAMILIES)
        lines.append(f"| {n} | {per_family} | {overall[n]} |")
    lines += [
        "",
        "| model | train median | train p90 | held-out median | held-out p90 |",
        "|:---|---:|---:|---:|---:|",
    ]
    models = [
        ("untuned: ceiling (fractions 1, no overhead)", report.untuned),
        (f"hand-set starting values ({STARTING.bandwidth}, {STARTING.compute}, {STARTING.step_overhead_us:g} us)",
         report.starting),
        ("fitted", report.fitted),
    ]  # fmt: skip
    for name, results in models:
        train, test = stats(results, "train"), stats(results, "test")
        lines.append(
            f"| {name} | {_pct(train.median_abs_error)} | {_pct(train.p90_abs_error)} | "
            f"{_pct(test.median_abs_error)} | {_pct(test.p90_abs_error)} |"
        )
    lines += [
        "",
        "| family | held-out rows | held-out median | held-out p90 | train median |",
        "|:---|---:|---:|---:|---:|",
    ]
    for family in FAMILIES:
        if not any(family_of(r.row.gpu) == family and r.split == "test" for r in report.fitted):
            continue
        test, train = stats(report.fitted, "test", family), stats(report.fitted, "train", family)
        lines.append(
            f"| {family} | {test.rows} | {_pct(test.median_abs_error)} | {_pct(test.p90_abs_error)} | "
            f"{_pct(train.median_abs_error)} |"
        )
    return "\n".join(lines) + "\n"


def planned_writes(report: Report) -> dict[Path, str]:
    """Every file the fit rewrites, with its new text."""
    writes = {}
    for members in FAMILIES.values():
        for gpu in members:
            path = SPECS / f"{gpu}.yaml"
            ach = achievable_of(report, gpu)
            if ach is not None and path.is_file():
                writes[path] = replace_achievable(path.read_text(encoding="utf-8"), ach)
    readme = VALIDATION_README.read_text(encoding="utf-8")
    if FIT_BLOCK.search(readme) is None:
        raise SystemExit(f"{VALIDATION_README}: no <!-- fit:start --> ... <!-- fit:end --> markers")
    body = fit_markdown(report)
    writes[VALIDATION_README] = FIT_BLOCK.sub(lambda m: m.group(1) + body + m.group(3), readme, count=1)
    return writes


def main(argv: list[str]) -> int:
    """Fit, print, and write (or with --check, report whether anything would change)."""
    report = run_fit()
    print(fit_markdown(report))
    changed = [p for p, text in planned_writes(report).items() if p.read_text(encoding="utf-8") != text]
    if "--check" in argv:
        for path in changed:
            print(f"out of date: {path.relative_to(ROOT)}")
        return 1 if changed else 0
    for path, text in planned_writes(report).items():
        if path in changed:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
