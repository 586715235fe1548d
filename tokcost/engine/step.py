"""One forward pass of a serving engine over a mix of sequences: the unit continuous batching is built from.

A pass runs several segments at once, each a group of sequences that already hold `cached_tokens` of KV and
compute `new_tokens` more: a decode step is Segment(B, c, 1); a prefill is Segment(B, prefix, P - prefix);
a chunked-prefill step of a continuous-batching server is Segment(b, c, 1) plus Segment(1, done, chunk).
The weights are read once for the whole pass (Pope et al. 2022; vLLM and SGLang's mixed batches).
step_cost is the one-pass convenience (it builds the deployment and compiles its kernels each call); a caller
that prices many passes of one deployment keeps `deployment(...).bound(rates)` (serving/steps.py does).
"""

from __future__ import annotations

from typing import Literal

from tokcost.engine.estimate import deployment
from tokcost.engine.memory import kv_capacity_tokens
from tokcost.engine.passcost import PassCost
from tokcost.engine.passes import pass_cost
from tokcost.engine.stages import Segment
from tokcost.engine.workload import Workload
from tokcost.hardware.spec import GpuSpec, Link
from tokcost.models.spec import ModelSpec
from tokcost.profiles import GENERIC, EngineProfile

Scenario = Literal["ceiling", "expected"]
__all__ = ["Scenario", "Segment", "kv_capacity", "step_cost"]


def step_cost(
    model: ModelSpec,
    gpu: GpuSpec,
    workload: Workload,
    *,
    segments: list[Segment],
    scenario: Scenario,
    extra_overhead_s: float = 0.0,
    network: Link | None = None,
    engine: EngineProfile = GENERIC,
) -> PassCost:
    """Time of one pass over `segments` on the workload's layout and precision (a steady pipeline)."""
    d = deployment(model, gpu, workload, network, engine)
    return pass_cost(
        model,
        d.precision,
        d.layout,
        d.links,
        d.rates(scenario),
        segments,
        schedule="steady",
        extra_overhead_s=extra_overhead_s,
    )


def kv_capacity(
    model: ModelSpec, gpu: GpuSpec, workload: Workload, network: Link | None = None, engine: EngineProfile = GENERIC
) -> float:
    """Tokens of KV one replica holds beside weights, workspace (at the workload's batch) and reserve."""
    d = deployment(model, gpu, workload, network, engine)
    return kv_capacity_tokens(model, gpu, workload, d.precision, d.layout)
