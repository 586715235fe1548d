"""Measured vs predicted: the engine priced on the loop's own steps, against what the loop measured.

The only module of tokcost.measure that calls the engine (step_cost for a pass, estimate for memory,
the expected distinct experts),
so the engine can change behind it. No torch here: it takes plain results (LoopResult) and specs.
- Predictions price the loop's own passes: prefill is Segment(B, 0, P); each decode step is
  Segment(B, c, 1) at the slots c that step really read (a bucketed step reads its bucket), averaged
  over the steps. "datasheet" is the ceiling, "datasheet expected" the hardware's sustained shares, and
  "calibrated" the spec measured for this loop with the loop as its engine (its step overhead, and its own stream
  and GEMM rates as its hardware: loop_calibrated).
- MBU (Databricks' definition: achieved bytes/s over peak bandwidth) uses the bytes the loop read,
  counted from the built model; the engine's expectation is shown next to them.
- An error is (predicted - measured) / measured, and None when the step times vary by more than
  NOISY_CV: a noisy machine gets no error figure.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tokcost.engine.estimate import estimate
from tokcost.engine.features import expected_distinct_experts
from tokcost.engine.step import Segment, step_cost
from tokcost.engine.workload import Workload
from tokcost.hardware.spec import GpuSpec, Link
from tokcost.hardware.sustained import SustainedFigure
from tokcost.models.spec import ModelSpec
from tokcost.profiles import (
    GENERIC,
    EngineProfile,
    load_engine,
)
from tokcost.units import MIB

TERMS = ("weights", "attention", "communication", "other", "overhead")


def _counting_gpu(dtype: str, memory_bytes: float = 1e9) -> GpuSpec:
    """A spec with unit rates, for the engine's counts (bytes, FLOPs, memory) rather than its times."""
    return GpuSpec(name="counts", source="unit rates: counts only", memory_gb=max(memory_bytes / 1e9, 0.1),
                   memory_runtime_mib=max(memory_bytes / MIB, 100), memory_bandwidth_gb_s=1, peak_tflops={dtype: 1},
                   link=Link(kind="nvlink", gb_s=1, latency_us=0, source="unit rates: counts only"))  # fmt: skip


def workload_of(dtype: str, batch: int, prompt: int, output: int, tp: int = 1) -> Workload:
    """The engine workload that describes one measured run (every tensor in the run's dtype)."""
    # the ranks of one measured run share one machine: its group never spans nodes
    return Workload(batch=batch, prompt_tokens=prompt, output_tokens=output, tp=tp, weights_dtype=dtype,
                    kv_dtype=dtype, compute_dtype=dtype, gpus_per_node=max(tp, 8))  # fmt: skip


@dataclass(frozen=True)
class Prediction:
    """TTFT and TPOT one spec predicts for the loop's own passes, per term, and the errors."""

    ttft_s: float
    tpot_s: float
    terms: dict[str, float]  # mean decode step by term: weights, attention, communication, overhead
    ttft_error: float | None  # (predicted - measured) / measured; None when too noisy
    tpot_error: float | None


def loop_calibrated(gpu: GpuSpec) -> tuple[GpuSpec, EngineProfile]:
    """This loop as hardware and engine (issue 19's split): a calibrated spec's `achievable` shares are what the loop
    itself streamed and multiplied, so they stand as the hardware's sustained shares, and the engine adds only the
    step cost calibrate measured; unchanged (and the generic engine) for a spec without them. (As engine
    efficiencies over the probes' shares they were held to the profiles' range, 2x: a CPU's fp16 GEMM probe, 27x
    slower than the loop's own fp16 linears, priced its decode compute-bound at 5-8x the step measured.)"""
    a = gpu.achievable
    if a.basis != "measured":
        return gpu, GENERIC
    hw = gpu.hardware

    def loops(figure: SustainedFigure, share: float, what: str) -> SustainedFigure:
        return figure.model_copy(update={"fraction": share, "source": f"the measured loop's own {what} ({a.source})"})

    sustained = hw.model_copy(update={
        "copy_bandwidth": loops(hw.copy_bandwidth, a.bandwidth, "weight stream"),
        "gemm": {k: loops(v, a.compute, "prefill GEMMs") for k, v in hw.gemm.items()},
    })  # fmt: skip
    engine = GENERIC.model_copy(update={"name": "measure-loop", "step_overhead_us": a.step_overhead_us})
    return gpu.model_copy(update={"sustained": sustained}), engine


def _calibrated(spec: ModelSpec, calibrated: GpuSpec, loop: Any, noisy: bool) -> Prediction | None:
    """The calibrated column: the loop's own rates as the hardware, its step cost as the engine."""
    hardware, engine = loop_calibrated(calibrated)
    return predict(spec, hardware, "expected", loop, noisy, engine)


