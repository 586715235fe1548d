"""`tokcost validate`: every published measurement against the ceiling and expected predictions, and the summary."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

import tokcost
from tokcost import fmt
from tokcost.cli.options import TableFormat, TableFormatOpt
from tokcost.cli.render import Table, print_json, print_tables
from tokcost.errors import SpecError, UsageError
from tokcost.hardware.library import load_gpu
from tokcost.hardware.spec import GpuSpec
from tokcost.models.library import load_model
from tokcost.models.spec import ModelSpec
from tokcost.profiles import Band, load_engine

if TYPE_CHECKING:  # the validation modules load only when `tokcost validate` runs (start-up stays small)
    from tokcost.validation.compare import RowResult
    from tokcost.validation.data import Row
    from tokcost.validation.multinode import MultinodeResult
    from tokcost.validation.summary import GroupStats, Summary

# The published measurements ship inside the package, so `pip install .` and a wheel can validate too.
DEFAULT_DATA = Path(tokcost.__file__).resolve().parent / "validation" / "published.yaml"
MULTINODE_DATA = Path(tokcost.__file__).resolve().parent / "validation" / "multinode.yaml"

DataOpt = Annotated[
    Optional[Path],
    typer.Option("--data", help="Published measurements YAML (default: the published rows shipped with tokcost)."),
]
ValidateEngineOpt = Annotated[
    Optional[str],
    typer.Option(
        "--engine",
        help="Price every row with this engine profile (default: each row's own engine era, and the fold that left "
        "its source out): generic, vllm, vllm@0.6, sglang, tensorrt-llm@static, llama.cpp, ..., or a YAML file.",
    ),
]


def data_path(data: Path | None) -> Path:
    """The file to read: --data, else the packaged tokcost/validation/published.yaml, else a clear error."""
    if data is not None:
        return data
    if not DEFAULT_DATA.is_file():
        raise UsageError(
            f"--data: no published.yaml at {DEFAULT_DATA} (this tokcost was installed without its data); "
            "pass --data FILE"
        )
    return DEFAULT_DATA


def load_specs(rows: list[Row], where: str) -> tuple[dict[str, ModelSpec], dict[str, GpuSpec]]:
    """Each distinct model and GPU the rows name, loaded once; a bad name points at its first row."""
    models: dict[str, ModelSpec] = {}
    gpus: dict[str, GpuSpec] = {}
    for row in rows:
        field = "model"
        try:
            if row.model not in models:
                models[row.model] = load_model(row.model)
            field = "gpu"
            if row.gpu not in gpus:
                gpus[row.gpu] = load_gpu(row.gpu)
        except SpecError as exc:
            raise SpecError(f"{where}: row {row.id}", f"{exc.where}: {exc.message}", field=field) from None
        held, context = row.prompt_tokens + row.output_tokens, models[row.model].max_context
        if held > context:  # a run the model cannot hold prices as nothing (and read as beating the ceiling)
            raise SpecError(f"{where}: row {row.id}", f"prompt_tokens + output_tokens ({held:,}) exceed "
                            f"{row.model}'s max_context ({context:,})", field="prompt_tokens")  # fmt: skip
    return models, gpus


def run_validation(path: Path, engine: str | None = None) -> tuple[list[RowResult], Summary]:
    """Load the rows and the built-in specs they name; price every row with its engine era's shipped profile and,
    when the stored folds were fitted on these rows, with the fold that left its source out (or all with `engine`);
    summarize."""
    from tokcost.validation.data import load_rows
    from tokcost.validation.folds import load_folds
    from tokcost.validation.run import folds_apply, price_rows, shipped_profiles
    from tokcost.validation.summary import summarize

    rows = load_rows(path)
    models, gpus = load_specs(rows, str(path))
    override = load_engine(engine) if engine is not None else None
    try:
        folds = None if override is not None else load_folds()
        if not folds_apply(folds, rows):  # fitted on other rows: no held-out figure is claimed for these
            folds = None
        results = price_rows(rows, models, gpus, shipped_profiles(), engine=override, folds=folds)
    except SpecError as exc:  # "row <id>: compute: ...": prefix the file
        raise SpecError(f"{path}: {exc.where}", exc.message, field=exc.field) from None
    return results, summarize(results, models)


def run_multinode(engine: str | None = None) -> list[MultinodeResult]:
    """The multi-node rows shipped with tokcost, priced with their layouts and their engine eras (never fitted on)."""
    from tokcost.validation.report import multinode_results
    from tokcost.validation.run import shipped_profiles

    override = load_engine(engine) if engine is not None else None
    return multinode_results({}, shipped_profiles(), override)


def _value(v: float) -> str:
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def _pct(v: float | None, signed: bool = False) -> str:
    return "-" if v is None else f"{v:+.1%}" if signed else f"{v:.1%}"


def rows_table(results: list[RowResult]) -> Table:
    """One line per published row: measured, ceiling, expected, held out (its source left out), errors, the check."""
    table = Table(
        "Published measurements vs tokcost (error = predicted / measured - 1; held out: a fit that never read the "
        "row's source)",
        ["id", "engine", "metric", "measured", "ceiling", "expected", "error", "held out", "held-out error", "check"],
        # a narrow terminal keeps what a row is and how far off: the id, the metric, measured and held-out error
        drop=("ceiling", "held out", "check", "expected", "error", "engine"),
        answer=("measured", "held-out error"),
    )
    for r in results:
        check = f"excluded: {r.row.exclude}" if not r.used else "BEATS CEILING" if r.violation else "ok"
        held = "-" if r.held_out is None else _value(r.held_out)
        table.rows.append([
            r.row.id, r.engine, r.row.metric, _value(r.row.value), _value(r.ceiling), _value(r.expected),
            _pct(r.error, signed=True), held, _pct(r.held_out_error, signed=True), check,
        ])  # fmt: skip
    return table


def headline_table(summary: Summary, one_engine: bool = False) -> Table:
    """Leave-one-source-out: each source predicted by a fit that never read it (issue 19's headline)."""
    h = summary.headline
    table = Table("Leave-one-source-out (each source predicted by a fit that never read it)", ["figure", "value"])
    if h is None:  # one row that says why, not an empty table
        why = (
            "none: --engine prices every row with one profile"
            if one_engine
            else "none: the stored folds were fitted on other rows (scripts/fit_expected.py refits them on these)"
        )
        table.rows.append(["held-out predictions", why])
        return table
    table.rows += [
        ["sources / rows", f"{h.sources} / {h.rows}"],
        ["median of per-source medians", _pct(h.median_of_source_medians)],
        ["pooled median", _pct(h.pooled_median)],
        ["pooled p90", _pct(h.pooled_p90)],
        ["inside the 80% band", f"{h.inside_band / h.rows:.1%} ({h.inside_band} of {h.rows})"],
    ]
    for engine, (rows, sources, median) in h.by_engine.items():
        table.rows.append(
            [f"engine: {engine} ({fmt.counted(rows, 'row')}, {fmt.counted(sources, 'source')})", _pct(median)]
        )
    return table


def summary_table(summary: Summary) -> Table:
    """Median and 90th-percentile |error| held out, beside the shipped fit's and the untuned ceiling's, per group."""
    table = Table(
        f"{summary.rows_used} rows used of {summary.rows_total} · ceiling violations: {len(summary.violations)}",
        ["group", "n", "held-out median", "held-out p90", "fit median", "ceiling median", "inside band",
         "violations"],
    )  # fmt: skip
    for g in summary.groups:
        table.rows.append([
            g.group, str(g.rows), _pct(g.held_out_median), _pct(g.held_out_p90), _pct(g.fit_median),
            _pct(g.ceiling_median), "-" if g.inside_band is None else f"{g.inside_band}", str(g.violations),
        ])  # fmt: skip
    table.notes.append(
        "Absolute error of 'expected' (hardware x engine era: the GPU's measured sustained shares and each row's "
        "engine era); 'held out' comes from the fit that never read the row's source; 'fit' is the shipped profile's "
        "(it read every row); 'ceiling median' is the untuned model (datasheet peaks, no overhead)."
    )
    if summary.violations:
        table.notes.append("Measured better than the ceiling: " + ", ".join(summary.violations))
    if summary.excluded:
        table.notes.append("Excluded: " + ", ".join(summary.excluded))
    return table


def _group_json(g: GroupStats) -> dict[str, object]:
    return {
        "group": g.group, "rows": g.rows, "held_out_median_abs_error": g.held_out_median,
        "held_out_p90_abs_error": g.held_out_p90, "fit_median_abs_error": g.fit_median,
        "ceiling_median_abs_error": g.ceiling_median, "inside_band": g.inside_band, "violations": g.violations,
    }  # fmt: skip


def _headline_json(summary: Summary) -> dict[str, object] | None:
    h = summary.headline
    if h is None:
        return None
    return {
        "sources": h.sources, "rows": h.rows, "median_of_source_medians": h.median_of_source_medians,
        "pooled_median": h.pooled_median, "pooled_p90": h.pooled_p90, "inside_band": h.inside_band,
        "by_engine": {e: {"rows": n, "sources": s, "median_abs_error": m} for e, (n, s, m) in h.by_engine.items()},
    }  # fmt: skip


def _row_json(r: RowResult, bands: dict[str, tuple[Band | None, float]]) -> dict[str, object]:
    band, ratio = bands.get(r.row.id, (None, None))
    held = None if ratio is None else {
        "time_ratio": ratio, "low": band.low if band else None, "high": band.high if band else None,
        "inside": band is not None and band.low <= ratio <= band.high,
    }  # fmt: skip
    return {
        "id": r.row.id, "source_id": r.row.source_id, "model": r.row.model, "gpu": r.row.gpu, "gpus": r.row.gpus,
        "framework": r.row.framework, "engine": r.engine, "platform": r.cell.platform, "waves": r.waves,
        "metric": r.row.metric, "used": r.used, "exclude": r.row.exclude, "measured": r.row.value,
        "ceiling": r.ceiling, "expected": r.expected, "held_out": r.held_out, "error": r.error,
        "held_out_error": r.held_out_error, "ceiling_error": r.ceiling_error, "violation": r.violation,
        # the row's 80% band without its source, on predicted / measured time, as the summary's coverage counts it
        "held_out_band": held,
    }  # fmt: skip


def multinode_table(results: list[MultinodeResult]) -> Table:
    """The multi-node rows: measured, ceiling, expected and error, or why a row is not priced."""
    table = Table(
        "Multi-node and expert-parallel rows (the hard class: priced with their layouts, never fitted on)",
        ["id", "metric", "measured", "ceiling", "expected", "error", "check"],
    )
    for m in results:
        if m.expected is None or m.ceiling is None:
            table.rows.append([m.row.id, m.row.metric, _value(m.row.value), "-", "-", "-", f"not priced: {m.reason}"])
            continue
        check = "BEATS CEILING" if m.violation else "ok"
        table.rows.append([m.row.id, m.row.metric, _value(m.row.value), _value(m.ceiling), _value(m.expected),
                           _pct(m.error, signed=True), check])  # fmt: skip
    return table


def _multinode_json(m: MultinodeResult) -> dict[str, object]:
    return {
        "id": m.row.id, "source_id": m.row.source_id, "metric": m.row.metric, "measured": m.row.value,
        "ceiling": m.ceiling, "expected": m.expected, "error": m.error, "network": m.network, "not_priced": m.reason,
        "violation": m.violation,
    }  # fmt: skip


def validate(
    data: DataOpt = None, engine: ValidateEngineOpt = None, format: TableFormatOpt = TableFormat.table
) -> None:
    """Check predictions against published measurements. Example: tokcost validate --engine vllm --format markdown"""
    path = data_path(data)
    results, summary = run_validation(path, engine)
    multinode = run_multinode(engine) if data is None else []
    if format == TableFormat.json:
        from tokcost.validation.summary import held_out_bands

        bands = held_out_bands([r for r in results if r.used])
        print_json({
            "data": str(path),
            "engine": engine or "each row's own",
            "summary": {
                "rows_total": summary.rows_total, "rows_used": summary.rows_used, "excluded": list(summary.excluded),
                "violations": list(summary.violations), "leave_one_source_out": _headline_json(summary),
                "groups": [_group_json(g) for g in summary.groups],
            },
            "rows": [_row_json(r, bands) for r in results],
            "multinode": [_multinode_json(m) for m in multinode],
        })  # fmt: skip
    else:
        tables = [rows_table(results), headline_table(summary, engine is not None), summary_table(summary)] + (
            [multinode_table(multinode)] if multinode else []
        )
        print_tables(tables, format.value)
