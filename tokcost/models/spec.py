"""ModelSpec: the shapes of a decoder-only transformer, and the exact parameter and KV counts they imply.

Counting conventions (written down, unlike most peers):
- Every MLP is gated (SwiGLU / GeGLU: gate, up, down = 3 matrices), as in every built-in model.
- Biases: only q/k/v biases are counted (`attention_bias`); other bias and extra norm vectors
  (qk-norm, post-norms, attention sinks) are below 0.01% of any built-in model and omitted.
- Norms: two RMSNorm vectors per layer plus the final one.
- The embedding table is a parameter; a tied LM head shares it and is not counted twice.
"""

from __future__ import annotations

from functools import cached_property
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tokcost.formats import FormatName, bits_of

# The unquantized dtype of a model: activations, norms, embedding and LM head (quantized formats go in
# weights_dtype / moe.expert_dtype).
BaseDtype = Literal["fp32", "bf16", "fp16"]

_FROZEN = ConfigDict(frozen=True, extra="forbid", strict=True)  # strict: a bool or a string is never a number


class MoeSpec(BaseModel):
    """Routed experts: each MoE layer holds `experts` MLPs and each token uses `experts_per_token`."""

    model_config = _FROZEN

    experts: int = Field(ge=1, le=4096)
    experts_per_token: int = Field(ge=1, le=4096)
    shared_experts: int = Field(default=0, ge=0, le=64)
    expert_intermediate_size: int = Field(ge=1, le=1_000_000)
    shared_expert_intermediate_size: int | None = Field(default=None, ge=1, le=1_000_000)
    dense_layers: int = Field(default=0, ge=0, le=1000)
    dense_intermediate_size: int | None = Field(default=None, ge=1, le=1_000_000)
    expert_dtype: FormatName | None = None  # routed experts as shipped (gpt-oss: MXFP4), else weights_dtype

    @model_validator(mode="after")
    def _top_k_within_experts(self) -> MoeSpec:
        if self.experts_per_token > self.experts:
            raise ValueError(f"experts_per_token ({self.experts_per_token}) must be at most experts ({self.experts})")
        return self


class MlaSpec(BaseModel):
    """Multi-head latent attention (DeepSeek-V2/V3): the KV cache holds one compressed latent per token."""

    model_config = _FROZEN

    kv_lora_rank: int = Field(ge=1, le=1_000_000)
    rope_head_dim: int = Field(ge=0, le=100_000)
    q_lora_rank: int | None = Field(default=None, ge=1, le=1_000_000)
    nope_head_dim: int = Field(ge=1, le=100_000)
    v_head_dim: int = Field(ge=1, le=100_000)


class SlidingWindowSpec(BaseModel):
    """Local attention: the listed layers keep only the last `window_tokens` tokens of KV."""

    model_config = _FROZEN

    window_tokens: int = Field(ge=1, le=100_000_000)
    layers: Literal["all", "even", "odd"] | list[int] = "all"


