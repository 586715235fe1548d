"""The kernels of one forward pass, in the order a token meets them, with the work each does on the busiest GPU.

Every stage counts FLOPs (a multiply-add is 2) and HBM bytes read and written per occurrence on one GPU, and
how many times it runs per pass (the layers of its kind in the slowest pipeline stage). A matmul reads its
weights once per pass whatever the token count (Pope et al. 2022), reads its input activation and writes its
output; norms and activation functions are fused into their neighbours (TensorRT-LLM, SGLang and
torch.compile fuse them), so they add FLOPs and their tiny weights but no pass of their own over HBM.
The K/V of new tokens go straight into the cache (the "KV cache write"); attention reads the cache.
MLA (DeepSeek-V2/V3) attends in its absorbed latent form in decode (one query per step) and in the per-head
form in prefill, as vLLM and SGLang run it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

from tokcost.engine.layout import Layout, kv_heads_per_rank, stage_layer_ranges
from tokcost.engine.workload import Precision
from tokcost.formats import get as get_format
from tokcost.models.spec import ModelSpec

Kind = Literal["matmul", "experts", "attention", "memory", "collective"]
Op = Literal["all-reduce", "all-to-all", "send/recv"]
LOGIT_BYTES = 4  # logits are sampled in fp32


@dataclass(frozen=True, slots=True)
class Segment:
    """`sequences` sequences holding `cached_tokens` of KV each, computing `new_tokens` more in this pass.

    A decode step is Segment(B, c, 1); a prefill is Segment(B, prefix, P - prefix); a chunked-prefill step of
    a continuous-batching server is Segment(b, c, 1) plus Segment(1, done, chunk).
    """

    sequences: float
    cached_tokens: float
    new_tokens: float

    @property
    def tokens(self) -> float:
        """Tokens this segment runs through the blocks."""
        return self.sequences * self.new_tokens


@dataclass(frozen=True, slots=True)
class Stage:
    """One kernel (or collective) of a pass: its work on the busiest GPU, per occurrence, and how often it runs."""

    name: str
    block: str  # "" outside the blocks, else the block kind ("dense layer", "MoE layer, sliding window", ...)
    kind: Kind
    count: int
    flops: float = 0.0
    bytes_read: float = 0.0
    bytes_written: float = 0.0
    weight_bytes: float = 0.0  # the part of bytes_read that is weights (weight-only formats, the breakdown)
    weight_format: str = ""  # storage format of those weights
    kv_bytes: float = 0.0  # the part of bytes_read that is the KV cache (attention)
    collective: Op | None = None
    payload_bytes: float = 0.0  # the collective's buffer (all-to-all: the busiest rank's volume)
    ranks: int = 1  # GPUs the collective spans
    note: str = ""  # how the numbers were counted, for --explain and --journey

    @property
    def bytes(self) -> float:
        """HBM bytes per occurrence."""
        return self.bytes_read + self.bytes_written


@dataclass(frozen=True, slots=True)
class BlockKind:
    """Layers that cost the same: dense or MoE MLP, global or sliding-window attention."""

    moe: bool
    sliding: bool

    def label(self, model: ModelSpec) -> str:
        """Human name of the kind."""
        mlp = "MoE layer" if self.moe else "dense layer"
        return mlp + (
            f", window {model.sliding_window.window_tokens:,}" if self.sliding and model.sliding_window else ""
        )


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
    groups = [(False, range(layers.start, min(layers.stop, dense_end))),
              (True, range(max(layers.start, dense_end), layers.stop))]  # fmt: skip
    out: dict[BlockKind, int] = {}
    for moe, r in groups:
        sliding = _sliding_in(model, r)
        for kind, n in ((BlockKind(moe, True), sliding), (BlockKind(moe, False), len(r) - sliding)):
            if n:
                out[kind] = n
    return out


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


def attended(model: ModelSpec, sliding: bool, tokens: float) -> float:
    """Tokens a layer keeps for one sequence holding `tokens` (a sliding layer keeps the window)."""
    if sliding and model.sliding_window:
        return min(tokens, model.sliding_window.window_tokens)
    return tokens


def causal_pairs(model: ModelSpec, sliding: bool, cached: float, new: float) -> float:
    """Query-key pairs of `new` tokens appended to `cached`: position i sees min(i, window) tokens."""

    def upto(n: float) -> float:  # sum over positions 1..n of the tokens each sees (itself included)
        w = model.sliding_window.window_tokens if sliding and model.sliding_window else None
        if w is None:
            return n * (n + 1) / 2
        return min(n, w) * (min(n, w) + 1) / 2 + max(n - w, 0) * w

    return upto(cached + new) - upto(cached)


# ---- routing ------------------------------------------------------------------------------------------


def expected_distinct_experts(experts: int, top_k: int, tokens: float) -> float:
    """Distinct experts `tokens` tokens touch under uniform routing: E x (1 - (1 - k/E)^T)."""
    return experts * (1 - (1 - top_k / experts) ** tokens)


def busiest_rank_pairs(experts: int, top_k: int, tokens: float, ep: int) -> float:
    """Expected token-expert pairs on the busiest of `ep` ranks under uniform routing (not the mean).

    Each token sends k distinct experts; a rank holding E/ep of them gets a hypergeometric share per token
    (mean k/ep, variance k (1/ep)(1 - 1/ep)(E - k)/(E - 1)). Summed over T tokens the load is near normal, and
    the expected maximum of ep such loads is mean + sigma x sqrt(2 ln ep) (the Gumbel approximation).
    """
    mean = tokens * top_k / ep
    if ep == 1:
        return mean
    variance = tokens * top_k * (1 / ep) * (1 - 1 / ep) * (experts - top_k) / max(experts - 1, 1)
    return min(mean + math.sqrt(variance) * math.sqrt(2 * math.log(ep)), tokens * min(top_k, experts / ep))


# ---- the stages ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PassShape:
    """What one pass runs on one pipeline stage's busiest GPU: its tokens, sequences and attention work."""

    segments: tuple[Segment, ...]
    dp: int

    def per_dp(self, n: float) -> float:
        """Sequences of one DP attention replica (the busiest when they do not split evenly)."""
        return n if self.dp == 1 else math.ceil(n / self.dp - 1e-9)

    @property
    def tokens(self) -> float:
        """Tokens of the whole replica this pass runs (every DP replica's)."""
        return sum(s.tokens for s in self.segments)

    @property
    def tokens_dp(self) -> float:
        """Tokens of the busiest DP attention replica."""
        return sum(self.per_dp(s.sequences) * s.new_tokens for s in self.segments)

    @property
    def logit_rows(self) -> float:
        """Rows that need logits on the busiest DP replica: one per sequence (its last token)."""
        return sum(self.per_dp(s.sequences) for s in self.segments)


