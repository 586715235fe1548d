"""The roofline: each kernel of a pass takes max(FLOPs / peak FLOP/s, bytes / bandwidth) (under "expected" plus the
share of the shorter side that the kernel does not hide, kernel_seconds); kernels run in turn.

Williams, Waterman, Patterson, "Roofline: an insightful visual performance model", CACM 2009. Pricing each
kernel on its own roofline (as LLM-Viewer does) rather than the pass's totals makes a compute-bound kernel
unable to hide a memory-bound one: each runs on its own. Collectives run on the link their group spans.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal, get_args

from tokcost.engine.collectives import CollectiveCost, Line, Links, Path, cheapest, collective_lines
from tokcost.engine.kernels import KV_ATTENTION
from tokcost.engine.layout import Layout, per_dp
from tokcost.engine.passcost import PassCost as PassCost  # re-exported: plots and serving import it from here
from tokcost.engine.passcost import Priced, overlapped_sides
from tokcost.engine.stages import Op, Stage
from tokcost.engine.workload import Precision, same_tensor_rate
from tokcost.errors import UsageError
from tokcost.formats import get as get_format
from tokcost.hardware.spec import GpuSpec
from tokcost.hardware.sustained import RowDtype, RowKernel, RowPace
from tokcost.profiles import GENERIC, IDENTITY, CollectiveCosts, EngineProfile, KernelEfficiency, RowKernelSwitch
from tokcost.units import US

NO_COLLECTIVE_COST = CollectiveCosts()
ALL_OPS: frozenset[Op] = frozenset(get_args(Op))
OVERLAPPABLE: frozenset[Op] = frozenset({"all-to-all"})  # what an engine may hide behind compute (two-batch overlap)
# "Expected": the share of a kernel's shorter roofline side that its longer does not hide (kernel_seconds). A stated
# value, not a measurement: published rows whose kernels sit near the ridge (both sides within 3x) ran 30-40% slower
# than max(compute, memory) across TensorRT-LLM, vLLM and TGI, while rows far from it did not. Chosen among 0, 0.3,
# 0.6 and 1 by leave-one-source-out: 0.6 lowers the headline without moving more values past the stability limit
# (1 moves 45); the serving check, which no fit reads, agrees (validation/README.md).
UNHIDDEN_SHARE = 0.6
UNHIDDEN_SOURCE = (
    "a stated value chosen by leave-one-source-out among 0, 0.3, 0.6 and 1: near the ridge the "
    "published rows ran 30-40% slower than max(compute, memory)"
)
# "Expected": an attention kernel's fixed time on the GPU, whatever its work (kernel_rate): decode-attention
# microbenchmarks time a kernel as an intercept plus its KV stream, and at short contexts the intercept is most of
# it (prologue, the query's load, the softmax merge, the output's write). Published intercepts, in us: 12.4 and 16.8
# (onnxruntime PR 21414: its paged kernel and FlashAttention-2's paged decode, H100, 64 sequences, 64/8 heads), 14.5,
# 15 and 17 (FlashInfer's 2024-02 blog, H100 batch decode, GQA and MHA at batch 64 and 16), 13.5 (10-17:
# FlashAttention-3's paged decode under CUDA graphs, flash-attention issue 1572), 8 and 11.1 (TensorRT-LLM's
# trtllm-gen decode on B200 at batch 4 and 128, flashinfer PR 1415); A100 21 and 27 (the blog). Their median on H100
# and B200, 14 us, less the gap every kernel already pays apart (the era's kernel_us, 1.5-3 us): 12 us, on every
# GPU. A stated value from the sources, not fitted or chosen on the fit (run at 10, 12 and 15 us, with the folds
# then started from the full fit, the median of per-source medians left out read 15.6%, 16.1% and 15.2%).
ATTENTION_FLOOR_S = 12e-6
ATTENTION_FLOOR_SOURCE = (
    "the median intercept of published decode-attention timings against context, 14 us on H100 and B200 "
    "(FlashInfer, FlashAttention-2/3, onnxruntime's paged kernel, trtllm-gen), less the per-kernel gap priced "
    "apart; a stated value, not fitted"
)


@dataclass(frozen=True, slots=True)
class Rates:
    """The speeds one scenario assumes: datasheet peaks ("ceiling"), or the hardware's sustained shares with one
    engine era's efficiencies and host costs ("expected")."""

    flops_per_s: float  # matmuls at the compute dtype (the hardware's: the engine's share is applied per kernel)
    attention_flops_per_s: float  # attention runs on 16-bit activations (FP8 attention only with FP8 compute)
    bytes_per_s: float  # HBM, as a large copy streams it
    expected: bool  # links at their measured efficiency, not their datasheet rate
    compute_dtype: str = "bf16"  # the dtype whose peak flops_per_s is
    float16_flops_per_s: float = 0.0  # the 16-bit rate, for 16-bit weights under a narrower compute (LM head)
    fp8_flops_per_s: float = 0.0  # the FP8 rate, for FP8 operands whatever the compute (0: the GPU has no FP8 peak)
    kernels: KernelEfficiency = IDENTITY  # the engine's efficiency per kernel class (identity: ceiling)
    memory_gap: float = 1.0  # the engine's platform gap on every memory-side efficiency (1 on CUDA)
    compute_gap: float = 1.0  # ... on the compute side of GEMMs
    attention_gap: float = 1.0  # ... and on prefill attention's compute side
    moe_compute_gap: float = 1.0  # routed experts' compute side under an older kernel class (mma_sync_share)
    peak_bytes_per_s: float = 0.0  # the datasheet: no kernel streams faster (0: bytes_per_s is the datasheet)
    peak_flops_per_s: float = 0.0  # the dense peaks of the three matmul paths, likewise
    peak_attention_flops_per_s: float = 0.0
    peak_float16_flops_per_s: float = 0.0
    peak_fp8_flops_per_s: float = 0.0
    collective_costs: CollectiveCosts = NO_COLLECTIVE_COST  # the engine's launch and sync per collective, in us
    step_overhead_s: float = 0.0  # per forward pass: scheduling, sampling on the host
    sequence_overhead_s: float = 0.0  # per sequence in the pass, on the host: its inputs, sampling, output
    launch_overhead_s: float = 0.0  # per kernel the host launches (eager eras): a pass is no faster than that
    # a graph era's decode steps of more sequences per DP rank than its graphs capture run eager: this per kernel
    graph_cap_tokens: float = math.inf
    eager_launch_overhead_s: float = 0.0
    kernel_overhead_s: float = 0.0  # per kernel on the GPU: the gap between kernels, their ramp and tail
    # kernels the engine launches per stage row of a pass (EraFields.kernels_per_row): launches and gaps scale by it
    kernels_per_row: float = 1.0
    one_host_thread: bool = False  # one host thread launches every GPU's kernels of a pipeline stage (EraFields)
    request_overhead_s: float = 0.0  # once per request (HTTP, tokenization, admission), on TTFT
    comm_overlap: float = 0.0  # share of the overlapped collectives' time hidden behind the kernels
    overlap_ops: frozenset[Op] = OVERLAPPABLE  # which collectives overlap (the ceiling: all of them, fully)
    unhidden: float = 0.0  # share of a kernel's shorter roofline side not hidden behind its longer (0: the ceiling)
    attention_floor_s: float = 0.0  # an attention kernel's fixed time on the GPU, whatever its work (0: the ceiling)
    fp8_attention: bool = True  # attention takes FP8 operands with an FP8 cache (FlashAttention-2-class kernels: no)
    # routed experts multiply at the compute dtype (an Ampere grouped GEMM, EraFields.moe_gemm_kernel: at 16 bits only)
    narrow_experts: bool = True
    # a grouped GEMM's gathered expert rows, in elements per second, at 16 bits and narrower (sustained.RowPace; 0:
    # none priced, as on the ceiling)
    expert_rows_per_s: float = 0.0
    narrow_expert_rows_per_s: float = 0.0
    four_bit_expert_rows_per_s: float = 0.0  # at 4-bit compute: the engines' own 4-bit MoE kernels' pace

    def host_s(self, sequences: float, dp: int = 1) -> float:
        """The host's serial time for one pass of `sequences` sequences: per step plus per sequence, the sequences
        of the busiest of `dp` attention replicas (each DP rank schedules its own: SGLang's DP-attention schedulers,
        vLLM's engine core per DP rank), so the ranks' host work runs side by side."""
        return self.step_overhead_s + self.sequence_overhead_s * per_dp(sequences, dp)

    def launch_s(self, gpus: int, tokens: float) -> float:
        """The host's time per kernel of one GPU's pass, a decode batch of `tokens` per DP rank (features.graph_batch:
        0 for a pass with prompt tokens): an eager era's launch cost; a graph era's eager cost past the batch its
        graphs capture (a graph replay launches them all: 0 up to it); times the `gpus` of a pipeline stage
        (Layout.stage_gpus) where one host thread launches every GPU's kernels in turn (their launches serialize);
        a process per GPU launches its own beside the others'."""
        per = self.launch_overhead_s or (self.eager_launch_overhead_s if tokens > self.graph_cap_tokens else 0.0)
        return per * (gpus if self.one_host_thread else 1)

    def launched(self, kernel_rows: float, collective_rows: float) -> float:
        """The kernels a pass's rows launch under these rates (kernels_launched)."""
        return kernels_launched(kernel_rows, collective_rows, self.kernels_per_row)

    def cap(self, value: float, peak: float) -> float:
        """A rate never above its datasheet figure (unset: no cap, the ceiling's own rates)."""
        return min(value, peak) if peak else value