class ModelSpec(BaseModel):
    """A decoder-only transformer's shapes; derived counts are exact integers."""

    model_config = _FROZEN | ConfigDict(populate_by_name=True, str_strip_whitespace=True)

    name: str = Field(min_length=1, max_length=200)
    source: str = Field(default="", max_length=2000)
    layers: int = Field(ge=1, le=10_000)
    hidden_size: int = Field(ge=1, le=1_000_000)
    attention_heads: int = Field(ge=1, le=10_000)
    kv_heads: int = Field(ge=1, le=10_000)
    head_dim_stated: int | None = Field(default=None, alias="head_dim", ge=1, le=100_000)
    intermediate_size: int = Field(ge=1, le=10_000_000)
    vocab_size: int = Field(ge=1, le=100_000_000)
    tied_embeddings: bool = False
    attention_bias: bool = False
    dtype: BaseDtype = "bf16"
    # block linears as shipped when quantized (AWQ int4-g128, FP8 checkpoints, GGUF q4_k_m); None: at `dtype`
    weights_dtype: FormatName | None = None
    # matmul dtype of a checkpoint that quantizes activations too (FP8 / INT8 W8A8); None: at `dtype`
    compute_dtype: Literal["fp8", "int8", "int4", "fp4"] | None = None
    max_context: int = Field(ge=1, le=1_000_000_000)
    params_total_stated: int | None = Field(default=None, alias="params_total", ge=1, le=10**15)
    moe: MoeSpec | None = None
    mla: MlaSpec | None = None
    sliding_window: SlidingWindowSpec | None = None
    notes: str = Field(default="", max_length=10_000)

    @model_validator(mode="after")
    def _consistent_shapes(self) -> ModelSpec:
        if self.kv_heads > self.attention_heads or self.attention_heads % self.kv_heads:
            divisors = [d for d in range(1, self.attention_heads + 1) if self.attention_heads % d == 0]
            shown = ", ".join(str(d) for d in divisors[:12]) + (", ..." if len(divisors) > 12 else "")
            raise ValueError(
                f"kv_heads ({self.kv_heads}) must divide attention_heads ({self.attention_heads}): {shown}"
            )
        if self.head_dim_stated is None and self.hidden_size % self.attention_heads:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) is not a multiple of attention_heads "
                f"({self.attention_heads}); state head_dim explicitly"
            )
        if self.moe and self.moe.dense_layers > self.layers:
            raise ValueError(f"moe.dense_layers ({self.moe.dense_layers}) exceeds layers ({self.layers})")
        if self.sliding_window and isinstance(self.sliding_window.layers, list):
            bad = [i for i in self.sliding_window.layers if not 0 <= i < self.layers]
            if bad:
                raise ValueError(f"sliding_window.layers: {bad[0]} is outside 0..{self.layers - 1}")
        return self

    # ---- shapes ----------------------------------------------------------------------------

    @cached_property
    def head_dim(self) -> int:
        """Per-head width; defaults to hidden_size / attention_heads."""
        return self.head_dim_stated or self.hidden_size // self.attention_heads

    @cached_property
    def moe_layers(self) -> int:
        """Layers whose MLP is routed experts."""
        return self.layers - self.moe.dense_layers if self.moe else 0

    @cached_property
    def dense_mlp_layers(self) -> int:
        """Layers with a plain gated MLP."""
        return self.layers - self.moe_layers

    @cached_property
    def dense_intermediate(self) -> int:
        """Intermediate width of the dense MLP layers."""
        if self.moe and self.moe.dense_intermediate_size:
            return self.moe.dense_intermediate_size
        return self.intermediate_size

    # ---- parameter counts (exact integers) -------------------------------------------------

    @cached_property
    def params_attention_per_layer(self) -> int:
        """Q, K, V, O projections of one layer (MLA: its down/up projections and latent norms)."""
        h, n = self.hidden_size, self.attention_heads
        if self.mla:
            m = self.mla
            qk = m.nope_head_dim + m.rope_head_dim
            if m.q_lora_rank:
                q = h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * n * qk  # down, norm, up
            else:
                q = h * n * qk
            kv = h * (m.kv_lora_rank + m.rope_head_dim) + m.kv_lora_rank  # joint KV down-proj + latent norm
            kv += m.kv_lora_rank * n * (m.nope_head_dim + m.v_head_dim)  # KV up-proj
            return q + kv + n * m.v_head_dim * h  # + output projection
        q_dim, kv_dim = n * self.head_dim, self.kv_heads * self.head_dim
        bias = q_dim + 2 * kv_dim if self.attention_bias else 0
        return h * q_dim + 2 * h * kv_dim + q_dim * h + bias

    @cached_property
    def params_dense_mlp_per_layer(self) -> int:
        """Gated MLP of a dense layer: gate, up and down projections."""
        return 3 * self.hidden_size * self.dense_intermediate

    @cached_property
    def params_per_expert(self) -> int:
        """One routed expert: a gated MLP of expert_intermediate_size."""
        return 3 * self.hidden_size * self.moe.expert_intermediate_size if self.moe else 0

    @cached_property
    def params_shared_experts_per_layer(self) -> int:
        """Always-on shared experts of one MoE layer."""
        if not self.moe:
            return 0
        width = self.moe.shared_expert_intermediate_size or self.moe.expert_intermediate_size
        return self.moe.shared_experts * 3 * self.hidden_size * width

    @cached_property
    def params_router_per_layer(self) -> int:
        """Router (gate) matrix of one MoE layer: hidden x experts."""
        return self.hidden_size * self.moe.experts if self.moe else 0

    @cached_property
    def params_attention(self) -> int:
        """Attention weights of all layers."""
        return self.layers * self.params_attention_per_layer

    @cached_property
    def params_mlp(self) -> int:
        """Every MLP weight: dense layers, all routed experts, shared experts and routers."""
        routed = self.moe.experts * self.params_per_expert if self.moe else 0
        moe = self.moe_layers * (routed + self.params_shared_experts_per_layer + self.params_router_per_layer)
        return self.dense_mlp_layers * self.params_dense_mlp_per_layer + moe

    @cached_property
    def params_norms(self) -> int:
        """RMSNorm vectors: two per layer plus the final norm."""
        return (2 * self.layers + 1) * self.hidden_size

    @cached_property
    def params_embedding(self) -> int:
        """Input embedding table: vocab x hidden."""
        return self.vocab_size * self.hidden_size

    @cached_property
    def params_lm_head(self) -> int:
        """Output projection; zero extra when tied to the embedding."""
        return 0 if self.tied_embeddings else self.vocab_size * self.hidden_size

    @cached_property
    def params_blocks(self) -> int:
        """Everything inside the transformer blocks (attention, MLP, norms)."""
        return self.params_attention + self.params_mlp + self.params_norms

    @cached_property
    def params_total(self) -> int:
        """All parameters, derived from the shapes."""
        return self.params_blocks + self.params_embedding + self.params_lm_head

    @cached_property
    def params_inactive_experts(self) -> int:
        """Routed-expert parameters a single token does not touch."""
        if not self.moe:
            return 0
        return self.moe_layers * (self.moe.experts - self.moe.experts_per_token) * self.params_per_expert

    @cached_property
    def params_active(self) -> int:
        """Parameters one token touches: all but the unrouted experts (embedding and LM head included)."""
        return self.params_total - self.params_inactive_experts

    @property
    def params_mismatch(self) -> float | None:
        """Relative gap between the stated params_total and the shapes; None when none was stated."""
        if self.params_total_stated is None:
            return None
        return self.params_total / self.params_total_stated - 1

    # ---- attention and KV ------------------------------------------------------------------

    def is_sliding_layer(self, layer: int) -> bool:
        """Whether `layer` (0-based) uses the sliding window."""
        sw = self.sliding_window
        if sw is None:
            return False
        if sw.layers == "all":
            return True
        if sw.layers == "even":
            return layer % 2 == 0
        if sw.layers == "odd":
            return layer % 2 == 1
        return layer in sw.layers

    @cached_property
    def sliding_layers(self) -> int:
        """How many layers use the sliding window."""
        return sum(self.is_sliding_layer(i) for i in range(self.layers))

    @cached_property
    def kv_elements_per_token_per_layer(self) -> int:
        """Cached values per token per layer: K and V heads, or MLA's latent plus its RoPE key."""
        if self.mla:
            return self.mla.kv_lora_rank + self.mla.rope_head_dim
        return 2 * self.kv_heads * self.head_dim

    def kv_bytes_per_token(self, kv_dtype: str | None = None) -> float:
        """KV bytes one token adds across all layers: 2 x layers x kv_heads x head_dim x bytes."""
        bits = bits_of(kv_dtype or self.dtype)
        return self.layers * self.kv_elements_per_token_per_layer * bits / 8

    def attended_tokens(self, context_tokens: float) -> float:
        """Sum over layers of the tokens each layer keeps (sliding layers cap at the window), / layers."""
        sw = self.sliding_window
        if sw is None:
            return context_tokens
        local = self.sliding_layers
        capped = min(context_tokens, sw.window_tokens)
        return (local * capped + (self.layers - local) * context_tokens) / self.layers

    def kv_cache_bytes(self, tokens_per_sequence: float, sequences: int = 1, kv_dtype: str | None = None) -> float:
        """KV cache held for `sequences` sequences of `tokens_per_sequence` tokens (windows applied)."""
        return sequences * self.attended_tokens(tokens_per_sequence) * self.kv_bytes_per_token(kv_dtype)

    @cached_property
    def attention_flops_per_token_per_context(self) -> int:
        """FLOPs of QK^T and AV for one query against one cached token, all layers: 2 x layers x heads x (dk + dv)."""
        if self.mla:
            qk, v = self.mla.nope_head_dim + self.mla.rope_head_dim, self.mla.v_head_dim
        else:
            qk = v = self.head_dim
        return 2 * self.layers * self.attention_heads * (qk + v)

    def truncated(self, layers: int) -> ModelSpec:
        """The same model with only its first `layers` layers (for measuring shapes that don't fit)."""
        # rebuilt, not model_copy'd: model_copy would carry over the cached derived counts
        data = self.model_dump(by_alias=True)
        data.update(layers=layers, params_total=None)
        if self.moe and self.moe.dense_layers > layers:
            data["moe"]["dense_layers"] = layers
        if self.sliding_window and isinstance(self.sliding_window.layers, list):
            data["sliding_window"]["layers"] = [i for i in self.sliding_window.layers if i < layers]
        return ModelSpec.model_validate(data)
