"""What one GPU SKU itself sustains, as shares of its datasheet: a large copy and a large dense GEMM per dtype.

The hardware half of "expected" (the engine profile is the other half): measured on the hardware, never
fitted on serving rows. Each figure carries its source, an uncertainty and how it is known:
- `measured`: a published microbenchmark of this SKU (STREAM/BabelStream-style copy or triad, nvbandwidth,
  cuBLAS/hipBLASLt GEMMs), or `tokcost calibrate` on the user's own device;
- `anchor`: a stated assumption where no figure for this SKU was found (a sibling SKU, the same memory system).
copy_bandwidth is a share of `memory_bandwidth_gb_s`; gemm[dtype] a share of the dense `peak_tflops[dtype]`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

_FROZEN = ConfigDict(frozen=True, extra="forbid", strict=True, str_strip_whitespace=True)
# fp16 and bf16 run on the same tensor cores at the same dense rate: an entry for either serves both
SIXTEEN_BIT_PARTNER = {"bf16": "fp16", "fp16": "bf16"}
SHORT_SOURCE_CHARS = 100  # what `provenance` keeps of a source: its first clause, clipped


class SustainedFigure(BaseModel):
    """One sustained share of a datasheet figure, with its spread and where it comes from."""

    model_config = _FROZEN

    fraction: float = Field(gt=0, le=1)  # of the datasheet figure; a measurement above it lifts the ceiling
    uncertainty: float = Field(ge=0, le=0.5)  # +- absolute, from the sources' spread or the method
    basis: Literal["measured", "anchor"]
    source: str = Field(min_length=1, max_length=4000)  # URL or repo+path, the figure as printed, the arithmetic

    @field_validator("source")
    @classmethod
    def _source_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("every sustained figure needs a source: the benchmark and its figure, or the assumption")
        return value

    @property
    def provenance(self) -> str:
        """'measured: <short source>' or 'anchor: <assumption>', for --explain."""
        first = self.source.split("; ")[0].strip().removeprefix("assumption: ")  # 'anchor:' says it already
        if len(first) > SHORT_SOURCE_CHARS:
            first = first[: SHORT_SOURCE_CHARS - 3].rstrip() + "..."
        return f"{self.basis}: {first}"


class Sustained(BaseModel):
    """A large device copy's share of the datasheet bandwidth, and a large GEMM's share of each dense peak."""

    model_config = _FROZEN

    copy_bandwidth: SustainedFigure
    # keys are dtypes of the spec's peak_tflops; GpuSpec checks that every listed dtype has one (fp16/bf16 share)
    gemm: dict[str, SustainedFigure] = Field(min_length=1)

    def gemm_for(self, dtype: str) -> SustainedFigure | None:
        """The GEMM share at `dtype`: its own entry, else its 16-bit partner's (fp16 <-> bf16), else None."""
        for key in (dtype, SIXTEEN_BIT_PARTNER.get(dtype, dtype)):
            if key in self.gemm:
                return self.gemm[key]
        return None

    def missing_gemm(self, dtypes: list[str]) -> list[str]:
        """The dtypes (of a spec's peak_tflops) that have no GEMM share of their own nor a 16-bit partner's."""
        return [d for d in dtypes if self.gemm_for(d) is None]

    @property
    def provenance(self) -> dict[str, str]:
        """Where each figure comes from, by name ('copy_bandwidth', 'gemm.bf16', ...)."""
        out = {"copy_bandwidth": self.copy_bandwidth.provenance}
        out.update({f"gemm.{dtype}": figure.provenance for dtype, figure in self.gemm.items()})
        return out
