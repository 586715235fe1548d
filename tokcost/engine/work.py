"""Work apart from rates: what a pass, or a span of decode steps, asks of each kernel; priced under any rates.

A Work is rates-free: per pipeline stage, each kernel's rate slot (its class: a kernel's kind and weight format,
or a collective's op and group; a RateTable holds each class's rate under one scenario), its count, and its
FLOPs, weight bytes and other bytes at the first and the last point (a collective: its payload). A single pass
has one point; a span of decode steps has one per context, and every kernel's work is linear between its ends
(features.py). pass_sum is where a Work meets rates: each kernel through roofline.kernel_seconds (or its
collective's rate), summed per pipeline stage (passcost.stage_seconds: overlapped collectives and the host's
launches applied), the pass through the stages (passcost.pipeline_seconds) summed over the points exactly
(series.pipeline_sum). A stage with overlap is the larger of two lines-sums (kernels + (1 - o) x overlapped,
(1 - o) x kernels + overlapped) and the host's launches a constant: each is one more variant of that stage.
The fit re-prices each row's Work under many rates.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tokcost.engine.collectives import Links
from tokcost.engine.layout import Layout
from tokcost.engine.passcost import Schedule, pipeline_seconds, stage_seconds
from tokcost.engine.roofline import (
    CollectiveRate,
    KernelRate,
    Rates,
    collective_rate,
    kernel_rate,
    kernel_seconds,
    kernels_launched,
)
from tokcost.engine.series import Kernel, Variant, pipeline_sum
from tokcost.engine.stages import Op, Stage

Rate = KernelRate | CollectiveRate
KernelKey = tuple[str, str, float, bool]  # what a kernel's rate depends on: kind, format, row_flops, FP8 operands
CollectiveKey = tuple[Op, int, bool]  # what a collective's depends on: its op, ranks, and whether it crosses nodes
Fixed = tuple[int, int, float, float, float]  # (rate slot, count, FLOPs, weight bytes, other bytes): one value
# a kernel whose work moves between the first and the last point: (slot, count, FLOPs at each end, weight bytes at
# each end, other bytes at each end)
Moving = tuple[int, int, float, float, float, float, float, float]
Collective = tuple[int, int, float]  # (slot, count, payload bytes): collectives carry activations, never the cache


@dataclass(frozen=True, slots=True)
class StageWork:
    """One pipeline stage's kernels: those whose work is one value over the points, those it moves, collectives."""

    fixed: tuple[Fixed, ...]
    moving: tuple[Moving, ...]
    collectives: tuple[Collective, ...]

    def launches(self, kernels_per_row: float) -> float:
        """Kernels (collectives included) launched for one microbatch through this stage (kernels_launched)."""
        rows = sum(e[1] for e in self.fixed) + sum(e[1] for e in self.moving)
        return kernels_launched(rows, sum(e[1] for e in self.collectives), kernels_per_row)


def kernel_key(stage: Stage) -> KernelKey:
    """The class of a kernel's rate."""
    return (stage.kind, stage.weight_format, stage.row_flops, stage.fp8_operands)


def collective_key(stage: Stage) -> CollectiveKey:
    """The class of a collective's rate."""
    assert stage.collective is not None
    return (stage.collective, stage.ranks, stage.crosses_nodes)


@dataclass(frozen=True, slots=True)
class RateTable:
    """A compiled pass's kernel classes and collectives at their rates under one scenario, by slot."""

    kernels: tuple[KernelRate, ...]
    collectives: tuple[CollectiveRate, ...]
    overlap: float = 0.0  # share of the overlapped collectives hidden behind kernels (Rates.comm_overlap)
    overlap_ops: frozenset[str] = frozenset()
    launch_s: float = 0.0  # the host's time per launched kernel of one GPU's pass (Rates.launch_s), up to ...
    gap_s: float = 0.0  # the GPU's idle time per kernel (Rates.kernel_overhead_s)
    kernels_per_row: float = 1.0  # kernels the engine launches per kernel row (Rates.kernels_per_row)
    graph_cap_tokens: float = math.inf  # ... the tokens per DP rank a graph era's graphs capture; past them:
    eager_launch_s: float = 0.0

    def launch_at(self, tokens: float) -> float:
        """The host's time per launched kernel of a pass whose graph replays a decode batch of `tokens` per DP rank
        (Rates.launch_s)."""
        return self.eager_launch_s if tokens > self.graph_cap_tokens else self.launch_s

    @staticmethod
    def of(
        kernels: Sequence[KernelKey], collectives: Sequence[CollectiveKey], rates: Rates, links: Links, layout: Layout
    ) -> RateTable:
        """Each class's rate under `rates` (roofline.kernel_rate, collective_rate)."""
        return RateTable.priced(
            tuple(kernel_rate(kind, fmt, rates, row_flops, fp8) for kind, fmt, row_flops, fp8 in kernels),
            tuple(
                collective_rate(op, n, rates, links, layout, crosses_nodes=crosses) for op, n, crosses in collectives
            ),
            rates,
            layout,
        )

    @staticmethod
    def priced(
        kernels: tuple[KernelRate, ...], collectives: tuple[CollectiveRate, ...], rates: Rates, layout: Layout
    ) -> RateTable:
        """Rates already looked up per slot (the fit keeps them per class), with the scenario's overlap, launch and
        gap costs on the layout's pipeline stage."""
        gpus = layout.stage_gpus
        return RateTable(kernels, collectives, rates.comm_overlap, frozenset(rates.overlap_ops),
                         rates.launch_s(gpus, 0.0), rates.kernel_overhead_s, rates.kernels_per_row,
                         rates.graph_cap_tokens, rates.launch_s(gpus, math.inf))  # fmt: skip


