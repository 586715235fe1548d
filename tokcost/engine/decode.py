"""Decode steps of one batch as exact functions of the context, and their mean over contexts in closed form.

With the batch fixed, only the attention features move with the context c (KV tokens read, query-key pairs:
features.py), and on a span between windows' kinks they are linear in c. So every kernel that reads them is the
larger of two lines in c, every other kernel a constant, and the mean step over first..last is a sum of
arithmetic series split where lines cross (series.py): exact, equal to summing every step. Collectives carry
activations and routed tokens, never the cache: they do not move with c.
"""

from __future__ import annotations

from dataclasses import dataclass

from tokcost.engine.compiled import BoundPass, Rate, Row, microbatches, row_bound
from tokcost.engine.features import Segment
from tokcost.engine.forms import Form
from tokcost.engine.roofline import Bound, CollectiveRate, KernelRate, kernel_seconds, pipeline_factor
from tokcost.engine.series import Kernel, stages_max_sum


@dataclass(frozen=True, slots=True)
class _Moving:
    """A kernel that reads the cache: its forms with the batch's other features folded in."""

    count: int
    flops: Form
    weight_bytes: Form
    other_bytes: Form
    rate: KernelRate


@dataclass(frozen=True, slots=True)
class _Stage:
    """One pipeline stage of a decode step of a fixed batch: its fixed time by bound, and its moving kernels."""

    fixed: dict[Bound, float]
    moving: tuple[_Moving, ...]

    @property
    def fixed_s(self) -> float:
        """Time of the kernels and collectives the context does not move."""
        return sum(self.fixed.values())


class DecodeLines:
    """Decode steps of `batch` sequences on one bound pass, as functions of their cached context."""

    def __init__(self, bound: BoundPass, batch: float) -> None:
        compiled = bound.compiled
        self.compiled, self.batch = compiled, batch
        self.microbatches = microbatches(compiled.layout, [Segment(batch, 0, 1)])
        self.share = batch / self.microbatches
        self.factor = pipeline_factor(self.microbatches, compiled.layout.pp, "steady")
        self.overhead_s = bound.overhead_s
        context = compiled.space.context_indices
        rest = frozenset(range(compiled.space.size)) - context
        x = compiled.space.vector([Segment(self.share, 0, 1)])  # the features the context does not move
        self.stages = tuple(_stage(stage, x, rest, context) for stage in bound.stages)

    def _lines(self, a: float, b: float) -> list[tuple[float, list[Kernel]]]:
        """Each stage at contexts a and b: its fixed time, and each moving kernel's two roofline sides as lines."""
        space = self.compiled.space
        xa, xb = space.decode_context(self.share, a), space.decode_context(self.share, b)
        out = []
        for stage in self.stages:
            kernels: list[Kernel] = []
            for k in stage.moving:
                ca, ma = kernel_seconds(k.flops(xa), k.weight_bytes(xa), k.other_bytes(xa), k.rate)
                cb, mb = kernel_seconds(k.flops(xb), k.weight_bytes(xb), k.other_bytes(xb), k.rate)
                kernels.append(((k.count * ca, k.count * cb), (k.count * ma, k.count * mb)))
            out.append((stage.fixed_s, kernels))
        return out

    def mean(self, first: int, last: int) -> float:
        """Mean step over cached contexts first..last (integers), exactly the mean of every step."""
        total = sum(stages_max_sum(self._lines(a, b), b - a + 1) for a, b in self.compiled.decode_spans(first, last))
        return self.factor * total / (last - first + 1) + self.overhead_s

    def at(self, cached: float) -> tuple[float, Bound]:
        """One step at `cached` tokens: its time, and what holds most of its slowest stage's time."""
        space = self.compiled.space
        x = space.decode_context(self.share, cached)
        best: tuple[float, dict[Bound, float]] | None = None
        for stage in self.stages:
            time = dict(stage.fixed)
            for k in stage.moving:
                compute_s, memory_s = kernel_seconds(k.flops(x), k.weight_bytes(x), k.other_bytes(x), k.rate)
                side: Bound = "compute" if compute_s > memory_s else "memory"
                time[side] += k.count * max(compute_s, memory_s)
            total = sum(time.values())
            if best is None or total > best[0]:
                best = (total, time)
        assert best is not None
        seconds, time = best
        return self.factor * seconds + self.overhead_s, max(time, key=lambda k: time[k])


def _stage(
    stage: tuple[tuple[Row, Rate], ...], x: list[float], rest: frozenset[int], context: frozenset[int]
) -> _Stage:
    """A stage's kernels split into those the context moves (kept as folded forms) and the rest (timed once)."""
    fixed: dict[Bound, float] = {"memory": 0.0, "compute": 0.0, "interconnect": 0.0}
    moving = []
    for row, rate in stage:
        forms = (row.flops, row.weight_bytes, row.other_bytes)
        if isinstance(rate, CollectiveRate) or not any(i in context for f in forms for i, _ in f.terms):
            assert row.payload is None or not any(i in context for i, _ in row.payload.terms)
            seconds, bound = row_bound(row, rate, x)
            fixed[bound] += seconds
        else:
            flops, weights, other = (f.fold(x, rest) for f in forms)
            moving.append(_Moving(row.stage.count, flops, weights, other, rate))
    return _Stage(fixed, tuple(moving))
