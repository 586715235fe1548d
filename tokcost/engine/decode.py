"""Decode steps of one batch as exact functions of the context, and their mean over contexts in closed form.

With the batch fixed, only the context features move with the context c (KV tokens read, query-key pairs, a
state read: features.py), and on each piece between the contexts where a window fills, a chunk ends or a state
is first read (attend.py Pieces: "regimes") they are linear in c. So every kernel that reads them does work linear
in c, and its two roofline sides are lines in c (kernel_seconds is linear in the work it prices: its intercept
prices the work at c = 0 of the regime's line, its slope the work per token of context); every other kernel is a
constant. The mean step over first..last is then a sum of arithmetic series, split where lines cross (series.py):
exact, equal to summing every step. A chunked layer's sawtooth gives a regime per chunk; they are built as the
contexts asked for reach them. Collectives carry activations and routed tokens, never the cache: they do not move
with c. A stage's time is the largest of its variants (passcost.stage_seconds): its kernels with their gaps and the
unhidden share of its overlapped collectives; those collectives leading with the kernels' share hidden; the host's
launches (eager eras). The pass through the pipeline stages (series.pipeline_sum) is summed the same way, split
where any of these lines cross, so the mean stays exact.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tokcost.engine.compiled import BoundPass, Rate, Row, microbatches, row_bound
from tokcost.engine.features import Segment
from tokcost.engine.forms import Form
from tokcost.engine.passcost import Bound, pipeline_seconds, visible_bound
from tokcost.engine.roofline import CollectiveRate, Rates, kernel_seconds, kernel_slopes
from tokcost.engine.series import Variant, max_sum, pipeline_sum

Line = tuple[float, float]  # (value at context 0, per token of context)


@dataclass(frozen=True, slots=True)
class _Moving:
    """A kernel that reads the cache, in one regime: its compute and memory time (all occurrences) as lines in c."""

    compute: Line
    memory: Line


@dataclass(frozen=True, slots=True)
class _Stage:
    """One pipeline stage of a decode step of a fixed batch in one regime: fixed time by bound, moving kernels."""

    fixed: dict[Bound, float]
    fixed_s: float
    moving: tuple[_Moving, ...]
    host: bool = False  # the host's launches (an eager era's floor), not the GPU's kernels
    kernels_s: float = 0.0  # the kernels' fixed seconds and their gaps (the moving ones come at each context)
    overlapped_s: float = 0.0  # the collectives that overlap the kernels
    overlap: float = 0.0  # the share of the shorter of the two hidden behind the longer (Rates.comm_overlap)


def _at(line: Line, c: float) -> float:
    return line[0] + line[1] * c


class DecodeLines:
    """Decode steps of `batch` sequences on one bound pass, as functions of their cached context."""

    def __init__(self, bound: BoundPass, batch: float) -> None:
        compiled = bound.compiled
        space = compiled.space
        self.microbatches = microbatches(compiled.layout, [Segment(batch, 0, 1)])
        self.share = share = batch / self.microbatches
        self.overhead_s = bound.rates.host_s(batch, compiled.layout.dp)
        self.bound, self.pieces = bound, space.pieces
        self.context = space.context_indices
        self.x = space.vector([Segment(share, 0, 1)])  # the features the context does not move
        # by each regime's first context, built when reached: per pipeline stage, its variants (_stage)
        self.regimes: dict[int, tuple[tuple[_Stage, ...], ...]] = {}
        self.pieced = bool(self.pieces.points or self.pieces.periods)  # else one regime holds every context

    def _regime(self, cached: float) -> tuple[tuple[_Stage, ...], ...]:
        """The stages on the regime that holds context `cached`."""
        return self._regime_from(self.pieces.start(cached) if self.pieced else 0)

    def _regime_from(self, start: int) -> tuple[tuple[_Stage, ...], ...]:
        """The stages on the regime that starts at context `start`: the context features as exact lines in c."""
        found = self.regimes.get(start)
        if found is None:
            space = self.bound.compiled.space
            at_start, after = space.decode_context(self.share, start), space.decode_context(self.share, start + 1)
            slope = [b - a for a, b in zip(at_start, after, strict=True)]
            const = [a - s * start for a, s in zip(at_start, slope, strict=True)]
            rates, launches = self.bound.rates, self.bound.launch_s(self.x)
            found = tuple(_stage(stage, self.x, self.context, const, slope, rates, launch_s)
                          for stage, launch_s in zip(self.bound.stages, launches, strict=True))  # fmt: skip
            self.regimes[start] = found
        return found

    def mean(self, first: int, last: int) -> float:
        """Mean step over cached contexts first..last (integers), exactly the mean of every step."""
        m = self.microbatches
        if not self.pieced:
            return _sum(self._regime_from(0), first, last, m) / (last - first + 1) + self.overhead_s
        total, a = 0.0, first
        while a <= last:
            start, end = self.pieces.span(a)
            b = last if end >= last else int(end)
            total += _sum(self._regime_from(start), a, b, m)
            a = b + 1
        return total / (last - first + 1) + self.overhead_s

    def line(self, cached: float) -> tuple[float, float, float]:
        """The step from `cached` on as a line: (seconds at `cached`, seconds per token of context, the context up
        to which it holds: the regime's end, a kernel changing bound, another variant or stage taking over)."""
        until = self.pieces.end(cached) + 1
        stages = []  # (time, slope) of each pipeline stage at `cached`: its largest variant
        for group in self._regime(cached):
            variants = []  # each moving kernel on its active side
            for stage in group:
                time, slope = stage.fixed_s, 0.0
                for k in stage.moving:
                    (active, a_slope), (other, o_slope) = sorted(
                        ((_at(k.compute, cached), k.compute[1]), (_at(k.memory, cached), k.memory[1])), reverse=True
                    )
                    time, slope = time + active, slope + a_slope
                    if o_slope > a_slope:  # the other side overtakes ahead
                        until = min(until, cached + (active - other) / (o_slope - a_slope))
                variants.append((time, slope))
            top, until = _overtaken(variants, cached, until)
            stages.append(top)
        m = self.microbatches
        # the pass (passcost.pipeline_seconds, steady): every stage once, or m x the slowest
        passes = [(sum(t for t, _ in stages), sum(d for _, d in stages))] if len(stages) > 1 else []
        passes += [(m * t, m * d) for t, d in stages] if m > 1 or not passes else []
        (time, slope), until = _overtaken(passes, cached, until)
        return time + self.overhead_s, slope, until

    def at(self, cached: float) -> tuple[float, Bound]:
        """One step at `cached` tokens: its time, and what holds most of its slowest stage's time."""
        best: tuple[float, Bound] | None = None
        times = []
        for group in self._regime(cached):
            stage = group[0]  # what holds the time: the kernels as priced (passcost.PassCost.bound)
            time, kernels = dict(stage.fixed), stage.kernels_s
            for k in stage.moving:
                compute_s, memory_s = _at(k.compute, cached), _at(k.memory, cached)
                time["compute" if compute_s > memory_s else "memory"] += max(compute_s, memory_s)
                kernels += max(compute_s, memory_s)
            each = [
                v.fixed_s + sum(max(_at(k.compute, cached), _at(k.memory, cached)) for k in v.moving) for v in group
            ]
            total = max(each)
            gpu = max((t for t, v in zip(each, group, strict=True) if not v.host), default=0.0)
            shown = visible_bound(time, kernels, stage.overlapped_s, stage.overlap)
            bound: Bound = "host" if total > gpu else shown  # launches past the GPU
            times.append(total)
            if best is None or total > best[0]:
                best = (total, bound)
        assert best is not None
        return pipeline_seconds(times, self.microbatches, "steady") + self.overhead_s, best[1]


def _overtaken(lines: list[Line], cached: float, until: float) -> tuple[Line, float]:
    """The largest of (value, slope) lines at `cached` (a tie goes to the steeper), and `until` cut to where a
    steeper one overtakes it."""
    top = max(lines)
    for time, slope in lines:
        if slope > top[1]:
            until = min(until, cached + (top[0] - time) / (slope - top[1]))
    return top, until


def _sum(groups: tuple[tuple[_Stage, ...], ...], a: int, b: int, m: int) -> float:
    """Sum over contexts a..b of the steady pass through the stages (one regime; a stage is the largest of its
    variants; m microbatches)."""
    n = b - a + 1
    if len(groups) == 1 and len(groups[0]) == 1:  # one stage, one variant: each moving kernel's sum on its own
        stage = groups[0][0]
        total = n * stage.fixed_s
        for k in stage.moving:
            total += _max_sum(k, a, b, n)
        return total
    lines: list[list[Variant]] = [
        [(s.fixed_s, [((_at(k.compute, a), _at(k.compute, b)), (_at(k.memory, a), _at(k.memory, b))) for k in s.moving])
         for s in group]
        for group in groups
    ]  # fmt: skip
    return pipeline_sum(lines, n, m, fill=False)


def _max_sum(k: _Moving, a: int, b: int, n: int) -> float:
    """Sum over contexts a..b of one moving kernel's time."""
    return max_sum((_at(k.compute, a), _at(k.compute, b)), (_at(k.memory, a), _at(k.memory, b)), n)


def _stage(
    stage: tuple[tuple[Row, Rate], ...],
    x: list[float],
    context: frozenset[int],
    const: list[float],
    slope: list[float],
    rates: Rates,
    launch_s: float,
) -> tuple[_Stage, ...]:
    """A stage's kernels split into those the context moves (as lines in c) and the rest (timed once), as the
    variants whose largest is the stage's time (passcost.stage_seconds): its kernels, their gaps and its collectives
    with the overlapped ones' hidden share taken off; the overlapped collectives leading, the kernels' share
    hidden; the host's launches (eager eras)."""
    fixed: dict[Bound, float] = {"memory": 0.0, "compute": 0.0, "interconnect": 0.0}
    overlapped = 0.0
    moving = []
    for row, rate in stage:
        forms = (row.flops, row.weight_bytes, row.other_bytes)
        if isinstance(rate, CollectiveRate) or not any(i in context for f in forms for i, _ in f.terms):
            assert row.payload is None or not any(i in context for i, _ in row.payload.terms)
            seconds, bound = row_bound(row, rate, x)
            fixed[bound] += seconds
            if isinstance(rate, CollectiveRate) and rate.op in rates.overlap_ops:
                overlapped += seconds
            continue
        # work at c = 0 of the regime's line (every other feature at its value) and per token of context
        base = [const[i] if i in context else v for i, v in enumerate(x)]
        f0, w0, o0 = (f(base) for f in forms)
        f1, w1, o1 = (_linear(f, slope) for f in forms)
        n = row.stage.count
        (c0, m0), (c1, m1) = kernel_seconds(f0, w0, o0, rate), kernel_slopes(f1, w1, o1, rate)
        moving.append(_Moving((n * c0, n * c1), (n * m0, n * m1)))
    collectives = sum(row.stage.count for row, rate in stage if isinstance(rate, CollectiveRate))
    count = rates.launched(sum(row.stage.count for row, _ in stage) - collectives, collectives)
    kernels_s = fixed["memory"] + fixed["compute"] + count * rates.kernel_overhead_s
    serial, o = fixed["interconnect"] - overlapped, rates.comm_overlap
    variants = [
        _Stage(fixed, serial + kernels_s + (1 - o) * overlapped, tuple(moving), False, kernels_s, overlapped, o)
    ]
    if o and overlapped:  # the collectives lead: the kernels hide behind them
        led = tuple(_Moving(_scaled(k.compute, 1 - o), _scaled(k.memory, 1 - o)) for k in moving)
        variants.append(_Stage(fixed, serial + overlapped + (1 - o) * kernels_s, led))
    if launch_s:  # the host's launches (BoundPass.launch_s): a floor on the stage's time
        variants.append(_Stage(fixed, launch_s, (), host=True))
    return tuple(variants)


def _scaled(line: Line, factor: float) -> Line:
    return line[0] * factor, line[1] * factor


def _linear(form: Form, x: Sequence[float]) -> float:
    """The form's linear part at x (its constant left out): the work per token of context."""
    return sum(a * x[i] for i, a in form.terms)