def _matmul(
    name: str,
    block: str,
    count: int,
    params: float,
    tokens: float,
    fmt: str,
    act: float,
    in_dim: float,
    out_dim: float,
    note: str = "",
    kind: Kind = "matmul",
) -> Stage:
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


def _collective(name: str, block: str, count: int, op: Op, payload_bytes: float, ranks: int, note: str = "") -> Stage:
    """A collective stage: `op` over `ranks` GPUs moving `payload_bytes` (the busiest rank's, for an all-to-all)."""
    return Stage(name, block, "collective", count, collective=op, payload_bytes=payload_bytes, ranks=ranks, note=note)


def block_stages(
    model: ModelSpec, p: Precision, layout: Layout, shape: PassShape, kind: BlockKind, count: int
) -> list[Stage]:
    """The kernels of `count` layers of one kind, on the busiest GPU of their pipeline stage."""
    h, tp, act = model.hidden_size, layout.tp, p.activation_bytes
    label = kind.label(model)
    t_dp = shape.tokens_dp
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
    kv_read = sum(shape.per_dp(s.sequences) * attended(model, kind.sliding, s.cached_tokens) for s in shape.segments)
    pairs_flops = sum(
        shape.per_dp(s.sequences)
        * causal_pairs(model, kind.sliding, s.cached_tokens, s.new_tokens)
        * attention_flops_per_pair(model, tp, absorbed=s.new_tokens == 1)
        for s in shape.segments
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
    mlp = moe_stages if kind.moe else dense_mlp_stages
    return stages + mlp(model, p, layout, shape, label, count)


def dense_mlp_stages(
    model: ModelSpec, p: Precision, layout: Layout, shape: PassShape, label: str, count: int
) -> list[Stage]:
    """Gate, up and down projections split tp-way (data-parallel across DP attention replicas)."""
    h, tp, act, t = model.hidden_size, layout.tp, p.activation_bytes, shape.tokens_dp
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


def moe_stages(model: ModelSpec, p: Precision, layout: Layout, shape: PassShape, label: str, count: int) -> list[Stage]:
    """Router, shared experts, routed experts on the busiest expert-parallel rank, and their all-to-alls."""
    assert model.moe is not None
    moe, h, tp, act = model.moe, model.hidden_size, layout.tp, p.activation_bytes
    t_dp, tokens, ep, etp = shape.tokens_dp, shape.tokens, layout.ep, layout.expert_tp
    stages = [_matmul("router", label, count, h * moe.experts, t_dp, p.weights, act, h, moe.experts)]
    if model.params_shared_experts_per_layer:
        shared = model.params_shared_experts_per_layer / tp
        stages.append(_matmul("shared experts", label, count, shared, t_dp, p.experts, act, h, h))
    pairs = busiest_rank_pairs(moe.experts, moe.experts_per_token, tokens, ep)
    local = moe.experts // ep
    touched = min(expected_distinct_experts(moe.experts, moe.experts_per_token, tokens) / ep, local)
    inter = moe.expert_intermediate_size / etp
    a2a = pairs * h * act * (ep - 1) / ep  # pairs routed to this rank from the other ranks
    if ep > 1:
        stages.append(
            _collective(
                "expert dispatch (all-to-all)",
                label,
                count,
                "all-to-all",
                a2a,
                layout.stage_gpus,
                note=f"busiest rank receives {pairs:,.1f} token-expert pairs x hidden",
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


def head_stages(model: ModelSpec, p: Precision, layout: Layout, shape: PassShape) -> list[Stage]:
    """Final norm, LM head (vocab split tp-way) and sampling, for one row per sequence."""
    h, v, tp, rows = model.hidden_size, model.vocab_size, layout.tp, shape.logit_rows
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


def embedding_stage(model: ModelSpec, p: Precision, layout: Layout, shape: PassShape) -> Stage:
    """Token ids look up rows of the embedding table: T rows read (at most the vocabulary), not the table."""
    rows = min(shape.tokens_dp, model.vocab_size)
    h = model.hidden_size
    return Stage(
        "embedding lookup",
        "",
        "memory",
        1,
        bytes_read=rows * h * p.embedding_bytes / layout.tp,
        bytes_written=shape.tokens_dp * h * p.activation_bytes,
        note="one row per token, vocab split tp-way",
    )


def pipeline_stages(model: ModelSpec, p: Precision, layout: Layout, segments: list[Segment]) -> list[list[Stage]]:
    """Every pipeline stage's kernels for one pass (microbatch), first stage first."""
    shape = PassShape(tuple(segments), layout.dp)
    ranges = stage_layer_ranges(model.layers, layout.pp)
    out = []
    for i, layers in enumerate(ranges):
        stages = [embedding_stage(model, p, layout, shape)] if i == 0 else []
        for kind, count in stage_kinds(model, layers).items():
            stages += block_stages(model, p, layout, shape, kind, count)
        if i == len(ranges) - 1:
            stages += head_stages(model, p, layout, shape)
        else:
            stages.append(
                _collective(
                    "send to next stage",
                    "",
                    1,
                    "send/recv",
                    shape.tokens_dp * model.hidden_size * p.activation_bytes,
                    2,
                )
            )
        out.append(stages)
    return out
