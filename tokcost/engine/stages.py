"""The kernels of one forward pass, in the order a token meets them, with the work each does on the busiest GPU.

Every stage counts FLOPs (a multiply-add is 2) and HBM bytes read and written per occurrence on one GPU, and
how many times it runs per pass (the layers of its kind in the slowest pipeline stage). A matmul reads its
weights once per pass whatever the token count (Pope et al. 2022), reads its input activation and writes its
output; norms and activation functions are fused into their neighbours (TensorRT-LLM, SGLang and
torch.compile fuse them), so they add FLOPs and their tiny weights but no pass of their own over HBM.
The K/V of new tokens go straight into the cache (the "KV cache write"); attention reads the cache.
MLA (DeepSeek-V2/V3) attends in its absorbed latent form in decode (one query per step) and in the per-head
form in prefill, as vLLM and SGLang run it.

Every count is linear in the pass's features (features.py): the builders run on numbers for one point and on
linear forms to compile a configuration's kernels once (compiled.py), so the formulas are written only here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Generic, Literal

from tokcost.engine.blocks import (
    BlockKind,
    attention_flops_per_pair,
    attention_kinds,
    attention_params_per_rank,
    kv_bytes_per_token_layer,
    stage_kinds,
)
from tokcost.engine.features import Features, FeatureSpace, N, Segment
from tokcost.engine.layout import Layout, stage_layer_ranges
from tokcost.engine.workload import Precision
from tokcost.formats import get as get_format
from tokcost.models.spec import ModelSpec

Kind = Literal["matmul", "experts", "attention", "memory", "collective"]
Op = Literal["all-reduce", "all-to-all", "send/recv"]
LOGIT_BYTES = 4  # logits are sampled in fp32
__all__ = ["Segment", "Stage", "pass_stages", "pipeline_stages"]


@dataclass(frozen=True, slots=True)
class Stage(Generic[N]):
    """One kernel (or collective) of a pass: its work on the busiest GPU, per occurrence, and how often it runs."""

    name: str
    block: str  # "" outside the blocks, else the block kind ("dense layer", "MoE layer, sliding window", ...)
    kind: Kind
    count: int
    flops: N | float = 0.0
    bytes_read: N | float = 0.0
    bytes_written: N | float = 0.0
    weight_bytes: N | float = 0.0  # the part of bytes_read that is weights (weight-only formats, the breakdown)
    weight_format: str = ""  # storage format of those weights
    kv_bytes: N | float = 0.0  # the part of bytes_read that is the KV cache (attention)
    collective: Op | None = None
    payload_bytes: N | float = 0.0  # the collective's buffer (all-to-all: the busiest rank's volume)
    ranks: int = 1  # GPUs the collective spans
    note: str = ""  # how the numbers were counted, for --explain and --journey
    crosses_nodes: bool = False  # a send/recv between pipeline stages on different nodes (rides the network)

    @property
    def bytes(self) -> N | float:
        """HBM bytes per occurrence."""
        return self.bytes_read + self.bytes_written


# ---- the stages ----------------------------------------------------------------------------------------


def _matmul(name: str, block: str, count: int, params: float, tokens: N, fmt: str, act: float, in_dim: float,
            out_dim: float, note: str = "", kind: Kind = "matmul") -> Stage[N]:  # fmt: skip
    """A matmul against `params` weights for `tokens` rows: 2 x params x tokens FLOPs, weights read once."""
    weight = params * get_format(fmt).bytes
    return Stage(
        name,
        block,
        kind,
        count,
        flops=2 * params * tokens,
        bytes_read=weight + tokens * in_dim * act,
        bytes_written=tokens * out_dim * act,
        weight_bytes=weight,
        weight_format=fmt,
        note=note,
    )


def _collective(name: str, block: str, count: int, op: Op, payload_bytes: N, ranks: int, note: str = "",
                crosses_nodes: bool = False) -> Stage[N]:  # fmt: skip
    """A collective stage: `op` over `ranks` GPUs moving `payload_bytes` (the busiest rank's, for an all-to-all)."""
    return Stage(name, block, "collective", count, collective=op, payload_bytes=payload_bytes, ranks=ranks,
                 note=note, crosses_nodes=crosses_nodes)  # fmt: skip


def block_stages(
    model: ModelSpec, p: Precision, layout: Layout, f: Features[N], kind: BlockKind, count: int
) -> list[Stage[N]]:
    """The kernels of `count` layers of one kind, on the busiest GPU of their pipeline stage."""
    h, tp, act = model.hidden_size, layout.tp, p.activation_bytes
    label = kind.label(model)
    t_dp = f.tokens_dp
    qkv_params, o_params = attention_params_per_rank(model, tp)
    q_width = (
        model.attention_heads
        / tp
        * (model.mla.nope_head_dim + model.mla.rope_head_dim if model.mla else model.head_dim)
    )
    v_width = model.attention_heads / tp * (model.mla.v_head_dim if model.mla else model.head_dim)
    kv_tok = kv_bytes_per_token_layer(model, p, tp)
    fused = "RMSNorm fused into the next matmul's prologue: its weights, no pass of its own over activations"
    norm_bytes = h * p.embedding_bytes
    attn_norm = Stage(
        "attention norm",
        label,
        "memory",
        count,
        flops=4 * t_dp * h,
        bytes_read=norm_bytes,
        weight_bytes=norm_bytes,
        weight_format=p.embedding,
        note=fused,
    )
    kv_read = f.kv_read[kind.attention]
    absorbed, heads = f.pairs_absorbed[kind.attention], f.pairs_heads[kind.attention]
    pairs_flops = absorbed * attention_flops_per_pair(model, tp, absorbed=True) + heads * attention_flops_per_pair(
        model, tp, absorbed=False
    )
    stages = [
        attn_norm,
        _matmul("QKV projection", label, count, qkv_params, t_dp, p.weights, act, h, q_width),
        Stage(
            "KV cache write",
            label,
            "memory",
            count,
            bytes_written=t_dp * kv_tok,
            note="the new tokens' K/V (MLA: latent + RoPE key) appended to the cache",
        ),
        Stage(
            "attention (KV cache read)",
            label,
            "attention",
            count,
            flops=pairs_flops,
            bytes_read=kv_read * kv_tok + t_dp * q_width * act,
            kv_bytes=kv_read * kv_tok,
            bytes_written=t_dp * v_width * act,
            weight_format=p.kv,  # the cache's format: FP8 attention kernels need an FP8 cache
            note="reads every cached token it attends to once (FlashAttention / paged decode kernels)",
        ),
        _matmul("output projection", label, count, o_params, t_dp, p.weights, act, v_width, h),
    ]
    if tp > 1:
        stages.append(_collective("attention all-reduce", label, count, "all-reduce", t_dp * h * act, tp))
    stages.append(replace(attn_norm, name="MLP norm"))
    mlp = moe_stages if kind.mlp == "moe" else dense_mlp_stages
    return stages + mlp(model, p, layout, f, label, count)


def dense_mlp_stages(
    model: ModelSpec, p: Precision, layout: Layout, f: Features[N], label: str, count: int
) -> list[Stage[N]]:
    """Gate, up and down projections split tp-way (data-parallel across DP attention replicas)."""
    h, tp, act, t = model.hidden_size, layout.tp, p.activation_bytes, f.tokens_dp
    inter = model.dense_intermediate / tp
    stages = [
        _matmul(
            "MLP (gate, up, down)",
            label,
            count,
            3 * h * inter,
            t,
            p.weights,
            act,
            h + inter,
            inter + h,
            note="SwiGLU fused into the gate/up epilogue: the intermediate is written once and read once",
        ),
    ]
    if tp > 1:
        stages.append(_collective("MLP all-reduce", label, count, "all-reduce", t * h * act, tp))
    return stages


def node_dedupe(top_k: int, nodes: int) -> float:
    """Off-node copies of a token per remote expert pair when a group spans `nodes` nodes: a token is sent once per
    remote node hosting any of its top_k experts (uniform routing: E[distinct remote nodes] = (N - 1)(1 - (1 -
    1/N)^k)) instead of once per pair (k (N - 1) / N); 1 inside one node."""
    if nodes <= 1:
        return 1.0
    return (1 - (1 - 1 / nodes) ** top_k) * nodes / top_k


def moe_stages(
    model: ModelSpec, p: Precision, layout: Layout, f: Features[N], label: str, count: int
) -> list[Stage[N]]:
    """Router, shared experts, routed experts on the busiest expert-parallel rank, and their all-to-alls."""
    assert model.moe is not None
    moe, h, tp, act = model.moe, model.hidden_size, layout.tp, p.activation_bytes
    t_dp, tokens, ep, etp = f.tokens_dp, f.tokens, layout.ep, layout.expert_tp
    stages = [_matmul("router", label, count, h * moe.experts, t_dp, p.weights, act, h, moe.experts)]
    if model.params_shared_experts_per_layer:
        shared = model.params_shared_experts_per_layer / tp
        stages.append(_matmul("shared experts", label, count, shared, t_dp, p.experts, act, h, h))
    pairs, touched = f.expert_pairs, f.experts_touched
    local = moe.experts // ep
    inter = moe.expert_intermediate_size / etp
    # pairs routed to this rank from the other ranks; across nodes a token crosses the network once per node that
    # hosts any of its experts, then NVLink forwards it (DeepEP's dispatch, DeepSeek-V3 report section 3.2.2)
    dedupe = node_dedupe(moe.experts_per_token, math.ceil(layout.stage_gpus / layout.gpus_per_node))
    a2a = pairs * h * act * (ep - 1) / ep * dedupe
    # dispatch at 1 byte per element under FP8 compute (the activations are quantized for the FP8 GEMM anyway)
    dispatch = a2a * (1 / act if p.compute == "fp8" else 1.0)
    if ep > 1:
        stages.append(
            _collective(
                "expert dispatch (all-to-all)",
                label,
                count,
                "all-to-all",
                dispatch,
                layout.stage_gpus,
                note=f"busiest rank receives {pairs:,.1f} token-expert pairs x hidden"
                + (f", x {dedupe:.2f} for one copy per remote node" if dedupe < 1 else ""),
            )
        )
    weight = touched * 3 * h * inter * get_format(p.experts).bytes
    stages.append(
        Stage(
            "routed experts",
            label,
            "experts",
            count,
            flops=2 * pairs * 3 * h * inter,
            bytes_read=weight + pairs * (h + inter) * act,
            bytes_written=pairs * (inter + h) * act,
            weight_bytes=weight,
            weight_format=p.experts,
            note=f"{touched:,.2f} of {local} experts on the busiest rank touched, {pairs:,.1f} token-expert pairs",
        )
    )
    if ep > 1:
        stages.append(_collective("expert combine (all-to-all)", label, count, "all-to-all", a2a, layout.stage_gpus))
    elif layout.stage_gpus > 1:  # experts split tensor-parallel: their partial sums are all-reduced
        stages.append(
            _collective(
                "MoE all-reduce",
                label,
                count,
                "all-reduce",
                (tokens if layout.dp > 1 else t_dp) * h * act,
                layout.stage_gpus,
            )
        )
    return stages


def head_stages(model: ModelSpec, p: Precision, layout: Layout, f: Features[N]) -> list[Stage[N]]:
    """Final norm, LM head (vocab split tp-way) and sampling, for one row per sequence."""
    h, v, tp, rows = model.hidden_size, model.vocab_size, layout.tp, f.logit_rows
    return [
        Stage(
            "final norm",
            "",
            "memory",
            1,
            flops=4 * rows * h,
            bytes_read=h * p.embedding_bytes,
            weight_bytes=h * p.embedding_bytes,
            weight_format=p.embedding,
        ),
        _matmul(
            "LM head",
            "",
            1,
            v * h / tp,
            rows,
            p.embedding,
            p.activation_bytes,
            h,
            0.0,
            note="vocab x hidden, at the model dtype; logits only for each sequence's last token",
        ),
        Stage(
            "sampling",
            "",
            "memory",
            1,
            flops=5 * rows * v / tp,
            bytes_read=rows * v / tp * LOGIT_BYTES,
            bytes_written=rows * v / tp * LOGIT_BYTES,
            note="logits written in fp32, then softmax / top-k over the vocabulary",
        ),
    ]


def embedding_stage(model: ModelSpec, p: Precision, layout: Layout, f: Features[N]) -> Stage[N]:
    """Token ids look up rows of the embedding table: T rows read (at most the vocabulary), not the table."""
    h = model.hidden_size
    return Stage(
        "embedding lookup",
        "",
        "memory",
        1,
        bytes_read=f.embedding_rows * h * p.embedding_bytes / layout.tp,
        bytes_written=f.tokens_dp * h * p.activation_bytes,
        note="one row per token, vocab split tp-way",
    )


def pass_stages(model: ModelSpec, p: Precision, layout: Layout, f: Features[N]) -> list[list[Stage[N]]]:
    """Every pipeline stage's kernels for one pass (microbatch) with features `f`, first stage first."""
    ranges = stage_layer_ranges(model.layers, layout.pp)
    out = []
    for i, layers in enumerate(ranges):
        stages = [embedding_stage(model, p, layout, f)] if i == 0 else []
        for kind, count in stage_kinds(model, layers).items():
            stages += block_stages(model, p, layout, f, kind, count)
        if i == len(ranges) - 1:
            stages += head_stages(model, p, layout, f)
        else:  # activations handed to the next stage, over the network when the two sit on different nodes
            payload = f.tokens_dp * model.hidden_size * p.activation_bytes
            hop = layout.hop_crosses_nodes(i)
            stages.append(_collective("send to next stage", "", 1, "send/recv", payload, 2, crosses_nodes=hop))
        out.append(stages)
    return out


def pipeline_stages(
    model: ModelSpec, p: Precision, layout: Layout, segments: Sequence[Segment]
) -> list[list[Stage[float]]]:
    """Every pipeline stage's kernels for one pass (microbatch) over `segments`, at that point's numbers."""
    space = FeatureSpace(model, layout, attention_kinds(model))
    return pass_stages(model, p, layout, space.named(space.vector(segments)))
