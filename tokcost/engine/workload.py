"""Workload: what is asked of the hardware (batch, tokens, precisions, GPUs), validated with allowed ranges.

Strict, as spec files are: a bool is never a count and a string never a number (`Workload(batch=True)` is
refused, not batch 1). A value out of range is a UsageError naming the keyword (`batch: must be an integer
from 1 to 1,000,000 (got 0)`); `Workload.checked` names it as its caller does (the CLI: `--batch`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, computed_field, model_validator

from tokcost import formats
from tokcost.errors import UsageError
from tokcost.formats import FormatName, KvFormatName
from tokcost.hardware.spec import GpuSpec
from tokcost.models.spec import ModelSpec
from tokcost.plain import plain
from tokcost.spec_errors import field_message
from tokcost.units import COMPUTE_DTYPES

# a dtype a GPU spec may list a dense peak for; whether this GPU lists one is checked when estimating
ComputeDtype = Literal[COMPUTE_DTYPES]  # type: ignore[valid-type]
# in any case, as the format names are (FP8 is fp8): the flags of compare, sweep and plan take it so
_AnyCaseCompute = Annotated[ComputeDtype, BeforeValidator(lambda v: v.lower() if isinstance(v, str) else v)]


MAX_GPUS = 4096  # in one replica (tp x pp x dp): --gpus and each parallel degree
MAX_PRICE_USD = 100_000  # per GPU-hour: a price past it is a typo (plan's --price keeps to the same range)


class Workload(BaseModel):
    """A serving scenario: B sequences of P prompt and O output tokens on one replica's parallel layout."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    batch: int = Field(default=1, ge=1, le=1_000_000)
    prompt_tokens: int = Field(default=1024, ge=1, le=100_000_000)
    output_tokens: int = Field(default=256, ge=1, le=100_000_000)
    tp: int = Field(default=1, ge=1, le=4096)  # tensor parallel
    pp: int = Field(default=1, ge=1, le=1024)  # pipeline stages
    ep: int = Field(default=1, ge=1, le=4096)  # expert parallel (within the tp x dp GPUs of a stage)
    dp: int = Field(default=1, ge=1, le=4096)  # data-parallel attention replicas (MoE)
    redundant_experts: int = Field(default=0, ge=0, le=4096)  # expert copies over the EP ranks (EPLB; MoE, ep > 1)
    gpus_per_node: int | None = Field(default=None, ge=1, le=1024)  # None: the GPU spec's
    weights_dtype: FormatName | None = None
    kv_dtype: KvFormatName | None = None
    compute_dtype: _AnyCaseCompute | None = None
    cached_prefix_tokens: int = Field(default=0, ge=0, le=100_000_000)
    price_per_hour_usd: float | None = Field(default=None, ge=0, le=MAX_PRICE_USD)
    # False: attention writes its scores out and reads them back (llama.cpp without -fa, llama-bench's default;
    # eager attention in transformers) instead of a fused flash-attention kernel that keeps them on chip
    flash_attention: bool = True

    def __init__(self, **values: Any) -> None:
        """Validated; the first wrong value is a UsageError naming its keyword and what it allows."""
        try:  # numpy's integers are ints here too, as the API's arguments take them
            super().__init__(**{key: plain(value) for key, value in values.items()})
        except ValidationError as exc:
            raise workload_error(exc) from None

    def __setattr__(self, name: str, value: Any) -> None:
        """Frozen: a one-line UsageError that says how to get another, not pydantic's multi-line error."""
        raise UsageError(f"{name}: a Workload is frozen (estimates hold it); make another: "
                         f"Workload(**{{**workload.model_dump(exclude={{'gpus'}}), {name!r}: ...}})")  # fmt: skip

    @classmethod
    def checked(cls, values: Mapping[str, Any], names: Mapping[str, str]) -> Workload:
        """A Workload from `values`; an error names the key as `names` says (the CLI's flags), else as the key."""
        try:
            return cls(**values)
        except UsageError as exc:  # `key: message`, as __init__ words it: the key named as the caller names it
            key, _, message = str(exc).partition(": ")
            raise UsageError(f"{names.get(key, key)}: {message}") from None

    @model_validator(mode="before")
    @classmethod
    def _gpus_is_tp(cls, data: Any) -> Any:
        """`gpus` is tp x pp x dp: without tp, tp is what the other degrees leave (`gpus` alone is the shorthand for
        tp); with it, the product must match."""
        if not isinstance(data, dict) or "gpus" not in data:
            return data
        data = dict(data)
        gpus = data.pop("gpus")
        if gpus is None:  # not given, as the CLI's --gpus left out: tp x pp x dp as they stand
            return data
        if isinstance(gpus, bool) or not isinstance(gpus, int) or not 1 <= gpus <= MAX_GPUS:
            raise ValueError(f"must be an integer from 1 to {MAX_GPUS:,} (got {gpus!r:.20})")
        pp, dp = data.get("pp", 1), data.get("dp", 1)
        if not all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in (pp, dp, data.get("tp", 1))):
            return data  # a degree of the wrong kind: its own field says so
        if "tp" not in data:
            if gpus % (pp * dp):
                raise ValueError(f"gpus ({gpus}) is not a multiple of pp x dp = {pp} x {dp} = {pp * dp}, so no "
                                 "tensor-parallel degree fills it")  # fmt: skip
            data["tp"] = gpus // (pp * dp)
        elif gpus != data["tp"] * pp * dp:
            tp = data["tp"]
            raise ValueError(f"gpus ({gpus}) must equal tp x pp x dp = {tp} x {pp} x {dp} = {tp * pp * dp}; give "
                             "degrees that multiply to it, or leave --tp out")  # fmt: skip
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


