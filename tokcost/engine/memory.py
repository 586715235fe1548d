"""Memory on the fullest GPU: resident weights + KV cache + state + activation workspace + a reserve, against capacity.

Capacity is what the runtime reports (GpuSpec.memory_bytes: "80 GB" HBM parts hold ~80 GiB). Every pipeline
stage is checked and the fullest GPU decides `fits`; max batch, max context and the smallest layout that
fits follow from the same sum. Attention layers hold KV per token (a window or a chunk at most: attend.py);
linear-attention and state-space layers hold a fixed state per sequence, whatever its length, which is why a
hybrid's long-context batch is larger: only its few attention layers grow with the context.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from tokcost.engine.attend import held_tokens
from tokcost.engine.blocks import (
    BlockKind,
    kv_bytes_per_token_layer,
    mixer_params_per_rank,
    mlp_params_per_rank,
    stage_kinds,
    state_bytes_per_sequence_layer,
)
from tokcost.engine.layout import Layout, layout_problem, stage_layer_ranges, tp_degrees
from tokcost.engine.workload import Precision, Workload
from tokcost.eras import at_least, version_key
from tokcost.formats import get as get_format
from tokcost.hardware.spec import GpuSpec
from tokcost.models.layers import KV_MIXERS
from tokcost.models.spec import ModelSpec
from tokcost.profiles import EngineProfile

# vLLM's default gpu_memory_utilization=0.9 (vllm/engine/arg_utils.py) leaves 10% of each GPU for the CUDA
# context, NCCL buffers, the caching allocator's fragmentation and CUDA-graph pools; TensorRT-LLM's
# free_gpu_memory_fraction=0.9 leaves 10% of the memory free after weights and activations (Layout.reserve_of_free).
RESERVE_FRACTION = 0.10
# SGLang's default mem_fraction_static (python/sglang/srt/server_args.py; EraFields.memory_reserve "sglang"): the
# share of the GPU its weights and KV pool may take; the rest holds activations, CUDA graphs and the context.
# Before 0.4.7, a share by TP size: 0.88 at TP 1, 0.87 from 2, 0.85 from 4, 0.81 from 8, 0.79 from 16
SGLANG_SHARE_BY_TP = ((16, 0.79), (8, 0.81), (4, 0.85), (2, 0.87), (1, 0.88))
# from 0.4.7 (PR 7054): 2.8 GiB + TP x PP / 10 below 35 GiB, 9.5 + TP x PP / 2 below 90, 12 + TP x PP / 2 below 160,
# 32 above, reserved: (below GiB, base GiB, GPUs per extra GiB)
SGLANG_RESERVE_TIERS_GIB = ((35, 2.8, 10), (90, 9.5, 2), (160, 12.0, 2))
SGLANG_LARGE_RESERVE_GIB = 32.0
# from 0.5.3 (PR 10975): 512 MiB + 1.5 MiB per token of the prefill chunk (at least 2,048) + 2 MiB per sequence the
# CUDA graphs capture + 128 MiB per GPU of a stage, at least 10 GiB on GPUs above 60 GiB
SGLANG_SINCE = {"tiers": (0, 4, 7), "defaults": (0, 5, 3)}
# Serving engines prefill in chunks (vLLM's max_num_batched_tokens); activations of at most this many
# tokens are live at once.
PREFILL_CHUNK_TOKENS = 8192
# Logits are materialized in fp32 for sampling, over the whole vocabulary on every rank once gathered (stages.py):
# 4 bytes per vocab entry per sequence.
LOGIT_BYTES = 4
# Unfused attention (flash attention off) holds a micro-batch's fp32 scores against the whole context: llama.cpp's
# -ub default is 512 query tokens (common/common.h n_ubatch), each score 4 bytes (its KQ tensor is F32)
UNFUSED_UBATCH_TOKENS = 512
SCORE_VALUE_BYTES = 4
MAX_PIPELINE_STAGES = 64  # the smallest-layout search stops here
MAX_BATCH = 10_000_000  # the max-batch search stops here
Kinds = tuple[tuple[BlockKind, int], ...]  # (block kind, layers) of one pipeline stage


@dataclass(frozen=True, slots=True)
class GpuBytes:
    """What one GPU holds, by part, in bytes."""

    weights: float
    kv: float  # attention layers' KV cache
    state: float  # linear-attention and state-space layers' state
    workspace: float
    reserve: float
    stage: int = 0  # the pipeline stage this GPU serves; the last holds the LM head's logits

    @property
    def total(self) -> float:
        """Everything the GPU holds."""
        return self.weights + self.kv + self.state + self.workspace + self.reserve


@dataclass(frozen=True, slots=True)
class MemoryReport:
    """The fullest GPU's bytes, the replica's totals, and the limits they imply."""

    per_gpu: GpuBytes  # the fullest GPU of the replica
    weights_bytes_total: float  # every GPU of the replica together
    kv_cache_bytes_total: float
    state_bytes_total: float
    kv_bytes_per_token: float  # all layers, the whole model (before any split)
    state_bytes_per_sequence: float  # all layers, the whole model (before any split)
    capacity_bytes_per_gpu: float
    capacity_basis: str
    gpus: int
    fits: bool
    max_batch: int
    max_context: int
    min_gpus: int | None
    min_layout: str | None


def stage_weight_bytes(model: ModelSpec, p: Precision, layout: Layout, layers: range, first: bool, last: bool) -> float:
    """Resident weights on one GPU of a pipeline stage: every expert it holds, not only those a pass touches."""
    h, tp = model.hidden_size, layout.tp
    total = 0.0
    for kind, count in stage_kinds(model, layers).items():
        mixer_bytes = p.attention_bytes if kind.mixer in KV_MIXERS else p.weight_bytes  # attention as shipped
        layer = mixer_params_per_rank(model, kind.mixer, tp) * mixer_bytes
        layer += model.params_norms_per_layer(kind.mixer, kind.mlp) * p.vector_bytes  # the norms around each part
        if kind.mlp == "moe" and model.moe:
            experts = layout.slots_per_rank(model.moe.experts) * model.params_per_expert / layout.expert_tp
            layer += experts * p.expert_bytes + model.params_shared_experts_per_layer / tp * p.expert_bytes
            layer += model.params_router_per_layer * p.weight_bytes
        else:
            layer += mlp_params_per_rank(model, kind.mlp, tp) * p.weight_bytes
        total += count * layer
    table = model.vocab_size * h / layout.vocab_tp * p.embedding_bytes
    if first:  # the embedding table; and a vision or audio tower, held where the prompt enters (never read by decode)
        total += table + model.encoder_params / tp * p.vector_bytes  # at the checkpoint's dtype, sharded as vLLM's ViTs
    if last:
        total += model.norm_vectors("final") * h * p.vector_bytes + (0.0 if model.tied_embeddings and first else table)
    return total


def kv_held_tokens(model: ModelSpec, mixer: str, seqs: int, tokens: int, prefix: int) -> float:
    """Tokens of KV one layer of kind `mixer` holds for `seqs` sequences of `tokens` sharing a cached `prefix`."""
    if mixer not in ("global", "sparse"):  # each sequence keeps its own window or chunk; a shared prefix is gone
        return seqs * held_tokens(model, mixer, tokens)
    return prefix + seqs * (tokens - prefix)  # the prefix once, then each sequence's own (vLLM / SGLang caching)


def layers_kv_bytes(
    model: ModelSpec, kinds: Kinds, kv_bytes_per_token: float, dp: int, batch: int, tokens: int, prefix: int
) -> float:
    """KV one GPU holds for layers of `kinds` ((block kind, layers) pairs): `batch` sequences split dp-way."""
    seqs, prefix = math.ceil(batch / dp), min(prefix, tokens)
    total = 0.0
    for kind, count in kinds:
        if kind.mixer in KV_MIXERS:  # a sparse layer's index keys beside its K/V
            per_token = kv_bytes_per_token + model.index_bytes_per_token_per_layer(kind.mixer)
            total += count * kv_held_tokens(model, kind.mixer, seqs, tokens, prefix) * per_token
    return total


def layers_state_per_sequence(model: ModelSpec, p: Precision, kinds: Kinds, tp: int) -> float:
    """State one sequence keeps on one GPU for layers of `kinds` (linear-attention and state-space layers)."""
    return sum(count * state_bytes_per_sequence_layer(model, p, k.mixer, tp) for k, count in kinds)


def layers_state_bytes(model: ModelSpec, p: Precision, kinds: Kinds, layout: Layout, batch: int) -> float:
    """State one GPU holds for layers of `kinds`: each of `batch` sequences (split dp-way) keeps its own."""
    return math.ceil(batch / layout.dp) * layers_state_per_sequence(model, p, kinds, layout.tp)


def stage_kv_bytes(
    model: ModelSpec, p: Precision, layout: Layout, layers: range, wl: Workload, batch: int, tokens: int
) -> float:
    """KV on one GPU of a stage for `batch` sequences of `tokens`; a cached prefix is stored once per replica."""
    kinds = tuple(stage_kinds(model, layers).items())
    per_token = kv_bytes_per_token_layer(model, p, layout.tp)
    return layers_kv_bytes(model, kinds, per_token, layout.dp, batch, tokens, wl.cached_prefix_tokens)


def stage_state_bytes(model: ModelSpec, p: Precision, layout: Layout, layers: range, batch: int) -> float:
    """State on one GPU of a stage for `batch` sequences."""
    return layers_state_bytes(model, p, tuple(stage_kinds(model, layers).items()), layout, batch)


def mlp_width(model: ModelSpec) -> int:
    """The widest MLP a token runs: the dense intermediate, or its routed experts' together."""
    moe_width = model.moe.experts_per_token * model.moe.expert_intermediate_size if model.moe else 0
    return max(model.dense_intermediate, moe_width)


