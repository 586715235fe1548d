"""The step times one replica's closed form asks for, from the engine's step-time curves (steps.py, curve.py).

A decode-only step as a decoding sequence sees it (itself plus the others: a Poisson count in an open loop, its
users' decoding share in a closed one), a full packed chunk step, and each prompt's lone prefill cost: its full
chunks plus its part-filled last chunk, priced at anchor prompts and interpolated between them only within one
chunk count (a prompt one token past a chunk costs a whole step).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import replace

from tokcost.engine.step import Segment
from tokcost.serving.curve import Curve

POISSON_EXACT_BELOW = 30.0  # decode batches whose Poisson spread is summed term by term (MoE only)
FILL_LEVELS = 10  # prompt-token fills of one step priced from one token to the chunk (geometric)


class ReplicaCurves:
    """Step times of a Replica (mixed into it: reads its Steps, loop, prompt grid and anchors)."""

    def fastest_step_s(self) -> float:
        """The quickest a decode step can be: one sequence alone (TPOT's physical floor)."""
        return self._main_curves()[0](1.0)

    def decode_slope(self, b: float) -> float:
        """dT0/db: what one more sequence in the batch adds to a decode-only step at batch b."""
        return self._main_curves()[0].slope(b)

    def _decode_step(self, b: float) -> float:
        """T0: a decode-only step as a decoding sequence sees it, itself plus Poisson(b) others."""
        return self.decode_step_moments(b)[0]

    def decode_step_moments(self, b: float) -> tuple[float, float]:
        """(mean, variance) of the decode-only step over the Poisson(b) others a decoding sequence shares it with.

        Linear in the batch for dense models on one pipeline stage: the step at b + 1, variance slope^2 b. An MoE's
        distinct experts are concave in the batch and pipeline stages split it into whole microbatches, so there
        both come from the Poisson weights (Jensen: the step at the mean batch is not the mean step).
        """
        curve = self._main_curves()[0]
        if self.loop.closed:  # the others are the users' decoding share, not a Poisson count: no Jensen term
            seen = max(b, 1.0)
            return curve(seen), curve.slope(seen) ** 2 * max(b, 0.0)
        # pipeline stages bend it too: the step jumps where another whole microbatch forms (compiled.microbatches)
        if (self.steps.model.moe is None and self.steps.deployment.layout.pp == 1) or b <= 0:
            return curve(b + 1), curve.slope(b + 1) ** 2 * max(b, 0.0)
        points: list[tuple[float, float]] = []
        if b > POISSON_EXACT_BELOW:  # normal approximation: 3-point Gauss-Hermite, variance b
            spread = math.sqrt(3 * b)
            points = [(1 / 6, curve(b + 1 - spread)), (4 / 6, curve(b + 1)), (1 / 6, curve(b + 1 + spread))]
        else:
            pmf, k = math.exp(-b), 0
            while k <= b + 8 * math.sqrt(b) + 8:
                points.append((pmf, curve(k + 1)))
                k += 1
                pmf *= b / k
        mean = sum(w * y for w, y in points)
        return mean, max(sum(w * y * y for w, y in points) - mean**2, 0.0)

    def _main_curves(self) -> tuple[Curve, Curve]:
        """(decode-only, full packed chunk) step-time curves, built on first use (the second only with prefill)."""
        if self._curves is None:
            decode = self.steps.curve(())
            self._curves = (decode, self.steps.curve(self.packed) if self.prompts else decode)
        return self._curves

    def prefix_slope(self) -> float:
        """c1: seconds a packed prompt token costs per token of prefix it attends over (its prompt's chunks before
        its own), from the full packed step priced one chunk deeper: a prompt's packed work grows as c1 P'^2 / 2
        on top of its tokens' share of the step (Replica.work_tokens). Read at no decodes beside: the chunk's own
        attention, whatever runs beside it."""
        if self._prefix_slope is None:
            shift = float(self.chunk)
            deeper = tuple(replace(s, cached_tokens=s.cached_tokens + shift) for s in self.packed)
            tokens = sum(s.tokens for s in self.packed)
            rise = self.steps.curve(deeper)(0.0) - self._main_curves()[1](0.0)
            self._prefix_slope = max(rise, 0.0) / (tokens * shift) if tokens > 0 else 0.0
        return self._prefix_slope

    def _alone(self, b: float, alpha: float) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """Lone prefill cost A(P') of every prompt grid point at decode batch b, and its last step's part."""
        if self._anchor_curves is None:
            self._anchor_curves = [
                (pt.chunks - 1, self.steps.curve(pt.full) if pt.full else None, self.steps.curve(pt.tail), pt.tokens,
                 pt.last_chunk(self.chunk))
                for pt in (self.prompts[i] for i in self.anchors)
            ]  # fmt: skip
        excess, tails = [], []
        for full_chunks, full, tail, tokens, last in self._anchor_curves:
            t = tail(b)
            excess.append(full_chunks * (full(b) if full else 0.0) + t - alpha * tokens)
            tails.append(t - alpha * last)
        alone, lasts = [], []
        for pt, (i, j, f) in zip(self.prompts, self._brackets, strict=True):
            alone.append(alpha * pt.tokens + excess[i] + (excess[j] - excess[i]) * f)
            lasts.append(alpha * pt.last_chunk(self.chunk) + tails[i] + (tails[j] - tails[i]) * f)
        return tuple(alone), tuple(lasts)

    def fill_steps(self, b: float) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """(tokens, seconds): a step of b decodes and one chunk of x prompt tokens, at FILL_LEVELS fills from one
        token to the chunk (geometric): how a step's time grows with the prompt tokens it carries, flat while the
        step stays bound by reading the weights, then linear in the FLOPs (interpolated between levels)."""
        if self._fill_curves is None:
            top = self.chunk
            xs = sorted({max(1, round(top ** (j / (FILL_LEVELS - 1)))) for j in range(FILL_LEVELS)})
            p0 = self.traffic.cached_prefix_tokens
            self._fill_curves = (tuple(xs), tuple(self.steps.curve((Segment(1, p0, x),)) for x in xs))
        xs, curves = self._fill_curves
        return xs, tuple(c(b) for c in curves)


def interpolate(xs: tuple[float, ...], ys: tuple[float, ...], x: float) -> float:
    """ys at x, linear between the neighbouring xs (increasing), held at the ends."""
    if x <= xs[0]:
        return ys[0]
    j = min(bisect_right(xs, x), len(xs) - 1)
    if x >= xs[j]:
        return ys[j]
    return ys[j - 1] + (ys[j] - ys[j - 1]) * (x - xs[j - 1]) / (xs[j] - xs[j - 1])


def interpolate_sorted(xs: tuple[float, ...], ys: tuple[float, ...], points: list[float]) -> list[float]:
    """interpolate(xs, ys, x) at each of `points` (ascending), in one walk along xs: a step's time at every fill a
    prompt's last step may have (sharing.step_share reads a few to 2,000 of them per prompt and pass)."""
    out, j, first, n = [], min(1, len(xs) - 1), xs[0], len(xs)
    for x in points:
        if x <= first:
            out.append(ys[0])
            continue
        while j < n - 1 and xs[j] <= x:  # bisect_right's neighbour: the first xs[j] above x, or the last
            j += 1
        if x >= xs[j]:
            out.append(ys[j])
        else:
            out.append(ys[j - 1] + (ys[j] - ys[j - 1]) * (x - xs[j - 1]) / (xs[j] - xs[j - 1]))
    return out


def bracket(xs: list[int], x: float) -> tuple[int, int, float]:
    """(i, j, f): x = xs[i] + f (xs[j] - xs[i]) between neighbours, f = 0 beyond the ends (xs increasing)."""
    if not xs or x <= xs[0]:
        return 0, 0, 0.0
    for j in range(1, len(xs)):
        if x <= xs[j]:
            span = xs[j] - xs[j - 1]
            return j - 1, j, (x - xs[j - 1]) / span if span else 0.0
    return len(xs) - 1, len(xs) - 1, 0.0
