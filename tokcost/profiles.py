"""Serving-engine profiles: what one engine era adds on top of the hardware when it runs a model ("expected").

"Expected" = hardware x engine. The GPU spec keeps what the hardware itself sustains (its `sustained` block: a
copy's share of the datasheet bandwidth, a large GEMM's share of each dense peak). A profile keeps what one era of
an engine (vLLM V1, TensorRT-LLM in-flight, ...) reaches relative to that, per kernel class, on two sides kept
apart, so that a slow prefill never drags decode:
- memory side (a share of the copy rate): GEMV over native weights, dequantizing GEMV by format family (int4,
  int8, fp8, fp4, gguf, nf4), decode attention reading the KV cache by attention architecture (paged GQA / MHA /
  MQA; MLA's latent cache apart: another kernel), MoE grouped GEMM (on top of the GEMV's);
- compute side (a share of the GEMM rate at the kernel's dtype): GEMM, prefill attention, MoE grouped GEMM;
and its host costs: per forward pass (scheduling, sampling), per launched kernel in eager eras (the host launches
each kernel; a pass takes the longer of its GPU work and its launches), per collective by link class (a custom
all-reduce on NVLink/xGMI, NCCL over PCIe, the network), per request on client-side harnesses (HTTP,
tokenization: the TTFT a user sees); the share of expert all-to-all it hides behind compute (two-batch overlap);
its gap on a platform (ROCm builds of CUDA-first engines); and the scheduler defaults `plan` serves with.
Each fitted number is labelled `fitted` or `prior` (`basis`); `band` is the 80% band of left-out rows around
expected. Efficiency x the hardware's share is capped at the datasheet, so "expected" is never above "ceiling".

The files (tokcost/specs/engines/*.yaml) hold every era of an engine; tokcost/eras.py resolves `vllm@0.6` to one
era. `generic` is the identity with no cost: the hardware alone.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tokcost.formats import get as get_format
from tokcost.hardware.sustained import RowDtype, RowKernel
from tokcost.names import SpecName

_FROZEN = ConfigDict(frozen=True, extra="forbid", strict=True, str_strip_whitespace=True)
# A share of what the hardware sustains for one kernel class: above 1 when an engine's kernel streams more than a
# plain copy (the product with the hardware's share is still capped at the datasheet). Outside 0.05-2 is a typo.
EFFICIENCY_RANGE = (0.05, 2.0)
Efficiency = Annotated[float, Field(ge=EFFICIENCY_RANGE[0], le=EFFICIENCY_RANGE[1], allow_inf_nan=False)]
Microseconds = Annotated[float, Field(ge=0, le=10_000_000, allow_inf_nan=False)]
Platform = Literal["cuda", "rocm"]
Basis = Literal["fitted", "engine", "all engines", "prior"]  # its own rows, its engine's pooled, every engine's, none
WEIGHT_ONLY_FAMILIES = ("int4", "int8", "fp8", "fp8_block", "fp4", "gguf", "nf4")


class WeightOnly(BaseModel):
    """A format family's own GEMV (memory side): dequantizing, or block-scaled; unset: the era's GEMV efficiency."""

    model_config = _FROZEN

    int4: Efficiency | None = None  # AWQ, GPTQ, MLC q4f16 (Marlin-class); torch.compile: tinygemm, a kernel apart
    int8: Efficiency | None = None
    fp8: Efficiency | None = None  # FP8 weights on a GPU without FP8 tensor cores (Marlin FP8)
    # FP8 with a scale per 128x128 block (DeepSeek-V3/R1) at FP8 compute: triton's w8a8_block_fp8_matmul, CUTLASS
    # blockwise, DeepGEMM; fused MoE over such experts too
    fp8_block: Efficiency | None = None
    fp4: Efficiency | None = None  # MXFP4, NVFP4 where not native
    gguf: Efficiency | None = None  # llama.cpp's block formats
    nf4: Efficiency | None = None  # bitsandbytes

    def of(self, family: str) -> float | None:
        """The family's efficiency, or None when unset (or not a family this schema knows)."""
        return getattr(self, family, None) if family in WEIGHT_ONLY_FAMILIES else None


