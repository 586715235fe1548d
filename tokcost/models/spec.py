"""ModelSpec: the shapes of a decoder-only transformer, per-layer mixer and MLP kinds, and what they imply.

Counting conventions (written down, unlike most peers), each an exact integer (models/counts.py):
- An MLP is gated (SwiGLU / GeGLU: gate, up, down) unless `mlp_gated: false` (Nemotron-H's squared ReLU,
  the GELU MLPs of StarCoder2, Phi-2, Falcon and GPT-NeoX); a routed or shared expert is an MLP of the same kind
  (Nemotron-3's experts: up and down, squared ReLU).
- Biases, q/k norms, Gemma's post-norms, attention sinks and output gates are counted when their field says
  so; the HuggingFace import sets them from the architecture, so that an imported count equals transformers'.
- Norms: one RMSNorm vector before each mixer and each MLP a layer has (one for both with `shared_norm`: a
  parallel block's single input norm), two more with `post_norms`, plus the final one; a LayerNorm
  (`norm_bias`) has a bias vector beside each.
- The embedding table is a parameter; a tied LM head shares it and is not counted twice.
- A vision or audio tower is `encoder_params`: counted, reported and held in memory, never read by decode.
"""

from __future__ import annotations

from functools import cached_property
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tokcost.formats import FormatName
from tokcost.models.counts import Counts
from tokcost.models.layers import MIXERS, MLPS, LayerPlan, Mixer, Mlp, expand
from tokcost.models.mixers import GatedDeltaNetSpec, MambaSpec
from tokcost.names import SpecName

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
    dense_layers: int = Field(default=0, ge=0, le=1000)  # the first layers have a dense MLP (DeepSeek-V3)
    dense_intermediate_size: int | None = Field(default=None, ge=1, le=1_000_000)
    expert_dtype: FormatName | None = None  # routed experts as shipped (gpt-oss: MXFP4), else weights_dtype
    router_bias: bool = False  # gpt-oss: the router has a bias per expert
    expert_bias: bool = False  # gpt-oss: every expert's projections have biases
    shared_expert_gate: bool = False  # Qwen2-MoE, Qwen3-Next: a sigmoid gate (hidden -> 1) on the shared expert

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


class SparseAttentionSpec(BaseModel):
    """DeepSeek Sparse Attention (DeepSeek-V3.2): a lightning indexer scores every cached token with small FP8 heads,
    and attention reads only the top_k_tokens it selects; the cache keeps every token (its latent and its index
    key). Sources: DeepSeek-V3.2-Exp's config.json (index_topk 2048, index_n_heads 64, index_head_dim 128) and
    technical report (the indexer in FP8); vLLM and SGLang replicate the indexer on every TP rank
    (ReplicatedLinear wq_b, wk, weights_proj) and cache each index key in FP8 with a 4-byte scale."""

    model_config = _FROZEN

    top_k_tokens: int = Field(ge=1, le=100_000_000)  # tokens each query attends (index_topk)
    index_heads: int = Field(ge=1, le=10_000)  # the indexer's query heads (index_n_heads)
    index_head_dim: int = Field(ge=1, le=100_000)  # its key and query width (index_head_dim)
    index_key_bytes: int = Field(default=4, ge=0, le=1_000)  # beside the FP8 key: its scale (vLLM: 4 B a token)

    def index_bytes_per_token(self) -> float:
        """One token's index key in one layer: FP8, one byte an element, and its scale."""
        return self.index_head_dim + self.index_key_bytes

    def params(self, hidden_size: int, q_lora_rank: int | None) -> int:
        """The indexer's weights in one layer: wq_b (from the query latent), wk, its key LayerNorm, weights_proj."""
        q_in = q_lora_rank or hidden_size
        d, h = self.index_head_dim, self.index_heads
        return q_in * h * d + hidden_size * d + 2 * d + hidden_size * h