@dataclass(frozen=True, slots=True)
class Work:
    """Every pipeline stage's kernels' work over `points` consecutive points (1: one pass), and the pass's schedule."""

    stages: tuple[StageWork, ...]
    points: int
    microbatches: int
    pp: int
    tokens: float  # the decode batch a CUDA graph replays for it (features.graph_batch): the same at every point


def _kernel_seconds(entries: Sequence[Fixed], table: RateTable) -> float:
    """The time of kernels whose work is one value over the points."""
    total, kernels = 0.0, table.kernels
    for slot, n, flops, weights, other in entries:
        compute_s, memory_s = kernel_seconds(flops, weights, other, kernels[slot])
        total += n * (compute_s if compute_s > memory_s else memory_s)
    return total


def _collective_seconds(stage: StageWork, table: RateTable) -> tuple[float, float]:
    """(serial, overlapped) time of a stage's collectives (their payloads are one value over the points)."""
    serial = overlapped = 0.0
    for slot, n, payload in stage.collectives:
        rate = table.collectives[slot]
        if rate.op in table.overlap_ops:
            overlapped += n * rate.seconds(payload)
        else:
            serial += n * rate.seconds(payload)
    return serial, overlapped


def stage_times(work: Work, table: RateTable) -> list[float]:
    """Each pipeline stage's time at the work's first point."""
    out = []
    for stage in work.stages:
        launches = stage.launches(table.kernels_per_row)
        kernels = _kernel_seconds(stage.fixed, table) + launches * table.gap_s
        for slot, n, flops, _, weights, _, other, _ in stage.moving:
            compute_s, memory_s = kernel_seconds(flops, weights, other, table.kernels[slot])
            kernels += n * (compute_s if compute_s > memory_s else memory_s)
        serial, overlapped = _collective_seconds(stage, table)
        out.append(stage_seconds(kernels, serial, overlapped, table.overlap, launches * table.launch_at(work.tokens)))
    return out


def pass_sum(work: Work, table: RateTable, schedule: Schedule) -> float:
    """Sum over the work's points of its pass through every pipeline stage (passcost.pipeline_seconds; no
    overhead)."""
    if work.points == 1:
        return pipeline_seconds(stage_times(work, table), work.microbatches, schedule)
    stages: list[list[Variant]] = []
    o, launch_s = table.overlap, table.launch_at(work.tokens)
    for stage in work.stages:
        kernels: list[Kernel] = []
        for slot, n, fa, fb, wa, wb, oa, ob in stage.moving:
            rate = table.kernels[slot]
            ca, ma = kernel_seconds(fa, wa, oa, rate)
            cb, mb = kernel_seconds(fb, wb, ob, rate)
            kernels.append(((n * ca, n * cb), (n * ma, n * mb)))
        launches = stage.launches(table.kernels_per_row)
        fixed = _kernel_seconds(stage.fixed, table) + launches * table.gap_s
        serial, overlapped = _collective_seconds(stage, table)
        variants: list[Variant] = [(serial + fixed + (1 - o) * overlapped, kernels)]
        if o and overlapped:  # the collectives lead: the kernels hide behind them
            scaled = [((1 - o) * x0, (1 - o) * x1) for x0, x1 in (line for pair in kernels for line in pair)]
            led = [(scaled[i], scaled[i + 1]) for i in range(0, len(scaled), 2)]
            variants.append((serial + overlapped + (1 - o) * fixed, led))
        if launches and launch_s:  # the host's launches: a floor on the stage's time
            variants.append((launches * launch_s, []))
        stages.append(variants)
    return pipeline_sum(stages, work.points, work.microbatches, fill=schedule == "fill")
