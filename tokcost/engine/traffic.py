"""What one step moves and computes, per GPU: weight bytes, KV bytes, FLOPs, all-reduce bytes.

FLOPs, not MACs: a multiply-add is 2 FLOPs. Counts only; turning them into seconds is roofline.py's job.
References: Kaplan et al. 2020 (2N FLOPs per token), Pope et al. 2022 "Efficiently Scaling Transformer
Inference" (decode re-reads weights and KV each step; two all-reduces per layer under tensor parallelism).
"""

from __future__ import annotations

from dataclasses import dataclass

from tokcost.engine.workload import Precision
from tokcost.models.spec import ModelSpec

# Activation traffic per token per layer in prefill, in elements of hidden size: the attention and MLP
# sub-blocks each read their input and write their output once (fused kernels, FlashAttention).
ACTIVATION_RW_PER_LAYER = 4


@dataclass(frozen=True, slots=True)
class StepCounts:
    """Per-GPU work of one forward pass: each term a named part of the total."""

    weight_bytes: float  # block weights (distinct experts only) + LM head + embedding rows looked up
    kv_read_bytes: float  # cached K/V (or MLA latents) the attention reads
    kv_write_bytes: float  # K/V of the tokens this pass appends
    activation_bytes: float  # activations read and written between kernels (prefill)
    matmul_flops: float  # every matmul against weights, LM head included
    attention_flops: float  # QK^T and AV against the cache
    allreduce_bytes: float  # payload of one all-reduce (tensor parallel)
    allreduces: int  # all-reduces in this pass: two per layer when gpus > 1


def expected_distinct_experts(experts: int, top_k: int, tokens: float) -> float:
    """Distinct experts a layer touches for `tokens` tokens under uniform routing: E x (1 - (1 - k/E)^T)."""
    return experts * (1 - (1 - top_k / experts) ** tokens)


def block_weight_bytes(model: ModelSpec, precision: Precision, tokens: float) -> float:
    """Bytes of every block weight one pass over `tokens` tokens reads (MoE: distinct experts only)."""
    dense = model.params_attention + model.dense_mlp_layers * model.params_dense_mlp_per_layer
    total = dense * precision.weight_bytes + model.params_norms * precision.embedding_bytes
    if model.moe:
        touched = expected_distinct_experts(model.moe.experts, model.moe.experts_per_token, tokens)
        per_layer = touched * model.params_per_expert + model.params_shared_experts_per_layer
        total += model.moe_layers * per_layer * precision.expert_bytes
        total += model.moe_layers * model.params_router_per_layer * precision.weight_bytes
    return total


def resident_weight_bytes(model: ModelSpec, precision: Precision) -> float:
    """Bytes of all weights held in memory (every expert, embedding, untied LM head)."""
    all_experts = model.moe.experts if model.moe else 0
    blocks = block_weight_bytes(model, precision, tokens=0)
    blocks += model.moe_layers * all_experts * model.params_per_expert * precision.expert_bytes
    return blocks + (model.params_embedding + model.params_lm_head) * precision.embedding_bytes


def lm_head_bytes(model: ModelSpec, precision: Precision) -> float:
    """The output projection's bytes (tied: the shared embedding table, read once as the head)."""
    return model.vocab_size * model.hidden_size * precision.embedding_bytes


def matmul_params_per_token(model: ModelSpec) -> int:
    """Weights one token multiplies through: active block linears and the LM head (the embedding is a lookup)."""
    return (
        model.params_active
        - model.params_embedding
        - model.params_norms
        + (model.params_embedding if model.tied_embeddings else 0)
    )


def kv_shard(model: ModelSpec, gpus: int) -> float:
    """Fraction of the KV cache one GPU holds: KV heads split across GPUs, replicated past kv_heads; MLA whole."""
    if model.mla:
        return 1.0  # one latent per token, replicated on every tensor-parallel rank
    return max(model.kv_heads / gpus, 1) / model.kv_heads


def decode_counts(model: ModelSpec, precision: Precision, batch: int, context: float, gpus: int) -> StepCounts:
    """One decode step: `batch` new tokens, each attending over `context` cached tokens."""
    attended = model.attended_tokens(context)
    kv_token = model.kv_bytes_per_token(precision.kv) * kv_shard(model, gpus)
    weights = block_weight_bytes(model, precision, tokens=batch) + lm_head_bytes(model, precision)
    if not model.tied_embeddings:  # only B rows of the input embedding (tied: inside the head's read)
        weights += batch * model.hidden_size * precision.embedding_bytes
    return StepCounts(
        weight_bytes=weights / gpus,
        kv_read_bytes=batch * attended * kv_token,
        kv_write_bytes=batch * kv_token,
        activation_bytes=0.0,
        matmul_flops=2 * matmul_params_per_token(model) * batch / gpus,
        attention_flops=model.attention_flops_per_token_per_context * attended * batch / gpus,
        allreduce_bytes=batch * model.hidden_size * precision.activation_bytes,
        allreduces=2 * model.layers if gpus > 1 else 0,
    )


