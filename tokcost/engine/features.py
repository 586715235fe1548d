"""The features of a pass: every count its kernels depend on that is not linear, computed exactly per point.

A pass (one microbatch share of its segments, on the busiest GPU of a pipeline stage) is described by:
- tokens_dp: tokens of the busiest DP attention replica (sequences split per replica, rounded up);
- tokens: tokens of the whole replica (the MoE layers see every DP replica's);
- logit_rows: rows that need logits on the busiest DP replica: one per sequence (its last token), which is
  also how many sequences write back their state in a layer that keeps one;
- embedding_rows: embedding rows looked up on it, at most the vocabulary: min(tokens_dp, vocab);
- for an MoE: token-expert pairs on the busiest expert-parallel rank, and the experts touched there;
- for a model with state layers (linear attention, Mamba-2): sequences whose state is read (those with a cache:
  a fresh prompt starts from zeros), and tokens run by the recurrent step (decode: one new token) and by the
  chunked scan (prefill);
- per attention kind (global, sliding window, chunked, sparse and its indexer: attend.py): KV tokens read, query-key
  pairs scored in the absorbed form (one query per sequence: decode; MLA scores against its latent) and in the
  per-head form (prefill), and the cached tokens a per-head pass reads (MLA up-projects their latents to per-head K
  and V first). An MLA prefill on a cached prefix takes whichever form costs fewer FLOPs (mla_absorbs).
Every kernel's FLOPs and bytes are linear in these (stages.py), so a configuration's kernels are counted once
(compiled.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from tokcost.engine.attend import AttentionKind, Pieces, attention_kinds, causal_pairs, has_state, kv_read_tokens
from tokcost.engine.blocks import attention_flops_per_pair, mla_prefix_flops_per_token
from tokcost.engine.forms import Form
from tokcost.engine.layout import Layout, per_dp
from tokcost.models.spec import ModelSpec

N = TypeVar("N", float, Form)
TOKENS_DP, TOKENS, LOGIT_ROWS, EMBEDDING_ROWS, EXPERT_PAIRS, EXPERTS_TOUCHED = range(6)
STATE_READS, RECURRENT_TOKENS, SCAN_TOKENS = range(6, 9)
SHARED = 9  # features every pass has; then four per attention kind
PER_KIND = 4  # kv_read, pairs_absorbed, pairs_heads, prefix_heads


def graph_batch(x: Sequence[float]) -> float:
    """The decode batch a CUDA graph replays for a pass at feature vector x: its sequences on the busiest DP rank
    where each runs one token (a decode step); 0 for a pass that carries prompt tokens, whose graphs (SGLang's
    piecewise prefill, vLLM V1's mixed steps) follow other caps, not priced past them (Rates.launch_s)."""
    return x[TOKENS_DP] if x[TOKENS_DP] <= x[LOGIT_ROWS] else 0.0


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


# ---- routing ------------------------------------------------------------------------------------------------


def expected_distinct_experts(experts: int, top_k: int, tokens: float) -> float:
    """Distinct experts `tokens` tokens touch under uniform routing: E x (1 - (1 - k/E)^T)."""
    return experts * (1 - (1 - top_k / experts) ** tokens)


def busiest_rank_experts(local: int, pairs: float, mean_distinct: float) -> float:
    """Distinct experts the busiest of the ranks reads: its `pairs` token-expert pairs spread uniformly over its
    `local` experts, local x (1 - (1 - 1/local)^pairs) (with one rank, the whole model's count `mean_distinct`,
    which keeps each token's k experts distinct). Not the mean over ranks: at Mixtral's EP 8 one token's two
    experts sit whole on two ranks, and each reads all of its expert, not a quarter."""
    if local <= 0:
        return 0.0
    return min(max(pairs_spread_experts(local, pairs), mean_distinct), local)


def pairs_spread_experts(local: int, pairs: float) -> float:
    """Distinct experts of `local` that `pairs` uniformly spread pairs touch: local x (1 - (1 - 1/local)^pairs)."""
    return local * (1 - (1 - 1 / local) ** pairs) if local > 1 else min(pairs, 1.0)


def pairs_load_sigma(experts: int, top_k: int, tokens: float, ep: int) -> float:
    """Standard deviation of one rank's token-expert pairs: sqrt(T k (1/ep)(1 - 1/ep)(E - k)/(E - 1))."""
    return math.sqrt(tokens * top_k * (1 / ep) * (1 - 1 / ep) * (experts - top_k) / max(experts - 1, 1))


def busiest_rank_pairs(experts: int, top_k: int, tokens: float, ep: int) -> float:
    """Expected token-expert pairs on the busiest of `ep` ranks under uniform routing (not the mean).

    Each token sends k distinct experts; a rank holding E/ep of them gets a hypergeometric share per token
    (mean k/ep, variance k (1/ep)(1 - 1/ep)(E - k)/(E - 1)). Summed over T tokens the load is near normal, and
    the expected maximum of ep such loads is mean + sigma x sqrt(2 ln ep) (the Gumbel approximation).
    """
    mean = tokens * top_k / ep
    if ep == 1:
        return mean
    sigma = pairs_load_sigma(experts, top_k, tokens, ep)
    return min(mean + sigma * math.sqrt(2 * math.log(ep)), tokens * min(top_k, experts / ep))


# ---- the feature vector -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Features(Generic[N]):
    """A pass's features by name: numbers for one point, or Forms (one per feature) to compile the kernels."""

    tokens_dp: N
    tokens: N
    logit_rows: N
    embedding_rows: N
    expert_pairs: N
    experts_touched: N
    state_reads: N
    recurrent_tokens: N
    scan_tokens: N
    kv_read: Mapping[str, N]  # by attention kind
    pairs_absorbed: Mapping[str, N]
    pairs_heads: Mapping[str, N]
    prefix_heads: Mapping[str, N]  # cached tokens read in the per-head form (MLA: up-projected from the latent)

    @property
    def sequences_dp(self) -> N:
        """Sequences on the busiest DP replica (one logit row each): each writes back its state once per pass."""
        return self.logit_rows


def mla_absorbs(model: ModelSpec, pairs: float, prefix: float) -> bool:
    """Whether a pass scores `pairs` over a cached `prefix` with fewer FLOPs in MLA's absorbed form than per head.

    Per head, each cached token's latent is first up-projected to every head's K and V (vLLM's context chunks,
    SGLang's chunked-KV path: blocks.mla_prefix_flops_per_token), then each pair is scored per head; absorbed,
    each pair is scored against the latent (dearer: blocks.attention_flops_per_pair) and nothing is up-projected.
    DeepSeek-V3: per head is dearer below about 171 new tokens per sequence over a long prefix (SGLang dispatches
    by lengths the same way). Without MLA the forms are one.
    """
    if model.mla is None or prefix == 0:
        return False
    per_head = pairs * attention_flops_per_pair(model, 1, absorbed=False)
    per_head += prefix * mla_prefix_flops_per_token(model, 1)
    return pairs * attention_flops_per_pair(model, 1, absorbed=True) < per_head


@dataclass(frozen=True, slots=True)
class FeatureSpace:
    """The features of one (model, layout), in vector order: nine shared, then four per attention kind."""

    model: ModelSpec
    layout: Layout
    kinds: tuple[AttentionKind, ...]  # the attention kinds the model's layers use
    state: bool = False  # whether some layer keeps a state per sequence

    @staticmethod
    def of(model: ModelSpec, layout: Layout) -> FeatureSpace:
        """The features `model`'s layers need on `layout`."""
        return FeatureSpace(model, layout, attention_kinds(model), has_state(model))

    def kind_index(self, kind: AttentionKind) -> int:
        """Index of `kind`'s first feature (its KV read; then absorbed pairs, per-head pairs, per-head prefix)."""
        return SHARED + PER_KIND * self.kinds.index(kind)

    @property
    def size(self) -> int:
        """Length of the vector."""
        return SHARED + PER_KIND * len(self.kinds)

    @property
    def context_indices(self) -> frozenset[int]:
        """The features a decode step's context moves (KV read, pairs, a state read); the rest: the batch alone."""
        moved = {i for k in self.kinds for i in range(self.kind_index(k), self.kind_index(k) + PER_KIND)}
        return frozenset(moved | ({STATE_READS} if self.state else set()))

    @property
    def pieces(self) -> Pieces:
        """Where a decode step's context features start a new linear piece (attend.py)."""
        return Pieces.of(self.model, self.kinds, self.state)

    def symbols(self) -> Features[Form]:
        """Every feature as the form x_i: the stage builders run on these to give the coefficients."""
        return self._named([Form.feature(i) for i in range(self.size)])

    def named(self, v: Sequence[float]) -> Features[float]:
        """The features of vector `v` by name, for the stage builders at one point."""
        return self._named(v)

    def _named(self, v: Sequence[N]) -> Features[N]:
        at = {k: self.kind_index(k) for k in self.kinds}
        return Features(v[TOKENS_DP], v[TOKENS], v[LOGIT_ROWS], v[EMBEDDING_ROWS], v[EXPERT_PAIRS],
                        v[EXPERTS_TOUCHED], v[STATE_READS], v[RECURRENT_TOKENS], v[SCAN_TOKENS],
                        {k: v[i] for k, i in at.items()}, {k: v[i + 1] for k, i in at.items()},
                        {k: v[i + 2] for k, i in at.items()}, {k: v[i + 3] for k, i in at.items()})  # fmt: skip

    def vector(self, segments: Sequence[Segment]) -> list[float]:
        """The exact features of a pass over `segments` (one microbatch's share of each)."""
        model, dp, v = self.model, self.layout.dp, [0.0] * self.size
        for s in segments:
            n = per_dp(s.sequences, dp)
            v[TOKENS_DP] += n * s.new_tokens
            v[TOKENS] += s.sequences * s.new_tokens
            v[LOGIT_ROWS] += n
            if self.state:  # one new token runs the recurrent step, a prompt the chunked scan
                v[RECURRENT_TOKENS if s.new_tokens == 1 else SCAN_TOKENS] += n * s.new_tokens
            self._context(v, n, s.cached_tokens, s.new_tokens)
        v[EMBEDDING_ROWS] = min(v[TOKENS_DP], model.vocab_size)
        if model.moe:
            moe, ep = model.moe, self.layout.ep
            slots = self.layout.expert_slots(moe.experts)  # uniform routing over every copy (layout.py)
            v[EXPERT_PAIRS] = busiest_rank_pairs(slots, moe.experts_per_token, v[TOKENS], ep)
            distinct = expected_distinct_experts(slots, moe.experts_per_token, v[TOKENS])
            v[EXPERTS_TOUCHED] = busiest_rank_experts(slots // ep, v[EXPERT_PAIRS], distinct / ep)
        return v

    def _context(self, v: list[float], sequences_dp: float, cached: float, new: float) -> None:
        """Add one segment's context features: a state read, each attention kind's KV read and query-key pairs."""
        if self.state and cached > 0:  # a sequence with a cache has a state to continue from
            v[STATE_READS] += sequences_dp
        for j, kind in enumerate(self.kinds):
            i = SHARED + PER_KIND * j
            read = kv_read_tokens(self.model, kind, cached)
            v[i] += sequences_dp * read
            pairs = causal_pairs(self.model, kind, cached, new)
            # decode (one new token) scores in the absorbed form, prefill per head (MLA: vLLM, SGLang); sparse
            # attention runs MLA's absorbed (MQA) form in prefill too (DeepSeek-V3.2's report; vLLM's FlashMLA sparse
            # backend takes the 576-wide absorbed query only), and an indexer's pairs are one dot product per head
            if new == 1 or kind in ("sparse", "index") or mla_absorbs(self.model, pairs, read):
                v[i + 1] += sequences_dp * pairs
            else:
                v[i + 2] += sequences_dp * pairs
                v[i + 3] += sequences_dp * read

    def decode_context(self, sequences: float, cached: float) -> list[float]:
        """Only the context's features (context_indices) of a decode step of `sequences` at `cached` tokens."""
        v = [0.0] * self.size
        self._context(v, per_dp(sequences, self.layout.dp), cached, 1)
        return v