def kernels_launched(kernel_rows: float, collective_rows: float, kernels_per_row: float) -> float:
    """The kernels a pass's rows launch: each kernel row as the engine's kernels_per_row, each collective one (an
    all-reduce is one NCCL or custom kernel); the per-kernel launch and gap costs are paid on these."""
    return kernel_rows * kernels_per_row + collective_rows


def _peak(gpu: GpuSpec, dtype: str) -> float:
    flops = gpu.peak_flops_per_s(dtype)
    if flops is None:
        raise UsageError(
            f"--compute-dtype: {gpu.name} lists no dense peak for {dtype}, the matmuls' dtype (the model's where "
            f"--compute-dtype names none); it lists: {', '.join(gpu.peak_tflops)}"
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
    """Datasheet peaks, no overhead, every collective hidden behind compute: nothing real runs faster (looked up
    once per GPU spec and compute dtype)."""
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
        expected=False,
        compute_dtype=compute_dtype,
        # 0 where the spec lists no 16-bit peak (a CPU calibrated at fp32): no 16-bit path, the compute dtype's runs
        float16_flops_per_s=gpu.peak_flops_per_s("bf16") or gpu.peak_flops_per_s("fp16") or 0.0,
        fp8_flops_per_s=gpu.peak_flops_per_s("fp8") or 0.0,
        comm_overlap=1.0,  # the bound: communication perfectly overlapped with compute (two-batch overlap at best)
        overlap_ops=ALL_OPS,
    )


