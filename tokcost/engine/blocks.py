"""Which layers a pipeline stage holds and what one GPU holds of each: block kinds, per-rank parameters and KV.

A block kind is an attention kind (global, sliding window: features.py) and an MLP kind (dense, MoE); layers of
one kind cost the same, so a stage is priced by kind, counted, not walked. A new attention kind (chunked,
linear / state-space) is a new value of BlockKind.attention with its own features and parameters.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tokcost.engine.features import ATTENTION_KINDS, AttentionKind
from tokcost.engine.layout import kv_heads_per_rank
from tokcost.engine.workload import Precision
from tokcost.formats import get as get_format
from tokcost.models.spec import ModelSpec

Mlp = Literal["dense", "moe"]


@dataclass(frozen=True, slots=True)
class BlockKind:
    """Layers that cost the same: an attention kind (global, sliding window) and an MLP kind (dense, MoE)."""

    attention: AttentionKind
    mlp: Mlp

    def label(self, model: ModelSpec) -> str:
        """Human name of the kind."""
        mlp = "MoE layer" if self.mlp == "moe" else "dense layer"
        sw = model.sliding_window
        return mlp + (f", window {sw.window_tokens:,}" if self.attention == "sliding" and sw else "")


def _sliding_in(model: ModelSpec, r: range) -> int:
    """How many layers of range `r` slide (counted, not walked: a stage may hold thousands of layers)."""
    sw = model.sliding_window
    if sw is None or not r:
        return 0
    if sw.layers == "all":
        return len(r)
    if sw.layers in ("even", "odd"):
        parity = 0 if sw.layers == "even" else 1
        return len(range(r.start + (r.start % 2 != parity), r.stop, 2))
    return sum(1 for i in set(sw.layers) if i in r)


def stage_kinds(model: ModelSpec, layers: range) -> dict[BlockKind, int]:
    """How many layers of each kind a pipeline stage holds: dense before MoE, sliding before global."""
    dense_end = model.moe.dense_layers if model.moe else model.layers
    groups: list[tuple[Mlp, range]] = [("dense", range(layers.start, min(layers.stop, dense_end))),
                                       ("moe", range(max(layers.start, dense_end), layers.stop))]  # fmt: skip
    out: dict[BlockKind, int] = {}
    for mlp, r in groups:
        sliding = _sliding_in(model, r)
        for kind, n in ((BlockKind("sliding", mlp), sliding), (BlockKind("global", mlp), len(r) - sliding)):
            if n:
                out[kind] = n
    return out


def attention_kinds(model: ModelSpec) -> tuple[AttentionKind, ...]:
    """The attention kinds the model's layers use, in ATTENTION_KINDS order."""
    used = {kind.attention for kind in stage_kinds(model, range(model.layers))}
    return tuple(k for k in ATTENTION_KINDS if k in used)


# ---- parameters one GPU holds -----------------------------------------------------------------------


def attention_params_per_rank(model: ModelSpec, tp: int) -> tuple[float, float]:
    """(QKV-side params, output-projection params) of one layer on one TP rank."""
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
    return h * (q_dim + 2 * kv_dim) + bias, q_dim * h


def kv_bytes_per_token_layer(model: ModelSpec, precision: Precision, tp: int) -> float:
    """Cache bytes one token adds to one layer on one TP rank (KV heads split, MLA latent whole)."""
    bytes_ = get_format(precision.kv).bytes
    if model.mla:
        return (model.mla.kv_lora_rank + model.mla.rope_head_dim) * bytes_
    return 2 * kv_heads_per_rank(model, tp) * model.head_dim * bytes_


def attention_flops_per_pair(model: ModelSpec, tp: int, *, absorbed: bool) -> float:
    """FLOPs of QK^T and AV for one query against one cached token, one layer, one TP rank."""
    heads = model.attention_heads / tp
    if model.mla and absorbed:  # scores over latent + rope key, values in the latent: 2 h (2 r + rope)
        return 2 * heads * (2 * model.mla.kv_lora_rank + model.mla.rope_head_dim)
    if model.mla:
        return 2 * heads * (model.mla.nope_head_dim + model.mla.rope_head_dim + model.mla.v_head_dim)
    return 2 * heads * 2 * model.head_dim
