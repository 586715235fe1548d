"""What one sequence's layer of each mixer kind keeps, reads and scores, as exact functions of its context.

Layers that cache K/V per token (models/layers.py KV_MIXERS):
- global: keeps every earlier token and reads them all;
- sliding (window w: Mistral, Gemma): keeps the last w; position i sees min(i + 1, w) tokens, itself included;
- chunked (chunk C: Llama-4's attention_chunk_size): position i attends within its own chunk, tokens
  floor(i / C) x C .. i. vLLM's ChunkedLocalAttentionManager frees the blocks of earlier chunks
  (get_num_skipped_tokens = floor(computed / C) x C, vllm/v1/core/single_type_kv_cache_manager.py), so a
  sequence keeps and reads only its current chunk; transformers' chunked cache keeps a ring of the last C
  instead. tokcost models vLLM's: a decode step at c cached tokens reads c mod C of them (the sawtooth), and
  memory holds min(tokens, C) per sequence, the most it holds at any point of its life.
Linear-attention and state-space layers keep a fixed state per sequence (models/mixers.py): nothing of theirs
grows with the context; a pass reads a sequence's state when it has one (cached > 0) and writes it back.

A decode step's counts are piecewise linear in the context c. Pieces start where a window fills (c = w - 1:
the pairs stop growing; c = w: the reads), at every chunk boundary (multiples of C), and at c = 1 for a state
(read from then on). Pieces.kinks lists those inside a range: the exact decode mean sums each piece in closed form.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Literal

from tokcost.models.layers import STATE_MIXERS
from tokcost.models.spec import ModelSpec

# "sparse" (DeepSeek Sparse Attention) attends the top k tokens its indexer selects: reads and scores like a window
# of k, but keeps every token; "index" is not a layer's kind but its indexer's, which scores every cached key as
# global attention does (its features sit beside the sparse layers'; features.py)
AttentionKind = Literal["global", "sliding", "chunked", "sparse", "index"]
ATTENTION_KINDS: tuple[AttentionKind, ...] = ("global", "sliding", "chunked", "sparse")
_WINDOWED = ("sliding", "sparse")  # at most `span` tokens attended, the most recent or the top k


def span_of(model: ModelSpec, kind: str) -> int | None:
    """The window (sliding), chunk (chunked) or top k (sparse) of a layer of this kind; None for a global layer."""
    if kind == "sliding":
        return model.window
    if kind == "chunked":
        return model.chunk_tokens
    if kind == "sparse" and model.sparse_attention:
        return model.sparse_attention.top_k_tokens
    return None


def kv_read_tokens(model: ModelSpec, kind: str, cached: float) -> float:
    """Cached tokens the first new token of a sequence attends to: all, the window or top k, or its chunk's so far."""
    span = span_of(model, kind)
    if span is None:
        return cached
    return min(cached, span) if kind in _WINDOWED else cached % span


def _pairs_upto(model: ModelSpec, kind: str, n: float) -> float:
    """Sum over positions 1..n of the tokens each attends to, itself included."""
    span = span_of(model, kind)
    if span is None:  # causal: 1 + 2 + ... + n
        return n * (n + 1) / 2
    if kind in _WINDOWED:  # 1 + ... + w, then w for each later position
        w = min(n, span)
        return w * (w + 1) / 2 + max(n - span, 0) * span
    full, rest = divmod(n, span)  # every full chunk scores 1 + ... + C, the current one 1 + ... + r
    return full * span * (span + 1) / 2 + rest * (rest + 1) / 2


def causal_pairs(model: ModelSpec, kind: str, cached: float, new: float) -> float:
    """Query-key pairs `new` tokens appended to `cached` score in a layer of this kind."""
    return _pairs_upto(model, kind, cached + new) - _pairs_upto(model, kind, cached)


def held_tokens(model: ModelSpec, kind: str, tokens: float) -> float:
    """Tokens of KV a layer of this kind holds for a sequence of `tokens`, at its peak: all (global, sparse), the
    window, a chunk."""
    span = span_of(model, kind)
    return tokens if span is None or kind == "sparse" else min(tokens, span)


def attention_kinds(model: ModelSpec) -> tuple[AttentionKind, ...]:
    """The attention kinds the model's layers use, in ATTENTION_KINDS order, then the indexer's beside sparse ones."""
    used = tuple(k for k in ATTENTION_KINDS if model.plan.count(mixer=k))
    return used + (("index",) if "sparse" in used else ())


def has_state(model: ModelSpec) -> bool:
    """Whether some layer keeps a fixed state per sequence (linear attention, Mamba-2)."""
    return any(model.plan.count(mixer=m) for m in STATE_MIXERS)


@dataclass(frozen=True, slots=True)
class Pieces:
    """Where a decode step's features start a new linear piece in the context: fixed points and periods."""

    points: tuple[int, ...]  # a window filling (w - 1, w), the first state read (1)
    periods: tuple[int, ...]  # chunks: a piece starts at every multiple

    @staticmethod
    def of(model: ModelSpec, kinds: tuple[str, ...], state: bool) -> Pieces:
        """The pieces of a model whose KV layers are `kinds` (and that keeps a state when `state`)."""
        window = model.window if "sliding" in kinds else None
        top = span_of(model, "sparse") if "sparse" in kinds else None
        chunk = model.chunk_tokens if "chunked" in kinds else None
        points = {w + d for w in (window, top) if w for d in (-1, 0)} | ({1} if state else set())
        return Pieces(tuple(sorted(c for c in points if c > 0)), (chunk,) if chunk else ())

    def span(self, c: float) -> tuple[int, float]:
        """The first and the last context of the piece that holds context c (the last: infinity when none follows)."""
        if not self.points and not self.periods:
            return 0, math.inf
        i = bisect.bisect_right(self.points, c)
        first, after = (self.points[i - 1] if i else 0), (self.points[i] if i < len(self.points) else math.inf)
        for q in self.periods:
            n = math.floor(c / q)
            first, after = max(first, n * q), min(after, (n + 1) * q)
        return first, after - 1

    def start(self, c: float) -> int:
        """The first context of the piece that holds context c."""
        return self.span(c)[0]

    def end(self, c: float) -> float:
        """The last context of the piece that holds context c (infinity when none follows)."""
        return self.span(c)[1]

    def kinks(self, first: int, last: int) -> tuple[int, ...]:
        """Piece starts c with first < c <= last, in order."""
        out, c = [], first
        while (end := self.end(c)) < last:
            c = int(end) + 1
            out.append(c)
        return tuple(out)
