"""The kernels of a layer's mixer: attention over a KV cache, or a linear-attention / state-space layer's state.

Attention (global, sliding window, chunked: attend.py): the QKV projection, the new tokens' K/V written to the
cache, attention reading every cached token it attends to (FlashAttention / paged decode kernels), the output
projection. MLA (DeepSeek-V2/V3) attends in its absorbed latent form in decode (one query per step) and in the
per-head form in prefill, as vLLM and SGLang run it; its cache read is its own kernel class (`attention_mla`:
FlashMLA, FlashInfer MLA or triton's MLA decode, one latent row shared by every head), priced apart from paged
GQA attention by the engine's efficiencies.

A state layer keeps a fixed state per sequence (models/mixers.py) and runs in three kernels between its input and
output projections, as vLLM runs Qwen3-Next and Nemotron-H: a depthwise causal convolution (K multiply-adds per
channel per token) that reads and writes its window of the last K - 1 inputs, then the recurrence, which reads a
sequence's state once per pass (when it has one) and writes it back once:
- decode (one new token) steps the recurrence per token;
- prefill runs the chunked scan, whose per-chunk states are written to HBM once and read back once (flash-linear-
  attention's chunk_gated_delta_rule_fwd_h then chunk_fwd_o; mamba_ssm's chunk state then chunk scan kernels).
FLOPs per token and head, the recurrences' sources:
- Gated DeltaNet (Yang, Kautz, Hatamizadeh 2025, arXiv:2412.06464, eq. 10; S is dk x dv per value head):
  decode S = a S (I - b k k^T) + b v k^T, o = S^T q: decay (dk dv) + S k (2 dk dv) + rank-1 update (2 dk dv) +
  S^T q (2 dk dv) = 7 dk dv. Prefill, the chunkwise WY form (Yang et al. 2024, arXiv:2406.06484, sec. 3; chunk
  C = 64, flash-linear-attention's fixed chunk): per chunk K K^T (2 C^2 dk), the triangular solve (~2 C^3 / 3),
  W and U (2 C^2 (dk + dv)), U - W S and the state update (4 C dk dv), the output Q S + (Q K^T) U (2 C dk dv +
  2 C^2 (dk + dv)): per token 6 dk dv + C (6 dk + 4 dv) + 2 C^2 / 3.
- Mamba-2 (Dao & Gu 2024, arXiv:2405.21060; state P x N per head): decode (selective_state_update) decay (P N)
  + dt B x (P N) + add (P N) + C h (2 P N) = 5 P N. Prefill, the SSD algorithm's chunked form (sec. 6, chunk Q =
  the config's chunk_size): chunk states B^T X (2 N P) and their output C S (2 N P) per token, the diagonal
  blocks (L o C B^T) X (2 Q P) per head, C B^T (2 Q N) per group; the scan over chunk states is negligible.
"""

from __future__ import annotations

from dataclasses import replace

from tokcost.engine.blocks import (
    BlockKind,
    attention_flops_per_pair,
    attention_params_per_rank,
    kv_bytes_per_token_layer,
    mla_prefix_flops_per_token,
)
from tokcost.engine.features import Features, N
from tokcost.engine.kernels import Kind, Stage, collective, matmul, norm
from tokcost.engine.layout import Layout
from tokcost.engine.workload import Precision
from tokcost.models.layers import KV_MIXERS
from tokcost.models.spec import ModelSpec

GDN_CHUNK_TOKENS = 64  # flash-linear-attention's chunk_gated_delta_rule (BT = 64), which vLLM and SGLang run


