"""A configuration's kernels counted once, then priced for one point or a million.

Compile: the stage builders of stages.py run once per (model, precision, layout) on the features as linear forms
(forms.py), so every pipeline stage's kernels become rows of coefficients: FLOPs, weight bytes, other bytes and a
collective's payload. Bind: under one scenario's rates and links each row gets its divisors once (roofline's
kernel_rate and collective_rate, where the engine's efficiencies are applied and capped). A point is then its
exact feature vector (features.py) and a few dot products, timed by roofline.kernel_seconds and
CollectiveRate.seconds, the only places a time is computed. One point's PassCost (the breakdown, --explain,
--journey) runs the builders on that point's features and prices each stage with the same rates.

Pipeline schedule (GPipe-style microbatches, as vLLM and TensorRT-LLM run pipeline parallelism): the batch
splits into m = min(pp, sequences) microbatches. In steady decode each sequence's next token waits for its last
to pass every stage, and the slowest stage serves all m microbatches in turn: a step takes max(sum of the
stages, m x the slowest); a pass from an empty pipeline (a prefill) takes the sum of the stages plus m - 1 of
the slowest (passcost.pipeline_seconds). Balanced stages give max(m, pp) and m + pp - 1 stage-times; an
unbalanced last stage (a large LM head) at one microbatch costs its own time once, not pp times.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tokcost.engine.collectives import Links
from tokcost.engine.features import FeatureSpace, Segment, graph_batch
from tokcost.engine.forms import Form
from tokcost.engine.layout import Layout
from tokcost.engine.passcost import Bound, PassCost, Schedule, pipeline_seconds, stage_seconds
from tokcost.engine.roofline import CollectiveRate, Rates, kernel_seconds, priced
from tokcost.engine.stages import Stage, pass_stages
from tokcost.engine.work import (
    Collective,
    CollectiveKey,
    Fixed,
    KernelKey,
    Moving,
    Rate,
    RateTable,
    StageWork,
    Work,
    collective_key,
    kernel_key,
    pass_sum,
)
from tokcost.engine.workload import Precision
from tokcost.models.spec import ModelSpec


@dataclass(frozen=True, slots=True)
class Row:
    """One kernel of a compiled pass: its stage (names, kind, count) and its work as forms over the features."""

    stage: Stage[Form]
    flops: Form
    weight_bytes: Form
    other_bytes: Form  # bytes read and written that are not weights
    payload: Form | None  # a collective's payload (None: a kernel on its roofline)

    @staticmethod
    def of(stage: Stage[Form]) -> Row:
        """The row of a stage the builders returned on symbolic features."""
        f = Form.of
        if stage.collective is not None:
            return Row(stage, Form(), Form(), Form(), f(stage.payload_bytes))
        weights = f(stage.weight_bytes)
        return Row(stage, f(stage.flops), weights, f(stage.bytes_read) + f(stage.bytes_written) - weights, None)


def microbatches(layout: Layout, segments: Sequence[Segment]) -> int:
    """Microbatches a pass splits into: one per pipeline stage, at most one per prompt and one per decoding
    sequence, so that each holds whole prompts beside its share of the decodes (a step that carries one prefill
    chunk beside the decodes runs as one microbatch, as vLLM schedules a batch of everything not in flight). The
    prompts count the same whether packed in one segment or given one a segment."""
    counts = [sum(s.sequences for s in segments if (s.new_tokens > 1) is prefill) for prefill in (False, True)]
    present = [n for n in counts if n > 0]
    return max(1, min(layout.pp, math.floor(min(present)))) if present else 1


def share(segments: Sequence[Segment], m: int) -> list[Segment]:
    """One microbatch's part of each segment."""
    return [Segment(s.sequences / m, s.cached_tokens, s.new_tokens) for s in segments] if m > 1 else list(segments)


