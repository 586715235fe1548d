"""`tokcost compare`: one row per (model, GPU), the purchase table for capacity plans."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from tokcost import fmt, plots
from tokcost.cli.common import (
    check_force_with_plot,
    format_grid,
    gpu_names,
    per_gpu_values,
    split_list,
    workload_from_flags,
)
from tokcost.cli.deploy import degree_named_as_given, layout_flags, unused_network, warn
from tokcost.cli.estimate_cmd import band_spans
from tokcost.cli.options import (
    BatchOpt,
    ComputeListOpt,
    DpOpt,
    EngineOpt,
    EpOpt,
    FlashOpt,
    ForceOpt,
    Format,
    FormatOpt,
    GpusPerNodeOpt,
    KvListOpt,
    NetworkOpt,
    OutputOpt,
    PlotOpt,
    PpOpt,
    PrefixOpt,
    PromptOpt,
    RedundantOpt,
    TpOpt,
    WeightsListOpt,
)
from tokcost.cli.render import Table, flash_note, print_csv, print_json, print_tables
from tokcost.engine.estimate import Estimate, estimate
from tokcost.engine.report import compare_row
from tokcost.hardware.library import load_gpu, network_for
from tokcost.inputs import check_distinct_names, check_grid
from tokcost.models.library import load_model
from tokcost.profiles import engine_for


def compare(
    model: Annotated[str, typer.Option("--model", "-m", help="Model names or files, comma-separated.")],
    gpu: Annotated[str, typer.Option("--gpu", "-g", help="GPU names or files, comma-separated, or 'all'.")],
    gpus: Annotated[
        Optional[str],
        typer.Option("--gpus", help="GPUs per replica (TP): one value, one per --gpu, or NAME=N (h100-sxm=8,h200=4)."),
    ] = None,
    tp: TpOpt = None,
    pp: PpOpt = 1,
    ep: EpOpt = 1,
    dp: DpOpt = 1,
    redundant_experts: RedundantOpt = 0,
    gpus_per_node: GpusPerNodeOpt = None,
    network: NetworkOpt = None,
    engine: EngineOpt = None,
    batch: BatchOpt = 1,
    prompt: PromptOpt = 1024,
    output: OutputOpt = 256,
    weights: WeightsListOpt = None,
    kv_dtype: KvListOpt = None,
    compute_dtype: ComputeListOpt = None,
    cached_prefix: PrefixOpt = 0,
    flash_attention: FlashOpt = True,
    price: Annotated[
        Optional[str],
        typer.Option("--price", help="USD per GPU-hour: one value, one per --gpu, or NAME=USD (default: the spec's)."),
    ] = None,
    format: FormatOpt = Format.table,
    plot: PlotOpt = None,
    force: ForceOpt = False,
) -> None:
    """Compare models x GPUs for one workload. Example: tokcost compare -m llama-3.1-70b -g h100-sxm,h200 --gpus 4,2"""
    check_force_with_plot(force, plot)
    model_names, names_given = split_list(model, "--model", merge=False), gpu_names(gpu)
    formats = format_grid(weights, kv_dtype, compute_dtype)  # every combination, as plan takes them
    check_grid(("--model", model_names), ("--gpu", names_given), ("formats", formats))
    models = [load_model(m) for m in model_names]
    gpu_list = [load_gpu(name) for name in names_given]
    check_distinct_names(models, "--model")
    check_distinct_names(gpu_list, "--gpu")
    gpu_specs = dict(zip(names_given, gpu_list, strict=True))
    names = list(gpu_specs)
    counts = per_gpu_values(gpus, names, "--gpus", int)
    prices = per_gpu_values(price, names, "--price", float)
    workloads = {
        (name, i): workload_from_flags(
            batch=batch, prompt_tokens=prompt, output_tokens=output, cached_prefix_tokens=cached_prefix,
            flash_attention=flash_attention, price_per_hour_usd=prices.get(name), **precision,
            **layout_flags(counts.get(name), tp, pp, ep, dp, gpus_per_node, redundant_experts),
        )
        for name in names
        for i, precision in enumerate(formats)
    }  # fmt: skip
    profile = engine_for(engine)
    with degree_named_as_given(counts, tp, pp, dp):
        results = [estimate(m, spec, workloads[name, i], network_for(spec, network), profile) for m in models
                   for name, spec in gpu_specs.items() for i in range(len(formats))]  # fmt: skip
    rows = [compare_row(e) for e in results]
    warn(unused_network(network, [e.layout for e in results]))
    warnings = [f"{e.model.name} on {e.gpu.name}: {w}" for e in results for w in e.warnings]
    if plot is not None:  # grouped bars of TTFT, TPOT, tokens/s and $/1M per (model, GPU)
        plots.save(plots.compare_figure(results), plot, force=force, asker="--plot")
    if format == Format.json:
        print_json({"rows": rows, "warnings": warnings})
        return
    warn(warnings)
    if format == Format.csv:
        print_csv(rows)
    else:
        print_tables([compare_table(results, fold_formats=format == Format.table)], format.value)


def _formats(e: Estimate) -> str:
    """The resolved precision, e.g. 'fp8/bf16/fp8' (weights/KV/compute)."""
    p = e.precision
    return f"{p.weights}/{p.kv}/{p.compute}"


def compare_table(results: list[Estimate], *, fold_formats: bool = False) -> Table:
    """Formatted purchase table: expected figures, with the ceiling tokens/s for reference. Where the formats vary
    they get a column, or with `fold_formats` (the terminal's table) go under the model's name, which wraps at
    spaces: a column of its own leaves no room at 80 columns for the answer."""
    wl = results[0].workload
    table = Table(
        f"batch {wl.batch:,} · prompt {wl.prompt_tokens:,} · output {wl.output_tokens:,}"
        f"{flash_note(wl.flash_attention)}",
        [
            "model",
            "gpu",
            "GPUs",
            "fits",
            "TTFT",
            "TPOT",
            "tokens/s",
            "80% band",
            "ceiling tok/s",
            "max batch",
            "$/1M in",
            "$/1M out",
            "J/token",
        ],
        # on a narrow terminal the answer stays (model, GPU, fit, TPOT, tokens/s, $/1M out); these go first
        drop=("ceiling tok/s", "80% band", "J/token", "$/1M in", "max batch", "GPUs", "TTFT"),
        wrap=("fits",),
    )
    several = len({_formats(e) for e in results}) > 1  # the precision shown only when it varies
    column, folded = several and not fold_formats, several and fold_formats
    if column:
        table.columns.insert(2, "weights/KV/compute")
    elif folded:
        table.columns[0] = "model, weights / KV / compute"  # words short enough to wrap
    for e in results:
        x, mem = e.expected, e.memory
        if mem.fits:
            fits, cost = (
                "yes",
                [
                    fmt.usd(x.usd_per_million_input_tokens),
                    fmt.usd(x.usd_per_million_output_tokens),
                    fmt.joules(x.joules_per_output_token),
                ],
            )
        else:
            need = f"needs {mem.min_gpus}" if mem.min_gpus else "no layout searched"
            fits, cost = f"does not fit ({need})", ["", "", ""]
        tpot = fmt.ms(x.tpot_s) if x.tpot_s else "n/a"
        rate, ceiling = fmt.rate(x.decode_tokens_per_s), fmt.rate(e.ceiling.decode_tokens_per_s)
        band = band_spans(e)["decode_tokens_per_s"]
        table.rows.append(
            [
                f"{e.model.name} {_formats(e)}" if folded else e.model.name,
                e.gpu.name,
                *([_formats(e)] if column else []),
                f"{e.layout.gpus} ({e.layout.label()})",
                fits,
                fmt.ms(x.ttft_s),
                tpot,
                rate,
                band,
                ceiling,
                f"{mem.max_batch:,}",
                *cost,
            ]
        )
    provenance = sorted({f"{e.gpu.name}: {e.gpu.expected_provenance_at(e.precision.compute)}" for e in results})
    table.notes.append("Times, tokens/s and costs are 'expected'; J/token from TDP is an upper bound. Expected from:")
    table.notes += [f"  {p}" for p in provenance]
    bands = sorted({f"{e.deployment.engine.label} on {e.gpu.platform}: {e.band.basis}" for e in results})
    table.notes.append("80% band (where 8 in 10 runs of the engine era fall, from published runs each predicted by a "
                       "fit that never read their source):")  # fmt: skip
    table.notes += [f"  {b}" for b in bands]
    return table
