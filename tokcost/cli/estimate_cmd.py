"""`tokcost estimate`: one model on one GPU type, ceiling and expected side by side."""

from __future__ import annotations

import sys

from tokcost import fmt
from tokcost.cli.common import workload_from_flags
from tokcost.cli.options import (
    BatchOpt,
    ComputeOpt,
    ExplainOpt,
    Format,
    FormatOpt,
    GpuOpt,
    GpusOpt,
    KvOpt,
    ModelOpt,
    OutputOpt,
    PrefixOpt,
    PriceOpt,
    PromptOpt,
    WeightsOpt,
)  # fmt: skip
from tokcost.cli.render import Table, flatten, print_csv, print_json, print_tables
from tokcost.engine.estimate import Estimate
from tokcost.engine.estimate import estimate as run_estimate
from tokcost.engine.explain import explain
from tokcost.engine.report import bottleneck, estimate_dict
from tokcost.hardware.library import load_gpu
from tokcost.models.library import load_model

GLOSSARY = """
Metrics: TTFT = time to first token = prefill time. TPOT = time per output token = (E2E - TTFT) / (O - 1), the
mean decode step as the context grows. E2E = TTFT + (O - 1) x TPOT. tokens/s = batch / TPOT (decode).
MBU = bytes moved per step / TPOT / peak bandwidth; MFU = FLOPs / time / peak FLOP/s. Critical batch = the
smallest batch whose decode step is compute-bound. Ceiling = datasheet peaks; expected = achievable fractions
of them plus a per-step overhead.
"""


def estimate(
    model: ModelOpt,
    gpu: GpuOpt,
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
    explain_: ExplainOpt = False,
) -> None:
    """Estimate TTFT, TPOT, throughput, memory and cost. Example: tokcost estimate -m llama-3.1-8b -g h100-sxm"""
    workload = workload_from_flags(
        batch=batch, prompt_tokens=prompt, output_tokens=output, gpus=gpus, weights_dtype=weights,
        kv_dtype=kv_dtype, compute_dtype=compute_dtype, cached_prefix_tokens=cached_prefix,
        price_per_hour_usd=price,
    )  # fmt: skip
    result = run_estimate(load_model(model), load_gpu(gpu), workload)
    if format == Format.json:
        print_json(estimate_dict(result))
    elif format == Format.csv:
        print_csv([flatten(estimate_dict(result))])
    else:
        print_tables(estimate_tables(result), format.value)
    if explain_:
        print_explanation(result, markdown=format == Format.markdown)


estimate.__doc__ = (estimate.__doc__ or "") + "\n" + GLOSSARY


def _times(e: Estimate, attr: str) -> list[str]:
    return [fmt.ms(getattr(e.ceiling, attr)), fmt.ms(getattr(e.expected, attr))]


def estimate_tables(e: Estimate) -> list[Table]:
    """Performance (ceiling vs expected), memory, and the decode step's breakdown."""
    wl, p, c, x, mem = e.workload, e.precision, e.ceiling, e.expected, e.memory
    header = (
        f"{e.model.name} on {wl.gpus}x {e.gpu.name} · batch {wl.batch} · prompt {wl.prompt_tokens:,} · output "
        f"{wl.output_tokens:,} · weights {p.weights}"
        + (f" (experts {p.experts})" if p.experts != p.weights else "")
        + f" · KV {p.kv} · compute {p.compute}"
    )
    perf = Table(
        "Performance",
        ["metric", "ceiling", "expected"],
        header=header,
        rows=[
            ["TTFT", *_times(e, "ttft_s")],
            ["TPOT", *_times(e, "tpot_s")],
            ["E2E", *_times(e, "e2e_s")],
            ["decode tokens/s", f"{c.decode_tokens_per_s:,.1f}", f"{x.decode_tokens_per_s:,.1f}"],
            [
                "tokens/s per sequence",
                f"{c.decode_tokens_per_s / wl.batch:,.1f}",
                f"{x.decode_tokens_per_s / wl.batch:,.1f}",
            ],
            ["prefill bound", c.prefill_bound, x.prefill_bound],
            ["decode bound", c.decode_bound, x.decode_bound],
            ["$/1M input tokens", fmt.usd(c.usd_per_million_input_tokens), fmt.usd(x.usd_per_million_input_tokens)],
            ["$/1M output tokens", fmt.usd(c.usd_per_million_output_tokens), fmt.usd(x.usd_per_million_output_tokens)],
            ["J/output token (TDP)", fmt.joules(c.joules_per_output_token), fmt.joules(x.joules_per_output_token)],
        ],
        notes=[bottleneck(e)] + _warnings(e),
    )
    memory = Table(
        "Memory",
        ["item", "value"],
        [
            ["weights", fmt.gb(mem.weights_bytes)],
            ["KV cache", f"{fmt.gb(mem.kv_cache_bytes)} ({mem.kv_bytes_per_token:,.0f} B/token)"],
            ["activation workspace", fmt.gb(mem.workspace_bytes)],
            ["reserve", fmt.gb(mem.reserve_bytes)],
            ["total / capacity", f"{fmt.gb(mem.total_bytes)} / {fmt.gb(mem.capacity_bytes)}"],
            ["fits", "yes" if mem.fits else f"no: needs {mem.min_gpus or '>64'} GPUs"],
            ["max batch at this context", f"{mem.max_batch:,}"],
            ["max context at this batch", f"{mem.max_context:,}"],
            ["critical batch", f"{e.critical_batch:,}" if e.critical_batch else "none (never compute-bound)"],
        ],
    )
    step = c.decode_step
    breakdown = Table(
        f"Decode step at mean context {e.mean_decode_context:,.0f} (ceiling, per GPU)",
        ["part", "FLOPs", "bytes", "time", "share", "bound"],
        [
            [
                part.name,
                fmt.tflop(part.flops),
                fmt.gb(part.bytes),
                fmt.ms(part.seconds),
                f"{part.seconds / step.seconds:.0%}",
                part.bound,
            ]
            for part in step.components
            if part.seconds or part.bytes
        ],
    )
    return [perf, memory, breakdown]


def _warnings(e: Estimate) -> list[str]:
    out = []
    if e.workload.total_tokens > e.model.max_context:
        out.append(f"warning: prompt + output ({e.workload.total_tokens:,}) exceeds {e.model.name}'s max_context "
                   f"({e.model.max_context:,})")  # fmt: skip
    mismatch = e.model.params_mismatch
    if mismatch is not None and abs(mismatch) > 0.02:
        out.append(f"warning: {e.model.name}'s stated params_total differs from its shapes by {mismatch:+.1%}")
    return out


def print_explanation(e: Estimate, markdown: bool = False) -> None:
    """The arithmetic behind every headline number."""
    out = ["", "## How these numbers are derived" if markdown else "How these numbers are derived:"]
    for head, lines in explain(e):
        out.append(f"\n**{head}**" if markdown else f"\n{head}")
        out += [f"- {line}" if markdown else f"  {line}" for line in lines]
    sys.stdout.write("\n".join(out) + "\n")
