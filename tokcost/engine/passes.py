"""A forward pass priced: the kernels of every pipeline stage on their rooflines, the slowest stage, the schedule.

Pipeline schedule (GPipe-style microbatches, as vLLM and TensorRT-LLM run pipeline parallelism): the batch
splits into m = min(pp, sequences) microbatches. In steady decode every stage stays busy and each sequence
gets a token every max(m, pp) stage-times; a pass from an empty pipeline (a prefill) takes m + pp - 1
stage-times, the (pp - 1) being the fill bubble. With pp = 1 both are one stage-time.
"""

from __future__ import annotations

import math

from tokcost.engine.collectives import Links
from tokcost.engine.layout import Layout
from tokcost.engine.roofline import PassCost, Rates, Schedule, price_stage
from tokcost.engine.stages import Segment, pipeline_stages
from tokcost.engine.workload import Precision
from tokcost.models.spec import ModelSpec


def microbatches(layout: Layout, segments: list[Segment]) -> int:
    """Microbatches a pass splits into: one per pipeline stage, at most one per sequence."""
    sequences = sum(s.sequences for s in segments)
    return max(1, min(layout.pp, math.floor(sequences)))


def pass_cost(
    model: ModelSpec,
    precision: Precision,
    layout: Layout,
    links: Links,
    rates: Rates,
    segments: list[Segment],
    *,
    schedule: Schedule,
    extra_overhead_s: float = 0.0,
) -> PassCost:
    """The pass over `segments` (the whole replica's), priced on its slowest pipeline stage."""
    m = microbatches(layout, segments)
    share = [Segment(s.sequences / m, s.cached_tokens, s.new_tokens) for s in segments]
    priced = [
        tuple(price_stage(st, rates, links, layout) for st in stage)
        for stage in pipeline_stages(model, precision, layout, share)
    ]
    slowest = max(priced, key=lambda stage: sum(s.seconds for s in stage))
    return PassCost(slowest, rates.step_overhead_s + extra_overhead_s, layout.pp, m, schedule)
