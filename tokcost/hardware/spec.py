"""GpuSpec: datasheet ceilings of one accelerator (decimal units, dense peaks only), plus achievable fractions."""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tokcost.units import COMPUTE_DTYPES, GB, TFLOPS, US

_FROZEN = ConfigDict(frozen=True, extra="forbid")
MIN_TFLOPS = 0.001  # 1 GFLOP/s: below any accelerator, and it keeps every time finite


class Achievable(BaseModel):
    """Fractions of the datasheet a tuned decode loop reaches; used for "expected", never for "ceiling"."""

    model_config = _FROZEN

    # fractions under 1% are typos, not tuned loops; the lower bounds also keep every time finite
    bandwidth: float = Field(default=1.0, ge=0.01, le=1)
    compute: float = Field(default=1.0, ge=0.01, le=1)
    step_overhead_us: float = Field(default=0.0, ge=0, le=1_000_000)  # per forward pass: launches, sampling
    request_overhead_us: float = Field(default=0.0, ge=0, le=10_000_000)  # once per request, added to TTFT
    allreduce_latency_us: float | None = Field(default=None, ge=0, le=1_000_000)  # None: interconnect_latency_us
    weight_only_quant_bandwidth: float | None = Field(default=None, ge=0.01, le=1)
    source: str = Field(default="", max_length=2000)


class GpuSpec(BaseModel):
    """One GPU's ceilings as published: memory, bandwidth, dense peak TFLOP/s per dtype, power, links, price."""

    model_config = _FROZEN

    name: str = Field(min_length=1, max_length=200)
    source: str = Field(min_length=1, max_length=4000)
    # lower bounds keep every time finite: no accelerator has under 0.1 GB or 1 GB/s
    memory_gb: float = Field(ge=0.1, le=100_000)
    memory_bandwidth_gb_s: float = Field(ge=1, le=1_000_000)
    peak_tflops: dict[str, float]
    tdp_w: float | None = Field(default=None, ge=1, le=100_000)  # None: unknown (e.g. a calibrated CPU)
    interconnect_gb_s: float | None = Field(default=None, ge=0.1, le=1_000_000)
    interconnect_latency_us: float = Field(default=5.0, ge=0, le=1_000_000)
    price_per_hour_usd: float | None = Field(default=None, ge=0, le=100_000)
    achievable: Achievable = Achievable()
    device_names: list[str] = Field(default_factory=list)
    provenance: dict[str, str] = Field(default_factory=dict)
    notes: str = Field(default="", max_length=10_000)

    @field_validator("source")
    @classmethod
    def _source_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("every GPU figure needs a source; give a datasheet URL or 'measured by ...'")
        return value

    @field_validator("peak_tflops")
    @classmethod
    def _known_dense_peaks(cls, value: dict[str, float]) -> dict[str, float]:
        if not value:
            raise ValueError(f"give at least one dense peak, keys among: {', '.join(COMPUTE_DTYPES)}")
        for key, tflops in value.items():
            if key not in COMPUTE_DTYPES:
                raise ValueError(f"unknown dtype {key!r}; allowed: {', '.join(COMPUTE_DTYPES)}")
            if not isinstance(tflops, (int, float)) or not math.isfinite(tflops) or not MIN_TFLOPS <= tflops <= 1e6:
                raise ValueError(f"{key}: must be a number of TFLOP/s from {MIN_TFLOPS} to 1,000,000 (got {tflops!r})")
        return value

    @property
    def memory_bytes(self) -> float:
        """Capacity in bytes (decimal GB as marketed)."""
        return self.memory_gb * GB

    @property
    def bandwidth_bytes_per_s(self) -> float:
        """Peak memory bandwidth in B/s."""
        return self.memory_bandwidth_gb_s * GB

    @property
    def interconnect_bytes_per_s(self) -> float | None:
        """GPU-to-GPU bandwidth per direction in B/s; None without a link."""
        return self.interconnect_gb_s * GB if self.interconnect_gb_s else None

    @property
    def interconnect_latency_s(self) -> float:
        """Fixed latency of one collective step, in seconds."""
        return self.interconnect_latency_us * US

    def peak_flops_per_s(self, dtype: str) -> float | None:
        """Dense peak FLOP/s for matmuls in `dtype`; fp16 and bf16 stand in for each other."""
        for key in (dtype, {"bf16": "fp16", "fp16": "bf16"}.get(dtype, dtype)):
            if key in self.peak_tflops:
                return self.peak_tflops[key] * TFLOPS
        return None