def per_token_activation_bytes(model: ModelSpec, p: Precision, tp: int) -> float:
    # live activations per token of one layer: residual, normed input, q/k/v/attn out (~4 x hidden; a state
    # layer's in-projection is narrower than that plus the MLP's), gate and up projections (2 x intermediate,
    # split tp-way)
    return (4 * model.hidden_size + 2 * mlp_width(model) / tp) * p.activation_bytes


class ReplicaMemory:
    """One replica's memory as a function of its load: each pipeline stage's weights, KV and state, counted once."""

    def __init__(self, model: ModelSpec, gpu: GpuSpec | None, p: Precision, layout: Layout) -> None:
        self.model, self.layout = model, layout
        self.ranges = stage_layer_ranges(model.layers, layout.pp)
        last = len(self.ranges) - 1
        self.weights = [stage_weight_bytes(model, p, layout, r, s == 0, s == last) for s, r in enumerate(self.ranges)]
        self.kinds = [tuple(stage_kinds(model, r).items()) for r in self.ranges]
        self.precision = p
        self.state_per_sequence = [layers_state_per_sequence(model, p, kinds, layout.tp) for kinds in self.kinds]
        self.kv_per_token = kv_bytes_per_token_layer(model, p, layout.tp)
        self.activation_bytes = per_token_activation_bytes(model, p, layout.tp)
        self.reserve = layout.reserve_share * gpu.memory_bytes if gpu else 0.0
        self.capacity = gpu.memory_bytes if gpu else 0.0

    def kv(self, kinds: Kinds, batch: int, tokens: int, prefix: int) -> float:
        """KV on one GPU of a stage whose layers are `kinds`."""
        return layers_kv_bytes(self.model, kinds, self.kv_per_token, self.layout.dp, batch, tokens, prefix)

    def state(self, kinds: Kinds, batch: int) -> float:
        """State on one GPU of a stage whose layers are `kinds`."""
        return layers_state_bytes(self.model, self.precision, kinds, self.layout, batch)

    def gpu_bytes(self, batch: int, prompt: int, tokens: int, cached_prefix: int) -> GpuBytes:
        """The fullest GPU's bytes for `batch` sequences that prefilled `prompt` tokens and hold `tokens` each."""
        seqs = math.ceil(batch / self.layout.dp)
        workspace = min(seqs * prompt, PREFILL_CHUNK_TOKENS) * self.activation_bytes + self.score_buffer(
            seqs, prompt, tokens
        )
        # the fp32 logits each sequence samples from live only on the last stage, which holds the LM head
        logits = seqs * self.model.vocab_size / self.layout.sampled_share * LOGIT_BYTES
        best = None
        last = len(self.weights) - 1
        for s, (weights, kinds, state_per_sequence) in enumerate(
            zip(self.weights, self.kinds, self.state_per_sequence, strict=True)
        ):
            kv, state = self.kv(kinds, batch, tokens, cached_prefix), seqs * state_per_sequence
            work = workspace + (logits if s == last else 0.0)
            here = GpuBytes(weights, kv, state, work, self.reserve_beside(weights, work), s)
            if best is None or here.total > best.total:
                best = here
        assert best is not None
        return best

    def reserve_beside(self, weights: float, workspace: float) -> float:
        """The engine's reserve on a GPU holding `weights` and `workspace`: its share of the whole GPU (less the
        workspace where that share holds the activations: SGLang's), or 0.1 of what they leave free where the engine
        sizes its KV cache so (Layout.reserve_of_free: TensorRT-LLM's free_gpu_memory_fraction)."""
        if self.layout.reserve_holds_workspace:
            return max(self.reserve - workspace, 0.0)
        if not self.layout.reserve_of_free:
            return self.reserve
        return RESERVE_FRACTION * max(self.capacity - weights - workspace, 0.0)

    def score_buffer(self, seqs: int, prompt: int, tokens: int) -> float:
        """Unfused attention's fp32 scores of one layer, kept while softmax and the PV matmul read them: a micro-batch
        of queries (llama.cpp's -ub 512) against a sequence's whole context, every head of the rank; 0 when fused."""
        if self.precision.fused_attention:
            return 0.0
        heads = self.model.attention_heads / self.layout.tp
        return min(seqs * prompt, UNFUSED_UBATCH_TOKENS) * tokens * heads * SCORE_VALUE_BYTES

    def max_batch(self, wl: Workload) -> int:
        """The most sequences of `wl`'s lengths that fit (0 when one does not)."""
        prompt, tokens, prefix = wl.computed_prompt_tokens, wl.total_tokens, wl.cached_prefix_tokens
        return _largest(lambda b: self.gpu_bytes(b, prompt, tokens, prefix).total <= self.capacity, MAX_BATCH)


