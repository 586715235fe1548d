"""The roofline: each kernel of a pass takes max(FLOPs / peak FLOP/s, bytes / bandwidth); kernels run in turn.

Williams, Waterman, Patterson, "Roofline: an insightful visual performance model", CACM 2009. Pricing each
kernel on its own roofline (as LLM-Viewer does) rather than the pass's totals makes a compute-bound kernel
unable to hide a memory-bound one: each runs on its own. Collectives run on the link their group spans.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tokcost.engine.collectives import CollectiveCost, Line, Links, Path, cheapest, collective_lines
from tokcost.engine.layout import Layout
from tokcost.engine.passcost import PassCost as PassCost  # re-exported: plots and serving import it from here
from tokcost.engine.passcost import Priced
from tokcost.engine.stages import Op, Stage
from tokcost.engine.workload import same_tensor_rate
from tokcost.errors import UsageError
from tokcost.formats import get as get_format
from tokcost.hardware.spec import Achievable, GpuSpec
from tokcost.profiles import GENERIC, EngineProfile, KernelEfficiency
from tokcost.units import US


@dataclass(frozen=True, slots=True)
class Rates:
    """The speeds one scenario assumes: datasheet peaks ("ceiling") or achievable fractions ("expected")."""

    flops_per_s: float  # matmuls at the compute dtype
    attention_flops_per_s: float  # attention runs on 16-bit activations (FP8 attention only with FP8 compute)
    bytes_per_s: float  # HBM
    weight_only_bytes_per_s: float  # HBM as dequantizing (weight-only) matmul kernels stream it
    expected: bool  # links at their measured efficiency, not their datasheet rate
    compute_dtype: str = "bf16"  # the dtype whose peak flops_per_s is
    float16_flops_per_s: float = 0.0  # the 16-bit peak, for 16-bit weights under a narrower compute (LM head)
    kernels: KernelEfficiency = KernelEfficiency()  # the engine's efficiency per kernel class (identity: ceiling)
    bandwidth_fraction: float = 1.0  # of the datasheet, in bytes_per_s: an efficiency may lift it back to 1, no more
    compute_fraction: float = 1.0  # of the datasheet, in the FLOP/s rates
    collective_overhead_s: float = 0.0  # the engine's launch and synchronization per collective, on the link's latency
    link_latency_override_s: float | None = None  # a GPU spec's fitted all-reduce latency replacing the link's own
    step_overhead_s: float = 0.0  # per forward pass: launches, scheduling, sampling on the host
    request_overhead_s: float = 0.0  # once per request (tokenization, scheduling), on TTFT


def _peak(gpu: GpuSpec, dtype: str) -> float:
    flops = gpu.peak_flops_per_s(dtype)
    if flops is None:
        raise UsageError(
            f"--compute-dtype: {gpu.name} lists no dense peak for {dtype}; it lists: {', '.join(gpu.peak_tflops)}"
        )
    return flops


def _attention_peak(gpu: GpuSpec, compute: str) -> float:
    """Attention multiplies activations by the cache: at FP8 when the compute is FP8, else at 16 bits."""
    for dtype in ((compute,) if compute in ("fp8", "fp32") else ()) + ("bf16", "fp16", compute):
        flops = gpu.peak_flops_per_s(dtype)
        if flops is not None:
            return flops
    return _peak(gpu, compute)


_CEILINGS: dict[tuple[int, str], tuple[GpuSpec, Rates]] = {}  # kept with their GPU: an id is not reused meanwhile


def ceiling_rates(gpu: GpuSpec, compute_dtype: str) -> Rates:
    """Datasheet peaks, no overhead: nothing real runs faster (looked up once per GPU spec and compute dtype)."""
    found = _CEILINGS.get((id(gpu), compute_dtype))
    if found is not None and found[0] is gpu:
        return found[1]
    if len(_CEILINGS) >= 256:
        _CEILINGS.clear()
    rates = _ceiling_rates(gpu, compute_dtype)
    _CEILINGS[(id(gpu), compute_dtype)] = (gpu, rates)
    return rates


def _ceiling_rates(gpu: GpuSpec, compute_dtype: str) -> Rates:
    bw = gpu.bandwidth_bytes_per_s
    return Rates(
        _peak(gpu, compute_dtype),
        _attention_peak(gpu, compute_dtype),
        bw,
        bw,
        expected=False,
        compute_dtype=compute_dtype,
        float16_flops_per_s=_attention_peak(gpu, "bf16"),
    )


def expected_rates(
    gpu: GpuSpec, compute_dtype: str, engine: EngineProfile = GENERIC, achievable: Achievable | None = None
) -> Rates:
    """Hardware x engine: the GPU family's achievable fractions of its peaks (`achievable`, else the spec's); the
    engine's efficiency per kernel class (applied per kernel by kernel_rate), and its fixed costs per step, per
    request and per collective (the GPU's step and request costs when the profile states none)."""
    peak, ach = ceiling_rates(gpu, compute_dtype), achievable or gpu.achievable
    weight_only = ach.weight_only_quant_bandwidth or ach.bandwidth
    step_us = engine.step_overhead_us if engine.step_overhead_us is not None else ach.step_overhead_us
    request_us = engine.request_overhead_us if engine.request_overhead_us is not None else ach.request_overhead_us
    latency_us = ach.allreduce_latency_us
    return Rates(
        flops_per_s=peak.flops_per_s * ach.compute,
        attention_flops_per_s=peak.attention_flops_per_s * ach.compute,
        bytes_per_s=peak.bytes_per_s * ach.bandwidth,
        weight_only_bytes_per_s=peak.bytes_per_s * weight_only,
        expected=True,
        compute_dtype=compute_dtype,
        float16_flops_per_s=peak.float16_flops_per_s * ach.compute,
        kernels=engine.kernels,
        bandwidth_fraction=ach.bandwidth,
        compute_fraction=ach.compute,
        collective_overhead_s=engine.collective_overhead_us * US,
        link_latency_override_s=None if latency_us is None else latency_us * US,
        step_overhead_s=step_us * US,
        request_overhead_s=request_us * US,
    )


_NATIVE: dict[str, str | None] = {}


def native_compute(weight_format: str) -> str | None:
    """The dtype a format's matmuls run at natively (None: dequantized into the compute dtype), looked up once."""
    if weight_format not in _NATIVE:
        _NATIVE[weight_format] = get_format(weight_format).native_compute
    return _NATIVE[weight_format]


def matmul_dtype(kind: str, weight_format: str, rates: Rates) -> tuple[float, bool]:
    """(FLOP/s, dequantizing?) of a kernel: native formats at the compute peak, 16-bit weights at the 16-bit peak
    (an FP8 deployment keeps its LM head in bf16), other formats dequantized into the compute dtype."""
    if not weight_format or kind == "attention":
        return rates.flops_per_s, False
    native = native_compute(weight_format)
    if same_tensor_rate(native, rates.compute_dtype):
        return rates.flops_per_s, False
    if weight_format in ("bf16", "fp16"):
        return rates.float16_flops_per_s or rates.flops_per_s, False
    return rates.flops_per_s, True


def efficiency_key(kind: str, weight_format: str, compute_dtype: str, dequantizing: bool) -> tuple[str, str] | None:
    """Which of the engine's efficiencies a kernel reads: ("dense", dtype), ("weight_only", format), ("attention",
    ""), or None for norms, lookups, KV writes and sampling (routed experts add the MoE efficiency on top)."""
    if kind == "attention":
        return ("attention", "")
    if kind not in ("matmul", "experts"):
        return None
    if dequantizing:
        return ("weight_only", weight_format)
    # a native matmul at the compute dtype, or a 16-bit one (an FP8 deployment's LM head)
    native = native_compute(weight_format) if weight_format else None
    return ("dense", compute_dtype if native is None or same_tensor_rate(native, compute_dtype) else native)


def kernel_efficiency(kind: str, weight_format: str, rates: Rates, dequantizing: bool) -> float:
    """The engine's efficiency for one kernel class (1 for norms, lookups, KV writes and sampling)."""
    k, key = rates.kernels, efficiency_key(kind, weight_format, rates.compute_dtype, dequantizing)
    if key is None:
        return 1.0
    group, name = key
    if group == "attention":
        eff = k.decode_attention
    else:
        eff = k.weight_only(name) if group == "weight_only" else k.dense(name)
    return eff * (k.moe_grouped_gemm if kind == "experts" else 1.0)


@dataclass(frozen=True, slots=True)
class KernelRate:
    """The rates one kernel class runs at under one scenario, the engine's efficiency applied."""

    flops_per_s: float
    weight_bytes_per_s: float  # its weight stream (dequantizing kernels: the GPU's weight-only rate)
    bytes_per_s: float  # every other byte


def kernel_rate(kind: str, weight_format: str, rates: Rates) -> KernelRate:
    """The FLOP/s, weight-stream B/s and other B/s of a kernel of this kind and weight format under `rates`."""
    flops_per_s, dequantizing = matmul_dtype(kind, weight_format, rates)
    if kind == "attention":  # Q.K^T at the cache's dtype: FP8 with an FP8 cache and FP8 compute, else 16-bit
        fp8 = rates.compute_dtype == "fp8" and native_compute(weight_format) == "fp8"
        flops_per_s = rates.attention_flops_per_s if fp8 else rates.float16_flops_per_s or rates.attention_flops_per_s
    # the engine's efficiency for this kernel class, capped so that fraction x efficiency never passes the datasheet
    eff = kernel_efficiency(kind, weight_format, rates, dequantizing)
    peak_bytes_per_s = rates.bytes_per_s / rates.bandwidth_fraction
    flops_per_s *= min(eff, 1 / rates.compute_fraction)
    bytes_per_s = min(rates.bytes_per_s * eff, peak_bytes_per_s)
    # dequantizing kernels stream their weights at the GPU's weight-only rate when its spec gives one
    weights_bw = min(rates.weight_only_bytes_per_s * eff, peak_bytes_per_s) if dequantizing else bytes_per_s
    return KernelRate(flops_per_s, weights_bw, bytes_per_s)


def kernel_rates(stage: Stage, rates: Rates) -> tuple[float, float, float]:
    """(FLOP/s, weight-stream B/s, other B/s) one stage's kernel runs at under `rates`."""
    r = kernel_rate(stage.kind, stage.weight_format, rates)
    return r.flops_per_s, r.weight_bytes_per_s, r.bytes_per_s


def kernel_seconds(flops: float, weight_bytes: float, other_bytes: float, rate: KernelRate) -> tuple[float, float]:
    """(compute, memory) seconds of one occurrence: the two sides of its roofline; the larger is its time."""
    return flops / rate.flops_per_s, weight_bytes / rate.weight_bytes_per_s + other_bytes / rate.bytes_per_s


@dataclass(frozen=True, slots=True)
class CollectiveRate:
    """A collective's path under one scenario, its algorithms as lines in the payload, and the engine's overhead."""

    op: Op
    ranks: int
    path: Path
    lines: tuple[Line, ...]
    overhead_s: float

    def seconds(self, payload_bytes: float) -> float:
        """One occurrence: the cheapest algorithm plus the engine's launch and synchronization."""
        return cheapest(self.lines, payload_bytes)[1] + self.overhead_s

    def cost(self, payload_bytes: float) -> CollectiveCost:
        """One occurrence with its algorithm, for the breakdown and --explain."""
        line, seconds = cheapest(self.lines, payload_bytes)
        return CollectiveCost(self.op, payload_bytes, self.ranks, self.path, line.algorithm,
                              seconds + self.overhead_s, payload_bytes * line.link_bytes_per_byte)  # fmt: skip


def collective_rate(
    op: Op, ranks: int, rates: Rates, links: Links, layout: Layout, *, crosses_nodes: bool = False
) -> CollectiveRate:
    """The path a collective rides under `rates`: the link its group spans, at the engine's share of its rate."""
    path = links.path(ranks, layout, expected=rates.expected, latency_override_s=rates.link_latency_override_s,
                      crosses_nodes=crosses_nodes)  # fmt: skip
    if rates.kernels.collective != 1.0:  # the engine's share of the link's rate, never above its datasheet
        top = links.path(ranks, layout, expected=False, crosses_nodes=crosses_nodes)
        path = replace(
            path,
            bytes_per_s=min(path.bytes_per_s * rates.kernels.collective, top.bytes_per_s),
            intra_bytes_per_s=min(path.intra_bytes_per_s * rates.kernels.collective, top.intra_bytes_per_s),
        )
    return CollectiveRate(op, ranks, path, collective_lines(op, ranks, path), rates.collective_overhead_s)


def stage_rate(stage: Stage, rates: Rates, links: Links, layout: Layout) -> KernelRate | CollectiveRate:
    """What one stage runs at: its kernel class's rates, or its collective's path."""
    if stage.collective is not None:
        return collective_rate(stage.collective, stage.ranks, rates, links, layout, crosses_nodes=stage.crosses_nodes)
    return kernel_rate(stage.kind, stage.weight_format, rates)


def priced(stage: Stage[float], rate: KernelRate | CollectiveRate) -> Priced:
    """One stage at its rate: its kernel on its roofline, or its collective on its path."""
    if isinstance(rate, CollectiveRate):
        return Priced(stage, 0.0, 0.0, rate.cost(stage.payload_bytes))
    n = stage.count
    compute_s, memory_s = kernel_seconds(stage.flops, stage.weight_bytes, stage.bytes - stage.weight_bytes, rate)
    return Priced(stage, n * compute_s, n * memory_s, None)


def price_stage(stage: Stage[float], rates: Rates, links: Links, layout: Layout) -> Priced:
    """One kernel on its roofline, or one collective on its path."""
    return priced(stage, stage_rate(stage, rates, links, layout))