class MemorySide(BaseModel):
    """Shares of the hardware's copy rate that the engine's memory-bound kernels stream."""

    model_config = _FROZEN

    gemv: Efficiency = 1.0  # weight stream of native-format matmuls (decode's GEMV, prefill's weight reads)
    weight_only: WeightOnly = WeightOnly()
    attention: Efficiency = 1.0  # decode attention reading the KV cache: paged GQA / MHA / MQA (flash decoding)
    # MLA's latent cache, read by its own kernel (FlashMLA, FlashInfer MLA, triton's MLA decode); unset: `attention`'s
    attention_mla: Efficiency | None = None
    moe: Efficiency = 1.0  # grouped GEMM over routed experts, on top of the GEMV's (or dequantizing GEMV's)

    @property
    def mla(self) -> float:
        """MLA's decode-attention efficiency: its own where stated, else the paged kernels' (a file written before
        the split)."""
        return self.attention if self.attention_mla is None else self.attention_mla


class ComputeSide(BaseModel):
    """Shares of the hardware's GEMM rate that the engine's compute-bound kernels reach."""

    model_config = _FROZEN

    gemm: Efficiency = 1.0  # weight matmuls at the compute dtype (prefill, large batches)
    attention: Efficiency = 1.0  # prefill attention (flash attention's FLOPs)
    moe: Efficiency = 1.0  # grouped GEMM over routed experts, on top of the GEMM's


class KernelEfficiency(BaseModel):
    """Per kernel class, the engine's share of what the hardware sustains, on the memory and the compute side."""

    model_config = _FROZEN

    memory: MemorySide = MemorySide()
    compute: ComputeSide = ComputeSide()

    def memory_of(self, group: str, fmt: str = "") -> float:
        """Memory-side efficiency of a kernel class: 'gemv', 'weight_only' (by format family), 'attention',
        'attention_mla'."""
        m = self.memory
        if group == "attention":
            return m.attention
        if group == "attention_mla":
            return m.mla
        if group == "weight_only":
            found = m.weight_only.of(kernel_family(fmt))
            return m.gemv if found is None else found
        return m.gemv

    def compute_of(self, group: str) -> float:
        """Compute-side efficiency of a kernel class: attention's (MLA's too: prefill runs it per head, as flash
        attention), else the GEMM's."""
        return self.compute.attention if group in ("attention", "attention_mla") else self.compute.gemm


IDENTITY = KernelEfficiency()


def kernel_family(fmt: str) -> str:
    """The dequantizing-kernel family of a weight format: int4 (AWQ, GPTQ, tinygemm, MLC q4f16), int8, fp8, fp4
    (MXFP4, NVFP4), gguf (llama.cpp's block formats), nf4 (bitsandbytes), fp8_block (FP8 with 128x128 block
    scales); else the format's own name."""
    name = get_format(fmt).name
    if name == "fp8-block":
        return "fp8_block"
    if name.startswith("int4"):
        return "int4"
    if name.startswith("int8"):
        return "int8"
    if name in ("fp4", "nvfp4", "mxfp4"):
        return "fp4"
    if name.startswith("nf4"):
        return "nf4"
    if name.startswith("q") and "_" in name:
        return "gguf"
    return name


class CollectiveCosts(BaseModel):
    """The engine's launch and synchronization per collective, on top of the link's own latency, by link class."""

    model_config = _FROZEN

    nvlink: Microseconds = 0.0  # NVLink / xGMI fabrics: custom one-shot all-reduce kernels (vLLM, TensorRT-LLM)
    pcie: Microseconds = 0.0  # NCCL / RCCL over PCIe (cards without a fabric, llama.cpp's row split)
    network: Microseconds = 0.0  # across nodes: InfiniBand / RoCE

    def of(self, link_class: str) -> float:
        """Microseconds per collective on a link class ('nvlink', 'pcie', 'network')."""
        return float(getattr(self, link_class))


