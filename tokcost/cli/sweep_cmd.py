"""`tokcost sweep`: one row per batch and/or context point; marks the critical batch and the memory limit."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from tokcost import fmt, plots
from tokcost.cli.common import check_grid, int_list, workload_from_flags
from tokcost.cli.deploy import layout_flags, warn
from tokcost.cli.options import (
    ComputeOpt,
    DpOpt,
    EngineOpt,
    EpOpt,
    Format,
    FormatOpt,
    GpuOpt,
    GpusOpt,
    GpusPerNodeOpt,
    KvOpt,
    ModelOpt,
    NetworkOpt,
    OutputOpt,
    PlotOpt,
    PpOpt,
    PriceOpt,
    PromptOpt,
    TpOpt,
    WeightsOpt,
)  # fmt: skip
from tokcost.cli.render import Table, print_csv, print_json, print_tables
from tokcost.engine.sweep import SweepPoint, sweep_warnings
from tokcost.engine.sweep import sweep as run_sweep
from tokcost.errors import UsageError
from tokcost.hardware.library import load_gpu, network_for
from tokcost.models.library import load_model
from tokcost.profiles import engine_for


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
    gpus_per_node: GpusPerNodeOpt = None,
    network: NetworkOpt = None,
    engine: EngineOpt = None,
    prompt: PromptOpt = 1024,
    output: OutputOpt = 256,
    weights: WeightsOpt = None,
    kv_dtype: KvOpt = None,
    compute_dtype: ComputeOpt = None,
    price: PriceOpt = None,
    format: FormatOpt = Format.table,
    plot: PlotOpt = None,
) -> None:
    """Sweep batch sizes and/or prompt lengths. Example: tokcost sweep -m llama-3.1-8b -g h100-sxm -b 1,8,64,256"""
    batches = int_list(batch, "--batch", 1, 1_000_000)
    contexts = int_list(context, "--context") if context is not None else [prompt]
    check_grid(("--batch", batches), ("--context", contexts))
    if output < 2:
        raise UsageError("--output: sweep prices decode steps; give 2 or more output tokens")
    base = workload_from_flags(
        prompt_tokens=prompt, output_tokens=output, weights_dtype=weights, kv_dtype=kv_dtype,
        compute_dtype=compute_dtype, price_per_hour_usd=price, **layout_flags(gpus, tp, pp, ep, dp, gpus_per_node),
    )  # fmt: skip
    spec = load_gpu(gpu)
    spec_model, net, profile = load_model(model), network_for(spec, network), engine_for(engine)
    points = run_sweep(spec_model, spec, base, batches=batches, prompts=contexts, network=net, engine=profile)
    warnings = sweep_warnings(spec_model, spec, base, prompts=contexts, network=net, engine=profile)
    rows = [p.as_dict() for p in points]
    if format == Format.json:
        print_json({"model": points[0].model, "gpu": points[0].gpu, "points": rows, "warnings": warnings})
        return
    warn(warnings)
    if format == Format.csv:
        print_csv(rows)
    else:
        print_tables([sweep_table(points)], format.value)
    if plot is not None:  # TPOT, tokens/s per GPU, memory and cost against batch and context
        plots.save(plots.sweep_figure(points, capacity_bytes_per_gpu=spec.memory_bytes), plot)


def sweep_table(points: list[SweepPoint]) -> Table:
    """One formatted row per point; markers for the critical batch and the memory limit."""
    table = Table(
        f"{points[0].model} on {points[0].gpus}x {points[0].gpu} (expected; ceiling tokens/s for reference)",
        ["batch", "prompt", "TPOT", "tokens/s", "ceiling tok/s", "$/1M out", "memory/GPU", "bound", "note"],
    )
    for p in points:
        notes = []
        if p.critical_batch_compute is not None and p.batch >= p.critical_batch_compute:
            notes.append(f"past critical batch {p.critical_batch_compute}")
        elif p.critical_batch_kv is not None and p.batch >= p.critical_batch_kv:
            notes.append(f"KV reads > weights from batch {p.critical_batch_kv}")
        if not p.fits:
            notes.append(f"exceeds memory (max batch {p.max_batch})")
        table.rows.append([
            f"{p.batch:,}", f"{p.prompt_tokens:,}", fmt.ms(p.tpot_s), f"{p.decode_tokens_per_s:,.1f}",
            f"{p.ceiling_decode_tokens_per_s:,.1f}", fmt.usd(p.usd_per_million_output_tokens),
            f"{fmt.gb(p.used_bytes_per_gpu)}", p.decode_bound, "; ".join(notes),
        ])  # fmt: skip
    return table
