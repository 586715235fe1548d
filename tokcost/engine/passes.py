"""A forward pass priced at one point: the kernels of every pipeline stage on their rooflines, the slowest stage.

A convenience over compiled.py for a single pass: it compiles the configuration, binds the rates and prices the
pass stage by stage. Callers that price many passes of one configuration keep a BoundPass (Deployment.bound).
"""

from __future__ import annotations

from collections.abc import Sequence

from tokcost.engine.collectives import Links
from tokcost.engine.compiled import CompiledPass, microbatches
from tokcost.engine.layout import Layout
from tokcost.engine.passcost import PassCost, Schedule
from tokcost.engine.roofline import Rates
from tokcost.engine.stages import Segment
from tokcost.engine.workload import Precision
from tokcost.models.spec import ModelSpec

__all__ = ["microbatches", "pass_cost"]


def pass_cost(
    model: ModelSpec,
    precision: Precision,
    layout: Layout,
    links: Links,
    rates: Rates,
    segments: Sequence[Segment],
    *,
    schedule: Schedule,
    extra_overhead_s: float = 0.0,
) -> PassCost:
    """The pass over `segments` (the whole replica's), priced on its slowest pipeline stage."""
    bound = CompiledPass(model, precision, layout).bind(rates, links)
    return bound.cost(segments, schedule=schedule, extra_overhead_s=extra_overhead_s)
