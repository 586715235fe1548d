"""Which layers a pipeline stage holds and what one GPU holds of each: block kinds, per-rank parameters, KV and state.

A block kind is a mixer kind (global, sliding window, chunked attention; Gated DeltaNet or Mamba-2, which keep a
state per sequence; none) and an MLP kind (dense, MoE, none): layers of one kind cost the same, so a stage is
priced by kind, counted over its layer range (models/layers.py LayerPlan), never walked.

Tensor parallelism splits attention and KV heads (blocks replicate KV heads past kv_heads, layout.py), and a state
layer's heads with their state (vLLM's MambaMixer2 and Qwen3-Next's GatedDeltaNet shard heads across TP ranks).
"""

from __future__ import annotations

from dataclasses import dataclass

from tokcost.engine.layout import kv_heads_per_rank
from tokcost.engine.workload import Precision
from tokcost.formats import get as get_format
from tokcost.models.layers import KV_MIXERS, STATE_MIXERS
from tokcost.models.spec import ModelSpec

_MIXER_NAMES = {"linear": "Gated DeltaNet", "mamba": "Mamba-2"}


@dataclass(frozen=True, slots=True)
class BlockKind:
    """Layers that cost the same: a mixer kind and an MLP kind (models/layers.py LayerKind)."""

    mixer: str
    mlp: str

    def label(self, model: ModelSpec) -> str:
        """Human name of the kind: "dense layer", "MoE layer, window 1,024", "Mamba-2 layer, no MLP", ..."""
        top = model.sparse_attention.top_k_tokens if model.sparse_attention else 0
        mixer = {"sliding": f"window {model.window or 0:,}", "chunked": f"chunk {model.chunk_tokens or 0:,}",
                 "sparse": f"sparse, top {top:,}", **_MIXER_NAMES}.get(self.mixer, "")  # fmt: skip
        if self.mlp == "none":
            return f"{mixer or 'attention'} layer, no MLP"
        mlp = "MoE" if self.mlp == "moe" else "dense"
        if self.mixer == "none":
            return f"{mlp} MLP-only layer"
        return f"{mlp} layer" + (f", {mixer}" if mixer else "")


def stage_kinds(model: ModelSpec, layers: range) -> dict[BlockKind, int]:
    """How many layers of each kind a pipeline stage holds, in the order they first appear."""
    return {BlockKind(k.mixer, k.mlp): n for k, n in model.plan.counts(layers).items()}


# ---- parameters one GPU holds -----------------------------------------------------------------------


def attention_params_per_rank(model: ModelSpec, tp: int) -> tuple[float, float]:
    """(QKV-side params, output-projection params) of one attention layer on one TP rank."""
    h, n = model.hidden_size, model.attention_heads
    if model.mla:
        m = model.mla
        qk = m.nope_head_dim + m.rope_head_dim
        # down-projections and latent norms are replicated on every rank; the per-head up-projections split
        replicated = h * (m.kv_lora_rank + m.rope_head_dim) + m.kv_lora_rank
        split = m.kv_lora_rank * n * (m.nope_head_dim + m.v_head_dim)
        if m.q_lora_rank:
            replicated += h * m.q_lora_rank + m.q_lora_rank
            split += m.q_lora_rank * n * qk
        else:
            split += h * n * qk
        return replicated + split / tp, n * m.v_head_dim * h / tp
    q_dim, kv_dim = n * model.head_dim / tp, kv_heads_per_rank(model, tp) * model.head_dim
    bias = q_dim + 2 * kv_dim if model.attention_bias else 0
    gate = q_dim if model.attention_gate else 0  # Qwen3-Next: q_proj also yields a sigmoid gate per query channel
    qkv_extras, o_extras = model.attention_extras(tp)  # q/k norms, sinks, the output bias
    return h * (q_dim + gate + 2 * kv_dim) + bias + qkv_extras, q_dim * h + o_extras


def mixer_params_per_rank(model: ModelSpec, mixer: str, tp: int) -> float:
    """Every weight of one layer's mixer on one TP rank (a state layer's heads split tp-way; a sparse layer's
    indexer whole, as vLLM's and SGLang's ReplicatedLinear hold it)."""
    if mixer in KV_MIXERS:
        return sum(attention_params_per_rank(model, tp)) + (model.params_indexer_per_layer if mixer == "sparse" else 0)
    return model.params_mixer_per_layer(mixer) / tp


def mlp_params_per_rank(model: ModelSpec, mlp: str, tp: int) -> float:
    """A dense MLP's weights on one TP rank (MoE layers are counted by expert: memory.py)."""
    return model.params_dense_mlp_per_layer / tp if mlp == "dense" else 0.0


def kv_bytes_per_token_layer(model: ModelSpec, precision: Precision, tp: int) -> float:
    """Cache bytes one token adds to one attention layer on one TP rank (KV heads split, MLA latent whole; a
    sparse model's FP8 latent in its own layout: counts.cache_bytes_per_token_per_layer)."""
    if model.mla:
        return model.cache_bytes_per_token_per_layer(precision.kv)
    return 2 * kv_heads_per_rank(model, tp) * model.head_dim * get_format(precision.kv).bytes


def state_bytes_per_sequence_layer(model: ModelSpec, precision: Precision, mixer: str, tp: int) -> float:
    """State one sequence keeps in one layer of kind `mixer` on one TP rank (0 for attention: its cache grows)."""
    if mixer not in STATE_MIXERS:
        return 0.0
    return model.state_bytes_per_sequence_per_layer(mixer, precision.state) / tp


def mla_prefix_flops_per_token(model: ModelSpec, tp: int) -> float:
    """FLOPs of up-projecting one cached latent to every head's K (nope part) and V, one layer, one TP rank: what
    MLA's per-head form pays for each cached token before it can score against it (0 without MLA)."""
    if model.mla is None:
        return 0.0
    m = model.mla
    return 2 * model.attention_heads / tp * m.kv_lora_rank * (m.nope_head_dim + m.v_head_dim)


def attention_flops_per_pair(model: ModelSpec, tp: int, *, absorbed: bool) -> float:
    """FLOPs of QK^T and AV for one query against one cached token, one layer, one TP rank."""
    heads = model.attention_heads / tp
    if model.mla and absorbed:  # scores over latent + rope key, values in the latent: 2 h (2 r + rope)
        return 2 * heads * (2 * model.mla.kv_lora_rank + model.mla.rope_head_dim)
    if model.mla:
        return 2 * heads * (model.mla.nope_head_dim + model.mla.rope_head_dim + model.mla.v_head_dim)
    return 2 * heads * 2 * model.head_dim
