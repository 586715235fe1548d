"""One forward pass of a serving engine over a mix of sequences: the unit continuous batching is built from.

A pass runs several segments at once, each a group of sequences that already hold `cached_tokens` of KV and
compute `new_tokens` more: a decode step is Segment(B, c, 1); a prefill is Segment(B, prefix, P - prefix);
a chunked-prefill step of a continuous-batching server is Segment(b, c, 1) plus Segment(1, done, chunk).
The weights are read once for the whole pass (Pope et al. 2022; vLLM and SGLang's mixed batches).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tokcost.engine.memory import kv_capacity_tokens
from tokcost.engine.roofline import PassCost, Rates, ceiling_rates, expected_rates, price_pass
from tokcost.engine.traffic import segment_counts
from tokcost.engine.workload import Precision, Workload, is_weight_only, resolve_precision
from tokcost.hardware.spec import GpuSpec
from tokcost.models.spec import ModelSpec

Scenario = Literal["ceiling", "expected"]


@dataclass(frozen=True, slots=True)
class Segment:
    """`sequences` sequences that hold `cached_tokens` tokens of KV each and compute `new_tokens` more."""

    sequences: float
    cached_tokens: float
    new_tokens: float

    @property
    def tokens(self) -> float:
        """Tokens this segment runs through the blocks."""
        return self.sequences * self.new_tokens


def scenario_rates(gpu: GpuSpec, precision: Precision, scenario: Scenario) -> Rates:
    """Datasheet peaks ("ceiling") or achievable rates ("expected") for this precision."""
    if scenario == "ceiling":
        return ceiling_rates(gpu, precision.compute)
    return expected_rates(gpu, precision.compute, weight_only_quant=is_weight_only(precision))


def step_cost(
    model: ModelSpec,
    gpu: GpuSpec,
    workload: Workload,
    *,
    segments: list[Segment],
    scenario: Scenario,
    extra_overhead_s: float = 0.0,
) -> PassCost:
    """Time of one pass over `segments` on the workload's GPUs and precision, as a sum of rooflines."""
    precision = resolve_precision(model, workload)
    rates = scenario_rates(gpu, precision, scenario)
    counts = segment_counts(model, precision, [(s.sequences, s.cached_tokens, s.new_tokens) for s in segments],
                            workload.gpus)  # fmt: skip
    return price_pass(counts, workload.gpus, rates, extra_overhead_s=extra_overhead_s)


def kv_capacity(model: ModelSpec, gpu: GpuSpec, workload: Workload) -> float:
    """Tokens of KV one replica holds beside weights, workspace (at the workload's batch) and reserve."""
    return kv_capacity_tokens(model, gpu, workload, resolve_precision(model, workload))
