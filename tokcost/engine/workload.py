"""Workload: what is asked of the hardware (batch, tokens, precisions, GPUs), validated with allowed ranges."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, computed_field, model_validator

from tokcost import formats
from tokcost.formats import FormatName
from tokcost.models.spec import ModelSpec

ComputeDtype = str  # a key of GpuSpec.peak_tflops; checked against the GPU when estimating


class Workload(BaseModel):
    """A serving scenario: B sequences of P prompt and O output tokens on one replica's parallel layout."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    batch: int = Field(default=1, ge=1, le=1_000_000)
    prompt_tokens: int = Field(default=1024, ge=1, le=100_000_000)
    output_tokens: int = Field(default=256, ge=1, le=100_000_000)
    tp: int = Field(default=1, ge=1, le=4096)  # tensor parallel
    pp: int = Field(default=1, ge=1, le=1024)  # pipeline stages
    ep: int = Field(default=1, ge=1, le=4096)  # expert parallel (within the tp x dp GPUs of a stage)
    dp: int = Field(default=1, ge=1, le=4096)  # data-parallel attention replicas (MoE)
    gpus_per_node: int | None = Field(default=None, ge=1, le=1024)  # None: the GPU spec's
    weights_dtype: FormatName | None = None
    kv_dtype: FormatName | None = None
    compute_dtype: ComputeDtype | None = None
    cached_prefix_tokens: int = Field(default=0, ge=0, le=100_000_000)
    price_per_hour_usd: float | None = Field(default=None, ge=0, le=100_000)

    @model_validator(mode="before")
    @classmethod
    def _gpus_is_tp(cls, data: Any) -> Any:
        """`gpus` alone is the shorthand for `tp`; with other degrees it must equal tp x pp x dp."""
        if not isinstance(data, dict) or data.get("gpus") is None:
            return data
        data = dict(data)
        gpus = data.pop("gpus")
        if isinstance(gpus, bool) or not isinstance(gpus, int) or not 1 <= gpus <= 4096:
            raise ValueError(f"must be an integer from 1 to 4,096 (got {gpus!r:.20})")
        if "tp" not in data and data.get("pp", 1) == 1 and data.get("dp", 1) == 1:
            data["tp"] = gpus
        elif gpus != data.get("tp", 1) * data.get("pp", 1) * data.get("dp", 1):
            raise ValueError(f"gpus ({gpus}) must equal tp x pp x dp; give the degrees or --gpus, not both")
        return data

    @computed_field  # type: ignore[prop-decorator]
    @property
    def gpus(self) -> int:
        """GPUs of one replica: tp x pp x dp."""
        return self.tp * self.pp * self.dp

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
    # linear-attention and state-space state, at the model dtype: vLLM's --mamba-cache-dtype "auto" (--kv-dtype
    # does not touch it; vllm/config/cache.py)
    state: str

    @property
    def weight_bytes(self) -> float:
        """Bytes per block-linear weight."""
        return formats.get(self.weights).bytes

    @property
    def expert_bytes(self) -> float:
        """Bytes per expert weight."""
        return formats.get(self.experts).bytes

    @property
    def embedding_bytes(self) -> float:
        """Bytes per embedding / LM-head weight."""
        return formats.get(self.embedding).bytes

    @property
    def state_bytes(self) -> float:
        """Bytes per state element."""
        return formats.get(self.state).bytes

    @property
    def activation_bytes(self) -> float:
        """Bytes per activation element."""
        return formats.get(self.activation).bytes


def same_tensor_rate(a: str | None, b: str) -> bool:
    """Whether matmuls in dtypes `a` and `b` run at one peak (fp16 and bf16 share tensor-core rates)."""
    return a == b or {a, b} == {"fp16", "bf16"}


def is_weight_only(p: Precision) -> bool:
    """Weights dequantized inside the matmul: their format does not run natively at the compute dtype."""
    return not all(same_tensor_rate(formats.get(d).native_compute, p.compute) for d in (p.weights, p.experts))


def resolve_precision(model: ModelSpec, workload: Workload) -> Precision:
    """Fill unset dtypes from the model: weights and KV at the model dtype, experts as shipped."""
    weights = workload.weights_dtype or model.weights_dtype or model.dtype
    experts = workload.weights_dtype or (model.moe.expert_dtype if model.moe else None) or weights
    # Weight-only formats (int4 AWQ/GPTQ, GGUF, NF4) dequantize into 16-bit matmuls; a checkpoint that
    # quantizes activations too (FP8 or INT8 W8A8) states its compute_dtype; --compute-dtype overrides both.
    compute = workload.compute_dtype or (model.compute_dtype if workload.weights_dtype is None else None) or model.dtype
    activation = "fp32" if model.dtype == "fp32" else "bf16"
    return Precision(
        weights=weights,
        experts=experts,
        embedding=model.dtype,
        kv=workload.kv_dtype or model.dtype,
        compute=compute,
        activation=activation,
        state=model.dtype,
    )