class SlidingWindowSpec(BaseModel):
    """Local attention, the first way to write it: the listed layers keep only the last `window_tokens`."""

    model_config = _FROZEN

    window_tokens: int = Field(ge=1, le=100_000_000)
    layers: Literal["all", "even", "odd"] | list[int] = "all"


_LEGACY_LAYERS = {"all": "1 sliding", "even": "1 sliding : 1 global", "odd": "1 global : 1 sliding"}
# what each mixer or MLP kind needs stated, and the key that states it
_NEEDS = {
    "sliding": "window_tokens",
    "chunked": "chunk_tokens",
    "sparse": "sparse_attention",
    "linear": "linear_attention",
    "mamba": "mamba",
}


# how an imported HF config's note names the shape keys it left out (hf_import; estimate repeats it as a warning)
DEFAULTED_NOTE = "not in the config, so transformers' defaults for"


class ModelSpec(Counts, BaseModel):
    """A decoder-only transformer's shapes; derived counts are exact integers."""

    model_config = _FROZEN | ConfigDict(populate_by_name=True, str_strip_whitespace=True)

    name: SpecName = Field(min_length=1, max_length=200)
    source: str = Field(default="", max_length=2000)
    layers: int = Field(ge=1, le=10_000)
    hidden_size: int = Field(ge=1, le=1_000_000)
    attention_heads: int = Field(ge=1, le=10_000)
    kv_heads: int = Field(ge=1, le=10_000)
    head_dim_stated: int | None = Field(default=None, alias="head_dim", ge=1, le=100_000)
    intermediate_size: int = Field(ge=1, le=10_000_000)
    vocab_size: int = Field(ge=1, le=100_000_000)
    tied_embeddings: bool = False
    attention_bias: bool = False  # q, k and v projections have biases
    output_bias: bool = False  # the attention output projection has a bias (gpt-oss; Llama's attention_bias)
    qk_norm: bool = False  # an RMSNorm over each query and key head (Qwen3, Gemma-3)
    post_norms: bool = False  # Gemma-2/3: a norm after the mixer and after the MLP too
    attention_sinks: bool = False  # gpt-oss: a learned sink logit per head
    attention_gate: bool = False  # Qwen3-Next: q_proj also yields a sigmoid gate on the attention output
    mlp_gated: bool = True
    mlp_bias: bool = False  # the dense MLP's projections have biases (StarCoder2, Phi-2, GPT-NeoX)
    norm_bias: bool = False  # LayerNorm: each norm has a bias vector beside its scale
    shared_norm: bool = False  # a parallel block's one input norm before both mixer and MLP (Phi-2, Falcon-7B)
    lm_head_bias: bool = False  # the LM head has a bias (Phi-2)
    dtype: BaseDtype = "bf16"
    # block linears as shipped when quantized (AWQ int4-g128, FP8 checkpoints, GGUF q4_k_m); None: at `dtype`
    weights_dtype: FormatName | None = None
    # attention's projections (q/k/v/o, MLA's too) as shipped where a checkpoint keeps them apart from the other
    # block linears (Meta's Llama-3.1-405B FP8 quantizes the MLPs only); None: at weights_dtype
    attention_dtype: FormatName | None = None
    # matmul dtype of a checkpoint that quantizes activations too (FP8 / INT8 W8A8); None: at `dtype`
    compute_dtype: Literal["fp8", "int8", "int4", "fp4"] | None = None
    max_context: int = Field(ge=1, le=1_000_000_000)
    params_total_stated: int | None = Field(default=None, alias="params_total", ge=1, le=10**15)
    encoder_params: int = Field(default=0, ge=0, le=10**14)  # vision / audio tower and projector: not decoded
    moe: MoeSpec | None = None
    mla: MlaSpec | None = None
    # each layer's mixer and MLP: "5 sliding : 1 global" repeats from layer 0, or one entry per layer
    layer_pattern: str | list[Mixer] | None = Field(default=None, max_length=10_000)
    mlp_pattern: str | list[Mlp] | None = Field(default=None, max_length=10_000)
    window_tokens: int | None = Field(default=None, ge=1, le=100_000_000)  # what a sliding layer keeps
    chunk_tokens: int | None = Field(default=None, ge=1, le=100_000_000)  # a chunked layer's chunk
    linear_attention: GatedDeltaNetSpec | None = None
    mamba: MambaSpec | None = None
    sparse_attention: SparseAttentionSpec | None = None  # DeepSeek Sparse Attention: the sparse layers' indexer
    sliding_window_given: SlidingWindowSpec | None = Field(default=None, alias="sliding_window")
    notes: str = Field(default="", max_length=10_000)

    @model_validator(mode="after")
    def _consistent_shapes(self) -> ModelSpec:
        if self.kv_heads > self.attention_heads or self.attention_heads % self.kv_heads:
            divisors = [d for d in range(1, self.attention_heads + 1) if self.attention_heads % d == 0]
            shown = ", ".join(str(d) for d in divisors[:12]) + (", ..." if len(divisors) > 12 else "")
            raise ValueError(
                f"kv_heads ({self.kv_heads}) must divide attention_heads ({self.attention_heads}): {shown}"
            )
        # MLA's heads take their widths from the mla block (GLM-4.7-Flash: 20 heads over a hidden size of 2,048)
        if self.head_dim_stated is None and self.mla is None and self.hidden_size % self.attention_heads:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) is not a multiple of attention_heads "
                f"({self.attention_heads}); state head_dim explicitly"
            )
        if self.moe and self.moe.dense_layers > self.layers:
            raise ValueError(f"moe.dense_layers ({self.moe.dense_layers}) exceeds layers ({self.layers})")
        sw = self.sliding_window_given
        if sw and isinstance(sw.layers, list):
            bad = [i for i in sw.layers if not 0 <= i < self.layers]
            if bad:
                raise ValueError(f"sliding_window.layers: {bad[0]} is outside 0..{self.layers - 1}")
            twice = sorted({i for i in sw.layers if sw.layers.count(i) > 1})
            if twice or not sw.layers:  # a layer listed twice, or none: a mistake, not a pattern
                raise ValueError(f"sliding_window.layers: layer {twice[0]} is listed twice; list each once"
                                 if twice else "sliding_window.layers: an empty list; list the sliding layers "
                                 f"(0..{self.layers - 1}), or drop sliding_window")  # fmt: skip
        if sw and (self.layer_pattern is not None or self.window_tokens is not None):
            raise ValueError("sliding_window is the older form of layer_pattern + window_tokens: give one of them")
        self._check_kinds()
        return self

    def _check_kinds(self) -> None:
        """Each kind the patterns use has its parameters, and no parameters are given for a kind never used."""
        for key in ("layer_pattern", "mlp_pattern"):
            try:
                expand(getattr(self, key), self.layers, "", MIXERS if key == "layer_pattern" else MLPS)
            except ValueError as exc:
                raise ValueError(f"{key}: {exc}") from None
        mixers, mlps = {k.mixer for k in self.plan.kinds}, {k.mlp for k in self.plan.kinds}
        for kind, key in _NEEDS.items():
            stated = self.window if key == "window_tokens" else getattr(self, key)
            if kind in mixers and stated is None:
                raise ValueError(f"layer_pattern has {kind} layers: state {key}")
            if kind not in mixers and getattr(self, key) is not None:
                raise ValueError(f"{key} is given but layer_pattern has no {kind} layer")
        if "moe" in mlps and self.moe is None:
            raise ValueError("mlp_pattern has moe layers: state moe (experts, experts_per_token, ...)")
        if self.mlp_pattern is not None and self.moe and "moe" not in mlps:
            raise ValueError("moe is given but mlp_pattern has no moe layer")
        if self.mlp_pattern is not None and self.moe and self.moe.dense_layers:
            raise ValueError("moe.dense_layers is the older form of mlp_pattern: give one of them")

    # ---- layers ------------------------------------------------------------------------------

    @cached_property
    def plan(self) -> LayerPlan:
        """Every layer's (mixer, MLP) kind, counted over any range without walking it."""
        sw = self.sliding_window_given
        if sw is not None:  # the older form: sliding layers by parity or index, the rest global
            if isinstance(sw.layers, list):
                listed = set(sw.layers)
                mixers = tuple("sliding" if i in listed else "global" for i in range(self.layers))
            else:
                mixers = expand(_LEGACY_LAYERS[sw.layers], self.layers, "global", MIXERS)
        else:
            mixers = expand(self.layer_pattern, self.layers, "global", MIXERS)
        if self.mlp_pattern is not None:
            mlps = expand(self.mlp_pattern, self.layers, "dense", MLPS)
        else:  # dense before MoE: DeepSeek-V3's first_k_dense_replace
            dense = self.moe.dense_layers if self.moe else self.layers
            mlps = ("dense",) * dense + ("moe",) * (self.layers - dense)
        return LayerPlan(mixers, mlps)

    @cached_property
    def head_dim(self) -> int:
        """Per-head width; defaults to hidden_size / attention_heads."""
        return self.head_dim_stated or self.hidden_size // self.attention_heads

    @cached_property
    def window(self) -> int | None:
        """Tokens a sliding layer keeps, in either way of writing it."""
        return self.sliding_window_given.window_tokens if self.sliding_window_given else self.window_tokens

    @cached_property
    def sliding_window(self) -> SlidingWindowSpec | None:
        """Sliding layers in the older form (a window and which layers), as measure's attention reads them."""
        sliding = [i for i, k in enumerate(self.plan.kinds) if k.mixer == "sliding"]
        if not sliding or self.window is None:
            return None
        n = self.layers
        canonical = {"all": list(range(n)), "even": list(range(0, n, 2)), "odd": list(range(1, n, 2))}
        form = next((name for name, layers in canonical.items() if layers == sliding), None)
        return SlidingWindowSpec(window_tokens=self.window, layers=form or sliding)

    def is_sliding_layer(self, layer: int) -> bool:
        """Whether `layer` (0-based) uses the sliding window."""
        return 0 <= layer < self.layers and self.plan.kinds[layer].mixer == "sliding"

    @cached_property
    def sliding_layers(self) -> int:
        """How many layers use the sliding window."""
        return self.plan.count(mixer="sliding")

    def at_dtype(self, dtype: str) -> ModelSpec:
        """The same model stored at `dtype` throughout (a measured loop builds every tensor at its run's dtype)."""
        data = self.model_dump(by_alias=True)  # rebuilt, not model_copy'd, as truncated says
        data.update(dtype=dtype, weights_dtype=None, attention_dtype=None, compute_dtype=None)
        if data.get("moe"):
            data["moe"]["expert_dtype"] = None
        return ModelSpec.model_validate(data)

    def truncated(self, layers: int) -> ModelSpec:
        """The same model with only its first `layers` layers (for measuring shapes that don't fit)."""
        # rebuilt, not model_copy'd: model_copy would carry over the cached derived counts
        data = self.model_dump(by_alias=True)
        data.update(layers=layers, params_total=None)
        if self.moe and self.moe.dense_layers > layers:
            data["moe"]["dense_layers"] = layers
        if self.sliding_window_given and isinstance(self.sliding_window_given.layers, list):
            kept_sliding = [i for i in self.sliding_window_given.layers if i < layers]
            data["sliding_window"] = {**data["sliding_window"], "layers": kept_sliding} if kept_sliding else None
        for key in ("layer_pattern", "mlp_pattern"):
            if isinstance(data[key], list):
                data[key] = data[key][:layers]
        kept = self.plan.kinds[:layers]
        for kind, key in _NEEDS.items():  # a kind cut away takes its parameters with it
            if kind not in {k.mixer for k in kept}:
                data[key] = None
        if self.mlp_pattern is not None and "moe" not in {k.mlp for k in kept}:
            data["moe"] = None
        return ModelSpec.model_validate(data)