def _gemm_share(gpu: GpuSpec, dtype: str, peak: float) -> float:
    """The hardware's sustained GEMM share for the dtype whose peak is `peak` (its 16-bit partner's, else bf16's)."""
    hw = gpu.hardware
    for name in (dtype, "bf16", "fp16"):
        figure = hw.gemm_for(name)
        if figure is not None and gpu.peak_flops_per_s(name) == peak:
            return figure.fraction
    figure = hw.gemm_for(dtype) or hw.gemm_for("bf16") or next(iter(hw.gemm.values()))
    return figure.fraction


def expected_rates(gpu: GpuSpec, compute_dtype: str, engine: EngineProfile = GENERIC, *, client_side: bool = True,
                   scheduler_steps: int = 1, fused_attention: bool = True, tp: int = 1) -> Rates:  # fmt: skip
    """Hardware x engine: the GPU's sustained shares of its peaks (copy for every HBM stream, the GEMM share of each
    matmul's dtype), the engine era's efficiencies per kernel class and its gap on the GPU's platform (applied per
    kernel by kernel_rate), its host costs, and the expert all-to-all it overlaps. `client_side`: the per-request
    cost is on TTFT (a user's view through an HTTP client); False for an engine-level clock. `scheduler_steps`:
    multi-step scheduling (vLLM 0.6's --num-scheduler-steps) spreads the host's work over that many steps.
    `fused_attention` False: attention's matmuls run as plain GEMMs (cuBLAS), whatever the era's flash kernels.
    `tp`: the layout's tensor parallelism, which sets the batch the era's CUDA graphs capture on this GPU."""
    engine = engine.per_window(scheduler_steps)
    gap = engine.gap(gpu.platform)
    rates = hardware_x_engine(
        gpu, compute_dtype, engine.kernels, memory_gap=gap.memory, compute_gap=gap.compute,
        attention_gap=gap.attention * (fa2_share(gpu, engine) if fused_attention else 1.0),
        moe_compute_gap=mma_sync_share(gpu, engine),
        collectives=engine.collective_overhead_us,
        step_s=engine.step_overhead_us * gap.step * US,
        sequence_s=engine.sequence_overhead_us * gap.step * US,
        launch_s=engine.launch_overhead_us * US, kernel_s=engine.kernel_overhead_us * US,
        kernels_per_row=engine.kernels_per_row, one_host_thread=engine.one_host_thread,
        request_s=engine.request_overhead_us * US if client_side else 0.0,
        overlap=engine.comm_overlap,
        fp8_attention=not engine.fa2_kernels,  # FlashAttention-2 has no FP8 path
        narrow_experts=engine.moe_gemm_kernel != "mma-sync",  # CUTLASS's Sm80 grouped GEMM takes 16-bit activations
        expert_rows=engine.moe_gemm_kernel == "fused-moe", row_kernels=engine.moe_row_kernels,
    )  # fmt: skip
    if engine.eager_launch_us is None:
        return rates
    cap = engine.scheduler(gpu_name=gpu.name, memory_bytes=gpu.memory_bytes, tp=tp).graph_batch_cap
    if cap is None:
        return rates
    # past the captured batch every kernel is launched from the host (EraFields.eager_launch_us)
    return replace(rates, graph_cap_tokens=float(cap), eager_launch_overhead_s=engine.eager_launch_us * US)


