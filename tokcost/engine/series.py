"""Exact sums over consecutive integers of lines, their maxima and upper envelopes (the decode mean in closed form).

A decode step's kernels are linear in the context c on a span (features.py), so each kernel's time is the larger
of two lines in c and a pipeline stage's time is a sum of such maxima; with several pipeline stages the pass takes
every stage once, or m times the slowest (pipeline_sum). Summing over c = first..last, the integers split where
two lines cross and each piece is an arithmetic series: n points of a line with end values y0 and y1 sum to
n (y0 + y1) / 2. Lines are given by their values at the first and last of n points (index 0 and n - 1).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

EndValues = tuple[float, float]  # a line's values at index 0 and at index n - 1


def at(line: EndValues, i: float, n: int) -> float:
    """The line's value at index i of n points."""
    return line[0] if n == 1 else line[0] + (line[1] - line[0]) * i / (n - 1)


def _run(line: EndValues, i: int, j: int, n: int) -> float:
    """Sum of the line over indices i..j (an arithmetic series)."""
    return (j - i + 1) * (at(line, i, n) + at(line, j, n)) / 2


def crossing(x: EndValues, y: EndValues, n: int) -> int | None:
    """The last index on the first side of where x - y changes sign, or None when it keeps one sign."""
    d0, d1 = x[0] - y[0], x[1] - y[1]
    if n == 1 or (d0 >= 0 and d1 >= 0) or (d0 <= 0 and d1 <= 0):
        return None
    return min(max(math.floor(d0 / (d0 - d1) * (n - 1)), 0), n - 2)


def max_sum(x: EndValues, y: EndValues, n: int) -> float:
    """Sum over n points of max(x, y)."""
    j = crossing(x, y, n)
    if j is None:
        top = x if x[0] + x[1] >= y[0] + y[1] else y
        return n * (top[0] + top[1]) / 2
    first, second = (x, y) if x[0] > y[0] else (y, x)
    return _run(first, 0, j, n) + _run(second, j + 1, n - 1, n)


def envelope_sum(lines: Sequence[EndValues], n: int) -> float:
    """Sum over n points of the largest of `lines` (the upper envelope, walked crossing by crossing)."""
    slopes = [0.0 if n == 1 else (y1 - y0) / (n - 1) for y0, y1 in lines]
    total, i = 0.0, 0
    while i < n:
        values = [at(line, i, n) for line in lines]
        top = max(range(len(lines)), key=lambda k: (values[k], slopes[k]))  # a tie goes to the steeper line
        end = n - 1
        for k, slope in enumerate(slopes):
            if slope > slopes[top]:  # a steeper line overtakes after t: top stays largest up to floor(t)
                end = min(end, i + math.floor((values[top] - values[k]) / (slope - slopes[top])))
        end = max(end, i)
        total += _run(lines[top], i, end, n)
        i = end + 1
    return total


Kernel = tuple[EndValues, EndValues]  # a kernel's two roofline sides, each a line: its time is their max


def _stage_value(const: float, kernels: Sequence[Kernel], i: int, n: int) -> float:
    return const + sum(max(at(x, i, n), at(y, i, n)) for x, y in kernels)


def stages_max_sum(stages: Sequence[tuple[float, Sequence[Kernel]]], n: int) -> float:
    """Sum over n points of the slowest stage, each a constant plus a sum of kernels (each the max of two lines).

    Each stage is linear between the kernels' crossings; on every piece between them the slowest stage is the
    upper envelope of lines.
    """
    if len(stages) == 1:
        const, kernels = stages[0]
        return n * const + sum(max_sum(x, y, n) for x, y in kernels)
    total = 0.0
    for u, v in _linear_pieces(stages, n):
        lines = [(_stage_value(c, k, u, n), _stage_value(c, k, v, n)) for c, k in stages]
        total += envelope_sum(lines, v - u + 1)
    return total


def _linear_pieces(stages: Sequence[tuple[float, Sequence[Kernel]]], n: int) -> list[tuple[int, int]]:
    """(first, last) index of each piece of 0..n-1 on which no kernel of any stage changes side (each stage linear)."""
    starts = {0}
    for _, kernels in stages:
        for x, y in kernels:
            j = crossing(x, y, n)
            if j is not None:
                starts.add(j + 1)
    bounds = sorted(starts) + [n]
    return [(u, stop - 1) for u, stop in zip(bounds[:-1], bounds[1:], strict=True)]


Variant = tuple[float, Sequence[Kernel]]  # one way to count a stage's time: a constant plus kernels


def _piece_top(variants: Sequence[EndValues]) -> EndValues:
    """The largest of lines that do not cross on their piece."""
    return max(variants, key=lambda line: line[0] + line[1])


def pipeline_sum(stages: Sequence[Sequence[Variant]], n: int, microbatches: int, *, fill: bool) -> float:
    """Sum over n points of a pass through pipeline stages, each stage the largest of its variants.

    m microbatches follow each other through the stages (GPipe). From an empty pipeline (fill) the first passes
    every stage once and each of the other m - 1 leaves the slowest stage one of its stage-times later. In steady
    decode each microbatch's next token waits for its previous one to pass every stage, and the slowest stage serves
    all m microbatches in turn: max(sum of the stages, m x the slowest). Balanced stages give m + pp - 1 and
    max(m, pp) stage-times.
    """
    every = [v for variants in stages for v in variants]
    if len(stages) == 1:
        return stages_max_sum(every, n)
    m = microbatches
    if fill:
        return sum(stages_max_sum(v, n) for v in stages) + (m - 1) * stages_max_sum(every, n)
    if m == 1:  # the sum of the stages is never below the slowest
        return sum(stages_max_sum(v, n) for v in stages)
    if m >= len(stages):  # m x the slowest is never below the sum of pp stages
        return m * stages_max_sum(every, n)
    total = 0.0  # between m = 1 and pp either may lead: split where any kernel changes side, then any stage's variant
    for u, v in _linear_pieces(every, n):
        k = v - u + 1
        lines = [[(_stage_value(c, ks, u, n), _stage_value(c, ks, v, n)) for c, ks in variants] for variants in stages]
        cuts = {0}
        for group in lines:
            for i, a in enumerate(group):
                for b in group[i + 1 :]:
                    j = crossing(a, b, k)
                    if j is not None:
                        cuts.add(j + 1)
        edges = sorted(cuts) + [k]
        for s, e in zip(edges[:-1], edges[1:], strict=True):
            tops = [_piece_top([(at(line, s, k), at(line, e - 1, k)) for line in group]) for group in lines]
            every_stage = (sum(t[0] for t in tops), sum(t[1] for t in tops))
            total += envelope_sum([every_stage] + [(m * t[0], m * t[1]) for t in tops], e - s)
    return total