class CompiledPass:
    """Every pipeline stage's kernels of one (model, precision, layout), as rows of forms over the pass's features."""

    def __init__(self, model: ModelSpec, precision: Precision, layout: Layout) -> None:
        self.model, self.precision, self.layout = model, precision, layout
        self.space = FeatureSpace.of(model, layout)
        symbols = self.space.symbols()
        self.stages = tuple(tuple(Row.of(s) for s in st) for st in pass_stages(model, precision, layout, symbols))
        rows = [row for stage in self.stages for row in stage]
        # the rate classes its kernels and collectives run at, and each row's slot among them
        kernels = list(dict.fromkeys(kernel_key(r.stage) for r in rows if r.payload is None))
        collectives = list(dict.fromkeys(collective_key(r.stage) for r in rows if r.payload is not None))
        self.kernel_keys, self.collective_keys = tuple(kernels), tuple(collectives)
        self.slots = tuple(tuple(self._slot(r, kernels, collectives) for r in stage) for stage in self.stages)

    @staticmethod
    def _slot(row: Row, kernels: list[KernelKey], collectives: list[CollectiveKey]) -> int:
        if row.payload is None:
            return kernels.index(kernel_key(row.stage))
        return collectives.index(collective_key(row.stage))

    def vector(self, segments: Sequence[Segment]) -> list[float]:
        """The features of one microbatch of a pass over `segments` (the whole replica's)."""
        return self.space.vector(share(segments, microbatches(self.layout, segments)))

    def point_stages(self, x: Sequence[float]) -> list[list[Stage[float]]]:
        """The stages at one point, built by the same builders on its numbers (names and notes included)."""
        return pass_stages(self.model, self.precision, self.layout, self.space.named(x))

    def work_between(self, xa: Sequence[float], xb: Sequence[float], points: int, m: int) -> Work:
        """The kernels' work at feature vectors xa (first point) and xb (last of `points`), m microbatches."""
        stages = []
        for rows, slots in zip(self.stages, self.slots, strict=True):
            fixed: list[Fixed] = []
            moving: list[Moving] = []
            collectives: list[Collective] = []
            for row, slot in zip(rows, slots, strict=True):
                n = row.stage.count
                if row.payload is not None:  # activations and routed tokens: never the cache, one value over a span
                    payload = row.payload(xa)
                    assert xa is xb or row.payload(xb) == payload, f"{row.stage.name} moves over the span"
                    collectives.append((slot, n, payload))
                    continue
                fa, wa, oa = row.flops(xa), row.weight_bytes(xa), row.other_bytes(xa)
                fb, wb, ob = (fa, wa, oa) if xa is xb else (row.flops(xb), row.weight_bytes(xb), row.other_bytes(xb))
                if (fa, wa, oa) == (fb, wb, ob):
                    fixed.append((slot, n, fa, wa, oa))
                else:
                    moving.append((slot, n, fa, fb, wa, wb, oa, ob))
            stages.append(StageWork(tuple(fixed), tuple(moving), tuple(collectives)))
        return Work(tuple(stages), points, m, self.layout.pp, graph_batch(xa))

    def work(self, segments: Sequence[Segment]) -> Work:
        """One pass over `segments` (the whole replica's): one microbatch's work on every stage."""
        m = microbatches(self.layout, segments)
        x = self.space.vector(share(segments, m))
        return self.work_between(x, x, 1, m)

    def decode_work(self, batch: float, first: int, last: int) -> tuple[Work, ...]:
        """Decode steps of `batch` sequences at cached contexts first..last: one Work per span on which every
        kernel's work is linear in the context (split where a window fills, at chunk boundaries, at a first
        state read: attend.py)."""
        m = microbatches(self.layout, [Segment(batch, first, 1)])
        spans, a = [], first
        for kink in self.space.pieces.kinks(first, last):
            spans.append((a, kink - 1))
            a = kink
        spans.append((a, last))
        vector = self.space.vector
        return tuple(
            self.work_between(vector([Segment(batch / m, a, 1)]), vector([Segment(batch / m, b, 1)]), b - a + 1, m)
            for a, b in spans
        )

    def rate_table(self, rates: Rates, links: Links) -> RateTable:
        """The rate of each of its kernel classes and collectives under one scenario."""
        return RateTable.of(self.kernel_keys, self.collective_keys, rates, links, self.layout)

    def bind(self, rates: Rates, links: Links) -> BoundPass:
        """The rows with their rates under one scenario."""
        return BoundPass(self, rates, links)


def pass_seconds(work: Work, table: RateTable, *, schedule: Schedule, overhead_s: float) -> float:
    """A pass from its work: through every pipeline stage under the schedule, plus its fixed overheads."""
    return pass_sum(work, table, schedule) + overhead_s


def mean_step_seconds(spans: Sequence[Work], table: RateTable, *, overhead_s: float) -> float:
    """The mean decode step over spans of contexts (a steady pipeline), summed exactly, plus its fixed overhead."""
    return sum(pass_sum(w, table, "steady") for w in spans) / sum(w.points for w in spans) + overhead_s


def row_seconds(row: Row, rate: Rate, x: Sequence[float]) -> float:
    """All occurrences of one kernel at feature vector x: the larger side of its roofline, or its collective."""
    if isinstance(rate, CollectiveRate):
        assert row.payload is not None
        return row.stage.count * rate.seconds(row.payload(x))
    compute_s, memory_s = kernel_seconds(row.flops(x), row.weight_bytes(x), row.other_bytes(x), rate)
    return row.stage.count * (compute_s if compute_s > memory_s else memory_s)


def row_bound(row: Row, rate: Rate, x: Sequence[float]) -> tuple[float, Bound]:
    """All occurrences of one kernel at x, and what bounds it."""
    if isinstance(rate, CollectiveRate):
        return row_seconds(row, rate, x), "interconnect"
    compute_s, memory_s = kernel_seconds(row.flops(x), row.weight_bytes(x), row.other_bytes(x), rate)
    return row.stage.count * max(compute_s, memory_s), "compute" if compute_s > memory_s else "memory"