def fa2_share(gpu: GpuSpec, engine: EngineProfile) -> float:
    """Prefill attention's share of the GPU's own flash attention under the engine's kernel class: an Ampere-class
    kernel (FlashAttention-2) on a GPU whose tensor cores it leaves partly idle (Hopper) reaches the GPU's measured
    `fa2_attention` share; 1 for native kernels and where the GPU states none."""
    figure = gpu.hardware.fa2_attention
    return figure.fraction if engine.fa2_kernels and figure is not None else 1.0


def mma_sync_share(gpu: GpuSpec, engine: EngineProfile) -> float:
    """Routed experts' compute share of the GPU's own GEMM under the engine's MoE kernel class: an Ampere/Ada-
    generation grouped GEMM (mma.sync) on a GPU whose warpgroup MMA it leaves idle (Hopper) reaches the GPU's
    measured `mma_sync_gemm` share; 1 for native kernels and where the GPU states none."""
    figure = gpu.hardware.mma_sync_gemm
    return figure.fraction if engine.moe_gemm_kernel == "mma-sync" and figure is not None else 1.0


def hardware_x_engine(
    gpu: GpuSpec, compute_dtype: str, kernels: KernelEfficiency, *, memory_gap: float = 1.0,
    compute_gap: float = 1.0, attention_gap: float = 1.0, moe_compute_gap: float = 1.0,
    collectives: CollectiveCosts = NO_COLLECTIVE_COST,
    step_s: float = 0.0, sequence_s: float = 0.0,
    launch_s: float = 0.0, kernel_s: float = 0.0, kernels_per_row: float = 1.0, one_host_thread: bool = False,
    request_s: float = 0.0,
    overlap: float = 0.0, unhidden: float = UNHIDDEN_SHARE, attention_floor_s: float = ATTENTION_FLOOR_S,
    fp8_attention: bool = True, narrow_experts: bool = True, expert_rows: bool = False,
    row_kernels: tuple[RowKernelSwitch, ...] = (),
) -> Rates:  # fmt: skip
    """Expected rates from the hardware's sustained shares and an engine's terms (expected_rates; the fit's
    candidates): every datasheet figure is the cap. `expert_rows`: the engine's fused-MoE kernel pays the GPU's row
    paces (sustained.expert_rows), those of the kernels `row_kernels` switches a class of experts to where the GPU
    states them (row_figure)."""
    peak, copy = ceiling_rates(gpu, compute_dtype), gpu.hardware.copy_bandwidth.fraction
    return Rates(
        flops_per_s=peak.flops_per_s * _gemm_share(gpu, compute_dtype, peak.flops_per_s),
        attention_flops_per_s=peak.attention_flops_per_s * _gemm_share(gpu, compute_dtype, peak.attention_flops_per_s),
        bytes_per_s=peak.bytes_per_s * copy,
        expected=True,
        compute_dtype=compute_dtype,
        float16_flops_per_s=peak.float16_flops_per_s * _gemm_share(gpu, "bf16", peak.float16_flops_per_s),
        fp8_flops_per_s=peak.fp8_flops_per_s * _gemm_share(gpu, "fp8", peak.fp8_flops_per_s),
        kernels=kernels,
        memory_gap=memory_gap,
        compute_gap=compute_gap,
        attention_gap=attention_gap,
        moe_compute_gap=moe_compute_gap,
        peak_bytes_per_s=peak.bytes_per_s,
        peak_flops_per_s=peak.flops_per_s,
        peak_attention_flops_per_s=peak.attention_flops_per_s,
        peak_float16_flops_per_s=peak.float16_flops_per_s,
        peak_fp8_flops_per_s=peak.fp8_flops_per_s,
        collective_costs=collectives,
        step_overhead_s=step_s,
        sequence_overhead_s=sequence_s,
        launch_overhead_s=launch_s,
        kernel_overhead_s=kernel_s,
        kernels_per_row=kernels_per_row,
        one_host_thread=one_host_thread,
        request_overhead_s=request_s,
        comm_overlap=overlap,
        unhidden=unhidden,
        attention_floor_s=attention_floor_s,
        fp8_attention=fp8_attention,
        narrow_experts=narrow_experts,
        expert_rows_per_s=_row_pace(gpu, "bf16", row_kernels) if expert_rows else 0.0,
        narrow_expert_rows_per_s=_row_pace(gpu, "fp8", row_kernels) if expert_rows else 0.0,
        four_bit_expert_rows_per_s=_row_pace(gpu, "fp4", row_kernels) if expert_rows else 0.0,
    )


