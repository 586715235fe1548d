"""Parallel layouts: how one replica's GPUs split a model (tensor, pipeline, expert, data-parallel attention).

Conventions (Megatron-LM, vLLM, SGLang and DeepSeek's inference system share them):
- TP splits every attention head group and MLP across `tp` GPUs (Shoeybi et al. 2019); KV heads are split
  too, and replicated when tp exceeds them (vLLM's GQA rule); an MLA latent is replicated on every TP rank.
- PP splits the layers into `pp` contiguous stages (Huang et al. 2019, GPipe); uneven splits put the extra
  layer on the first stages; a pass takes every stage once, or m times the slowest when m microbatches keep
  every stage busy (passcost.pipeline_seconds).
- DP attention (MoE models only, SGLang `--enable-dp-attention`, DeepSeek-V3 decode): `dp` replicas of the
  attention (each with its own sequences and its own KV cache, `tp`-way inside), whose tokens meet in the
  MoE layers. Dense MLPs and shared experts run data-parallel with the attention.
- EP spreads the routed experts over `ep` of the tp x dp GPUs of a stage; the remaining (tp x dp) / ep factor
  splits each expert tensor-parallel. Redundant experts (DeepSeek's EPLB, SGLang's and vLLM's
  `--ep-num-redundant-experts` / `--num-redundant-experts`) add copies: a pool of E + R expert slots, ep of
  which divide it (256 + 32 = 288 slots make EP 72 and 144 possible, lmsys blog 2025-05-05). Routing stays
  uniform, now over the slots: copies cost memory and weight reads, and the balance they buy against real skew
  is not priced (tokcost routes uniformly, with no skew to cure).
GPUs per replica = tp x pp x dp. `--gpus N` is the shorthand for `--tp N`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tokcost.models.spec import ModelSpec


@dataclass(frozen=True, slots=True)
class Layout:
    """One replica's parallel layout and the node size it is placed on."""

    tp: int = 1
    pp: int = 1
    ep: int = 1
    dp: int = 1
    gpus_per_node: int = 8
    redundant_experts: int = 0  # expert copies beyond the model's experts (EPLB), spread with them over the EP ranks
    # the embedding table and LM head split by vocabulary over TP (vLLM's VocabParallelEmbedding and ParallelLMHead,
    # TensorRT-LLM's, SGLang's); False: every rank holds and reads them whole (gpt-fast's apply_tp shards only the
    # layers), and the logits need no gather (the engine profile's vocab_parallel)
    vocab_split: bool = True
    # a split vocabulary's logits gathered whole for sampling (serving engines); False: each rank samples its own share
    # and only the winners move (tokcost measure's loop: an argmax per rank, the engine profile's logits_gather)
    logits_gathered: bool = True
    # the engine's reserve is 0.1 of the memory left free once weights and activations are loaded (TensorRT-LLM), not
    # of the whole GPU (vLLM, SGLang): the engine profile's kv_cache_budget
    reserve_of_free: bool = False
    # the share of each GPU the engine keeps beside weights and KV cache, and whether its activation workspace is
    # inside it (SGLang's mem_fraction_static) rather than beside it: memory.engine_reserve
    reserve_share: float = 0.10
    reserve_holds_workspace: bool = False

    @property
    def gpus(self) -> int:
        """GPUs of one replica: tp x pp x dp (expert parallelism reuses the tp x dp GPUs of a stage)."""
        return self.tp * self.pp * self.dp

    @property
    def vocab_tp(self) -> int:
        """Ranks the embedding table and the LM head are split over: tp, or 1 where every rank holds them whole."""
        return self.tp if self.vocab_split else 1

    @property
    def sampled_share(self) -> int:
        """The share of the vocabulary each rank samples over, as a divisor: 1 once gathered (or held whole)."""
        return 1 if self.logits_gathered else self.vocab_tp

    @property
    def stage_gpus(self) -> int:
        """GPUs of one pipeline stage: tp x dp (the group the MoE layers span)."""
        return self.tp * self.dp

    @property
    def expert_tp(self) -> int:
        """Tensor-parallel split of each routed expert: the stage's GPUs per expert-parallel rank."""
        return self.stage_gpus // self.ep

    def expert_slots(self, experts: int) -> int:
        """Expert slots across the EP ranks: the model's experts and their redundant copies."""
        return experts + self.redundant_experts

    def slots_per_rank(self, experts: int) -> int:
        """Expert slots one EP rank holds (the layout checks that ep divides the pool)."""
        return self.expert_slots(experts) // self.ep

    @property
    def nodes(self) -> int:
        """Nodes the replica spans."""
        return math.ceil(self.gpus / self.gpus_per_node)

    def hop_crosses_nodes(self, stage: int) -> bool:
        """Whether pipeline stage `stage` hands its activations to the next over the network.

        GPUs are placed in order, a stage's tp x dp of them after the previous stage's; rank r of stage i sends to
        rank r of stage i + 1, g = tp x dp GPUs further on. Some pair straddles a node boundary exactly when the
        first GPU of stage i and the last of stage i + 1 sit on different nodes; the slowest pair sets the pace.
        """
        g, n = self.stage_gpus, self.gpus_per_node
        return (stage * g) // n != ((stage + 2) * g - 1) // n

    def label(self) -> str:
        """`TP 8`, `TP 8 x PP 2`, `EP 16 x DP 16`, ... for headers."""
        parts = [f"TP {self.tp}"] if self.tp > 1 or self.gpus == 1 else []
        parts += (
            [f"PP {self.pp}"] * (self.pp > 1) + [f"DP {self.dp}"] * (self.dp > 1) + [f"EP {self.ep}"] * (self.ep > 1)
        )
        spare = f" (+{self.redundant_experts} redundant experts)" if self.redundant_experts else ""
        return " x ".join(parts) + spare