def mixer_stages(
    model: ModelSpec, p: Precision, layout: Layout, f: Features[N], kind: BlockKind, label: str, count: int
) -> list[Stage[N]]:
    """The kernels of `count` layers' mixers of one kind, their norm first (none for a layer without a mixer)."""
    if kind.mixer == "none":
        return []
    attention = kind.mixer in KV_MIXERS
    name = "attention norm" if attention else "mixer norm"
    vectors = model.norm_vectors("mixer", kind.mixer, kind.mlp)
    stages = [norm(name, label, count, f.tokens_dp, model.hidden_size, p.vectors, vectors)]
    if kind.mixer == "linear":
        stages += gated_deltanet_stages(model, p, layout, f, label, count)
    elif kind.mixer == "mamba":
        stages += mamba_stages(model, p, layout, f, label, count)
    else:
        stages += attention_stages(model, p, layout, f, kind.mixer, label, count)
    if layout.tp > 1:
        all_reduce = "attention all-reduce" if attention else "mixer all-reduce"
        act = f.tokens_dp * model.hidden_size * p.activation_bytes
        stages.append(collective(all_reduce, label, count, "all-reduce", act, layout.tp))
    return stages


SCORE_BYTES = 16  # unfused attention's traffic per scored pair and head: fp32 written, read, written, read


def attention_kernel(model: ModelSpec) -> Kind:
    """The kernel class that reads a model's KV cache: MLA's latent-cache kernel, or paged (GQA / MHA / MQA,
    sliding and chunked windows too) attention."""
    return "attention_mla" if model.mla is not None else "attention"


LOGIT_BYTES = 4  # the indexer's fp32 score per pair, written, then read by the top-k selection


def indexer_stages(model: ModelSpec, p: Precision, f: Features[N], label: str, count: int) -> list[Stage[N]]:
    """DeepSeek Sparse Attention's lightning indexer, whole on every TP rank (vLLM's and SGLang's ReplicatedLinear):
    its projections (wq_b from the query latent, wk and weights_proj from the hidden state), then its FP8 scoring of
    every cached index key by `index_heads` heads of `index_head_dim`, 2 H d FLOPs a pair (DeepGEMM's
    fp8_mqa_logits / paged MQA logits), one fp32 score a pair written and read back by the top-k selection; the
    attention that follows reads only the top k (the sparse kind's features)."""
    s, h, act, t_dp = model.sparse_attention, model.hidden_size, p.activation_bytes, f.tokens_dp
    assert s is not None  # a sparse layer always has its indexer (spec._check_kinds)
    heads, width = s.index_heads, s.index_head_dim
    keys, pairs = f.kv_read["index"], f.pairs_absorbed["index"]
    proj = matmul("indexer projections", label, count, model.params_indexer_per_layer, t_dp, p.attention, act, h,
                  heads * width + width + heads,
                  note="replicated on every TP rank: wq_b, wk, weights_proj")  # fmt: skip
    scores = Stage(
        "indexer (scores every cached key)",
        label,
        "attention",
        count,
        flops=pairs * 2 * heads * width,
        bytes_read=keys * s.index_bytes_per_token() + t_dp * heads * width + pairs * LOGIT_BYTES,
        kv_bytes=keys * s.index_bytes_per_token(),
        bytes_written=pairs * LOGIT_BYTES + t_dp * s.top_k_tokens * 4,  # the scores, then the indices chosen
        weight_format="fp8",  # FP8 keys and queries, quantized so whatever the deployment's compute
        fp8_operands=True,
        note=f"FP8 index keys of every cached token ({s.index_bytes_per_token():g} B each), one fp32 score a pair, "
        f"then the top {s.top_k_tokens:,} selected for attention",
    )
    return [proj, scores]


