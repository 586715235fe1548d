"""Serving-engine profiles: what an engine adds on top of the hardware when it runs a model ("expected").

"Expected" = hardware x engine. The GPU spec keeps what is the hardware's (the achievable fraction of its
bandwidth and compute per family); a profile keeps what the engine's kernels and scheduler reach relative to
that: an efficiency per kernel class, fixed costs per step and per request, and how well its collectives use
a link. A profile of 1.0 everywhere and no overhead (the `generic` profile before any fit) leaves the GPU's
own fractions untouched. Profiles are YAML in tokcost/specs/engines/, each with its source and fit digest.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

_FROZEN = ConfigDict(frozen=True, extra="forbid")
Efficiency = float  # a fraction of what the GPU achieves for this kernel class: 0.05..1.5 (a tuned kernel may beat it)


class KernelEfficiency(BaseModel):
    """Per kernel class, the engine's efficiency relative to the GPU family's achievable rate."""

    model_config = _FROZEN

    dense_gemm: dict[str, Efficiency] = Field(default_factory=dict)  # by compute dtype: bf16, fp8, int8, fp4
    weight_only_gemm: dict[str, Efficiency] = Field(default_factory=dict)  # by weight format: int4-g128, q4_k_m, ...
    decode_attention: Efficiency = Field(default=1.0, ge=0.05, le=1.5)
    moe_grouped_gemm: Efficiency = Field(default=1.0, ge=0.05, le=1.5)
    collective: Efficiency = Field(default=1.0, ge=0.05, le=1.5)  # of the link's own efficiency


class EngineProfile(BaseModel):
    """One serving engine's profile: kernel efficiencies and fixed costs, with where they come from."""

    model_config = _FROZEN

    name: str = Field(min_length=1, max_length=100)
    source: str = Field(min_length=1, max_length=4000)
    kernels: KernelEfficiency = KernelEfficiency()
    step_overhead_us: float | None = Field(default=None, ge=0, le=1_000_000)  # None: the GPU spec's
    request_overhead_us: float | None = Field(default=None, ge=0, le=10_000_000)  # None: the GPU spec's
    collective_latency_us: float | None = Field(default=None, ge=0, le=1_000_000)  # None: the link's
    fit: str = Field(default="", max_length=4000)  # how and on what it was fitted (digest of the train rows)
    notes: str = Field(default="", max_length=10_000)


GENERIC = EngineProfile(name="generic", source="identity: the GPU family's achievable fractions, no engine terms")


def load_engine(name_or_path: str) -> EngineProfile:
    """A validated profile from a built-in name (`vllm`) or a YAML file."""
    from pydantic import ValidationError

    from tokcost.catalog import locate
    from tokcost.spec_errors import validation_error

    where, data = locate("engines", name_or_path)
    try:
        return EngineProfile.model_validate(data)
    except ValidationError as exc:
        raise validation_error(where, exc) from None


def engine_for(engine: EngineProfile | str | None = None) -> EngineProfile:
    """The profile given (a profile, a built-in name or a file), else the generic one."""
    return engine if isinstance(engine, EngineProfile) else load_engine(engine or "generic")