def row_figure(
    gpu: GpuSpec, dtype: RowDtype, switches: tuple[RowKernelSwitch, ...]
) -> tuple[RowPace | None, RowKernel | None]:
    """(the GPU's measured row pace, the kernel it is of; None: the default fused MoE) for experts at `dtype`'s class
    under a build's kernel switches (EraFields.moe_row_kernels): the switched kernel's where the GPU states it."""
    kernel = next((s.kernel for s in switches if s.experts == dtype), None)
    return gpu.hardware.row_pace(dtype, kernel)


def _row_pace(gpu: GpuSpec, dtype: RowDtype, switches: tuple[RowKernelSwitch, ...]) -> float:
    """The pace of gathered expert rows at `dtype`'s class (row_figure), in elements per second (0: none)."""
    pace = row_figure(gpu, dtype, switches)[0]
    return pace.g_elements_per_s * 1e9 if pace is not None else 0.0


_NATIVE: dict[str, tuple[str | None, bool]] = {}


def _native(weight_format: str) -> tuple[str | None, bool]:
    """(its native matmul dtype, block-scaled?) of a format, looked up once."""
    if weight_format not in _NATIVE:
        f = get_format(weight_format)
        _NATIVE[weight_format] = (f.native_compute, f.block_scaled)
    return _NATIVE[weight_format]


