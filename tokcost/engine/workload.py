"""Workload: what is asked of the hardware (batch, tokens, precisions, GPUs), validated with allowed ranges."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tokcost.models.spec import Dtype, ModelSpec
from tokcost.units import DTYPE_BITS, WEIGHT_ONLY_DTYPES

ComputeDtype = str  # a key of GpuSpec.peak_tflops; checked against the GPU when estimating


class Workload(BaseModel):
    """A serving scenario: B sequences of P prompt and O output tokens on N tensor-parallel GPUs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    batch: int = Field(default=1, ge=1, le=1_000_000)
    prompt_tokens: int = Field(default=1024, ge=1, le=100_000_000)
    output_tokens: int = Field(default=256, ge=1, le=100_000_000)
    gpus: int = Field(default=1, ge=1, le=4096)
    weights_dtype: Dtype | None = None
    kv_dtype: Dtype | None = None
    compute_dtype: ComputeDtype | None = None
    cached_prefix_tokens: int = Field(default=0, ge=0, le=100_000_000)
    price_per_hour_usd: float | None = Field(default=None, ge=0, le=100_000)

    @model_validator(mode="after")
    def _prefix_within_prompt(self) -> Workload:
        if self.cached_prefix_tokens >= self.prompt_tokens:
            raise ValueError(
                f"cached prefix ({self.cached_prefix_tokens}) must be shorter than the prompt "
                f"({self.prompt_tokens}): at least one prompt token is computed, 0..{self.prompt_tokens - 1}"
            )
        return self

    @property
    def computed_prompt_tokens(self) -> int:
        """Prompt tokens prefill actually computes (the cached prefix is read, not recomputed)."""
        return self.prompt_tokens - self.cached_prefix_tokens

    @property
    def total_tokens(self) -> int:
        """Tokens each sequence holds at the end: prompt plus output."""
        return self.prompt_tokens + self.output_tokens


class Precision(BaseModel):
    """Resolved storage and compute dtypes of one estimate, with bytes per element."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    weights: str  # block linear layers
    experts: str  # routed and shared experts (MoE), else equal to weights
    embedding: str  # embedding table and LM head stay at the model dtype
    kv: str
    compute: str
    activation: str  # activations and all-reduce payloads

    @property
    def weight_bytes(self) -> float:
        """Bytes per block-linear weight."""
        return DTYPE_BITS[self.weights] / 8

    @property
    def expert_bytes(self) -> float:
        """Bytes per expert weight."""
        return DTYPE_BITS[self.experts] / 8

    @property
    def embedding_bytes(self) -> float:
        """Bytes per embedding / LM-head weight."""
        return DTYPE_BITS[self.embedding] / 8

    @property
    def activation_bytes(self) -> float:
        """Bytes per activation element."""
        return DTYPE_BITS[self.activation] / 8


def is_weight_only(p: Precision) -> bool:
    """Weights narrower than the matmul dtype, dequantized in the kernel: int8/int4/fp4, or fp8 under 16-bit compute."""
    narrow = (p.weights, p.experts)
    return any(d in WEIGHT_ONLY_DTYPES for d in narrow) or ("fp8" in narrow and p.compute != "fp8")


def resolve_precision(model: ModelSpec, workload: Workload) -> Precision:
    """Fill unset dtypes from the model: weights and KV at the model dtype, experts as shipped."""
    weights = workload.weights_dtype or model.dtype
    experts = workload.weights_dtype or (model.moe.expert_dtype if model.moe else None) or weights
    # Weight-only formats (int8, int4, fp4) dequantize into 16-bit matmuls; fp8 weights keep the
    # 16-bit peak too unless --compute-dtype fp8 says activations are fp8 as well.
    compute = workload.compute_dtype or model.dtype
    activation = "fp32" if model.dtype == "fp32" else "bf16"
    return Precision(
        weights=weights,
        experts=experts,
        embedding=model.dtype,
        kv=workload.kv_dtype or model.dtype,
        compute=compute,
        activation=activation,
    )
