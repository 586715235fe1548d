"""Which mixer and which MLP each layer of a decoder has, written as a repeating pattern or a per-layer list.

A pattern such as "5 sliding : 1 global" repeats from layer 0, and a remainder takes the pattern's prefix:
Gemma-3's 62 layers are ten periods of six, then two sliding layers (transformers' Gemma3TextConfig:
layer i slides when (i + 1) % sliding_window_pattern != 0). Llama-4 ("3 chunked : 1 global",
Llama4TextConfig.no_rope_layers) and Qwen3-Next ("3 linear : 1 global", Qwen3NextConfig.layer_types with
full_attention_interval 4) follow the same rule. Irregular hybrids (Nemotron-H's hybrid_override_pattern
"M-M-M-M*-...") are written as a list with one entry per layer.

Counts over a layer range are read from prefix sums, never by walking the range at each call.
"""

from __future__ import annotations

import re
from functools import cached_property
from itertools import accumulate
from typing import Literal, NamedTuple, get_args

# global: attends to every earlier token; sliding: the last `window_tokens`; chunked: the tokens of its own
# `chunk_tokens`-long chunk; linear: Gated DeltaNet, a fixed state per sequence; mamba: a Mamba-2 SSM, a fixed
# state per sequence; none: the layer has no mixer (Nemotron-H's MLP-only layers)
Mixer = Literal["global", "sliding", "chunked", "sparse", "linear", "mamba", "none"]
# dense: a plain MLP; moe: routed experts (plus any shared experts); none: the layer has no MLP (Nemotron-H)
Mlp = Literal["dense", "moe", "none"]
MIXERS: tuple[str, ...] = get_args(Mixer)
MLPS: tuple[str, ...] = get_args(Mlp)
KV_MIXERS = ("global", "sliding", "chunked", "sparse")  # mixers that cache K/V per token
STATE_MIXERS = ("linear", "mamba")  # mixers that keep a fixed state per sequence
_TERM = re.compile(r"\s*(\d+)\s+([a-z]+)\s*")


class LayerKind(NamedTuple):
    """Layers that cost the same: one mixer kind and one MLP kind."""

    mixer: str
    mlp: str


MAX_PERIOD = 10_000  # layers in one period of a pattern


def parse_pattern(text: str, allowed: tuple[str, ...]) -> tuple[str, ...]:
    """'5 sliding : 1 global' -> one period, one kind per layer; ValueError naming what is allowed."""
    period: list[str] = []
    for term in text.split(":"):
        match = _TERM.fullmatch(term)
        if not match or match[2] not in allowed or int(match[1]) < 1:
            raise ValueError(
                f"{term.strip()!r} is not 'COUNT KIND' (COUNT from 1, KIND one of {', '.join(allowed)}); "
                f"write the pattern as e.g. '5 {allowed[1]} : 1 {allowed[0]}'"
            )
        if len(period) + int(match[1]) > MAX_PERIOD:  # counted before any list is built: a count of 10^20 is text
            raise ValueError(f"a pattern's period is at most {MAX_PERIOD:,} layers")
        period += [match[2]] * int(match[1])
    return tuple(period)


def shortest_pattern(kinds: list[str]) -> str:
    """The shortest 'N kind : M kind' whose repetition from layer 0 (remainder: its prefix) gives `kinds`."""
    n = len(kinds)
    period = next(p for p in range(1, n + 1) if all(kinds[i] == kinds[i % p] for i in range(n)))
    runs: list[list] = []
    for kind in kinds[:period]:
        if runs and runs[-1][1] == kind:
            runs[-1][0] += 1
        else:
            runs.append([1, kind])
    return " : ".join(f"{count} {kind}" for count, kind in runs)


def expand(pattern: str | list[str] | None, layers: int, default: str, allowed: tuple[str, ...]) -> tuple[str, ...]:
    """One kind per layer from a pattern (repeated from layer 0), an explicit list, or None (all `default`)."""
    if pattern is None:
        return (default,) * layers
    if isinstance(pattern, list):
        if len(pattern) != layers:
            raise ValueError(f"a list needs one entry per layer: {layers} entries (got {len(pattern)})")
        return tuple(pattern)
    period = parse_pattern(pattern, allowed)
    return tuple(period[i % len(period)] for i in range(layers))


class LayerPlan:
    """Per-layer (mixer, MLP) kinds, with prefix sums so a range's counts cost O(kinds)."""

    def __init__(self, mixers: tuple[str, ...], mlps: tuple[str, ...]) -> None:
        self.kinds = tuple(LayerKind(a, b) for a, b in zip(mixers, mlps, strict=True))

    @cached_property
    def _prefix(self) -> dict[LayerKind, list[int]]:
        return {kind: [0, *accumulate(int(k == kind) for k in self.kinds)] for kind in dict.fromkeys(self.kinds)}

    def counts(self, layers: range) -> dict[LayerKind, int]:
        """How many layers of each kind `layers` holds (kinds with none left out), in first-seen order."""
        start, stop = max(layers.start, 0), min(layers.stop, len(self.kinds))
        out = {kind: sums[stop] - sums[start] for kind, sums in self._prefix.items()} if start < stop else {}
        return {kind: n for kind, n in out.items() if n}

    def count(self, *, mixer: str | None = None, mlp: str | None = None) -> int:
        """Layers of the whole model with this mixer and/or this MLP."""
        every = self.counts(range(len(self.kinds)))
        return sum(n for k, n in every.items() if mixer in (None, k.mixer) and mlp in (None, k.mlp))
