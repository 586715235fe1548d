"""`tokcost sweep`: one row per batch and/or context point; marks the critical batch and the memory limit.

csv and jsonl rows are written as each point is priced (memory holds one point), so their bound is on work and
output size; table, markdown, json and --plot hold every point, and their bound is on what is held.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import fields
from enum import Enum
from itertools import chain
from operator import attrgetter
from pathlib import Path
from typing import Annotated, Optional, TextIO

import typer

from tokcost import fmt, plots
from tokcost.cli.common import format_grid, int_list, workload_from_flags
from tokcost.cli.deploy import degree_named_as_given, layout_flags, unused_network, warn
from tokcost.cli.options import (
    ComputeListOpt,
    DpOpt,
    EngineOpt,
    EpOpt,
    FlashOpt,
    ForceOpt,
    GpuOpt,
    GpusOpt,
    GpusPerNodeOpt,
    KvListOpt,
    ModelOpt,
    NetworkOpt,
    OutputOpt,
    PlotOpt,
    PpOpt,
    PrefixOpt,
    PriceOpt,
    RedundantOpt,
    TpOpt,
    WeightsListOpt,
    dash_is_stdout,
)  # fmt: skip
from tokcost.cli.render import (
    RICH_ROWS,
    Progress,
    Table,
    flash_note,
    json_text,
    markdown,
    print_tables,
    write_rows,
)
from tokcost.engine.estimate import deployment
from tokcost.engine.sweep import SweepPoint, iter_sweep, sweep_warnings
from tokcost.errors import Interrupted, UsageError
from tokcost.files import check_destination, open_new
from tokcost.hardware.library import load_gpu, network_for
from tokcost.inputs import FLAG_OF_FIELD, MAX_GRID_POINTS, MAX_STREAMED_POINTS, check_decode_output, sweep_grid
from tokcost.models.library import load_model
from tokcost.profiles import engine_for

DEFAULT_PROMPT = 1024
MAX_HELD_POINTS = MAX_GRID_POINTS  # table, markdown, json and --plot hold every point (and rich lays out each row)
# csv and jsonl stream: ~150 bytes a row, so 10M rows are ~1.5 GB of CSV, and 5 minutes at 1M points in 30 s
COLUMNS = [f.name for f in fields(SweepPoint)]  # as_dict()'s keys, in order: the CSV header and the JSON keys
_row = attrgetter(*COLUMNS)


class SweepFormat(str, Enum):
    """Renderings of a sweep: three that hold the points, two that stream them."""

    table = "table"
    markdown = "markdown"
    json = "json"
    csv = "csv"
    jsonl = "jsonl"


STREAMED = (SweepFormat.csv, SweepFormat.jsonl)
# a destination whose suffix names a format: it must be the one -f writes (any other suffix is the user's choice)
_SUFFIX_FORMAT = {".csv": SweepFormat.csv, ".json": SweepFormat.json, ".jsonl": SweepFormat.jsonl,
                  ".md": SweepFormat.markdown, ".markdown": SweepFormat.markdown}  # fmt: skip
SweepFormatOpt = Annotated[
    SweepFormat,
    typer.Option(
        "--format",
        "-f",
        help=f"table (rich; plain text past {RICH_ROWS} rows), markdown or json: up to {MAX_HELD_POINTS:,} points; "
        f"csv or jsonl (JSON Lines), written as computed: up to {MAX_STREAMED_POINTS:,}.",
    ),
]
OutOpt = Annotated[
    Optional[Path],
    typer.Option(
        "--out",
        metavar="FILE",
        help="Write the rows to FILE (not stdout; - is stdout): it appears whole when the sweep ends.",
        callback=dash_is_stdout,
    ),
]


def sweep(
    model: ModelOpt,
    gpu: GpuOpt,
    batch: Annotated[str, typer.Option("--batch", "-b", help="Batch sizes, comma-separated: 1,2,4,8.")] = "1",
    context: Annotated[
        Optional[str], typer.Option("--context", help="Prompt lengths, comma-separated (default: --prompt).")
    ] = None,
    gpus: GpusOpt = None,
    tp: TpOpt = None,
    pp: PpOpt = 1,
    ep: EpOpt = 1,
    dp: DpOpt = 1,
    redundant_experts: RedundantOpt = 0,
    gpus_per_node: GpusPerNodeOpt = None,
    network: NetworkOpt = None,
    engine: EngineOpt = None,
    prompt: Annotated[
        Optional[int], typer.Option("--prompt", "-p", help="Prompt tokens per sequence, when --context is not given.")
    ] = None,
    output: OutputOpt = 256,
    cached_prefix: PrefixOpt = 0,
    weights: WeightsListOpt = None,
    kv_dtype: KvListOpt = None,
    compute_dtype: ComputeListOpt = None,
    flash_attention: FlashOpt = True,
    price: PriceOpt = None,
    format: SweepFormatOpt = SweepFormat.table,
    out: OutOpt = None,
    force: ForceOpt = False,
    plot: PlotOpt = None,
) -> None:
    """Sweep batch sizes and/or prompt lengths. Example: tokcost sweep -m llama-3.1-8b -g h100-sxm -b 1,8,64,256"""
    if prompt is not None and context is not None:
        raise UsageError("--prompt: --context gives the prompt lengths; drop --prompt (or give it as --context)")
    check_decode_output(output, "--output")
    batches = int_list(batch, "--batch", 1, 1_000_000)
    contexts = int_list(context, "--context") if context is not None else [DEFAULT_PROMPT if prompt is None else prompt]
    streamed = format in STREAMED and plot is None
    limit, hint = _bound(format, streamed)
    formats = format_grid(weights, kv_dtype, compute_dtype)  # each priced in turn, as compare and plan take them
    bases = [workload_from_flags(
        prompt_tokens=contexts[0], output_tokens=output, cached_prefix_tokens=cached_prefix,
        flash_attention=flash_attention, price_per_hour_usd=price,
        **precision,
        **layout_flags(gpus, tp, pp, ep, dp, gpus_per_node, redundant_experts),
    ) for precision in formats]  # fmt: skip
    names = {**FLAG_OF_FIELD, "prompt_tokens": "--context"}  # --prompt alone is checked as the base's
    more = (("formats", formats),) if len(formats) > 1 else ()
    batches, contexts = sweep_grid(bases[0], batches=batches, prompts=contexts, names=names, limit=limit, hint=hint,
                                   more=more)  # fmt: skip
    _check_outputs(format, out, force, plot, len(formats))
    spec = load_gpu(gpu)
    spec_model, net, profile = load_model(model), network_for(spec, network), engine_for(engine)
    with degree_named_as_given(gpus, tp, pp, dp):
        warn(unused_network(network, [deployment(spec_model, spec, bases[0], net, profile).layout]))
    points = chain.from_iterable(
        iter_sweep(spec_model, spec, base, batches=batches, prompts=contexts, network=net, engine=profile)
        for base in bases
    )
    # the first point priced now: what the engine refuses (a layer kind, a layout) is refused before any row
    first = next(points)
    points = chain([first], points)
    held = None if streamed else list(points)  # table, markdown, json and --plot hold every point
    warnings = list(dict.fromkeys(w for base in bases for w in sweep_warnings(
        spec_model, spec, base, prompts=contexts, network=net, engine=profile, batches=batches)))  # fmt: skip
    if format != SweepFormat.json:  # JSON carries its warnings inside
        warn(warnings)
    with _destination(out, force) as handle:
        if format in STREAMED:
            rows = points if held is None else held
            if out is not None and held is None:  # to a file: a terminal's stderr counts the rows (a million: minutes)
                rows = _counted(rows, len(batches) * len(contexts) * len(formats))
            write_rows(map(_row, rows), COLUMNS, format.value, handle)
        else:
            _render_held(held or [], format, handle, warnings)
    if plot is not None and held is not None:  # TPOT, tokens/s per GPU, memory and cost against batch and context
        figure = plots.sweep_figure(held, capacity_bytes_per_gpu=spec.memory_bytes)
        plots.save(figure, plot, force=force, asker="--plot")


def _check_outputs(format: SweepFormat, out: Path | None, force: bool, plot: Path | None, formats: int) -> None:
    """Before any work: --out where it can write, --force only with it, one picture per format."""
    if plot is not None and formats > 1:
        raise UsageError("--plot: draws one format's sweep; give one --weights/--kv-dtype/--compute-dtype value")
    if plot is not None and out is not None and plot.resolve() == out.resolve():  # one would replace the other
        raise UsageError(f"--plot: {plot.name!r} is also --out; give the picture and the table two files")
    if out is not None:
        if format == SweepFormat.table:
            raise UsageError("--out: writes csv, jsonl, json or markdown; add -f csv (or another of them)")
        written = _SUFFIX_FORMAT.get(out.suffix.lower())
        if written is not None and written != format:  # a .csv holding JSON: the next tool to open it fails
            raise UsageError(f"--out: {out.name!r} names a .{written.value} file but -f {format.value} writes "
                             f"{format.value}; give -f {written.value}, or a name that ends as -f writes")  # fmt: skip
        check_destination(out, force)
    elif force and plot is None:
        raise UsageError("--force: replaces an existing --out or --plot file; give it with one, or drop it")


def _render_held(points: list[SweepPoint], format: SweepFormat, handle: TextIO, warnings: list[str]) -> None:
    """The renderings that hold every point: JSON (with the warnings inside), Markdown or a table on stdout."""
    if format == SweepFormat.json:
        rows = [p.as_dict() for p in points]
        handle.write(json_text({"model": points[0].model, "gpu": points[0].gpu, "points": rows, "warnings": warnings}))
    elif format == SweepFormat.markdown:
        handle.write(markdown(sweep_table(points)) + "\n")
    else:
        print_tables([sweep_table(points)], format.value)


def _counted(points: Iterable[SweepPoint], total: int) -> Iterator[SweepPoint]:
    progress = Progress(sys.stderr, time.perf_counter(), "wrote {done:,} of {total:,} points")
    try:
        for done, point in enumerate(points, 1):
            progress(done, total)
            yield point
    finally:
        progress.clear()


def _bound(format: SweepFormat, streamed: bool) -> tuple[int, str]:
    """The grid's bound for this rendering, and what a refusal suggests."""
    if streamed:
        return MAX_STREAMED_POINTS, ""
    if format in STREAMED:  # with --plot every point is held
        return MAX_HELD_POINTS, f" with --plot (without it, csv and jsonl stream up to {MAX_STREAMED_POINTS:,})"
    return MAX_HELD_POINTS, f" with -f {format.value} (-f csv or -f jsonl streams up to {MAX_STREAMED_POINTS:,})"