def as_loop(engine: EngineProfile) -> EngineProfile:
    """`engine` with this loop's LM head: split by vocabulary over TP (shard.py), each rank taking the argmax of its
    own share and only the winners gathered, never the logits (the profile's own head is a serving engine's)."""
    return engine.model_copy(update={"vocab_parallel": True, "logits_gather": False})


def _mean_step(spec: ModelSpec, gpu: GpuSpec, wl: Workload, scenario: str, contexts: list[int],
               engine: EngineProfile = GENERIC) -> dict[str, float]:  # fmt: skip
    """The engine's decode step averaged over the loop's steps, by term."""
    totals = dict.fromkeys(TERMS, 0.0)
    for context, n in Counter(contexts).items():
        cost = step_cost(spec, gpu, wl, segments=[Segment(wl.batch, context, 1)], scenario=scenario, engine=engine)  # type: ignore[arg-type]
        for c in cost.components:
            totals[c.name] = totals.get(c.name, 0.0) + n * c.seconds
        # the rest of the engine's own step time: host cost, the idle gaps between kernels (an engine's per-kernel
        # gap, e.g. torch-compile's), a launch floor, less communication hidden under compute
        totals["overhead"] += n * (cost.seconds - sum(c.seconds for c in cost.components))
    return {k: v / len(contexts) for k, v in totals.items()}


def predict(spec: ModelSpec, gpu: GpuSpec, scenario: str, loop: Any, noisy: bool,
            engine: EngineProfile = GENERIC) -> Prediction | None:  # fmt: skip
    """What `gpu` under `scenario` (and `engine`) predicts for the loop's prefill and decode steps."""
    if gpu.peak_flops_per_s(loop.dtype) is None:
        return None
    engine = as_loop(engine)
    wl = workload_of(loop.dtype, loop.batch, loop.prompt_tokens, loop.output_tokens, loop.tp)
    prefill = step_cost(spec, gpu, wl, segments=[Segment(loop.batch, 0, loop.prompt_tokens)], scenario=scenario,  # type: ignore[arg-type]
                        engine=engine)  # fmt: skip
    terms = _mean_step(spec, gpu, wl, scenario, loop.decode_contexts, engine)
    tpot = sum(terms.values())
    return Prediction(
        ttft_s=prefill.seconds,
        tpot_s=tpot,
        terms=terms,
        ttft_error=None if loop.ttft.noisy else prefill.seconds / loop.ttft_s - 1,
        tpot_error=None if noisy else tpot / loop.tpot_s - 1,
    )


def engine_bytes(spec: ModelSpec, loop: Any) -> dict[str, float]:
    """Bytes per decode step (per GPU) the engine expects at the loop's contexts: weights and KV read."""
    wl = workload_of(loop.dtype, loop.batch, loop.prompt_tokens, loop.output_tokens, loop.tp)
    ref = _counting_gpu(loop.dtype)
    weights = kv = 0.0
    for context, n in Counter(loop.decode_contexts).items():
        cost = step_cost(spec, ref, wl, segments=[Segment(loop.batch, context, 1)], scenario="ceiling",
                         engine=as_loop(GENERIC))  # fmt: skip
        for p in cost.stages:  # every weight the step streams, the B embedding rows it looks up, the KV it reads
            st = p.stage
            lookup = st.bytes_read if st.name == "embedding lookup" else 0.0
            weights += n * st.count * (st.weight_bytes + lookup)
            kv += n * st.count * st.kv_bytes
    steps = len(loop.decode_contexts)
    out = {"weights": weights / steps, "kv_read": kv / steps}
    if spec.moe and spec.moe_layers:  # distinct experts a step touches under uniform routing: E x (1 - (1 - k/E)^B)
        out["experts_per_layer"] = expected_distinct_experts(spec.moe.experts, spec.moe.experts_per_token, loop.batch)
    return out


def memory_fit(spec: ModelSpec, dtype: str, batch: int, prompt: int, output: int, tp: int,
               free_bytes: float) -> dict[str, Any]:  # fmt: skip
    """Whether the engine's memory report (weights, KV, workspace, 10% reserve) fits in `free_bytes` per device."""
    gpu = _counting_gpu(dtype, free_bytes)
    report = estimate(spec, gpu, workload_of(dtype, batch, prompt, output, tp), engine=as_loop(GENERIC)).memory

    def fits_at_batch_1(layers: int) -> bool:
        return estimate(
            spec.truncated(layers), gpu, workload_of(dtype, 1, prompt, output, tp), engine=as_loop(GENERIC)
        ).memory.fits

    layers = next((n for n in range(spec.layers, 0, -1) if fits_at_batch_1(n)), 0)
    return {"fits": report.fits, "need_bytes": report.per_gpu.total, "max_batch": report.max_batch,
            "max_layers": layers}  # fmt: skip