class Band(BaseModel):
    """The 80% band of left-out rows around expected: measured time / expected time at the 10th and 90th percentile."""

    model_config = _FROZEN

    low: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)]  # a time can be this share of expected's ...
    high: Annotated[float, Field(ge=1, le=100, allow_inf_nan=False)]  # ... up to this multiple
    rows: int = Field(default=0, ge=0, le=1_000_000)  # left-out rows it rests on (0: a parent's, widened)
    sources: int = Field(default=0, ge=0, le=10_000)
    basis: str = Field(default="", max_length=500)  # whose residuals: this era's, its engine's, all engines'


class PlatformGap(BaseModel):
    """How an era's build for one platform differs from its CUDA build: factors on its efficiencies and step cost."""

    model_config = _FROZEN

    memory: Efficiency = 1.0  # on every memory-side efficiency
    compute: Efficiency = 1.0  # on the compute side of GEMMs (ROCm builds: hipBLASLt tuning, the GEMM backend)
    # on prefill attention's compute side apart (ROCm builds of 2024: triton or CK flash attention far below the
    # GEMMs on long prompts; the two are not one factor)
    attention: Efficiency = 1.0
    step: Annotated[float, Field(ge=0.1, le=10, allow_inf_nan=False)] = 1.0  # on the step cost
    basis: dict[str, Basis] = Field(default_factory=dict)
    band: Band | None = None  # rows of this platform, left out source by source; None: the era's, widened


class SchedulerTier(BaseModel):
    """Scheduler defaults an engine switches to on GPUs with at least `min_memory_gib` (vLLM V1, SGLang)."""

    model_config = _FROZEN

    min_memory_gib: float = Field(ge=0, le=100_000)
    max_running_sequences: int | None = Field(default=None, ge=1, le=10_000_000)
    chunk_tokens: int | None = Field(default=None, ge=16, le=1_000_000)
    # the largest decode batch its CUDA graphs capture (EraFields.graph_batch_cap), below TP 4 and from TP 4
    graph_batch_cap: int | None = Field(default=None, ge=1, le=1_000_000)
    graph_batch_cap_tp4: int | None = Field(default=None, ge=1, le=1_000_000)
    except_gpus: tuple[str, ...] = Field(
        default=(), strict=False
    )  # YAML lists: GPU names (substrings, as the engine matches device names) kept off the tier


class Scheduler(BaseModel):
    """What the scheduler allows per step on one GPU: the running cap, the chunk budget, steps per decision."""

    model_config = _FROZEN

    max_running_sequences: int | None  # None: only the KV cache caps them
    chunk_tokens: int | None  # None: the engine states none (plan searches the chunk)
    scheduler_steps: int = 1  # multi-step scheduling: decode steps per scheduling decision
    overlap: bool = False  # the next step's requests are chosen while this step runs: a late arrival waits one more
    prefill_apart: bool = False  # prefill runs in steps of its own: every decoding sequence waits each one out
    graph_batch_cap: int | None = None  # the largest decode batch its CUDA graphs capture (None: no cap stated)


class RowKernelSwitch(BaseModel):
    """From `since` on, an engine's builds multiply experts of one compute class (`experts`) in another MoE kernel
    (`kernel`) on every GPU whose spec states that kernel's row pace (Sustained.kernel_expert_rows): FlashInfer's
    TensorRT-LLM fused MoE, whose kernels exist for SM100 only, so only those GPUs state it."""

    model_config = _FROZEN

    kernel: RowKernel
    experts: RowDtype
    since: str = Field(max_length=20, pattern=r"^\d+(\.\d+)*$")
    source: str = Field(min_length=1, max_length=2000)  # the release and the code or PR that made it the default


