"""A step's time as a function of the decode batch b, from a handful of engine calls.

The engine prices one pass (Steps.cost, engine/compiled.py) as a sum of rooflines, each max(FLOPs / peak,
bytes / bandwidth). With the prefill part of the pass and the decode context held fixed, every count is linear
in b (b decode tokens, b sequences' KV reads), so each term is the max of two lines and the step time is
piecewise linear in b, with a kink only where a term changes bound. build_curve prices the pass at the ends of
the range, finds each flip where a kernel's compute_s - memory_s changes sign (a line through the two ends:
exact, since both are linear), evaluates there and recurses; between breakpoints it interpolates, which
reproduces the pass to rounding error (tests compare with direct calls). Two counts are not linear in b:
routed experts touched, E (1 - (1 - k/E)^tokens), and embedding rows, min(tokens, vocab); for MoE models every
piece is also checked at its midpoint and split until linear within INTERPOLATION_TOLERANCE, and the vocab
kink is a breakpoint.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass

from tokcost.engine.collectives import allreduce_options
from tokcost.engine.roofline import PassCost

INTERPOLATION_TOLERANCE = 1e-3  # relative chord error allowed at a piece's midpoint (nonlinear counts only)
MAX_EVALUATIONS = 128  # engine calls per curve at most

Price = Callable[[float], PassCost]


@dataclass(frozen=True, slots=True)
class Curve:
    """Step seconds at breakpoints `xs` (increasing); linear between, extended with the end slopes."""

    xs: tuple[float, ...]
    ys: tuple[float, ...]
    bounds: tuple[str, ...]  # the pass's bound at each breakpoint

    def __call__(self, b: float) -> float:
        i = min(max(bisect_right(self.xs, b) - 1, 0), len(self.xs) - 2)
        x0, x1 = self.xs[i], self.xs[i + 1]
        return self.ys[i] + (self.ys[i + 1] - self.ys[i]) * (b - x0) / (x1 - x0)

    def slope(self, b: float) -> float:
        """d seconds / d b on the piece holding b."""
        i = min(max(bisect_right(self.xs, b) - 1, 0), len(self.xs) - 2)
        return (self.ys[i + 1] - self.ys[i]) / (self.xs[i + 1] - self.xs[i])

    def bound(self, b: float) -> str:
        """The bound of the pass at the breakpoint nearest b."""
        i = min(range(len(self.xs)), key=lambda j: abs(self.xs[j] - b))
        return self.bounds[i]


def _gap(cost: PassCost, i: int) -> float:
    c = cost.stages[i]  # one kernel's roofline (a collective has neither term: its gap stays 0)
    return c.compute_s - c.memory_s


def _algorithm_gap(cost: PassCost, i: int, first: str, second: str) -> float:
    c = cost.stages[i].collective
    assert c is not None
    options = allreduce_options(c.payload_bytes, c.ranks, c.path)
    return options[first][0] - options[second][0]


def _first_flip(pa: PassCost, pb: PassCost, a: float, b: float) -> float | None:
    """The smallest b in (a, b) where a kernel changes bound, an all-reduce changes algorithm or the host's launches
    meet the GPU's time (each a crossing of two lines between the ends)."""
    eps = 1e-9 * (pa.seconds + pb.seconds)
    if [p.stage.name for p in pa.stages] != [p.stage.name for p in pb.stages]:
        return None  # another pipeline stage is the slowest at b: no kernel to follow across (refined by midpoints)
    flips = []
    for i in range(len(pa.stages)):
        ca, cb = pa.stages[i].collective, pb.stages[i].collective
        if ca is not None and cb is not None and ca.op == cb.op == "all-reduce" and ca.algorithm != cb.algorithm:
            ga, gb = (_algorithm_gap(x, i, ca.algorithm, cb.algorithm) for x in (pa, pb))
        else:
            ga, gb = _gap(pa, i), _gap(pb, i)
        if (ga > eps and gb < -eps) or (ga < -eps and gb > eps):
            flips.append(a + (b - a) * ga / (ga - gb))
    ga, gb = pa.gpu_s - pa.launch_s, pb.gpu_s - pb.launch_s  # the host's launches cross the GPU's time (a floor)
    if (pa.launch_s or pb.launch_s) and ((ga > eps and gb < -eps) or (ga < -eps and gb > eps)):
        flips.append(a + (b - a) * ga / (ga - gb))
    return min(flips) if flips else None


def build_curve(price: Price, lo: float, hi: float, *, linear: bool, breaks: tuple[float, ...] = (),
                chords_below: float = 0.0) -> Curve:  # fmt: skip
    """Breakpoints of price(b).seconds on [lo, hi]: the ends, `breaks`, and every bound flip between.

    Pieces are refined widest first, so a budget of MAX_EVALUATIONS spreads over the whole range. A piece that
    ends at or below `chords_below` is kept as the chord between its breaks: pipeline stages split the batch into
    whole microbatches, so below pp sequences a mean batch between two whole ones steps as their mixture.
    """
    points: dict[float, PassCost] = {x: price(x) for x in (lo, hi, *(x for x in breaks if lo < x < hi))}
    ordered = sorted(points)
    todo = [(a - b, a, b) for a, b in zip(ordered[:-1], ordered[1:], strict=True)]
    heapq.heapify(todo)
    min_width = 1e-9 * max(hi - lo, 1.0)
    evaluations = len(points)
    while todo and evaluations < MAX_EVALUATIONS:  # every engine call counts, kept or not
        _, a, b = heapq.heappop(todo)
        if b - a <= min_width or b <= chords_below:
            continue
        x = _first_flip(points[a], points[b], a, b)
        if x is not None and not a + min_width < x < b - min_width:
            x = None if linear else x  # a flip at the very end of a piece: nothing left to split
        if x is None and linear:
            continue
        evaluations += 1
        if x is None or x in points:  # nonlinear counts: accept the piece only if its midpoint lies on the chord
            x = (a + b) / 2
            mid = price(x)
            chord = (points[a].seconds + points[b].seconds) / 2
            if abs(mid.seconds - chord) <= INTERPOLATION_TOLERANCE * mid.seconds:
                continue
            points[x] = mid
        else:
            x = min(max(x, a + min_width), b - min_width)
            points[x] = price(x)
        if not a < x < b:  # no room left between a and b in floating point
            continue
        heapq.heappush(todo, (a - x, a, x))
        heapq.heappush(todo, (x - b, x, b))
    xs = tuple(sorted(points))
    return Curve(xs, tuple(points[x].seconds for x in xs), tuple(points[x].bound for x in xs))
