"""Exact parameter counts, KV bytes per token and state bytes per sequence of a ModelSpec, kind by kind.

Every figure is derived from the shapes: nothing is stated twice. The per-kind accessors are what the engine
asks a model for: how many layers of each (mixer, MLP) kind a layer range holds (`plan.counts`), and per kind
its parameters, its KV bytes per token, its state bytes per sequence and the tokens it attends to.
"""

from __future__ import annotations

import math
from functools import cached_property
from typing import TYPE_CHECKING

from tokcost.formats import bits_of
from tokcost.models.layers import KV_MIXERS

if TYPE_CHECKING:
    from tokcost.models.layers import LayerPlan
    from tokcost.models.mixers import GatedDeltaNetSpec, MambaSpec
    from tokcost.models.spec import MlaSpec, MoeSpec


class Counts:
    """Derived counts of a ModelSpec (a mixin: the fields live on ModelSpec)."""

    if TYPE_CHECKING:  # the ModelSpec fields these properties read
        layers: int
        hidden_size: int
        attention_heads: int
        kv_heads: int
        head_dim: int
        intermediate_size: int
        vocab_size: int
        tied_embeddings: bool
        attention_bias: bool
        output_bias: bool
        qk_norm: bool
        post_norms: bool
        attention_sinks: bool
        attention_gate: bool
        mlp_gated: bool
        mlp_bias: bool
        norm_bias: bool
        shared_norm: bool
        lm_head_bias: bool
        dtype: str
        encoder_params: int
        params_total_stated: int | None
        moe: MoeSpec | None
        mla: MlaSpec | None
        linear_attention: GatedDeltaNetSpec | None
        mamba: MambaSpec | None
        plan: LayerPlan
        window: int | None
        chunk_tokens: int | None

    # ---- layers of each kind -------------------------------------------------------------------

    @cached_property
    def moe_layers(self) -> int:
        """Layers whose MLP is routed experts."""
        return self.plan.count(mlp="moe")

    @cached_property
    def dense_mlp_layers(self) -> int:
        """Layers with a plain MLP."""
        return self.plan.count(mlp="dense")

    @cached_property
    def kv_layers(self) -> int:
        """Layers that cache K/V per token: global, sliding and chunked attention."""
        return sum(self.plan.count(mixer=m) for m in KV_MIXERS)

    @cached_property
    def dense_intermediate(self) -> int:
        """Intermediate width of the dense MLP layers."""
        if self.moe and self.moe.dense_intermediate_size:
            return self.moe.dense_intermediate_size
        return self.intermediate_size

    # ---- parameters per layer of each kind -------------------------------------------------------

    @cached_property
    def params_attention_per_layer(self) -> int:
        """Q, K, V, O projections of one attention layer (MLA: its down/up projections and latent norms)."""
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
        gate = h * q_dim if self.attention_gate else 0  # Qwen3-Next: q_proj is twice as wide (query, gate)
        bias = q_dim + 2 * kv_dim if self.attention_bias else 0
        return h * q_dim + gate + 2 * h * kv_dim + q_dim * h + bias + sum(self.attention_extras(1))

    def attention_extras(self, tp: int) -> tuple[float, float]:
        """(beside the QKV projections, beside the output one) on one of `tp` ranks: the q and k norms' vectors
        (whole on every rank), one sink logit a head (split with the heads), the output projection's bias (whole)."""
        qkv = (2 * self.head_dim * self._norm_vectors if self.qk_norm else 0) + (
            self.attention_heads / tp if self.attention_sinks else 0
        )
        return qkv, self.hidden_size if self.output_bias else 0

    @cached_property
    def params_indexer_per_layer(self) -> int:
        """A sparse-attention layer's indexer weights (SparseAttentionSpec.params; 0 without sparse attention)."""
        s = self.sparse_attention
        return s.params(self.hidden_size, self.mla.q_lora_rank if self.mla else None) if s else 0

    def params_mixer_per_layer(self, mixer: str) -> int:
        """Weights of one layer's mixer of kind `mixer`."""
        if mixer == "sparse":  # and its indexer
            return self.params_attention_per_layer + self.params_indexer_per_layer
        if mixer in KV_MIXERS:
            return self.params_attention_per_layer
        if mixer == "linear" and self.linear_attention:
            return self.linear_attention.params(self.hidden_size)
        if mixer == "mamba" and self.mamba:
            return self.mamba.params(self.hidden_size)
        return 0

    @cached_property
    def params_dense_mlp_per_layer(self) -> int:
        """MLP of a dense layer: gate, up and down projections (up and down when ungated), and their biases."""
        h, inter, m = self.hidden_size, self.dense_intermediate, self.mlp_matrices
        bias = (m - 1) * inter + h if self.mlp_bias else 0
        return m * h * inter + bias

    @property
    def mlp_matrices(self) -> int:
        """Weight matrices of one MLP, dense or expert: gate, up and down (3), or up and down when ungated (2)."""
        return 3 if self.mlp_gated else 2

    @cached_property
    def params_per_expert(self) -> int:
        """One routed expert: an MLP of expert_intermediate_size, gated as the model's are (and its biases,
        gpt-oss)."""
        if not self.moe:
            return 0
        h, inter = self.hidden_size, self.moe.expert_intermediate_size
        bias = (self.mlp_matrices - 1) * inter + h if self.moe.expert_bias else 0
        return self.mlp_matrices * h * inter + bias

    @cached_property
    def params_shared_experts_per_layer(self) -> int:
        """Always-on shared experts of one MoE layer (and their gate, Qwen2-MoE / Qwen3-Next)."""
        if not self.moe:
            return 0
        width = self.moe.shared_expert_intermediate_size or self.moe.expert_intermediate_size
        gate = self.hidden_size if self.moe.shared_expert_gate else 0
        return self.moe.shared_experts * self.mlp_matrices * self.hidden_size * width + gate

    @cached_property
    def params_router_per_layer(self) -> int:
        """Router (gate) matrix of one MoE layer: hidden x experts (+ a bias per expert)."""
        if not self.moe:
            return 0
        return self.hidden_size * self.moe.experts + (self.moe.experts if self.moe.router_bias else 0)

    def params_mlp_per_layer(self, mlp: str) -> int:
        """Weights of one layer's MLP of kind `mlp` (MoE: every expert, shared experts and router)."""
        if mlp == "dense":
            return self.params_dense_mlp_per_layer
        if mlp == "moe" and self.moe:
            routed = self.moe.experts * self.params_per_expert
            return routed + self.params_shared_experts_per_layer + self.params_router_per_layer
        return 0

    @property
    def _norm_vectors(self) -> int:
        """Vectors of one norm: its scale, and its bias for a LayerNorm."""
        return 2 if self.norm_bias else 1

    def norm_vectors(self, part: str, mixer: str = "none", mlp: str = "none") -> int:
        """Norm vectors (each hidden wide) one layer's `part` ("mixer" or "mlp") reads: one before it (the mixer's
        serves both with shared_norm) and one after it with post_norms, a LayerNorm's bias beside each scale; the
        final norm's ("final") before the LM head."""
        if part == "final":
            return self._norm_vectors
        if (mixer if part == "mixer" else mlp) == "none":
            return 0
        before = 0 if part == "mlp" and self.shared_norm and mixer != "none" else 1
        return (before + self.post_norms) * self._norm_vectors

    def params_norms_per_layer(self, mixer: str, mlp: str) -> int:
        """Norm weights of one layer: its mixer's and its MLP's norm vectors (norm_vectors)."""
        return sum(self.norm_vectors(part, mixer, mlp) for part in ("mixer", "mlp")) * self.hidden_size

    # ---- parameter totals --------------------------------------------------------------------

    @cached_property
    def params_attention(self) -> int:
        """Mixer weights of all layers (attention, linear attention, SSM)."""
        return sum(n * self.params_mixer_per_layer(k.mixer) for k, n in self.plan.counts(range(self.layers)).items())

    @cached_property
    def params_mlp(self) -> int:
        """Every MLP weight: dense layers, all routed experts, shared experts and routers."""
        return sum(n * self.params_mlp_per_layer(k.mlp) for k, n in self.plan.counts(range(self.layers)).items())

    @cached_property
    def params_norms(self) -> int:
        """Norm vectors of every layer plus the final norm."""
        every = self.plan.counts(range(self.layers)).items()
        final = self.hidden_size * self.norm_vectors("final")
        return sum(n * self.params_norms_per_layer(k.mixer, k.mlp) for k, n in every) + final

    @cached_property
    def params_embedding(self) -> int:
        """Input embedding table: vocab x hidden."""
        return self.vocab_size * self.hidden_size

    @cached_property
    def params_lm_head(self) -> int:
        """Output projection (and its bias, Phi-2); zero extra weights when tied to the embedding."""
        bias = self.vocab_size if self.lm_head_bias else 0
        return bias + (0 if self.tied_embeddings else self.vocab_size * self.hidden_size)

    @cached_property
    def params_blocks(self) -> int:
        """Everything inside the transformer blocks (mixers, MLPs, norms)."""
        return self.params_attention + self.params_mlp + self.params_norms

    @cached_property
    def params_total(self) -> int:
        """All decoder parameters, derived from the shapes (a vision or audio tower is `encoder_params`)."""
        return self.params_blocks + self.params_embedding + self.params_lm_head

    @cached_property
    def params_with_encoder(self) -> int:
        """Decoder plus vision / audio tower: what a model card's total counts."""
        return self.params_total + self.encoder_params

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
        """The stated params_total against the shapes' count (tower included), stated / shapes - 1: +4.6% when the
        stated figure is the larger; None when none is stated."""
        if self.params_total_stated is None:
            return None
        return self.params_total_stated / self.params_with_encoder - 1

    # ---- KV cache and state ------------------------------------------------------------------

    @cached_property
    def kv_elements_per_token_per_layer(self) -> int:
        """Cached values per token per attention layer: K and V heads, or MLA's latent plus its RoPE key."""
        if self.mla:
            return self.mla.kv_lora_rank + self.mla.rope_head_dim
        return 2 * self.kv_heads * self.head_dim

    def kv_bytes_per_token_per_layer(self, mixer: str, kv_dtype: str | None = None) -> float:
        """KV bytes one token adds to one layer of kind `mixer` (0 for a layer that keeps a state instead; a sparse
        layer's index key beside its K/V, at FP8 whatever the cache's format)."""
        if mixer not in KV_MIXERS:
            return 0.0
        return self.cache_bytes_per_token_per_layer(kv_dtype) + self.index_bytes_per_token_per_layer(mixer)

    def index_bytes_per_token_per_layer(self, mixer: str) -> float:
        """A sparse layer's index key per token, FP8 and its scale whatever the cache's format (0 for any other)."""
        s = self.sparse_attention
        return s.index_bytes_per_token() if mixer == "sparse" and s else 0.0

    def cache_bytes_per_token_per_layer(self, kv_dtype: str | None = None) -> float:
        """K/V (or MLA's latent and RoPE key) one token adds to one attention layer, at the cache's format. A sparse
        MLA model's FP8 cache is FlashMLA's sparse layout (vLLM's fp8_ds_mla, SGLang's): the latent in FP8, a 4-byte
        scale per 128 of it, the RoPE key kept at 16 bits: 512 + 16 + 128 = 656 B for DeepSeek-V3.2."""
        bits = bits_of(kv_dtype or self.dtype)
        if self.mla and self.sparse_attention and bits == 8:
            m = self.mla
            return m.kv_lora_rank + 4 * math.ceil(m.kv_lora_rank / 128) + 2 * m.rope_head_dim
        return self.kv_elements_per_token_per_layer * bits / 8

    def kv_bytes_per_token(self, kv_dtype: str | None = None) -> float:
        """KV bytes one token adds across all layers: 2 x attention layers x kv_heads x head_dim x bytes (MLA: the
        latent and its RoPE key; sparse layers: and the index key)."""
        every = self.plan.counts(range(self.layers)).items()
        return sum(n * self.kv_bytes_per_token_per_layer(k.mixer, kv_dtype) for k, n in every)

    def state_bytes_per_sequence_per_layer(self, mixer: str, state_dtype: str | None = None) -> float:
        """Fixed state one sequence keeps in one layer of kind `mixer` (0 for attention: its cache grows)."""
        spec = {"linear": self.linear_attention, "mamba": self.mamba}.get(mixer)
        return spec.state_elements() * bits_of(state_dtype or self.dtype) / 8 if spec else 0.0

    def state_bytes_per_sequence(self, state_dtype: str | None = None) -> float:
        """Fixed state one sequence keeps across all layers (linear attention, SSM), whatever its length."""
        every = self.plan.counts(range(self.layers)).items()
        return sum(n * self.state_bytes_per_sequence_per_layer(k.mixer, state_dtype) for k, n in every)

    def tokens_attended(self, mixer: str, context_tokens: float) -> float:
        """Tokens a layer of kind `mixer` attends to (and keeps) when the sequence holds `context_tokens`."""
        if mixer in ("global", "sparse"):  # a sparse layer reads its top k, but keeps every token
            return context_tokens
        if mixer == "sliding" and self.window:
            return min(context_tokens, self.window)
        if mixer == "chunked" and self.chunk_tokens and context_tokens > 0:
            return (context_tokens - 1) % self.chunk_tokens + 1  # its position within its chunk, itself included
        return 0.0

    def attended_tokens(self, context_tokens: float) -> float:
        """Tokens kept per attention layer, averaged over the attention layers (windows and chunks applied)."""
        if not self.kv_layers:
            return 0.0
        every = self.plan.counts(range(self.layers)).items()
        kept = sum(n * self.tokens_attended(k.mixer, context_tokens) for k, n in every if k.mixer in KV_MIXERS)
        return kept / self.kv_layers

    def kv_cache_bytes(self, tokens_per_sequence: float, sequences: int = 1, kv_dtype: str | None = None) -> float:
        """KV cache held for `sequences` sequences of `tokens_per_sequence` tokens (windows applied; no state)."""
        return sequences * self.attended_tokens(tokens_per_sequence) * self.kv_bytes_per_token(kv_dtype)

    @cached_property
    def attention_flops_per_token_per_context(self) -> int:
        """FLOPs of QK^T and AV for one query against one cached token, all layers: 2 x layers x heads x (dk + dv)."""
        if self.mla:
            qk, v = self.mla.nope_head_dim + self.mla.rope_head_dim, self.mla.v_head_dim
        else:
            qk = v = self.head_dim
        return 2 * self.kv_layers * self.attention_heads * (qk + v)