@dataclass(frozen=True)
class RunReport:
    """One batch size: what was measured, what the loop read, and what each spec predicted."""

    loop: Any  # LoopResult
    bytes_per_step: float  # what the loop read per step (weights + KV, this rank)
    engine_bytes: dict[str, float]
    prefill_flops: float
    mbu: float | None  # vs datasheet bandwidth
    mbu_vs_copy: float | None  # vs the measured copy bandwidth
    mfu_prefill: float | None  # vs datasheet peak FLOP/s
    noisy: bool
    datasheet: Prediction | None
    datasheet_expected: Prediction | None
    calibrated: Prediction | None
    expected_engine: str = GENERIC.name  # the profile datasheet_expected is priced with
    calibration: dict[str, Any] = field(default_factory=dict)


def run_report(spec: ModelSpec, loop: Any, *, datasheet: GpuSpec | None, calibrated: GpuSpec | None,
               copy_bytes_per_s: float | None, calibration: dict[str, Any] | None = None,
               expected_engine: EngineProfile = GENERIC) -> RunReport:  # fmt: skip
    """Compare one LoopResult with the engine's predictions under the datasheet and calibrated specs."""
    noisy = loop.step.noisy
    step_bytes = loop.weight_read_bytes + loop.kv_read_bytes
    achieved = step_bytes / loop.tpot_s
    wl = workload_of(loop.dtype, loop.batch, loop.prompt_tokens, loop.output_tokens, loop.tp)
    ref = _counting_gpu(loop.dtype)
    flops = step_cost(spec, ref, wl, segments=[Segment(loop.batch, 0, loop.prompt_tokens)], scenario="ceiling").flops
    peak = datasheet.peak_flops_per_s(loop.dtype) if datasheet else None
    return RunReport(
        loop=loop,
        bytes_per_step=step_bytes,
        engine_bytes=engine_bytes(spec, loop),
        prefill_flops=flops,
        mbu=achieved / datasheet.bandwidth_bytes_per_s if datasheet else None,
        mbu_vs_copy=achieved / copy_bytes_per_s if copy_bytes_per_s else None,
        mfu_prefill=flops / loop.ttft_s / peak if peak else None,
        noisy=noisy,
        datasheet=predict(spec, datasheet, "ceiling", loop, noisy) if datasheet else None,
        datasheet_expected=predict(spec, datasheet, "expected", loop, noisy, expected_engine) if datasheet else None,
        expected_engine=expected_engine.name,
        calibrated=_calibrated(spec, calibrated, loop, noisy) if calibrated else None,
        calibration=calibration or {},
    )


def _pred(x: Prediction | None) -> dict[str, Any] | None:
    return None if x is None else {"ttft_s": x.ttft_s, "tpot_s": x.tpot_s, "ttft_error": x.ttft_error,
                                   "tpot_error": x.tpot_error, "terms_s": x.terms}  # fmt: skip


def loop_profile(mode: str, on_gpu: bool) -> EngineProfile:
    """The engine profile this loop is: in compile mode on a GPU a torch.compile'd decode loop with CUDA graphs, as
    gpt-fast's (the torch-compile profile, fitted on published rows only); otherwise none fits, and "expected" is the
    hardware alone (generic)."""
    return load_engine("torch-compile") if mode == "compile" and on_gpu else GENERIC


def run_dict(r: RunReport) -> dict[str, Any]:
    """Stable JSON keys of one run."""
    lp = r.loop
    collectives = lp.collective_s_per_step
    return {
        "batch": lp.batch, "prompt_tokens": lp.prompt_tokens, "output_tokens": lp.output_tokens,
        "context_tokens": lp.context_tokens, "tp": lp.tp, "mode": lp.mode, "threads": lp.threads,
        "mean_context_read": sum(lp.decode_contexts) / len(lp.decode_contexts),
        "measured": {
            "ttft_s": lp.ttft_s, "tpot_s": lp.tpot_s, "decode_tokens_per_s": lp.decode_tokens_per_s,
            "ttft": lp.ttft.as_dict(), "tpot": lp.tpot.as_dict(), "step": lp.step.as_dict(), "noisy": r.noisy,
            "bytes_per_step": r.bytes_per_step, "mbu": r.mbu, "mbu_vs_copy": r.mbu_vs_copy,
            "mfu_prefill": r.mfu_prefill, "joules_per_output_token": lp.joules_per_output_token,
            "avg_power_w": lp.avg_power_w, "collective_s_per_step": collectives,
            "allreduce_share": collectives["all_reduce"] / lp.tpot_s if collectives else None,
        },
        "bytes_per_step": {
            "loop": {"weights": lp.weight_read_bytes, "kv_read": lp.kv_read_bytes},
            "engine": r.engine_bytes,
            "experts_per_layer": lp.experts_per_layer,
        },
        "expected_engine": r.expected_engine,
        "predicted": {"datasheet": _pred(r.datasheet), "datasheet_expected": _pred(r.datasheet_expected),
                      "calibrated": _pred(r.calibrated)},
        "calibration": r.calibration,
    }  # fmt: skip