@contextmanager
def _destination(out: Path | None, force: bool) -> Iterator[TextIO]:
    """stdout, or a temporary file that takes `out`'s name only once the sweep is written whole."""
    if out is None:
        yield sys.stdout
        return
    try:
        with open_new(out, force=force) as handle:
            yield handle
    except KeyboardInterrupt:
        raise Interrupted(f"interrupted: nothing was written to {out}") from None


TABLE_COLUMNS = ("batch", "prompt", "TTFT", "TPOT", "tokens/s", "ceiling tok/s", "$/1M in", "$/1M out",
                 "memory/GPU", "bound", "note")  # fmt: skip


def sweep_table(points: list[SweepPoint]) -> Table:
    """One formatted row per point; markers for the critical batch and the memory limit."""
    table = Table(
        f"{points[0].model} on {points[0].gpus}x {points[0].gpu} (expected; ceiling tokens/s for reference)"
        + flash_note(points[0].flash_attention),
        list(TABLE_COLUMNS),
        # on a narrow terminal: the reference figures go first, the notes stay (a point past the memory limit says so
        # there, and nowhere else once the costs are blank)
        drop=("ceiling tok/s", "bound", "$/1M in"),
        wrap=("note",),
        answer=("note",),
    )
    several = len({(p.weights, p.kv_dtype, p.compute_dtype) for p in points}) > 1  # a precision column if it varies
    if several:
        table.columns.insert(0, "weights/KV/compute")
    for p in points:
        notes = []
        if p.critical_batch_compute is not None and p.batch >= p.critical_batch_compute:
            notes.append(f"matmuls compute-bound from batch {p.critical_batch_compute}")
        if p.critical_batch_kv is not None and p.batch >= p.critical_batch_kv:  # both, when both are passed
            notes.append(f"KV reads > weights from batch {p.critical_batch_kv}")
        if not p.fits:
            notes.append(f"exceeds memory (max batch {p.max_batch})")
        precision = [f"{p.weights}/{p.kv_dtype}/{p.compute_dtype}"] if several else []
        table.rows.append([
            *precision, f"{p.batch:,}", f"{p.prompt_tokens:,}", fmt.ms(p.ttft_s), fmt.ms(p.tpot_s),
            fmt.rate(p.decode_tokens_per_s), fmt.rate(p.ceiling_decode_tokens_per_s),
            *((fmt.usd(p.usd_per_million_input_tokens), fmt.usd(p.usd_per_million_output_tokens)) if p.fits
              else ("", "")),  # blank where it does not fit, as compare leaves it (n/a is "no price")
            f"{fmt.gb(p.used_bytes_per_gpu)}", p.decode_bound, "; ".join(notes),
        ])  # fmt: skip
    if points[0].cached_prefix_tokens:  # the same prefix at every point: said once
        table.notes.append(f"{points[0].cached_prefix_tokens:,} tokens of each prompt from a prefix cache (read, not "
                           "recomputed: TTFT prices the rest)")  # fmt: skip
    if len(points) > RICH_ROWS:
        table.notes.append(f"({len(points):,} points; -f csv or -f jsonl writes each as it is computed, up to "
                           f"{MAX_STREAMED_POINTS:,}, and --out FILE keeps them in a file)")  # fmt: skip
    return table