def per_dp(sequences: float, dp: int) -> float:
    """Sequences of the busiest of `dp` attention replicas (whole sequences: the split rounds up)."""
    return sequences if dp == 1 else math.ceil(sequences / dp - 1e-9)


def divisors(n: int, limit: int) -> list[int]:
    """Divisors of n up to limit."""
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def _state_heads(model: ModelSpec) -> list[int]:
    """Head counts a state layer splits across TP ranks (Gated DeltaNet's key and value heads, Mamba-2's heads)."""
    heads = []
    if model.linear_attention and model.plan.count(mixer="linear"):
        heads += [model.linear_attention.key_heads, model.linear_attention.value_heads]
    if model.mamba and model.plan.count(mixer="mamba"):
        heads.append(model.mamba.heads)
    return heads


def _state_groups(model: ModelSpec) -> int:
    """Mamba-2's B/C groups where a TP degree must divide them (one group is replicated on every rank instead):
    vLLM's MambaMixer2 asserts n_groups % tp == 0 unless n_groups is 1."""
    if model.mamba and model.plan.count(mixer="mamba") and model.mamba.groups > 1:
        return model.mamba.groups
    return 1


def tp_degrees(model: ModelSpec, limit: int = 64) -> list[int]:
    """Tensor-parallel degrees the model allows: they divide the attention heads (KV heads divide or repeat),
    a state layer's heads and Mamba-2's groups (more than one)."""
    kv, state, groups = model.kv_heads, _state_heads(model), _state_groups(model)
    return [d for d in divisors(model.attention_heads, limit)
            if (kv % d == 0 if d <= kv else d % kv == 0) and all(n % d == 0 for n in state)
            and (groups == 1 or groups % d == 0)]  # fmt: skip


def _valid(model: ModelSpec) -> str:
    """Every TP degree the model allows, as a refusal lists them (all of them: a degree past 64 is one too)."""
    return ", ".join(str(d) for d in tp_degrees(model, limit=model.attention_heads))


def _tp_rule_broken(model: ModelSpec, tp: int) -> str:
    """Which of tp_degrees' rules `tp` breaks, in words (the first it breaks)."""
    kv = model.kv_heads
    if tp < 1:
        return "is not a degree: give 1 or more"
    if model.attention_heads % tp:
        return f"does not divide {model.name}'s {model.attention_heads} attention heads"
    if kv % tp if tp <= kv else tp % kv:
        return (f"neither divides {model.name}'s {kv} KV heads nor is a multiple of them (a rank holds whole KV heads, "
                f"or a copy of one)")  # fmt: skip
    state = next(n for n in _state_heads(model) if n % tp)
    return f"does not divide {model.name}'s {state} state heads"