def native_compute(weight_format: str) -> str | None:
    """The dtype a format's matmuls run at natively (None: dequantized into the compute dtype)."""
    return _native(weight_format)[0]


MatmulPath = Literal["compute", "float16", "attention", "fp8"]
NARROW_COMPUTE = frozenset({"fp8", "int8", "fp4", "int4"})  # compute dtypes under 16 bits (units.COMPUTE_DTYPES)
FOUR_BIT_COMPUTE = frozenset({"fp4", "int4"})


def matmul_path(kind: str, weight_format: str, rates: Rates) -> tuple[MatmulPath, bool]:
    """(which FLOP rate, a format's own kernel?) of a kernel: native formats at the compute peak (block-scaled ones
    in a kernel of their own), 16-bit weights at the 16-bit peak (an FP8 deployment keeps its LM head in bf16),
    other formats dequantized into the compute dtype; attention multiplies activations by the cache at FP8 with an
    FP8 cache under FP8 compute, else at 16 bits; routed experts under an Ampere grouped GEMM (Rates.narrow_experts
    False) at 16 bits where the compute is narrower, their weights streamed as the native class streams them."""
    if kind in KV_ATTENTION:
        fp8 = rates.fp8_attention and rates.compute_dtype == "fp8" and native_compute(weight_format) == "fp8"
        return ("attention" if fp8 or not rates.float16_flops_per_s else "float16"), False
    if not weight_format:
        return "compute", False
    native, block_scaled = _native(weight_format)
    sixteen: MatmulPath = "float16" if rates.float16_flops_per_s else "compute"
    path: MatmulPath
    if same_tensor_rate(native, rates.compute_dtype):
        path, own = "compute", block_scaled
    elif weight_format in ("bf16", "fp16"):
        path, own = sixteen, False
    else:
        path, own = "compute", True
    if kind == "experts" and not rates.narrow_experts and rates.compute_dtype in NARROW_COMPUTE:
        path = sixteen  # an Ampere grouped GEMM multiplies 16-bit activations; the weights stream in their own class
    return path, own


def compute_dtype_applies(p: Precision, rates: Rates) -> bool:
    """Whether the compute dtype sets any matmul's rate (matmul_path): 16-bit weights multiply at the
    16-bit peak whatever it is, and attention runs at FP8 only with an FP8 cache."""
    if p.compute in ("bf16", "fp16"):
        return True
    linear = (matmul_path(kind, fmt, rates)[0] for kind, fmt in
              (("matmul", p.weights), ("matmul", p.attention), ("experts", p.experts)))  # fmt: skip
    return "compute" in linear or matmul_path("attention", p.kv, rates)[0] == "attention"


def matmul_dtype(kind: str, weight_format: str, rates: Rates) -> tuple[float, bool]:
    """(FLOP/s, dequantizing?) of a kernel at the hardware's rate, before the engine's efficiency (matmul_path)."""
    path, dequantizing = matmul_path(kind, weight_format, rates)
    return _path_flops(rates, path)[0], dequantizing


def _path_flops(rates: Rates, path: MatmulPath) -> tuple[float, float]:
    """(the hardware's FLOP/s, the datasheet's) on one matmul path."""
    if path == "attention":
        return rates.attention_flops_per_s, rates.peak_attention_flops_per_s
    if path == "float16":
        return rates.float16_flops_per_s, rates.peak_float16_flops_per_s
    if path == "fp8":
        return rates.fp8_flops_per_s, rates.peak_fp8_flops_per_s
    return rates.flops_per_s, rates.peak_flops_per_s