class EraFields(BaseModel):
    """Everything one era of an engine states: kernels, host costs, overlap, platform gaps, scheduler, band."""

    model_config = _FROZEN

    summary: str = Field(default="", max_length=500)  # what the era is, for `specs list` and --explain
    kernels: KernelEfficiency = KernelEfficiency()
    step_overhead_us: Microseconds = 0.0  # per forward pass: scheduling, sampling, input preparation on the host
    # per running sequence per forward pass, on the host: its slot in the batch's inputs, its sampling parameters
    # and sampled token, its output and detokenization (Python objects per request, so the step grows with the batch)
    sequence_overhead_us: Microseconds = 0.0
    launch_overhead_us: Microseconds = 0.0  # per launched kernel, eager eras only (a CUDA graph launches them all)
    # per kernel on the GPU, every era: the idle gap between consecutive kernels and each one's ramp-up and tail
    kernel_overhead_us: Microseconds = 0.0
    # kernels the era launches per stage row of tokcost's pass (a dense Llama layer is 7 rows: two norms, QKV, KV
    # write, attention, output, MLP), on which the launch and gap costs above are paid: 1 where its fused kernels
    # match the rows; more for an unfused graph (llama.cpp's ggml ops, each a kernel)
    kernels_per_row: Annotated[float, Field(ge=1, le=20, allow_inf_nan=False)] = 1.0
    kernels_per_row_source: str = Field(default="", max_length=2000)  # where the count comes from
    # one host thread launches the kernels of every GPU of a pipeline stage (tp x dp), one GPU after another
    # (llama.cpp's row split: Rates.launch_s); False: a process per GPU launches its own side by side (vLLM, SGLang,
    # TGI, TensorRT-LLM)
    one_host_thread: bool = False
    one_host_thread_source: str = Field(default="", max_length=2000)  # where that comes from
    # the embedding table and LM head split by vocabulary over TP, their logits gathered for sampling
    # (Layout.vocab_split); False: every rank holds and reads them whole (gpt-fast)
    vocab_parallel: bool = True
    vocab_parallel_source: str = Field(default="", max_length=2000)  # where that comes from
    # a split vocabulary's logits gathered whole for sampling (Layout.logits_gathered); False: each rank samples its
    # share and only the winners move (tokcost measure's loop)
    logits_gather: bool = True
    # what the KV cache's 0.9 of memory is a share of (Layout.reserve_of_free): the GPU's "total" (vLLM's
    # gpu_memory_utilization, SGLang's mem_fraction_static) or what is "free" once weights and activations are loaded
    # (TensorRT-LLM's KvCacheConfig.free_gpu_memory_fraction): its reserve is 0.1 of that, not of the whole GPU
    kv_cache_budget: Literal["total", "free"] = "total"
    kv_cache_budget_source: str = Field(default="", max_length=2000)  # where that comes from
    # how much of each GPU the engine keeps beside weights and KV cache: "gpu-share", 0.1 of it (vLLM's default
    # gpu_memory_utilization 0.9); "sglang", SGLang's default mem_fraction_static, which its builds derive from the
    # GPU's memory, the layout and their own defaults (memory.engine_reserve), its activations inside the reserve
    memory_reserve: Literal["gpu-share", "sglang"] = "gpu-share"
    memory_reserve_source: str = Field(default="", max_length=4000)  # where the rule comes from
    request_overhead_us: Microseconds = 0.0  # per request, on a client's TTFT: HTTP, tokenization, admission
    collective_overhead_us: CollectiveCosts = CollectiveCosts()
    # the share of expert all-to-all (dispatch, combine) hidden behind compute: two-batch overlap, DeepEP
    comm_overlap: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] = 0.0
    platforms: dict[Platform, PlatformGap] = Field(default_factory=dict)
    # the class of its prefill attention kernels: "native" (each GPU's own best: FlashAttention-3 or TensorRT-LLM's
    # FMHA on Hopper) or "flash-attention-2" (Ampere's mma.sync kernels: vllm-flash-attn 2.x, xformers, PyTorch's
    # SDPA flash backend), which reach the GPU's `sustained.fa2_attention` share of its own on Hopper
    prefill_attention_kernel: Literal["native", "flash-attention-2"] = "native"
    prefill_attention_source: str = Field(default="", max_length=2000)  # where the kernel class comes from
    # the class of its MoE grouped GEMM: "native" (each GPU's own: warpgroup MMA on Hopper), "mma-sync" (an
    # Ampere/Ada-generation CUTLASS grouped GEMM), whose experts reach the GPU's `sustained.mma_sync_gemm` share of
    # its own GEMM on the compute side on Hopper, or "fused-moe" (a fused-MoE kernel that gathers each expert's token
    # rows: vLLM's and SGLang's Triton fused_moe, AITER's on ROCm), which pays the GPU's `sustained.expert_rows` pace
    # on top of its math
    moe_gemm_kernel: Literal["native", "mma-sync", "fused-moe"] = "native"
    moe_gemm_source: str = Field(default="", max_length=2000)  # where the kernel class comes from
    # builds of the era that switch a class of experts to another fused-MoE kernel on the GPUs that state its pace
    # (eras.as_built keeps those at or before the build's version; the newest build, every one)
    moe_row_kernels: tuple[RowKernelSwitch, ...] = Field(default=(), strict=False)

    # the scheduler's default cap on sequences running at once (vLLM max_num_seqs); None: only the KV cache caps it
    max_running_sequences: int | None = Field(default=None, ge=1, le=10_000_000)
    # the prefill token budget of one step (vLLM max_num_batched_tokens, SGLang chunked_prefill_size,
    # TensorRT-LLM max_num_tokens); None: the engine states none, and plan searches it
    chunk_tokens: int | None = Field(default=None, ge=16, le=1_000_000)
    # decode steps per scheduling decision (vLLM 0.6's --num-scheduler-steps); 1 for engines and eras without it
    scheduler_steps: int = Field(default=1, ge=1, le=64)
    # the engine version from which its scheduler chooses step k+1's requests while step k runs (SGLang's overlap
    # scheduler, on by default since 0.4): a request that finds the GPU busy joins the step after next; None: never
    overlap_scheduling_since: str | None = Field(default=None, max_length=20, pattern=r"^\d+(\.\d+)*$")
    # a step that runs prefill runs nothing else: the decoding sequences get no token from it and wait it out (vLLM
    # before V1 with chunked prefill off, SGLang without --enable-mixed-chunk); False: prefill chunks ride beside the
    # decodes in one pass (vLLM V1, TensorRT-LLM's in-flight batching)
    prefill_steps_apart: bool = False
    scheduler_tiers: tuple[SchedulerTier, ...] = Field(
        default=(), strict=False
    )  # defaults by GPU memory, the largest tier that applies wins
    scheduler_source: str = Field(default="", max_length=4000)  # where the scheduler defaults come from
    # the largest decode batch the era's CUDA graphs capture by default, below TP 4 and from TP 4 (a tier may raise
    # them): a larger batch decodes outside the graphs, each kernel launched from the host, which tokcost does not
    # price, so estimate and plan say so (graph_note); None: no cap stated (graphs cover the running cap, or none)
    graph_batch_cap: int | None = Field(default=None, ge=1, le=1_000_000)
    graph_batch_cap_tp4: int | None = Field(default=None, ge=1, le=1_000_000)
    graph_batch_flag: str = Field(default="", max_length=100)  # the engine's flag that sets the cap
    # per launched kernel of a decode step that runs outside the graphs (more sequences per DP rank than
    # graph_batch_cap): the host's eager launch, a floor on the step as launch_overhead_us is in eager eras (None: not
    # priced, graph_note)
    eager_launch_us: Microseconds | None = None
    eager_launch_source: str = Field(default="", max_length=4000)  # the published eager/graph pairs it comes from
    graph_batch_source: str = Field(default="", max_length=4000)  # where the caps come from
    basis: dict[str, Basis] = Field(default_factory=dict)  # each fitted parameter: fitted, or left at its prior
    band: Band | None = None  # None: no left-out rows speak for it (the CLI then shows the widest band)
    notes: str = Field(default="", max_length=10_000)
    # what tensor parallelism is in this engine where its own multi-GPU default is something else (llama.cpp splits
    # by layer): a warning wherever a layout prices tp > 1
    tensor_parallel_note: str = Field(default="", max_length=500)
    # the era a layout that splits a pipeline stage across GPUs (tp x dp > 1) runs as, where the split changes how the
    # engine runs (llama.cpp: a split buffer turns its CUDA graphs off, so a row split runs eager); None: this era
    tensor_split_era: str | None = Field(default=None, min_length=1, max_length=100)

    @model_validator(mode="after")
    def _kernel_classes_say_where_they_come_from(self) -> EraFields:
        """An older kernel class than the GPU's own is a claim about the engine's code: it names its source."""
        if self.prefill_attention_kernel != "native" and not self.prefill_attention_source:
            raise ValueError("prefill_attention_source: required where prefill_attention_kernel is not native")
        if self.moe_gemm_kernel != "native" and not self.moe_gemm_source:
            raise ValueError("moe_gemm_source: required where moe_gemm_kernel is not native")
        stated = (self.graph_batch_cap, self.graph_batch_cap_tp4,
                  *(c for t in self.scheduler_tiers for c in (t.graph_batch_cap, t.graph_batch_cap_tp4)))  # fmt: skip
        if any(c is not None for c in stated) and not self.graph_batch_source:
            raise ValueError("graph_batch_source: required where a CUDA-graph batch cap is stated")
        if self.eager_launch_us is not None and not self.eager_launch_source:
            raise ValueError("eager_launch_source: required where eager_launch_us is stated")
        return self

    @property
    def fa2_kernels(self) -> bool:
        """Whether its attention kernels are FlashAttention-2-class (Ampere's mma.sync, no FP8 path)."""
        return self.prefill_attention_kernel == "flash-attention-2"