def layout_problem(model: ModelSpec, layout: Layout) -> str | None:
    """Why `layout` cannot run `model` (with the valid choices listed), or None when it can."""
    tp, pp, ep, dp = layout.tp, layout.pp, layout.ep, layout.dp
    groups = _state_groups(model)
    if tp not in tp_degrees(model, limit=max(tp, 1)) and groups > 1 and groups % tp and not model.attention_heads % tp:
        return (f"--tp: {tp} does not divide {model.name}'s {groups} Mamba-2 groups (each rank holds whole groups, as "
                f"vLLM's MambaMixer2 does); valid degrees: {_valid(model)}")  # fmt: skip
    if tp not in tp_degrees(model, limit=max(tp, 1)):
        return f"--tp: {tp} {_tp_rule_broken(model, tp)}; valid degrees: {_valid(model)}"
    if pp > model.layers:
        return f"--pp: {pp} stages exceed {model.name}'s {model.layers} layers; valid: 1..{model.layers}"
    if not model.moe:
        if layout.redundant_experts:
            return f"--redundant-experts: {model.name} has no routed experts to copy"
        if ep > 1:
            return f"--ep: {model.name} has no routed experts; expert parallelism needs an MoE model (use --ep 1)"
        if dp > 1:
            return (
                f"--dp: data-parallel attention applies to MoE models, whose experts span the DP group; "
                f"{model.name} is dense: run independent replicas instead (use --dp 1)"
            )
        return None
    group, experts, spare = layout.stage_gpus, model.moe.experts, layout.redundant_experts
    slots = layout.expert_slots(experts)
    valid = ", ".join(str(d) for d in divisors(group, group) if slots % d == 0 and (d > 1 or not spare)) or "none"
    if group % ep:
        return f"--ep: {ep} must divide the stage's tp x dp = {group} GPUs; valid: {valid}"
    if spare and ep == 1:
        return (f"--redundant-experts: copies of experts spread over expert-parallel ranks, and at one EP rank every "
                f"GPU holds all {experts} experts: give EP above 1, or use --redundant-experts 0")  # fmt: skip
    if spare > experts * (ep - 1):  # past one copy of every expert on every rank, a rank holds an expert twice
        return (f"--redundant-experts: {spare} copies put an expert twice on one of {ep} EP ranks ({model.name} has "
                f"{experts} experts); valid: 0..{experts * (ep - 1)}")  # fmt: skip
    if slots % ep:
        pool = f"{experts} experts" + (f" + {spare} redundant = {slots} slots" if spare else "")
        first = (-experts) % ep or ep  # the fewest copies that make the pool divide by this EP
        hint = (f" (or --redundant-experts {first}, {first + ep}, ...: experts + copies divisible by EP {ep})" if spare
                else " (redundant experts enlarge the pool: use --redundant-experts R)")  # fmt: skip
        return f"--ep: {ep} does not divide {model.name}'s {pool}; valid for {group} GPUs: {valid}{hint}"
    return None


def kv_heads_per_rank(model: ModelSpec, tp: int) -> float:
    """KV heads one TP rank holds: split across ranks, one at least (replicated past kv_heads)."""
    return max(model.kv_heads / tp, 1.0)


def kv_replication(model: ModelSpec, tp: int) -> int:
    """How many TP ranks hold each KV head (1 when tp <= kv_heads); MLA latents sit on every rank."""
    if model.mla:
        return tp
    return max(tp // model.kv_heads, 1)


def stage_layer_ranges(layers: int, pp: int) -> list[range]:
    """Contiguous layer ranges of the pp stages; the first (layers mod pp) stages take one layer more."""
    base, extra = divmod(layers, pp)
    out, start = [], 0
    for s in range(pp):
        size = base + (1 if s < extra else 0)
        out.append(range(start, start + size))
        start += size
    return out
