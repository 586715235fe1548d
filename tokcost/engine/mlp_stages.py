"""The kernels of a layer's MLP: a dense MLP split tp-way, or routed experts on the busiest expert-parallel rank.

A gated MLP (SwiGLU / GeGLU) runs gate and up as one matmul whose epilogue applies the activation, then down; an
ungated one (Nemotron-H's squared ReLU, the GELU of StarCoder2 or Falcon) runs up then down. Routed experts: the
router, any shared experts, the experts touched on the busiest rank (features.py: uniform routing), and the
all-to-alls that carry their tokens where DP attention spreads them over the ranks (across nodes one copy of a token
per remote node that hosts its experts, as DeepEP dispatches; FP8 under FP8 compute); under TP alone every rank holds
every token, and the ranks' partial sums are all-reduced, whether the experts are split by tensor or by expert.
"""

from __future__ import annotations

import math

from tokcost.engine.blocks import BlockKind
from tokcost.engine.features import Features, N
from tokcost.engine.kernels import Stage, collective, matmul, norm
from tokcost.engine.layout import Layout
from tokcost.engine.workload import Precision
from tokcost.formats import get as get_format
from tokcost.models.spec import ModelSpec


def mlp_stages(
    model: ModelSpec, p: Precision, layout: Layout, f: Features[N], kind: BlockKind, label: str, count: int
) -> list[Stage[N]]:
    """The kernels of `count` layers' MLPs of `kind` (dense, moe), their norms first; none for "none"."""
    if kind.mlp == "none":
        return []
    vectors = model.norm_vectors("mlp", kind.mixer, kind.mlp)  # none with a parallel block's shared input norm
    head = [norm("MLP norm", label, count, f.tokens_dp, model.hidden_size, p.vectors, vectors)] if vectors else []
    return head + (moe_stages if kind.mlp == "moe" else dense_mlp_stages)(model, p, layout, f, label, count)


def dense_mlp_stages(
    model: ModelSpec, p: Precision, layout: Layout, f: Features[N], label: str, count: int
) -> list[Stage[N]]:
    """Gate, up and down projections (up and down when ungated) split tp-way, data-parallel across DP replicas."""
    h, tp, act, t = model.hidden_size, layout.tp, p.activation_bytes, f.tokens_dp
    inter = model.dense_intermediate / tp
    if model.mlp_gated:
        name, params, note = "MLP (gate, up, down)", 3 * h * inter, "SwiGLU fused into the gate/up epilogue"
    else:
        name, params, note = "MLP (up, down)", 2 * h * inter, "its activation fused into the up projection's epilogue"
    note += ": the intermediate is written once and read once"
    stages = [matmul(name, label, count, params, t, p.weights, act, h + inter, inter + h, note=note)]
    if tp > 1:
        stages.append(collective("MLP all-reduce", label, count, "all-reduce", t * h * act, tp))
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
    stages = [matmul("router", label, count, h * moe.experts, t_dp, p.weights, act, h, moe.experts)]
    if model.params_shared_experts_per_layer:
        shared = model.params_shared_experts_per_layer / tp
        stages.append(matmul("shared experts", label, count, shared, t_dp, p.experts, act, h, h))
    pairs, touched = f.expert_pairs, f.experts_touched
    local = layout.slots_per_rank(moe.experts)
    inter = moe.expert_intermediate_size / etp
    # pairs routed to this rank from the other ranks; across nodes a token crosses the network once per node that
    # hosts any of its experts, then NVLink forwards it (DeepEP's dispatch, DeepSeek-V3 report section 3.2.2)
    dedupe = node_dedupe(moe.experts_per_token, math.ceil(layout.stage_gpus / layout.gpus_per_node))
    a2a = pairs * h * act * (ep - 1) / ep * dedupe
    # dispatch at 1 byte per element under FP8 compute (the activations are quantized for the FP8 GEMM anyway)
    dispatch = a2a / act if p.compute == "fp8" else a2a
    # tokens cross ranks only where the stage's ranks hold different tokens (DP attention); under TP alone every rank
    # holds them all, runs the tokens routed to its own experts and all-reduces (vLLM's FusedMoEParallelConfig:
    # use_all2all_kernels = dp_size > 1 and use_ep)
    exchange = ep > 1 and layout.dp > 1
    if exchange:
        note = f"busiest rank receives {pairs:,.1f} token-expert pairs x hidden"
        note += f", x {dedupe:.2f} for one copy per remote node" if dedupe < 1 else ""
        stages.append(collective("expert dispatch (all-to-all)", label, count, "all-to-all", dispatch,
                                 layout.stage_gpus, note=note))  # fmt: skip
    m = model.mlp_matrices  # gate, up, down; up and down for an ungated expert (Nemotron-3's squared ReLU)
    weight = touched * m * h * inter * get_format(p.experts).bytes
    what = "expert slots" if layout.redundant_experts else "experts"
    stages.append(
        Stage(
            "routed experts",
            label,
            "experts",
            count,
            flops=2 * pairs * m * h * inter,
            bytes_read=weight + pairs * (h + inter) * act,
            bytes_written=pairs * (inter + h) * act,
            weight_bytes=weight,
            weight_format=p.experts,
            note=f"{touched:,.2f} of {local} {what} on the busiest rank touched, {pairs:,.1f} token-expert pairs",
            # each pair's row: h into gate/up ((m - 1) x inter), inter into down (h); 2 FLOPs a multiply-add
            row_flops=2 * m * h * inter / (h + inter),
        )
    )
    if exchange:
        stages.append(collective("expert combine (all-to-all)", label, count, "all-to-all", a2a, layout.stage_gpus))
    elif layout.stage_gpus > 1:  # experts split over the ranks (by tensor or by expert): partial sums all-reduced
        payload = (tokens if layout.dp > 1 else t_dp) * h * act
        stages.append(collective("MoE all-reduce", label, count, "all-reduce", payload, layout.stage_gpus))
    return stages
