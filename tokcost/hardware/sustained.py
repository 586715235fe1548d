"""What one GPU SKU itself sustains, as shares of its datasheet: a large copy and a large dense GEMM per dtype.

The hardware half of "expected" (the engine profile is the other half): measured on the hardware, never
fitted on serving rows. Each figure carries its source, an uncertainty and how it is known:
- `measured`: a published microbenchmark of this SKU (STREAM/BabelStream-style copy or triad, nvbandwidth,
  cuBLAS/hipBLASLt GEMMs), or `tokcost calibrate` on the user's own device;
- `anchor`: a stated assumption where no figure for this SKU was found (a sibling SKU, the same memory system).
copy_bandwidth is a share of `memory_bandwidth_gb_s`; gemm[dtype] a share of the dense `peak_tflops[dtype]`.
"Expected" streams every HBM byte at the copy share and runs every matmul at its dtype's GEMM share (times the
engine's efficiency, roofline.expected_rates). A spec with no `sustained` block (a user's file) gets ANCHORS.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

_FROZEN = ConfigDict(frozen=True, extra="forbid", strict=True, str_strip_whitespace=True)
# fp16 and bf16 run on the same tensor cores at the same dense rate: an entry for either serves both
SIXTEEN_BIT_PARTNER = {"bf16": "fp16", "fp16": "bf16"}
SHORT_SOURCE_CHARS = 100  # what `provenance` keeps of a source: its first clause, clipped


def _first_clause(text: str) -> str:
    """Text up to its first '; ' outside parentheses (a clause cut inside '(read + write; ...)' would leave it open)."""
    depth = 0
    for i, ch in enumerate(text):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth <= 0 and text.startswith("; ", i):
            return text[:i]
    return text


class _Sourced(BaseModel):
    """A figure with its basis and source (each subclass declares `basis` and `source` among its own fields, in
    the order a spec writes them): the source may not be blank, and --explain prints its provenance."""

    model_config = _FROZEN
    if TYPE_CHECKING:  # each subclass's own fields (a field here would come first in its dump)
        basis: str
        source: str

    @field_validator("source", check_fields=False)
    @classmethod
    def _source_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("every sustained figure needs a source: the benchmark and its figure, or the assumption")
        return value

    @property
    def provenance(self) -> str:
        """'<basis>: <the source's first clause, clipped>' (an anchor's 'assumption: ' dropped: the basis says it),
        for --explain."""
        first = _first_clause(self.source).strip().removeprefix("assumption: ")
        if len(first) > SHORT_SOURCE_CHARS:
            first = first[: SHORT_SOURCE_CHARS - 3].rstrip() + "..."
        return f"{self.basis}: {first}"


class SustainedFigure(_Sourced):
    """One sustained share of a datasheet figure, with its spread and where it comes from."""

    fraction: float = Field(gt=0, le=1)  # of the datasheet figure; a measurement above it lifts the ceiling
    uncertainty: float = Field(ge=0, le=0.5)  # +- absolute, from the sources' spread or the method
    basis: Literal["measured", "anchor"]
    source: str = Field(min_length=1, max_length=4000)  # URL or repo+path, the figure as printed, the arithmetic


class RowPace(_Sourced):
    """How fast a grouped GEMM over routed experts takes its gathered rows on this GPU: elements of the rows' inner
    dimensions per second, a cost per token-expert pair on top of its math (roofline.kernel_rate). Read off a
    published fused-MoE microbenchmark's time against tokens, where it grows linearly: the time per pair less its
    FLOPs at the GPU's GEMM rate, over the elements each pair's row carries through both GEMMs (hidden + width)."""

    g_elements_per_s: float = Field(gt=0, le=100_000)  # billions of row elements per second
    uncertainty: float = Field(ge=0, le=1)  # +- relative, from the sources' spread
    basis: Literal["measured", "anchor"]
    source: str = Field(min_length=1, max_length=4000)


# Stated anchors for a spec without a `sustained` block: at or below the median of the built-in SKUs' measured
# shares (copy: MI300X 0.76, A10 0.78, H200 0.84, B200 0.84, A100 0.85-0.88, H100 SXM 0.87, RTX 4090 0.89, median
# about 0.85: the anchor stays at 0.80, the cautious side; bf16 GEMM: A10 0.45,
# L4 0.47, MI300X 0.54, H100 PCIe 0.66, B200 0.69, L40S 0.74, A100 0.79-0.85, H100 SXM 0.80), with their spread.
ANCHOR_COPY = 0.80
ANCHOR_GEMM = 0.70
ANCHOR_COPY_UNCERTAINTY = 0.08
ANCHOR_GEMM_UNCERTAINTY = 0.15


# the compute classes a row pace is published for (Sustained.expert_rows): 16-bit, 8-bit and 4-bit experts
RowDtype = Literal["bf16", "fp8", "fp4"]
# the MoE kernels a row pace is published for beside the default fused-MoE one (Triton's, AITER's), which builds of an
# engine switch to on the GPUs that state their pace (EraFields.moe_row_kernels): FlashInfer's TensorRT-LLM fused MoE
RowKernel = Literal["flashinfer-trtllm"]


class Sustained(BaseModel):
    """A large device copy's share of the datasheet bandwidth, and a large GEMM's share of each dense peak."""

    model_config = _FROZEN

    copy_bandwidth: SustainedFigure
    # keys are dtypes of the spec's peak_tflops; GpuSpec checks that every listed dtype has one (fp16/bf16 share)
    gemm: dict[str, SustainedFigure] = Field(min_length=1)
    # FlashAttention-2's prefill rate as a share of this GPU's own flash attention (FlashAttention-3 on Hopper): an
    # Ampere-class kernel (mma.sync, no TMA or warpgroup MMA) leaves the newer tensor-core paths idle. Engines whose
    # prefill attention is of that class (EraFields.prefill_attention_kernel) run at this share. None: the GPU's own
    # kernels are of that class (Ampere, Ada), or no published figure (the share is then 1)
    fa2_attention: SustainedFigure | None = None
    # an Ampere/Ada-generation grouped GEMM's rate (mma.sync, no TMA or warpgroup MMA) as a share of this GPU's own
    # GEMM: engines whose MoE experts run in a kernel of that class (EraFields.moe_gemm_kernel) reach this share on
    # the experts' compute side. None: the GPU's own kernels are of that class (Ampere, Ada), or no published figure
    # (the share is then 1)
    mma_sync_gemm: SustainedFigure | None = None
    # the pace of a grouped GEMM over gathered expert rows (RowPace), by the dtype its experts multiply at: "bf16"
    # for 16-bit, "fp8" for 8-bit compute, "fp4" for 4-bit (which Triton's fused MoE has no path for: the engines'
    # own 4-bit MoE kernels). Missing: no published figure, and no such cost is priced
    expert_rows: dict[RowDtype, RowPace] = Field(default_factory=dict)
    # the same pace in another MoE kernel, by kernel then dtype: a build that switches its experts to that kernel
    # (EraFields.moe_row_kernels) pays it on this GPU. Missing: no published pace, so builds keep the default kernel
    kernel_expert_rows: dict[RowKernel, dict[RowDtype, RowPace]] = Field(default_factory=dict)

    def row_pace(self, dtype: RowDtype, kernel: RowKernel | None = None) -> tuple[RowPace | None, RowKernel | None]:
        """(the pace, the kernel it is of; None: the default fused-MoE kernel) of experts at `dtype`: `kernel`'s where
        this GPU states one, else the default kernel's (None where neither is published)."""
        switched = self.kernel_expert_rows.get(kernel, {}).get(dtype) if kernel is not None else None
        return (switched, kernel) if switched is not None else (self.expert_rows.get(dtype), None)

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
        if self.fa2_attention is not None:
            out["fa2_attention"] = self.fa2_attention.provenance
        if self.mma_sync_gemm is not None:
            out["mma_sync_gemm"] = self.mma_sync_gemm.provenance
        out.update({f"expert_rows.{dtype}": pace.provenance for dtype, pace in self.expert_rows.items()})
        out.update({f"kernel_expert_rows.{kernel}.{dtype}": pace.provenance
                    for kernel, paces in self.kernel_expert_rows.items() for dtype, pace in paces.items()})  # fmt: skip
        return out


@lru_cache(maxsize=64)
def anchored(dtypes: tuple[str, ...]) -> Sustained:
    """The stated anchors for a GPU whose spec gives no `sustained` block: one GEMM share per listed dtype."""
    copy = SustainedFigure(
        fraction=ANCHOR_COPY, uncertainty=ANCHOR_COPY_UNCERTAINTY, basis="anchor",
        source=f"assumption: no sustained block in the spec; a copy streams {ANCHOR_COPY:g} of the datasheet, near "
        "the median of the built-in GPUs' measured copy shares (0.76-0.89)",
    )  # fmt: skip
    gemm = SustainedFigure(
        fraction=ANCHOR_GEMM, uncertainty=ANCHOR_GEMM_UNCERTAINTY, basis="anchor",
        source=f"assumption: no sustained block in the spec; a large GEMM reaches {ANCHOR_GEMM:g} of the dense peak, "
        "near the median of the built-in GPUs' measured bf16 shares (0.45-0.85)",
    )  # fmt: skip
    return Sustained(copy_bandwidth=copy, gemm=dict.fromkeys(dtypes or ("bf16",), gemm))