def gpu_bytes(
    model: ModelSpec, gpu: GpuSpec, p: Precision, layout: Layout, wl: Workload, batch: int, prompt: int, tokens: int
) -> GpuBytes:
    """The fullest GPU's bytes for `batch` sequences that prefilled `prompt` tokens and hold `tokens` each."""
    return ReplicaMemory(model, gpu, p, layout).gpu_bytes(batch, prompt, tokens, wl.cached_prefix_tokens)


def context_prompt(tokens: int, prefix: int) -> int:
    """The computed prompt of a context of `tokens` when all of it is prompt (a cached prefix is not computed)."""
    return max(tokens - prefix, 1)


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


def smallest_layout(
    model: ModelSpec, gpu: GpuSpec, p: Precision, wl: Workload, like: Layout, reserve: ReserveOf | None = None
) -> Layout | None:
    """The fewest GPUs that hold the workload: a valid TP degree inside a node, then pipeline stages of a full node;
    each with `like`'s node size and its engine's LM head (split or whole, gathered or not), and its engine's reserve
    on that layout (`reserve`: engine_reserve; None: `like`'s)."""
    prompt, tokens = wl.computed_prompt_tokens, wl.total_tokens
    candidates = [replace(like, tp=d, pp=1, ep=1, dp=1, redundant_experts=0)
                  for d in tp_degrees(model, limit=like.gpus_per_node)]  # fmt: skip
    candidates += [replace(candidates[-1], pp=s) for s in range(2, min(model.layers, MAX_PIPELINE_STAGES) + 1)]
    for layout in candidates:
        if reserve is not None:  # an engine whose reserve depends on the layout (SGLang's)
            share, holds = reserve(layout.tp, layout.pp)
            layout = replace(layout, reserve_share=share, reserve_holds_workspace=holds)
        if layout_problem(model, layout) is None:
            used = gpu_bytes(model, gpu, p, layout, wl, wl.batch, prompt, tokens)
            if used.total <= gpu.memory_bytes:
                return layout
    return None


