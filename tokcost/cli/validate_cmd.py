"""`tokcost validate`: every published measurement against the ceiling and expected predictions, and the summary."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

import tokcost
from tokcost.cli.options import TableFormat, TableFormatOpt
from tokcost.cli.render import Table, print_json, print_tables
from tokcost.errors import SpecError, UsageError
from tokcost.hardware.library import load_gpu
from tokcost.hardware.spec import GpuSpec
from tokcost.models.library import load_model
from tokcost.models.spec import ModelSpec
from tokcost.profiles import EngineProfile, load_engine

if TYPE_CHECKING:  # the validation modules load only when `tokcost validate` runs (start-up stays small)
    from tokcost.validation.compare import GroupStats, RowResult, Summary
    from tokcost.validation.data import Row
    from tokcost.validation.multinode import MultinodeResult

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
        help="Price every row with this engine profile (default: each row's own engine): generic, vllm, sglang, "
        "tensorrt-llm, llama.cpp, torch-compile, or a YAML file.",
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
    return models, gpus


def load_engines(rows: list[Row]) -> dict[str, EngineProfile]:
    """The built-in profile of every engine the rows name."""
    return {name: load_engine(name) for name in sorted({r.engine for r in rows})}


def run_validation(path: Path, engine: str | None = None) -> tuple[list[RowResult], Summary]:
    """Load the rows and the built-in specs they name, price every row with its engine (or `engine`), summarize."""
    from tokcost.validation.compare import compare_rows, summarize
    from tokcost.validation.data import load_rows

    rows = load_rows(path)
    models, gpus = load_specs(rows, str(path))
    override = load_engine(engine) if engine else None
    try:
        results = compare_rows(rows, models, gpus, load_engines(rows), override)
    except SpecError as exc:  # "row <id>: compute: ...": prefix the file
        raise SpecError(f"{path}: {exc.where}", exc.message, field=exc.field) from None
    return results, summarize(results, models)


def run_multinode(engine: str | None = None) -> list[MultinodeResult]:
    """The multi-node rows shipped with tokcost, priced with their layouts (never fitted on)."""
    from tokcost.validation.multinode import price_multinode
    from tokcost.validation.serving_data import GPUS_NOT_BUILT_IN, load_multinode

    rows = load_multinode(MULTINODE_DATA)
    models = {r.model: load_model(r.model) for r in rows}
    gpus = {r.gpu: load_gpu(r.gpu) for r in rows if r.gpu not in GPUS_NOT_BUILT_IN}
    override = load_engine(engine) if engine else None
    profiles = {name: load_engine(name) for name in sorted({r.engine for r in rows})}
    return [price_multinode(r, models, gpus, override or profiles[r.engine]) for r in rows]


def _value(v: float) -> str:
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def _pct(v: float | None, signed: bool = False) -> str:
    return "-" if v is None else f"{v:+.1%}" if signed else f"{v:.1%}"


def rows_table(results: list[RowResult]) -> Table:
    """One line per published row: measured, ceiling, expected, the error of expected, and the ceiling check."""
    table = Table(
        "Published measurements vs tokcost (error = expected / measured - 1)",
        ["id", "metric", "split", "measured", "ceiling", "expected", "error", "check"],
    )
    for r in results:
        check = f"excluded: {r.row.exclude}" if not r.used else "BEATS CEILING" if r.violation else "ok"
        table.rows.append([
            r.row.id, r.row.metric, r.split, _value(r.row.value), _value(r.ceiling), _value(r.expected),
            _pct(r.error, signed=True), check,
        ])  # fmt: skip
    return table


def summary_table(summary: Summary) -> Table:
    """Median and 90th-percentile |error| of expected, all rows and held-out, beside the untuned ceiling's."""
    table = Table(
        f"{summary.rows_used} rows used of {summary.rows_total} · ceiling violations: {len(summary.violations)}",
        ["group", "n", "median", "p90", "held-out n", "held-out median", "held-out p90", "ceiling median",
         "violations"],
    )  # fmt: skip
    for g in summary.groups:
        table.rows.append([
            g.group, str(g.rows), _pct(g.median_abs_error), _pct(g.p90_abs_error), str(g.test_rows),
            _pct(g.test_median_abs_error), _pct(g.test_p90_abs_error), _pct(g.ceiling_median_abs_error),
            str(g.violations),
        ])  # fmt: skip
    table.notes.append(
        "Absolute error of 'expected' (hardware x engine: the GPU family's fitted fractions and each row's engine "
        "profile); held-out rows come from whole sources the fit never saw; 'ceiling median' is the untuned model "
        "(datasheet peaks, no overhead)."
    )
    if summary.violations:
        table.notes.append("Measured better than the ceiling: " + ", ".join(summary.violations))
    if summary.excluded:
        table.notes.append("Excluded: " + ", ".join(summary.excluded))
    return table


def _group_json(g: GroupStats) -> dict[str, object]:
    return {
        "group": g.group, "rows": g.rows, "median_abs_error": g.median_abs_error, "p90_abs_error": g.p90_abs_error,
        "test_rows": g.test_rows, "test_median_abs_error": g.test_median_abs_error,
        "test_p90_abs_error": g.test_p90_abs_error, "ceiling_median_abs_error": g.ceiling_median_abs_error,
        "violations": g.violations,
    }  # fmt: skip


def _row_json(r: RowResult) -> dict[str, object]:
    return {
        "id": r.row.id, "source_id": r.row.source_id, "model": r.row.model, "gpu": r.row.gpu, "gpus": r.row.gpus,
        "framework": r.row.framework, "engine": r.engine, "waves": r.waves,
        "metric": r.row.metric, "split": r.split, "used": r.used, "exclude": r.row.exclude, "measured": r.row.value,
        "ceiling": r.ceiling, "expected": r.expected, "error": r.error, "ceiling_error": r.ceiling_error,
        "violation": r.violation,
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
        print_json({
            "data": str(path),
            "engine": engine or "each row's own",
            "summary": {
                "rows_total": summary.rows_total, "rows_used": summary.rows_used, "excluded": list(summary.excluded),
                "violations": list(summary.violations), "groups": [_group_json(g) for g in summary.groups],
            },
            "rows": [_row_json(r) for r in results],
            "multinode": [_multinode_json(m) for m in multinode],
        })  # fmt: skip
    else:
        tables = [rows_table(results), summary_table(summary)] + ([multinode_table(multinode)] if multinode else [])
        print_tables(tables, format.value)