def attention_stages(
    model: ModelSpec, p: Precision, layout: Layout, f: Features[N], mixer: str, label: str, count: int
) -> list[Stage[N]]:
    """QKV projection, KV cache write, attention over the cache, output projection."""
    h, tp, act, t_dp = model.hidden_size, layout.tp, p.activation_bytes, f.tokens_dp
    qkv_params, o_params = attention_params_per_rank(model, tp)
    mla = model.mla
    q_width = model.attention_heads / tp * (mla.nope_head_dim + mla.rope_head_dim if mla else model.head_dim)
    v_width = model.attention_heads / tp * (mla.v_head_dim if mla else model.head_dim)
    kv_tok = kv_bytes_per_token_layer(model, p, tp)
    kv_read, absorbed, heads = f.kv_read[mixer], f.pairs_absorbed[mixer], f.pairs_heads[mixer]
    pairs_flops = absorbed * attention_flops_per_pair(model, tp, absorbed=True)
    pairs_flops = pairs_flops + heads * attention_flops_per_pair(model, tp, absorbed=False)
    gate = "; its sigmoid output gate applied in the output projection's prologue" if model.attention_gate else ""
    # unfused attention (flash attention off) writes each scored pair's fp32 score, softmax reads it and writes the
    # probability, the PV matmul reads it back: SCORE_BYTES per pair and head (llama.cpp's ggml_mul_mat(k, q) ->
    # ggml_soft_max_ext -> ggml_mul_mat(v, kq), src/llama-graph.cpp build_attn_mha, scores in F32)
    scores = 0 if p.fused_attention else (absorbed + heads) * model.attention_heads / tp * SCORE_BYTES / 2
    fused = ("reads every cached token it attends to once (FlashAttention / paged decode kernels)" if p.fused_attention
             else f"unfused: each scored pair's fp32 score written, softmaxed and read back, {SCORE_BYTES} B per pair "
                  "and head (flash attention off)")  # fmt: skip
    qkv = matmul("QKV projection", label, count, qkv_params, t_dp, p.attention, act, h, q_width)
    if mla:  # per head, a cached prefix's latents are up-projected to K and V first (features.mla_absorbs)
        prefix, kv_width = f.prefix_heads[mixer], model.attention_heads / tp * (mla.nope_head_dim + mla.v_head_dim)
        qkv = replace(qkv, flops=qkv.flops + prefix * mla_prefix_flops_per_token(model, tp),
                      bytes_read=qkv.bytes_read + prefix * kv_tok,
                      bytes_written=qkv.bytes_written + prefix * kv_width * act,
                      note="a prefill over a cached prefix also up-projects the prefix's latents to per-head K and V "
                           "(vLLM's context chunks; the attention reads those)")  # fmt: skip
    index_tok = model.index_bytes_per_token_per_layer(mixer)
    stages: list[Stage[N]] = [qkv] + (indexer_stages(model, p, f, label, count) if mixer == "sparse" else [])
    return stages + [
        Stage(
            "KV cache write",
            label,
            "memory",
            count,
            bytes_written=t_dp * (kv_tok + index_tok),
            note="the new tokens' K/V (MLA: latent + RoPE key) appended to the cache"
            + ("; and each one's FP8 index key" if index_tok else ""),
        ),  # fmt: skip
        Stage(
            "attention (KV cache read)",
            label,
            attention_kernel(model),
            count,
            flops=pairs_flops,
            bytes_read=kv_read * kv_tok + t_dp * q_width * act + scores,
            kv_bytes=kv_read * kv_tok,
            bytes_written=t_dp * v_width * act + scores,
            weight_format=p.kv,  # the cache's format: FP8 attention kernels need an FP8 cache
            note=fused + gate,
        ),
        matmul("output projection", label, count, o_params, t_dp, p.attention, act, v_width, h),
    ]


def _conv(name: str, label: str, count: int, f: Features[N], p: Precision, channels: float, kernel: int,
          bias: bool) -> Stage[N]:  # fmt: skip
    """The depthwise causal convolution: K multiply-adds per channel per token, its window of K - 1 inputs kept."""
    t, act, bias_terms = f.tokens_dp, p.activation_bytes, 1 if bias else 0
    weights = channels * (kernel + bias_terms) * p.vector_bytes
    window = channels * (kernel - 1) * p.state_bytes  # the conv state of one sequence
    note = "reads each sequence's last K - 1 inputs and writes them back"
    return Stage(name, label, "state", count, flops=(2 * kernel + bias_terms) * channels * t,
                 bytes_read=weights + f.state_reads * window + t * channels * act,
                 bytes_written=t * channels * act + f.sequences_dp * window, weight_bytes=weights,
                 weight_format=p.state, note=note)  # fmt: skip


