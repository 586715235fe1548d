"""Measured vs predicted: the engine priced with datasheet and calibrated peaks against a real decode loop.

No torch here: this module takes plain results (LoopResult, ProbeResult) and specs. MBU follows the
Databricks definition (achieved bytes/s over peak bandwidth), with bytes per step counted exactly as the
engine's decode step (weights, plus the KV cache the loop attends over). MFU: prefill FLOPs / TTFT / peak.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tokcost.engine.estimate import decode_step
from tokcost.engine.roofline import Rates, ceiling_rates, expected_rates, price_pass
from tokcost.engine.traffic import decode_counts, prefill_counts
from tokcost.engine.workload import Workload, resolve_precision
from tokcost.hardware.spec import GpuSpec
from tokcost.models.spec import ModelSpec


@dataclass(frozen=True)
class Prediction:
    """TTFT and TPOT one set of rates predicts for the measured loop, and their error against it."""

    ttft_s: float
    tpot_s: float
    ttft_error: float  # (predicted - measured) / measured
    tpot_error: float


@dataclass(frozen=True)
class RunReport:
    """One batch size: what was measured and what each spec predicted."""

    batch: int
    prompt_tokens: int
    output_tokens: int
    context_tokens: int
    ttft_s: float
    tpot_s: float
    decode_tokens_per_s: float
    bytes_per_step: float
    prefill_flops: float
    mbu: float | None  # vs datasheet bandwidth
    mbu_vs_copy: float | None  # vs the measured copy bandwidth
    mfu_prefill: float | None  # vs datasheet peak FLOP/s
    joules_per_output_token: float | None
    datasheet: Prediction | None
    datasheet_expected: Prediction | None
    calibrated: Prediction | None
    ttft_s_all: list[float] = field(default_factory=list)
    tpot_s_all: list[float] = field(default_factory=list)


def workload_of(dtype: str, batch: int, prompt: int, output: int) -> Workload:
    """The engine workload that describes one measured run (every tensor in the run's dtype)."""
    return Workload(batch=batch, prompt_tokens=prompt, output_tokens=output, weights_dtype=dtype, kv_dtype=dtype,
                    compute_dtype=dtype)  # fmt: skip


def _predict(spec: ModelSpec, wl: Workload, rates: Rates, context: int, ttft_s: float, tpot_s: float) -> Prediction:
    p = resolve_precision(spec, wl)
    prefill = price_pass(prefill_counts(spec, p, wl.batch, wl.prompt_tokens, 0, 1), 1, rates)
    # the loop's static cache is attended in full (masked) every step, so its step reads `context` tokens of KV
    step = decode_step(spec, wl, p, rates, context)
    return Prediction(prefill.seconds, step.seconds, prefill.seconds / ttft_s - 1, step.seconds / tpot_s - 1)


def run_report(
    spec: ModelSpec,
    loop: Any,
    *,
    datasheet: GpuSpec | None,
    calibrated: GpuSpec | None,
    copy_bytes_per_s: float | None,
) -> RunReport:
    """Compare one LoopResult with the engine's predictions under the datasheet and calibrated specs."""
    wl = workload_of(loop.dtype, loop.batch, loop.prompt_tokens, loop.output_tokens)
    p = resolve_precision(spec, wl)
    counts = decode_counts(spec, p, loop.batch, loop.context_tokens, 1)
    step_bytes = counts.weight_bytes + counts.kv_read_bytes + counts.kv_write_bytes
    achieved = step_bytes / loop.tpot_s
    prefill = prefill_counts(spec, p, loop.batch, loop.prompt_tokens, 0, 1)
    flops = prefill.matmul_flops + prefill.attention_flops
    peak_flops = datasheet.peak_flops_per_s(p.compute) if datasheet else None

    def predicted(gpu: GpuSpec | None, rates_of) -> Prediction | None:
        if gpu is None or gpu.peak_flops_per_s(p.compute) is None:
            return None
        return _predict(spec, wl, rates_of(gpu), loop.context_tokens, loop.ttft_s, loop.tpot_s)

    return RunReport(
        batch=loop.batch,
        prompt_tokens=loop.prompt_tokens,
        output_tokens=loop.output_tokens,
        context_tokens=loop.context_tokens,
        ttft_s=loop.ttft_s,
        tpot_s=loop.tpot_s,
        decode_tokens_per_s=loop.decode_tokens_per_s,
        bytes_per_step=step_bytes,
        prefill_flops=flops,
        mbu=achieved / datasheet.bandwidth_bytes_per_s if datasheet else None,
        mbu_vs_copy=achieved / copy_bytes_per_s if copy_bytes_per_s else None,
        mfu_prefill=flops / loop.ttft_s / peak_flops if peak_flops else None,
        joules_per_output_token=loop.joules_per_output_token,
        datasheet=predicted(datasheet, lambda g: ceiling_rates(g, p.compute)),
        datasheet_expected=predicted(datasheet, lambda g: expected_rates(g, p.compute, weight_only_quant=False)),
        calibrated=predicted(calibrated, lambda g: ceiling_rates(g, p.compute)),
        ttft_s_all=list(loop.ttft_s_all),
        tpot_s_all=list(loop.tpot_s_all),
    )


def run_dict(r: RunReport) -> dict[str, Any]:
    """Stable JSON keys of one run."""

    def pred(x: Prediction | None) -> dict[str, Any] | None:
        return None if x is None else {"ttft_s": x.ttft_s, "tpot_s": x.tpot_s, "ttft_error": x.ttft_error,
                                       "tpot_error": x.tpot_error}  # fmt: skip

    return {
        "batch": r.batch,
        "prompt_tokens": r.prompt_tokens,
        "output_tokens": r.output_tokens,
        "context_tokens": r.context_tokens,
        "measured": {
            "ttft_s": r.ttft_s,
            "tpot_s": r.tpot_s,
            "decode_tokens_per_s": r.decode_tokens_per_s,
            "bytes_per_step": r.bytes_per_step,
            "mbu": r.mbu,
            "mbu_vs_copy": r.mbu_vs_copy,
            "mfu_prefill": r.mfu_prefill,
            "joules_per_output_token": r.joules_per_output_token,
            "ttft_s_all": r.ttft_s_all,
            "tpot_s_all": r.tpot_s_all,
        },
        "predicted": {
            "datasheet": pred(r.datasheet),
            "datasheet_expected": pred(r.datasheet_expected),
            "calibrated": pred(r.calibrated),
        },
    }