def memory_report(
    model: ModelSpec, gpu: GpuSpec, wl: Workload, p: Precision, layout: Layout, reserve: ReserveOf | None = None
) -> MemoryReport:
    """Memory of the workload on its layout, and the limits it implies (`reserve`: the engine's on another layout,
    for the smallest that holds it)."""
    prompt, tokens, cap, prefix = wl.computed_prompt_tokens, wl.total_tokens, gpu.memory_bytes, wl.cached_prefix_tokens
    replica = ReplicaMemory(model, gpu, p, layout)
    used = replica.gpu_bytes(wl.batch, prompt, tokens, prefix)
    kv_total = sum(replica.kv(kinds, wl.batch, tokens, prefix) for kinds in replica.kinds) * layout.stage_gpus
    state_total = sum(replica.state(kinds, wl.batch) for kinds in replica.kinds) * layout.stage_gpus
    smallest = smallest_layout(model, gpu, p, wl, layout, reserve)
    return MemoryReport(
        per_gpu=used,
        weights_bytes_total=sum(replica.weights) * layout.stage_gpus,
        kv_cache_bytes_total=kv_total,
        state_bytes_total=state_total,
        kv_bytes_per_token=model.kv_bytes_per_token(p.kv),
        state_bytes_per_sequence=model.state_bytes_per_sequence(p.state),
        capacity_bytes_per_gpu=cap,
        capacity_basis=gpu.memory_basis,
        gpus=layout.gpus,
        fits=used.total <= cap,
        max_batch=replica.max_batch(wl),
        # the longest context that fits however it splits into prompt and output: its prefill workspace is priced as if
        # all of it were prompt (a fixed prompt had sized the workspace, and a prompt near the limit did not fit)
        max_context=_largest(
            lambda t: replica.gpu_bytes(wl.batch, context_prompt(t, prefix), t, prefix).total <= cap, model.max_context
        ),
        min_gpus=smallest.gpus if smallest else None,
        min_layout=smallest.label() if smallest else None,
    )


