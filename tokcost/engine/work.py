"""Work apart from rates: what a pass, or a span of decode steps, asks of each kernel; priced under any rates.

A Work is rates-free: per pipeline stage, each kernel's rate slot (its class: a kernel's kind and weight format,
or a collective's op and group), its count, and its FLOPs, weight bytes and other bytes at the first and the last
point (a collective: its payload). A single pass has one point; a span of decode steps has one per context, and
every kernel's work is linear between its ends (features.py). stage_sum is where a Work meets rates: each kernel
through roofline.kernel_seconds (or its collective's rate), summed per pipeline stage, the slowest stage summed
over the points exactly (series.py). The fit keeps each row's Work and re-prices it under thousands of rates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tokcost.engine.collectives import Links
from tokcost.engine.layout import Layout
from tokcost.engine.roofline import CollectiveRate, KernelRate, Rates, collective_rate, kernel_rate, kernel_seconds
from tokcost.engine.series import Kernel, stages_max_sum
from tokcost.engine.stages import Op, Stage

Rate = KernelRate | CollectiveRate
# what a kernel's rate depends on: ("kernel", kind, weight format) or ("collective", op, ranks, crosses nodes)
Key = tuple[str, str, str] | tuple[str, Op, int, bool]
# one kernel's work: (rate slot, count, FLOPs, FLOPs, weight bytes, weight bytes, other bytes, other bytes) at the
# first and last point; a collective's payload stands in both FLOPs places
KernelWork = tuple[int, int, float, float, float, float, float, float]


def rate_key(stage: Stage) -> Key:
    """The class of a stage's rate."""
    if stage.collective is not None:
        return ("collective", stage.collective, stage.ranks, stage.crosses_nodes)
    return ("kernel", stage.kind, stage.weight_format)


def rate_of(key: Key, rates: Rates, links: Links, layout: Layout) -> Rate:
    """The rate of one class under `rates`: a kernel's FLOP/s and bytes/s, or a collective's path and algorithms."""
    if len(key) == 4:
        _, op, ranks, crosses = key
        return collective_rate(op, ranks, rates, links, layout, crosses_nodes=crosses)
    return kernel_rate(key[1], key[2], rates)


@dataclass(frozen=True, slots=True)
class Work:
    """Every pipeline stage's kernels' work over `points` consecutive points (1: one pass), and the pass's schedule."""

    stages: tuple[tuple[KernelWork, ...], ...]
    points: int
    microbatches: int
    pp: int


def stage_times(work: Work, table: Sequence[Rate]) -> list[float]:
    """Each pipeline stage's time at the work's first point."""
    out = []
    for stage in work.stages:
        total = 0.0
        for slot, n, flops, _, weights, _, other, _ in stage:
            rate = table[slot]
            if isinstance(rate, CollectiveRate):
                total += n * rate.seconds(flops)
            else:
                compute_s, memory_s = kernel_seconds(flops, weights, other, rate)
                total += n * (compute_s if compute_s > memory_s else memory_s)
        out.append(total)
    return out


def stage_sum(work: Work, table: Sequence[Rate]) -> float:
    """Sum over the work's points of its slowest pipeline stage's time (one microbatch; no schedule, no overhead)."""
    if work.points == 1:
        return max(stage_times(work, table))
    stages: list[tuple[float, list[Kernel]]] = []
    for stage in work.stages:
        fixed, kernels = 0.0, []
        for slot, n, fa, fb, wa, wb, oa, ob in stage:
            rate = table[slot]
            if isinstance(rate, CollectiveRate):  # collectives carry activations, never the cache: one time
                fixed += n * rate.seconds(fa)
                continue
            ca, ma = kernel_seconds(fa, wa, oa, rate)
            if fa == fb and wa == wb and oa == ob:
                fixed += n * (ca if ca > ma else ma)
                continue
            cb, mb = kernel_seconds(fb, wb, ob, rate)
            kernels.append(((n * ca, n * cb), (n * ma, n * mb)))
        stages.append((fixed, kernels))
    return stages_max_sum(stages, work.points)
