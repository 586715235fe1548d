"""`tokcost compare`: one row per (model, GPU), the purchase table for capacity plans."""

from __future__ import annotations

from typing import Annotated

import typer

from tokcost import fmt
from tokcost.cli.common import check_grid, split_list, workload_from_flags
from tokcost.cli.options import (
    BatchOpt,
    ComputeOpt,
    Format,
    FormatOpt,
    GpusOpt,
    KvOpt,
    OutputOpt,
    PrefixOpt,
    PriceOpt,
    PromptOpt,
    WeightsOpt,
)  # fmt: skip
from tokcost.cli.render import Table, print_csv, print_json, print_tables
from tokcost.engine.estimate import Estimate, estimate
from tokcost.hardware.library import load_gpu
from tokcost.models.library import load_model


def compare_row(e: Estimate) -> dict[str, object]:
    """The flat record of one (model, GPU) pair: stable keys for JSON and CSV."""
    c, x, mem = e.ceiling, e.expected, e.memory
    return {
        "model": e.model.name,
        "gpu": e.gpu.name,
        "gpus": e.workload.gpus,
        "fits": mem.fits,
        "min_gpus": mem.min_gpus,
        "ttft_s": c.ttft_s,
        "tpot_s": c.tpot_s,
        "decode_tokens_per_s": c.decode_tokens_per_s,
        "expected_ttft_s": x.ttft_s,
        "expected_tpot_s": x.tpot_s,
        "expected_decode_tokens_per_s": x.decode_tokens_per_s,
        "max_batch": mem.max_batch,
        "critical_batch": e.critical_batch,
        "usd_per_million_input_tokens": x.usd_per_million_input_tokens,
        "usd_per_million_output_tokens": x.usd_per_million_output_tokens,
        "joules_per_output_token": x.joules_per_output_token,
    }


def compare(
    model: Annotated[str, typer.Option("--model", "-m", help="Model names or files, comma-separated.")],
    gpu: Annotated[str, typer.Option("--gpu", "-g", help="GPU names or files, comma-separated.")],
    gpus: GpusOpt = 1,
    batch: BatchOpt = 1,
    prompt: PromptOpt = 1024,
    output: OutputOpt = 256,
    weights: WeightsOpt = None,
    kv_dtype: KvOpt = None,
    compute_dtype: ComputeOpt = None,
    cached_prefix: PrefixOpt = 0,
    price: PriceOpt = None,
    format: FormatOpt = Format.table,
) -> None:
    """Compare models x GPUs for one workload. Example: tokcost compare -m llama-3.1-70b -g h100-sxm,h200,mi300x"""
    workload = workload_from_flags(
        batch=batch, prompt_tokens=prompt, output_tokens=output, gpus=gpus, weights_dtype=weights,
        kv_dtype=kv_dtype, compute_dtype=compute_dtype, cached_prefix_tokens=cached_prefix,
        price_per_hour_usd=price,
    )  # fmt: skip
    check_grid(("--model", split_list(model, "--model")), ("--gpu", split_list(gpu, "--gpu")))
    models = [load_model(m) for m in split_list(model, "--model")]
    gpu_specs = [load_gpu(g) for g in split_list(gpu, "--gpu")]
    results = [estimate(m, g, workload) for m in models for g in gpu_specs]
    rows = [compare_row(e) for e in results]
    if format == Format.json:
        print_json({"workload": workload.model_dump(), "rows": rows})
    elif format == Format.csv:
        print_csv(rows)
    else:
        print_tables([compare_table(results)], format.value)


def compare_table(results: list[Estimate]) -> Table:
    """Formatted purchase table: expected figures, with the ceiling tokens/s for reference."""
    wl = results[0].workload
    table = Table(
        f"batch {wl.batch} · prompt {wl.prompt_tokens:,} · output {wl.output_tokens:,} · {wl.gpus} GPU(s) per replica",
        ["model", "gpu", "fits (min GPUs)", "TTFT", "TPOT", "tokens/s", "ceiling tok/s", "max batch",
         "$/1M in", "$/1M out", "J/token"],
    )  # fmt: skip
    for e in results:
        x, mem = e.expected, e.memory
        fits = "yes" if mem.fits else f"no ({mem.min_gpus or '>64'})"
        table.rows.append([
            e.model.name, e.gpu.name, fits, fmt.ms(x.ttft_s), fmt.ms(x.tpot_s), f"{x.decode_tokens_per_s:,.1f}",
            f"{e.ceiling.decode_tokens_per_s:,.1f}", f"{mem.max_batch:,}", fmt.usd(x.usd_per_million_input_tokens),
            fmt.usd(x.usd_per_million_output_tokens), fmt.joules(x.joules_per_output_token),
        ])  # fmt: skip
    table.notes.append(
        "Times, tokens/s and costs are 'expected' (achievable fractions); J/token from TDP is an upper bound."
    )
    return table
