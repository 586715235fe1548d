"""Serving-engine profiles: what an engine adds on top of the hardware when it runs a model ("expected").

"Expected" = hardware x engine. The GPU spec keeps what is the hardware's: the fraction of its datasheet bandwidth
and compute that its family reaches (the `achievable:` block). A profile keeps what one engine's kernels and
scheduler reach relative to that, per kernel class:
- dense GEMM, by compute dtype (bf16 stands for fp16 too): the weight matmuls whose weights run natively;
- weight-only GEMM, by weight format (an exact format name, else its kernel family: int4, int8, fp8, fp4, gguf,
  nf4): matmuls that dequantize narrower weights inside the kernel;
- decode attention (the paged / flash kernels reading the KV cache), MoE grouped GEMM (on top of the GEMM class
  of the experts' format), and collectives (of the link's own efficiency);
and its fixed costs: per forward pass (launches, scheduling, sampling on the host), per request (tokenization,
set-up; on TTFT) and per collective (launch and synchronization, added to the link's own latency).
It also keeps the scheduler defaults `plan` serves with: the most sequences running at once, the token budget
of one step (chunked prefill), multi-step scheduling, and the defaults that change with the GPU's memory, each
with `scheduler_source`.
An efficiency scales both rooflines of its kernel (FLOP/s and bytes/s); the product with the GPU's fraction is
capped at the datasheet, so "expected" is never faster than "ceiling".

The `generic` profile is the identity (every efficiency 1, no fixed cost): the reference of the product, so the
GPU's fractions are what generic predicts. Profiles are YAML in tokcost/specs/engines/, each with its source and
the digest of the fit that produced it (scripts/fit_expected.py; validation/README.md has the split and errors).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from tokcost.formats import get as get_format

_FROZEN = ConfigDict(frozen=True, extra="forbid")
# A fraction of what the GPU family achieves for one kernel class; above 1 when an engine's kernel beats the
# family's reference (the product with the GPU's fraction is still capped at the datasheet).
EFFICIENCY_RANGE = (0.05, 2.0)
Efficiency = Annotated[float, Field(ge=EFFICIENCY_RANGE[0], le=EFFICIENCY_RANGE[1])]


class KernelEfficiency(BaseModel):
    """Per kernel class, the engine's efficiency relative to the GPU family's achievable rate."""

    model_config = _FROZEN

    dense_gemm: dict[str, Efficiency] = Field(default_factory=dict)  # by compute dtype: bf16, fp8, int8, fp4
    weight_only_gemm: dict[str, Efficiency] = Field(default_factory=dict)  # by format or kernel family (int4, gguf)
    decode_attention: Efficiency = 1.0
    moe_grouped_gemm: Efficiency = 1.0
    collective: Efficiency = 1.0  # of the link's own efficiency (bandwidth of large collectives)

    def dense(self, dtype: str) -> float:
        """Efficiency of a native matmul at `dtype` (fp16 and bf16 share one entry); 1 when the profile is silent."""
        key = "bf16" if dtype == "fp16" else dtype
        return self.dense_gemm.get(key, 1.0)

    def weight_only(self, fmt: str) -> float:
        """Efficiency of a dequantizing matmul on `fmt` weights: the exact format, else its kernel family, else 1."""
        return self.weight_only_gemm.get(fmt, self.weight_only_gemm.get(kernel_family(fmt), 1.0))


def kernel_family(fmt: str) -> str:
    """The dequantizing-kernel family of a weight format: int4 (AWQ, GPTQ, tinygemm, MLC q4f16), int8, fp8, fp4
    (MXFP4, NVFP4), gguf (llama.cpp's block formats), nf4 (bitsandbytes); else the format's own name."""
    name = get_format(fmt).name
    if name.startswith("int4"):
        return "int4"
    if name.startswith("int8"):
        return "int8"
    if name in ("fp4", "nvfp4"):
        return "fp4"
    if name.startswith("nf4"):
        return "nf4"
    if name.startswith("q") and "_" in name:
        return "gguf"
    return name


class SchedulerTier(BaseModel):
    """Scheduler defaults an engine switches to on GPUs with at least `min_memory_gib` (vLLM V1, SGLang)."""

    model_config = _FROZEN

    min_memory_gib: float = Field(ge=0, le=100_000)
    max_running_sequences: int | None = Field(default=None, ge=1, le=10_000_000)
    chunk_tokens: int | None = Field(default=None, ge=16, le=1_000_000)
    except_gpus: tuple[str, ...] = ()  # GPU names (substrings, as the engine matches device names) kept off the tier


class Scheduler(BaseModel):
    """What the scheduler allows per step on one GPU: the running cap, the chunk budget, steps per decision."""

    model_config = _FROZEN

    max_running_sequences: int | None  # None: only the KV cache caps them
    chunk_tokens: int | None  # None: the engine states none (plan searches the chunk)
    scheduler_steps: int = 1  # multi-step scheduling: decode steps per scheduling decision


class EngineProfile(BaseModel):
    """One serving engine's profile: kernel efficiencies and fixed costs, with where they come from."""

    model_config = _FROZEN

    name: str = Field(min_length=1, max_length=100)
    source: str = Field(min_length=1, max_length=4000)
    kernels: KernelEfficiency = KernelEfficiency()
    step_overhead_us: float | None = Field(default=None, ge=0, le=1_000_000)  # None: the GPU spec's
    request_overhead_us: float | None = Field(default=None, ge=0, le=10_000_000)  # None: the GPU spec's
    collective_overhead_us: float = Field(default=0.0, ge=0, le=1_000_000)  # per collective, on the link's latency
    # the scheduler's default cap on sequences running at once (vLLM max_num_seqs); None: only the KV cache caps it
    max_running_sequences: int | None = Field(default=None, ge=1, le=10_000_000)
    # the prefill token budget of one step (vLLM max_num_batched_tokens, SGLang chunked_prefill_size,
    # TensorRT-LLM max_num_tokens); None: the engine states none, and plan searches it
    chunk_tokens: int | None = Field(default=None, ge=16, le=1_000_000)
    # decode steps per scheduling decision (vLLM 0.6's --num-scheduler-steps); 1 for engines and eras without it
    scheduler_steps: int = Field(default=1, ge=1, le=64)
    scheduler_tiers: tuple[SchedulerTier, ...] = ()  # defaults by GPU memory, the largest tier that applies wins
    scheduler_source: str = Field(default="", max_length=4000)  # where the scheduler defaults come from
    fit: str = Field(default="", max_length=4000)  # how and on what it was fitted (digest of the train rows)
    notes: str = Field(default="", max_length=10_000)

    def scheduler(self, *, gpu_name: str, memory_bytes: float) -> Scheduler:
        """The scheduler defaults on one GPU: the base values, overridden by the largest memory tier it reaches."""
        cap, chunk = self.max_running_sequences, self.chunk_tokens
        gib = memory_bytes / 2**30
        for tier in sorted(self.scheduler_tiers, key=lambda t: t.min_memory_gib):
            if gib >= tier.min_memory_gib and not any(name in gpu_name for name in tier.except_gpus):
                cap = tier.max_running_sequences or cap
                chunk = tier.chunk_tokens or chunk
        return Scheduler(max_running_sequences=cap, chunk_tokens=chunk, scheduler_steps=self.scheduler_steps)


GENERIC = EngineProfile(
    name="generic",
    source="identity: the GPU family's achievable fractions and fixed costs, no engine terms",
    fit="identity by construction: the reference of the hardware x engine product (scripts/fit_expected.py)",
)
ENGINES = ("vllm", "sglang", "tensorrt-llm", "llama.cpp", "torch-compile", "generic")


def load_engine(name_or_path: str) -> EngineProfile:
    """A validated profile from a built-in name (`vllm`) or a YAML file."""
    from pydantic import ValidationError

    from tokcost.catalog import locate
    from tokcost.spec_errors import validation_error

    where, data = locate("engines", name_or_path)
    try:
        return EngineProfile.model_validate(data)
    except ValidationError as exc:
        raise validation_error(where, exc) from None


def engine_for(engine: EngineProfile | str | None = None) -> EngineProfile:
    """The profile given (a profile, a built-in name or a file), else the generic one."""
    return engine if isinstance(engine, EngineProfile) else load_engine(engine or "generic")