def causal_attended_sum(model: ModelSpec, start: float, end: float) -> float:
    """Sum over positions start+1..end of the tokens each attends to (itself included), averaged over layers."""

    def full(n: float) -> float:
        return n * (n + 1) / 2  # 1 + 2 + ... + n

    total = full(end) - full(start)
    sw = model.sliding_window
    if sw is None:
        return total

    def windowed(n: float) -> float:
        w = sw.window_tokens
        return full(min(n, w)) + max(n - w, 0) * w  # positions past the window see w tokens each

    local = windowed(end) - windowed(start)
    share = model.sliding_layers / model.layers
    return share * local + (1 - share) * total


def prefill_counts(
    model: ModelSpec, precision: Precision, batch: int, prompt: int, cached: int, gpus: int
) -> StepCounts:
    """Prefill of `batch` prompts: positions cached+1..prompt computed; attention reads the cached prefix."""
    computed = prompt - cached
    tokens = batch * computed
    kv_token = model.kv_bytes_per_token(precision.kv) * kv_shard(model, gpus)
    head_params = model.vocab_size * model.hidden_size
    body_params = matmul_params_per_token(model) - head_params
    weights = block_weight_bytes(model, precision, tokens=tokens) + lm_head_bytes(model, precision)
    if not model.tied_embeddings:  # embedding rows of the prompt (tied: inside the head's read)
        weights += min(tokens, model.vocab_size) * model.hidden_size * precision.embedding_bytes
    act = ACTIVATION_RW_PER_LAYER * model.layers * tokens * model.hidden_size * precision.activation_bytes
    return StepCounts(
        weight_bytes=weights / gpus,
        kv_read_bytes=batch * model.attended_tokens(cached) * kv_token if cached else 0.0,
        kv_write_bytes=tokens * kv_token,  # every computed token's K/V is written (windows evict later)
        activation_bytes=act / gpus,
        # every computed token runs the blocks; only the last token of each prompt needs logits
        matmul_flops=(2 * body_params * tokens + 2 * head_params * batch) / gpus,
        # causal: position i attends to i tokens, so the sum is ~P^2/2 (half of the full square)
        attention_flops=model.attention_flops_per_token_per_context
        * causal_attended_sum(model, cached, prompt)
        * batch
        / gpus,
        allreduce_bytes=tokens * model.hidden_size * precision.activation_bytes,
        allreduces=2 * model.layers if gpus > 1 else 0,
    )


def segment_counts(
    model: ModelSpec, precision: Precision, segments: list[tuple[float, float, float]], gpus: int
) -> StepCounts:
    """One pass over (sequences, cached_tokens, new_tokens) segments: weights read once for every token."""
    tokens = sum(n * new for n, _, new in segments)
    sequences = sum(n for n, _, _ in segments)
    kv_token = model.kv_bytes_per_token(precision.kv) * kv_shard(model, gpus)
    head_params = model.vocab_size * model.hidden_size
    body_params = matmul_params_per_token(model) - head_params
    weights = block_weight_bytes(model, precision, tokens=tokens) + lm_head_bytes(model, precision)
    if not model.tied_embeddings:  # embedding rows looked up (tied: inside the head's read)
        weights += min(tokens, model.vocab_size) * model.hidden_size * precision.embedding_bytes
    prefill_tokens = sum(n * new for n, _, new in segments if new > 1)
    act = ACTIVATION_RW_PER_LAYER * model.layers * prefill_tokens * model.hidden_size * precision.activation_bytes
    pairs = sum(n * causal_attended_sum(model, cached, cached + new) for n, cached, new in segments)
    return StepCounts(
        weight_bytes=weights / gpus,
        kv_read_bytes=sum(n * model.attended_tokens(cached) for n, cached, _ in segments) * kv_token,
        kv_write_bytes=tokens * kv_token,
        activation_bytes=act / gpus,
        # every new token runs the blocks; each sequence needs the logits of its last token only
        matmul_flops=(2 * body_params * tokens + 2 * head_params * sequences) / gpus,
        attention_flops=model.attention_flops_per_token_per_context * pairs / gpus,
        allreduce_bytes=tokens * model.hidden_size * precision.activation_bytes,
        allreduces=2 * model.layers if gpus > 1 else 0,
    )
