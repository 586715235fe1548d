"""Memory: weights + KV cache + activation workspace + a reserve, against capacity; max batch, max context, min GPUs."""

from __future__ import annotations

from dataclasses import dataclass

from tokcost.engine.traffic import kv_shard, resident_weight_bytes
from tokcost.engine.workload import Precision, Workload
from tokcost.hardware.spec import GpuSpec
from tokcost.models.spec import ModelSpec

# vLLM's default gpu_memory_utilization=0.9 (vllm/engine/arg_utils.py) leaves 10% of each GPU for the CUDA
# context, NCCL buffers, the caching allocator's fragmentation and CUDA-graph pools.
RESERVE_FRACTION = 0.10
# Serving engines prefill in chunks (vLLM's max_num_batched_tokens); activations of at most this many
# tokens are live at once.
PREFILL_CHUNK_TOKENS = 8192
# Logits are materialized in fp32 for sampling: 4 bytes per vocab entry per sequence.
LOGIT_BYTES = 4
# GPU counts tried for min_gpus: tensor-parallel degrees are powers of two in practice.
TP_DEGREES = (1, 2, 4, 8, 16, 32, 64)


@dataclass(frozen=True, slots=True)
class MemoryReport:
    """Bytes across all GPUs of the deployment; `fits` compares total with capacity."""

    weights_bytes: float
    kv_bytes_per_token: float
    kv_cache_bytes: float
    workspace_bytes: float
    reserve_bytes: float
    total_bytes: float
    capacity_bytes: float
    fits: bool
    max_batch: int
    max_context: int
    min_gpus: int | None


def per_gpu_bytes(
    model: ModelSpec, gpu: GpuSpec, precision: Precision, gpus: int, batch: int, prompt: int, tokens: int
):
    """(weights, kv, workspace, reserve) on one GPU of `gpus`."""
    weights = resident_weight_bytes(model, precision) / gpus
    kv = batch * model.kv_cache_bytes(tokens, kv_dtype=precision.kv) * kv_shard(model, gpus)
    moe_width = model.moe.experts_per_token * model.moe.expert_intermediate_size if model.moe else 0
    # live activations per token of one layer: residual, normed input, q/k/v/attn out (~4 x hidden),
    # gate and up projections (2 x intermediate)
    per_token = (4 * model.hidden_size + 2 * max(model.dense_intermediate, moe_width)) * precision.activation_bytes
    workspace = (min(batch * prompt, PREFILL_CHUNK_TOKENS) * per_token + batch * model.vocab_size * LOGIT_BYTES) / gpus
    return weights, kv, workspace, RESERVE_FRACTION * gpu.memory_bytes


def _fits(
    model: ModelSpec, gpu: GpuSpec, precision: Precision, gpus: int, batch: int, prompt: int, tokens: int
) -> bool:
    return sum(per_gpu_bytes(model, gpu, precision, gpus, batch, prompt, tokens)) <= gpu.memory_bytes


def _largest(ok, high: int) -> int:
    """The largest n in [0, high] with ok(n), for ok monotone (true then false); 0 when ok(1) fails."""
    if not ok(1):
        return 0
    lo, hi = 1, high
    if ok(hi):
        return hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def memory_report(model: ModelSpec, gpu: GpuSpec, workload: Workload, precision: Precision) -> MemoryReport:
    """Memory of the workload on `workload.gpus` GPUs, and the limits it implies."""
    n, prompt, tokens = workload.gpus, workload.computed_prompt_tokens, workload.total_tokens
    weights, kv, workspace, reserve = per_gpu_bytes(model, gpu, precision, n, workload.batch, prompt, tokens)
    total = weights + kv + workspace + reserve
    max_batch = _largest(lambda b: _fits(model, gpu, precision, n, b, prompt, tokens), 10_000_000)
    max_context = _largest(
        lambda t: _fits(model, gpu, precision, n, workload.batch, min(prompt, t), t), model.max_context
    )
    min_gpus = next((g for g in TP_DEGREES if _fits(model, gpu, precision, g, workload.batch, prompt, tokens)), None)
    return MemoryReport(
        weights_bytes=weights * n,
        kv_bytes_per_token=model.kv_bytes_per_token(precision.kv),
        kv_cache_bytes=kv * n,
        workspace_bytes=workspace * n,
        reserve_bytes=reserve * n,
        total_bytes=total * n,
        capacity_bytes=gpu.memory_bytes * n,
        fits=total <= gpu.memory_bytes,
        max_batch=max_batch,
        max_context=max_context,
        min_gpus=min_gpus,
    )


def kv_capacity_tokens(model: ModelSpec, gpu: GpuSpec, workload: Workload, precision: Precision) -> float:
    """Tokens of KV cache one replica can hold beside its weights, workspace and reserve (all sequences)."""
    n = workload.gpus
    weights, _, workspace, reserve = per_gpu_bytes(
        model, gpu, precision, n, workload.batch, workload.computed_prompt_tokens, workload.total_tokens
    )
    free = gpu.memory_bytes - weights - workspace - reserve
    per_token = model.kv_bytes_per_token(precision.kv) * kv_shard(model, n)
    return max(free, 0.0) / per_token