def _scan(name: str, label: str, count: int, f: Features[N], p: Precision, *, state_elements: float,
          chunk: int, flops_decode: float, flops_prefill: float, read: float, written: float) -> Stage[N]:  # fmt: skip
    """The recurrence: each sequence's state read once (when it has one) and written once; a prefill's chunk
    states written and read back once; `read` and `written` activation elements per token."""
    t, act, state = f.tokens_dp, p.activation_bytes, state_elements * p.state_bytes
    chunk_states = f.scan_tokens * state / chunk  # one state per chunk of the scan
    return Stage(
        name,
        label,
        "state",
        count,
        flops=f.recurrent_tokens * flops_decode + f.scan_tokens * flops_prefill,
        bytes_read=f.state_reads * state + chunk_states + t * read * act,
        bytes_written=f.sequences_dp * state + chunk_states + t * written * act,
        weight_format=p.state,
        note=f"reads and writes {state:,.0f} B of state per sequence; prefill scans chunks of {chunk} tokens",
    )


def gated_deltanet_stages(
    model: ModelSpec, p: Precision, layout: Layout, f: Features[N], label: str, count: int
) -> list[Stage[N]]:
    """Qwen3-Next's linear attention: in-projection, short convolution, gated delta rule, out-projection."""
    g, h, tp, act, t = model.linear_attention, model.hidden_size, layout.tp, p.activation_bytes, f.tokens_dp
    assert g is not None
    k_heads, v_heads, dk, dv = g.key_heads / tp, g.value_heads / tp, g.key_head_dim, g.value_head_dim
    key, value = k_heads * dk, v_heads * dv
    conv = 2 * key + value  # q, k, v
    width = conv + value + 2 * v_heads  # q, k, v, the output gate z, and b, a per value head
    c = GDN_CHUNK_TOKENS
    prefill = v_heads * (6 * dk * dv + c * (6 * dk + 4 * dv) + 2 * c * c / 3)  # the chunkwise WY form (module doc)
    return [
        matmul("GDN input projection", label, count, h * width, t, p.weights, act, h, width),
        _conv("GDN short convolution", label, count, f, p, conv, g.conv_kernel, bias=False),
        _scan("gated delta rule (state)", label, count, f, p, state_elements=g.recurrent_elements() / tp, chunk=c,
              flops_decode=v_heads * 7 * dk * dv, flops_prefill=prefill, read=conv + 2 * v_heads, written=value),
        matmul("GDN output projection", label, count, value * h, t, p.weights, act, 2 * value, h,
               note="its gated RMSNorm (o x silu(z)) fused into the prologue: reads o and z"),
    ]  # fmt: skip


def mamba_stages(
    model: ModelSpec, p: Precision, layout: Layout, f: Features[N], label: str, count: int
) -> list[Stage[N]]:
    """Nemotron-H's Mamba-2 mixer: in-projection, short convolution, SSD scan, out-projection."""
    m, h, tp, act, t = model.mamba, model.hidden_size, layout.tp, p.activation_bytes, f.tokens_dp
    assert m is not None
    heads, groups, hd, n = m.heads / tp, m.groups / tp, m.head_dim, m.state_size  # heads and groups split tp-way
    inner = heads * hd
    conv = inner + 2 * groups * n  # x, then B and C of every group
    width = inner + conv + heads  # the gate z, xBC and dt
    q = m.chunk_tokens
    prefill = heads * (4 * n * hd + 2 * q * hd) + groups * 2 * q * n  # SSD's chunked form (module doc)
    return [
        matmul("Mamba-2 input projection", label, count, h * width + (width if m.proj_bias else 0), t, p.weights, act,
               h, width),
        _conv("Mamba-2 short convolution", label, count, f, p, conv, m.conv_kernel, bias=m.conv_bias),
        _scan("SSM scan (state)", label, count, f, p, state_elements=m.recurrent_elements() / tp, chunk=q,
              flops_decode=heads * 5 * hd * n, flops_prefill=prefill, read=conv + heads, written=inner),
        matmul("Mamba-2 output projection", label, count, inner * h + (h if m.proj_bias else 0), t, p.weights, act,
               2 * inner, h, note="its gated RMSNorm (y x silu(z)) fused into the prologue: reads y and z"),
    ]  # fmt: skip