class EngineProfile(EraFields):
    """One era of one serving engine, as the engine prices it (eras.resolve picks it from the engine's file)."""

    name: SpecName = Field(min_length=1, max_length=100)
    era: str = Field(default="", max_length=100)
    source: str = Field(min_length=1, max_length=4000)
    fit: str = Field(default="", max_length=4000)  # how and on what it was fitted (digest of the rows)
    # the profile of tensor_split_era, attached by eras.EngineFile.profile (never dumped: the file names the era);
    # a copy of this profile with other values (model_copy) leaves it as it was, so tweak the era a layout runs as
    tensor_split: EngineProfile | None = Field(default=None, exclude=True, repr=False)
    # the build it runs as, its dotted version (eras.built_at: `vllm@0.19`, a published row's engine_version); None:
    # the era's newest build
    build: str | None = Field(default=None, max_length=40, pattern=r"^\d+(\.\d+)*$", exclude=True)
    # the share of each GPU its weights and KV cache may take where a flag sets it (SGLang's --mem-fraction-static,
    # vLLM's --gpu-memory-utilization); None: the engine's default (memory.engine_reserve)
    memory_share: float | None = Field(default=None, gt=0, le=1, exclude=True)

    @property
    def label(self) -> str:
        """'vllm@v1' (the name alone for a single-era engine such as generic)."""
        return f"{self.name}@{self.era}" if self.era else self.name

    def graph_note(self, batch: float, *, gpu_name: str, memory_bytes: float, tp: int, dp: int = 1) -> str | None:
        """What the reader should know where `batch` decoding sequences pass the largest batch the era's CUDA graphs
        capture by default on this GPU and TP: those steps run eager, priced where the era states its eager launch
        cost (Rates.launch_s). Each of `dp` data-parallel ranks runs its own graphs on its share of the batch."""
        cap = self.scheduler(gpu_name=gpu_name, memory_bytes=memory_bytes, tp=tp).graph_batch_cap
        per_rank = math.ceil(batch / dp) if dp > 1 else batch
        if cap is None or per_rank <= cap:
            return None
        batch_text = f"{per_rank:,.0f} per data-parallel rank" if dp > 1 else f"{batch:,.0f}"
        remedy = (f"raise the cap to the batch ({self.graph_batch_flag})" if self.graph_batch_flag
                  else "no flag raises it, so keep the running batch under it")  # fmt: skip
        head = (f"{self.label}: a decode batch of {batch_text} passes the {cap:,} sequences its CUDA graphs "
                "capture by default on this GPU and TP; past it each step runs eager, every kernel launched from the "
                "host")  # fmt: skip
        if self.eager_launch_us is not None:
            return (f"{head}, priced as {self.eager_launch_us:.3g} us per launched kernel, a floor on the step "
                    f"(--explain): {remedy} to decode faster where the launches set the step")  # fmt: skip
        return f"{head}, which these figures do not price: {remedy}, or expect slower decode steps"

    def per_window(self, scheduler_steps: int) -> EngineProfile:
        """Multi-step scheduling (vLLM 0.6's --num-scheduler-steps k): the host schedules, prepares inputs and
        processes outputs once per window of k decode steps, so its per-step and per-sequence costs are shared by k."""
        if scheduler_steps <= 1:
            return self
        k = scheduler_steps
        return self.model_copy(update={"step_overhead_us": self.step_overhead_us / k,
                                       "sequence_overhead_us": self.sequence_overhead_us / k})  # fmt: skip

    def for_layout(self, stage_gpus: int) -> EngineProfile:
        """The profile a layout runs under: the tensor-split era's where a stage spans several GPUs and the era
        names one (llama.cpp's row split runs eager), else this one."""
        return self.tensor_split if self.tensor_split is not None and stage_gpus > 1 else self

    def gap(self, platform: str) -> PlatformGap:
        """The era's gap on `platform` (none on CUDA or where the file states none)."""
        return self.platforms.get(platform, NO_GAP)  # type: ignore[call-overload]

    def band_on(self, platform: str) -> Band | None:
        """The band on `platform`: its own where rows of that platform were left out, else the era's."""
        own = self.gap(platform).band
        return own if own is not None else self.band

    def scheduler(self, *, gpu_name: str, memory_bytes: float, tp: int = 1) -> Scheduler:
        """The scheduler defaults on one GPU of a TP `tp` layout: the base values, overridden by the largest memory
        tier it reaches (the CUDA-graph batch cap by TP too: below 4, or from 4)."""
        cap, chunk = self.max_running_sequences, self.chunk_tokens
        graphs = (self.graph_batch_cap, self.graph_batch_cap_tp4)
        gib = memory_bytes / 2**30
        for tier in sorted(self.scheduler_tiers, key=lambda t: t.min_memory_gib):
            if gib >= tier.min_memory_gib and not any(name in gpu_name for name in tier.except_gpus):
                cap = tier.max_running_sequences or cap
                chunk = tier.chunk_tokens or chunk
                graphs = (tier.graph_batch_cap or graphs[0], tier.graph_batch_cap_tp4 or graphs[1])
        return Scheduler(
            max_running_sequences=cap,
            chunk_tokens=chunk,
            scheduler_steps=self.scheduler_steps,
            overlap=self.overlap_scheduling_since is not None,
            prefill_apart=self.prefill_steps_apart,
            graph_batch_cap=(graphs[1] or graphs[0]) if tp >= 4 else graphs[0],
        )  # the era's newest build: plan's engine


NO_GAP = PlatformGap()
GENERIC = EngineProfile(
    name="generic",
    source="identity: the hardware's sustained shares alone, no engine term and no host cost",
    summary="the hardware alone: every kernel at the GPU's sustained copy and GEMM shares, no host cost",
    fit="identity by construction (never fitted): what the hardware sustains, the reference engines are measured from",
)
ENGINES = ("vllm", "tensorrt-llm", "sglang", "lmdeploy", "llama.cpp", "tgi", "mlc", "torch-compile", "generic")


def load_engine(name_or_path: str) -> EngineProfile:
    """A validated profile from a built-in name (`vllm`, its newest era), `name@era` (`vllm@0.6`) or a YAML file."""
    from tokcost.eras import load_profile

    return load_profile(name_or_path)


def engine_for(engine: EngineProfile | str | None = None) -> EngineProfile:
    """The profile given (a profile, a built-in name or a file), else the generic one."""
    if isinstance(engine, EngineProfile):
        return engine
    return load_engine("generic" if engine is None else engine)  # an empty name is refused, not taken as none