def workload_error(exc: ValidationError) -> UsageError:
    """The first error as `key: what the key allows (got X)`."""
    first = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")[0]
    key, message = field_message(first, Workload)
    if key is None:  # the checks across keys: the prefix rule names the prefix, the other one the GPU count
        key = "cached_prefix_tokens" if "cached prefix" in message else "gpus"
    return UsageError(f"{key}: {message}")


class Precision(BaseModel):
    """Resolved storage and compute dtypes of one estimate, with bytes per element."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    weights: str  # block linear layers
    attention: str  # attention's projections (q/k/v/o), else equal to weights
    experts: str  # routed and shared experts (MoE), else equal to weights
    embedding: str  # embedding table and LM head: the model dtype, or a GGUF file's format (formats.whole_model)
    kv: str
    compute: str
    activation: str  # activations and all-reduce payloads
    # linear-attention and state-space state, at the model dtype: vLLM's --mamba-cache-dtype "auto" (--kv-dtype
    # does not touch it; vllm/config/cache.py)
    state: str
    fused_attention: bool = True  # Workload.flash_attention: False writes the scores out and reads them back
    # norms, convolution weights and other vectors: the model dtype whatever the weights' format (quantizers leave
    # them alone; a GGUF file keeps them in F32), never a GGUF file's block format
    vectors: str

    @property
    def vector_bytes(self) -> float:
        """Bytes per norm or other vector element."""
        return formats.get(self.vectors).bytes

    @property
    def weight_bytes(self) -> float:
        """Bytes per block-linear weight."""
        return formats.get(self.weights).bytes

    @property
    def attention_bytes(self) -> float:
        """Bytes per attention-projection weight."""
        return formats.get(self.attention).bytes

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


# Float formats the serving engines run natively (W8A8, W4A4) wherever the GPU has their tensor cores, and
# dequantize (W8A16, W4A16) where it has not: vLLM "FP8 computation is supported on NVIDIA GPUs with compute
# capability >= 8.9 (Ada Lovelace, Hopper, Blackwell). FP8 models will run on compute capability >= 7.5 (Turing)
# as weight-only W8A16, utilizing FP8 Marlin" (docs.vllm.ai/en/stable/features/quantization/fp8, 2025); NVIDIA
# Model Optimizer (TensorRT-LLM's quantizer): FP8 "per-tensor FP8 weight & activations, GPUs: Ada and later",
# FP4 "per-block FP4 weight & activations, GPUs: Blackwell and later" (nvidia.github.io/Model-Optimizer, support
# matrix). Integer formats default to weight-only: int4 is W4A16 (AWQ/GPTQ Marlin kernels, ModelOpt "W4A16 (INT4
# weights only)"), and int8 W8A8 needs a checkpoint quantized with activation scales (ModelOpt's INT8 uses
# SmoothQuant; TensorRT-LLM also offers W8A16 weight-only), so a bare int8 is W8A16 and --compute-dtype int8
# prices W8A8.
NATIVE_FLOAT_COMPUTE = ("fp8", "fp4")


def native_compute(weights: str, gpu: GpuSpec) -> str | None:
    """The dtype a weight format's matmuls run at by default on `gpu`: its own float tensor-core dtype where the
    GPU lists a dense peak for it (fp8 on Hopper, Ada, Blackwell, MI300X; fp4 on Blackwell); None where the
    engines dequantize it into 16-bit matmuls (every integer and GGUF format, fp8 on Ampere)."""
    f = formats.get(weights)
    if f.native_platforms is not None and gpu.platform not in f.native_platforms:
        return None  # its scales are another vendor's: dequantized (NVFP4 on an MI355X, whose FP4 is MXFP4)
    native = f.native_compute
    return native if native in NATIVE_FLOAT_COMPUTE and gpu.peak_flops_per_s(native) is not None else None


def _default_compute(model: ModelSpec, workload: Workload, gpu: GpuSpec | None) -> str:
    """The compute dtype when --compute-dtype is not given: a --weights format's native float dtype where `gpu`
    runs it; the model's own formats, the compute its checkpoint states (FP8 or INT8 W8A8) where `gpu` runs it;
    else the model's dtype (weights dequantized inside the matmul). Without a GPU, the stated compute only."""
    if workload.weights_dtype is not None:
        found = native_compute(workload.weights_dtype, gpu) if gpu is not None else None
    else:
        stated = model.compute_dtype
        found = stated if stated and (gpu is None or gpu.peak_flops_per_s(stated) is not None) else None
    return found or model.dtype