def kernel_class(kind: str, dequantizing: bool) -> str | None:
    """Which of the engine's kernel classes a kernel is: 'gemv' (native weights; 'gemm' on the compute side),
    'weight_only' (a format family's own kernel: dequantizing, or block-scaled), 'attention' (paged GQA / MHA /
    MQA), 'attention_mla' (MLA's latent cache), or None for norms, lookups, KV writes and sampling (these run at the
    hardware's own rates). Routed experts add the MoE efficiency on top of their class."""
    if kind in KV_ATTENTION:
        return kind
    if kind not in ("matmul", "experts"):
        return None
    return "weight_only" if dequantizing else "gemv"


def kernel_efficiency(kind: str, weight_format: str, rates: Rates, dequantizing: bool) -> tuple[float, float]:
    """(memory side, compute side) efficiency of one kernel class under the engine (1, 1 outside every class)."""
    group = kernel_class(kind, dequantizing)
    if group is None:
        return 1.0, 1.0
    k = rates.kernels
    memory, compute = k.memory_of(group, weight_format), k.compute_of(group)
    if kind == "experts":  # grouped GEMM over the routed experts, on top of its format's class (and its generation)
        memory, compute = memory * k.memory.moe, compute * k.compute.moe * rates.moe_compute_gap
    gap = rates.attention_gap if group in KV_ATTENTION else rates.compute_gap
    return memory * rates.memory_gap, compute * gap


@dataclass(frozen=True, slots=True)
class KernelRate:
    """The rates one kernel class runs at under one scenario, the engine's efficiency applied."""

    flops_per_s: float
    weight_bytes_per_s: float  # its weight stream
    bytes_per_s: float  # every other byte (activations, the KV cache)
    unhidden: float = 0.0  # Rates.unhidden: the share of the shorter side that the longer does not hide
    floor_s: float = 0.0  # fixed time of each occurrence, whatever its work (an attention kernel's: Rates)


def kernel_rate(
    kind: str, weight_format: str, rates: Rates, row_flops: float = 0.0, fp8_operands: bool = False
) -> KernelRate:
    """The FLOP/s, weight-stream B/s and other B/s of a kernel of this kind and weight format under `rates`:
    the hardware's rate on each side times the engine's efficiency there, capped at the datasheet. A grouped GEMM
    over gathered expert rows (`row_flops` FLOPs per element of them, Stage.row_flops) pays each element at the
    GPU's row pace on top of its math. A kernel of FP8 operands whatever the compute (Stage.fp8_operands) runs at
    the GPU's FP8 rate where it has one."""
    path, dequantizing = matmul_path(kind, weight_format, rates)
    if fp8_operands and rates.fp8_flops_per_s:
        path = "fp8"
    flops_per_s, peak_flops = _path_flops(rates, path)
    memory, compute = kernel_efficiency(kind, weight_format, rates, dequantizing)
    bytes_per_s = rates.cap(rates.bytes_per_s * memory, rates.peak_bytes_per_s)
    floor = rates.attention_floor_s if kind in KV_ATTENTION else 0.0
    flops_per_s = rates.cap(flops_per_s * compute, peak_flops)
    pace = expert_row_pace(path, rates) if row_flops else 0.0
    if pace:  # per FLOP: the math's time plus its share of a gathered row's elements at their pace
        flops_per_s = 1 / (1 / flops_per_s + 1 / (row_flops * pace))
    return KernelRate(flops_per_s, bytes_per_s, bytes_per_s, rates.unhidden, floor)


def expert_row_pace(path: MatmulPath, rates: Rates) -> float:
    """The row pace (elements/s) of experts multiplied on `path` (expert_row_dtype's)."""
    paces = {"bf16": rates.expert_rows_per_s, "fp8": rates.narrow_expert_rows_per_s,
             "fp4": rates.four_bit_expert_rows_per_s}  # fmt: skip
    return paces[expert_row_dtype(path, rates)]