class BoundPass:
    """A compiled pass under one scenario: prices any pass of its configuration, one point or many."""

    def __init__(self, compiled: CompiledPass, rates: Rates, links: Links) -> None:
        self.compiled, self.rates, self.links = compiled, rates, links
        self.table = compiled.rate_table(rates, links)
        table = self.table
        self.stages: tuple[tuple[tuple[Row, Rate], ...], ...] = tuple(
            tuple(
                (row, table.kernels[slot] if row.payload is None else table.collectives[slot])
                for row, slot in zip(rows, slots, strict=True)
            )
            for rows, slots in zip(compiled.stages, compiled.slots, strict=True)
        )
        self.overhead_s = rates.step_overhead_s
        # the host's time to launch each stage's kernels and collectives (eager eras; 0 with graphs)
        counts = [
            rates.launched(sum(r.stage.count for r in rows if r.payload is None),
                           sum(r.stage.count for r in rows if r.payload is not None))
            for rows in compiled.stages
        ]  # fmt: skip
        self.launches = tuple(counts)
        # the GPU's idle time between each stage's kernels (every era: a graph replays them back to back, not free)
        self.gap_s = tuple(n * rates.kernel_overhead_s for n in counts)

    def stage_seconds(self, x: Sequence[float]) -> list[float]:
        """One microbatch through each pipeline stage at feature vector x (each row's work priced as it is read;
        overlapped collectives and the host's launches as passcost.stage_seconds applies them)."""
        out = []
        for stage, launch_s, gap_s in zip(self.stages, self.launch_s(x), self.gap_s, strict=True):
            kernels, serial, overlapped = gap_s, 0.0, 0.0
            for row, rate in stage:
                seconds = row_seconds(row, rate, x)
                if not isinstance(rate, CollectiveRate):
                    kernels += seconds
                elif rate.op in self.rates.overlap_ops:
                    overlapped += seconds
                else:
                    serial += seconds
            out.append(stage_seconds(kernels, serial, overlapped, self.rates.comm_overlap, launch_s))
        return out

    def launch_s(self, x: Sequence[float]) -> tuple[float, ...]:
        """The host's time to launch each stage's kernels and collectives in a pass at feature vector x (eager eras,
        and a graph era past its captured batch; 0 where a graph replays them: Rates.launch_s)."""
        per = self.rates.launch_s(self.compiled.layout.stage_gpus, graph_batch(x))
        return tuple(n * per for n in self.launches)

    def slowest(self, x: Sequence[float]) -> int:
        """Index of the slowest pipeline stage at feature vector x (the first of equals)."""
        times = self.stage_seconds(x)
        return times.index(max(times))

    def seconds(
        self, segments: Sequence[Segment], *, schedule: Schedule = "steady", extra_overhead_s: float = 0.0
    ) -> float:
        """The pass over `segments` (the whole replica's): through every stage under the schedule, plus overheads."""
        m = microbatches(self.compiled.layout, segments)
        times = self.stage_seconds(self.compiled.space.vector(share(segments, m)))
        return pipeline_seconds(times, m, schedule) + (self.host_s(segments) + extra_overhead_s)

    def host_s(self, segments: Sequence[Segment]) -> float:
        """The host's serial time for a pass over `segments`: per step plus per sequence (Rates.host_s)."""
        return self.rates.host_s(sum(s.sequences for s in segments), self.compiled.layout.dp)

    def decode_mean(self, *, batch: float, first: int, last: int) -> float:
        """The mean decode step of `batch` sequences over cached contexts first..last, exactly."""
        spans = self.compiled.decode_work(batch, first, last)
        return mean_step_seconds(spans, self.table, overhead_s=self.rates.host_s(batch, self.compiled.layout.dp))

    def cost(self, segments: Sequence[Segment], *, schedule: Schedule, extra_overhead_s: float = 0.0) -> PassCost:
        """The same pass with every stage priced, on its slowest pipeline stage (the breakdown and --explain)."""
        m = microbatches(self.compiled.layout, segments)
        x = self.compiled.space.vector(share(segments, m))
        stages = self.compiled.point_stages(x)
        priced_stages = [
            tuple(priced(st, rate) for st, (_, rate) in zip(point, bound, strict=True))
            for point, bound in zip(stages, self.stages, strict=True)
        ]
        times = self.stage_seconds(x)
        i = times.index(max(times))
        host_s = self.host_s(segments) + extra_overhead_s
        launch_s = self.launch_s(x)[i]
        return PassCost(priced_stages[i], host_s, self.compiled.layout.pp, m, schedule, self.rates.comm_overlap,
                        frozenset(self.rates.overlap_ops), launch_s, self.gap_s[i], tuple(times))  # fmt: skip