def resolve_precision(model: ModelSpec, workload: Workload, gpu: GpuSpec | None = None) -> Precision:
    """Fill unset dtypes from the model and the GPU: weights and KV at the model dtype, experts and attention's
    projections as shipped, the compute as _default_compute says (one rule for every command and the API);
    --weights sets every block linear, --compute-dtype the compute."""
    weights = workload.weights_dtype or model.weights_dtype or model.dtype
    experts = workload.weights_dtype or (model.moe.expert_dtype if model.moe else None) or weights
    shipped = workload.weights_dtype in (None, model.weights_dtype)  # --weights naming the shipped format: as shipped
    attention = (model.attention_dtype if shipped else None) or weights
    activation = "fp32" if model.dtype == "fp32" else "bf16"
    p = Precision(
        weights=weights,
        attention=attention,
        experts=experts,
        embedding=weights if formats.get(weights).whole_model else model.dtype,  # a GGUF file holds them too
        kv=workload.kv_dtype or model.dtype,
        compute=workload.compute_dtype or _default_compute(model, workload, gpu),
        activation=activation,
        state=model.dtype,
        fused_attention=workload.flash_attention,
        vectors=model.dtype,
    )
    if workload.compute_dtype and gpu is not None:
        from tokcost.engine.roofline import ceiling_rates, compute_dtype_applies  # it reads Precision from here

        if not compute_dtype_applies(p, ceiling_rates(gpu, p.compute)):  # no matmul runs at it: report what they do
            p = p.model_copy(update={"compute": _default_compute(model, workload, gpu)})
    return p