def expert_row_dtype(path: MatmulPath, rates: Rates) -> RowDtype:
    """Which of a GPU's row paces (sustained.expert_rows) experts multiplied on `path` take: the 4-bit one at a 4-bit
    compute (Triton's fused MoE has no such path: vLLM and SGLang multiply NVFP4 experts in FlashInfer's kernels,
    whose pace it is), the narrow one at an 8-bit compute, else the 16-bit one."""
    if path != "compute" or rates.compute_dtype not in NARROW_COMPUTE:
        return "bf16"
    return "fp4" if rates.compute_dtype in FOUR_BIT_COMPUTE else "fp8"


def kernel_rates(stage: Stage, rates: Rates) -> tuple[float, float, float]:
    """(FLOP/s, weight-stream B/s, other B/s) one stage's kernel runs at under `rates`."""
    r = kernel_rate(stage.kind, stage.weight_format, rates, stage.row_flops, stage.fp8_operands)
    return r.flops_per_s, r.weight_bytes_per_s, r.bytes_per_s


def kernel_sides(flops: float, weight_bytes: float, other_bytes: float, rate: KernelRate) -> tuple[float, float]:
    """(compute, memory) seconds of one occurrence, each side on its own."""
    return flops / rate.flops_per_s, weight_bytes / rate.weight_bytes_per_s + other_bytes / rate.bytes_per_s


def kernel_seconds(flops: float, weight_bytes: float, other_bytes: float, rate: KernelRate) -> tuple[float, float]:
    """(compute, memory) seconds of one occurrence as priced: its roofline's two sides, each with the share of the
    other that the kernel does not hide (passcost.overlapped_sides), plus its fixed time (an attention kernel's); the
    larger is its time. A kernel overlaps its loads with its math imperfectly, most visibly where the two sides are
    equal."""
    return overlapped_sides(*kernel_sides(flops, weight_bytes, other_bytes, rate), rate.unhidden, rate.floor_s)


def kernel_slopes(flops: float, weight_bytes: float, other_bytes: float, rate: KernelRate) -> tuple[float, float]:
    """kernel_seconds of a kernel's work per unit of a feature (its lines' slopes): the sides without the fixed
    time, which each occurrence pays once."""
    return overlapped_sides(*kernel_sides(flops, weight_bytes, other_bytes, rate), rate.unhidden)


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
    """The path a collective rides under `rates` (the link its group spans) and the engine's cost on that link's
    class (a custom all-reduce on NVLink, NCCL over PCIe, the network)."""
    path = links.path(ranks, layout, expected=rates.expected, crosses_nodes=crosses_nodes)
    overhead_s = rates.collective_costs.of(path.link_class) * US
    return CollectiveRate(op, ranks, path, collective_lines(op, ranks, path), overhead_s)


def stage_rate(stage: Stage, rates: Rates, links: Links, layout: Layout) -> KernelRate | CollectiveRate:
    """What one stage runs at: its kernel class's rates, or its collective's path."""
    if stage.collective is not None:
        return collective_rate(stage.collective, stage.ranks, rates, links, layout, crosses_nodes=stage.crosses_nodes)
    return kernel_rate(stage.kind, stage.weight_format, rates, stage.row_flops, stage.fp8_operands)


def priced(stage: Stage[float], rate: KernelRate | CollectiveRate) -> Priced:
    """One stage at its rate: its kernel on its roofline, or its collective on its path."""
    if isinstance(rate, CollectiveRate):
        return Priced(stage, 0.0, 0.0, rate.cost(stage.payload_bytes))
    n = stage.count
    compute_s, memory_s = kernel_sides(stage.flops, stage.weight_bytes, stage.bytes - stage.weight_bytes, rate)
    return Priced(stage, n * compute_s, n * memory_s, None, rate.unhidden, n * rate.floor_s)


def price_stage(stage: Stage[float], rates: Rates, links: Links, layout: Layout) -> Priced:
    """One kernel on its roofline, or one collective on its path."""
    return priced(stage, stage_rate(stage, rates, links, layout))