def kv_capacity_tokens(model: ModelSpec, gpu: GpuSpec, wl: Workload, p: Precision, layout: Layout) -> float:
    """Tokens of KV (per sequence summed over all sequences) one replica holds beside weights, workspace, the state
    of `wl.batch` sequences and the reserve; windowed and chunked layers are counted as if they held every token."""
    used = gpu_bytes(model, gpu, p, layout, wl, wl.batch, wl.computed_prompt_tokens, 0)
    free = max(gpu.memory_bytes - used.weights - used.state - used.workspace - used.reserve, 0.0)
    ranges = stage_layer_ranges(model.layers, layout.pp)
    kv = kv_bytes_per_token_layer(model, p, layout.tp)
    per_token = max(sum(n * (kv + model.index_bytes_per_token_per_layer(k.mixer)) for k, n in
                        model.plan.counts(r).items() if k.mixer in KV_MIXERS) for r in ranges) or kv  # fmt: skip
    return free / per_token * layout.dp


def weight_format_bits(p: Precision) -> float:
    """Bits per block-linear weight of this precision (metadata included), for outputs."""
    return get_format(p.weights).bits


def resident_weight_bytes(model: ModelSpec, p: Precision) -> float:
    """Every weight as stored on one GPU holding the whole model: all experts, embedding, LM head, norms."""
    return stage_weight_bytes(model, p, Layout(), range(model.layers), True, True)


ReserveOf = Callable[[int, int], tuple[float, bool]]  # (tp, pp) -> engine_reserve's (share, holds the workspace)


def engine_reserve(engine: EngineProfile, gpu: GpuSpec, tp: int, pp: int) -> tuple[float, bool]:
    """(the share of each GPU the engine keeps beside weights and KV cache, whether its activations are inside it):
    0.1 beside them (vLLM's gpu_memory_utilization 0.9), or what SGLang's default mem_fraction_static leaves."""
    sglang = engine.memory_reserve == "sglang"
    if engine.memory_share is not None:  # a flag's share, which SGLang's activations live outside of too
        return round(1.0 - engine.memory_share, 3), sglang
    if not sglang:
        return RESERVE_FRACTION, False
    return round(1.0 - sglang_static_share(engine, gpu, tp, pp), 3), True


def sglang_static_share(engine: EngineProfile, gpu: GpuSpec, tp: int, pp: int) -> float:
    """SGLang's default mem_fraction_static on `gpu` at TP `tp` x PP `pp`, as its build derives it (engine.build;
    None: the newest): weights and the KV pool take this share of the GPU's memory (its MiB as the driver reports)."""
    version = version_key(engine.build) if engine.build else None
    mib = gpu.memory_bytes / 2**20
    if version is not None and not at_least(version, SGLANG_SINCE["tiers"]):
        return next(share for least, share in SGLANG_SHARE_BY_TP if tp >= least)
    if version is not None and not at_least(version, SGLANG_SINCE["defaults"]):
        tier = next(((gib, per) for below, gib, per in SGLANG_RESERVE_TIERS_GIB if mib < below * 1024), None)
        reserved = (tier[0] + tp * pp / tier[1]) * 1024 if tier is not None else SGLANG_LARGE_RESERVE_GIB * 1024
    else:
        s = engine.scheduler(gpu_name=gpu.name, memory_bytes=gpu.memory_bytes, tp=tp)
        # activations of a prefill chunk, the CUDA graphs' buffers, a communicator per GPU of the stage
        reserved = 512 + 1.5 * max(s.chunk_tokens or 0, 2048) + 2 * (s.graph_batch_cap or 0) + 128 * tp * pp
        reserved = max(reserved, 10 * 1024) if mib > 60 * 1024 else reserved
    return round((mib - reserved) / mib, 3)
