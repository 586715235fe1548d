"""The roofline: each component of a pass takes max(FLOPs / peak FLOP/s, bytes / bandwidth); components add.

Williams, Waterman, Patterson, "Roofline: an insightful visual performance model", CACM 2009.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tokcost.engine.traffic import StepCounts
from tokcost.errors import UsageError
from tokcost.hardware.spec import GpuSpec
from tokcost.units import US

Bound = Literal["compute", "memory", "interconnect"]


@dataclass(frozen=True, slots=True)
class Rates:
    """The speeds one scenario assumes: datasheet peaks ("ceiling") or achievable fractions ("expected")."""

    flops_per_s: float
    bytes_per_s: float
    link_bytes_per_s: float | None
    link_latency_s: float
    step_overhead_s: float
    request_overhead_s: float = 0.0  # once per request (scheduling, tokenization in the server), on TTFT


def ceiling_rates(gpu: GpuSpec, compute_dtype: str) -> Rates:
    """Datasheet peaks, no overhead: nothing real runs faster."""
    flops = gpu.peak_flops_per_s(compute_dtype)
    if flops is None:
        raise UsageError(
            f"--compute-dtype: {gpu.name} lists no dense peak for {compute_dtype}; "
            f"it lists: {', '.join(gpu.peak_tflops)}"
        )
    link = gpu.link
    return Rates(
        flops, gpu.bandwidth_bytes_per_s, link.bytes_per_s if link else None, link.latency_s if link else 0.0, 0.0
    )


def expected_rates(gpu: GpuSpec, compute_dtype: str, weight_only_quant: bool) -> Rates:
    """Achievable fractions of the peaks plus a fixed per-step overhead (kernel launches, sampling, scheduling)."""
    peak = ceiling_rates(gpu, compute_dtype)
    ach = gpu.achievable
    bandwidth = (
        ach.weight_only_quant_bandwidth if weight_only_quant and ach.weight_only_quant_bandwidth else ach.bandwidth
    )
    link = peak.link_bytes_per_s * gpu.link.efficiency if gpu.link and peak.link_bytes_per_s else None
    return Rates(
        flops_per_s=peak.flops_per_s * ach.compute,
        bytes_per_s=peak.bytes_per_s * bandwidth,
        link_bytes_per_s=link,
        link_latency_s=peak.link_latency_s if ach.allreduce_latency_us is None else ach.allreduce_latency_us * US,
        step_overhead_s=ach.step_overhead_us * US,
        request_overhead_s=ach.request_overhead_us * US,
    )


@dataclass(frozen=True, slots=True)
class Component:
    """One roofline term: its FLOPs, bytes, the time the slower of the two takes, and which one that is."""

    name: str
    flops: float
    bytes: float
    seconds: float
    bound: Bound
    compute_s: float = 0.0  # flops / peak
    memory_s: float = 0.0  # bytes / bandwidth


def roofline(name: str, flops: float, nbytes: float, rates: Rates) -> Component:
    """time = max(flops / peak, bytes / bandwidth); the larger term names the bound."""
    compute_s = flops / rates.flops_per_s
    memory_s = nbytes / rates.bytes_per_s
    bound: Bound = "compute" if compute_s > memory_s else "memory"
    return Component(name, flops, nbytes, max(compute_s, memory_s), bound, compute_s, memory_s)


def allreduce_seconds(payload_bytes: float, gpus: int, rates: Rates) -> float:
    """Ring all-reduce: 2 (n-1)/n x bytes over one link direction, plus a fixed latency."""
    if gpus == 1:
        return 0.0
    if rates.link_bytes_per_s is None:
        raise UsageError(
            "--gpus: this GPU spec has no link (GPU-to-GPU GB/s per direction), so tensor parallelism "
            "can't be priced; use --gpus 1, or add link: {kind, gb_s, latency_us, source} to a copy of the spec"
        )
    return 2 * (gpus - 1) / gpus * payload_bytes / rates.link_bytes_per_s + rates.link_latency_s


@dataclass(frozen=True, slots=True)
class PassCost:
    """A forward pass as the sum of its rooflines: weight stream, attention/KV, communication, overhead."""

    components: tuple[Component, ...]
    overhead_s: float

    @property
    def seconds(self) -> float:
        """Total time: the components run one after another."""
        return sum(c.seconds for c in self.components) + self.overhead_s

    @property
    def flops(self) -> float:
        """FLOPs of all components."""
        return sum(c.flops for c in self.components)

    @property
    def bytes(self) -> float:
        """Memory bytes of all components (the all-reduce payload goes over links, not memory)."""
        return sum(c.bytes for c in self.components if c.bound != "interconnect")

    @property
    def bound(self) -> Bound:
        """Interconnect when all-reduces outlast the rest; else compute when total FLOP time exceeds byte time."""
        comm = sum(c.seconds for c in self.components if c.bound == "interconnect")
        compute = sum(c.compute_s for c in self.components)
        memory = sum(c.memory_s for c in self.components)
        if comm > max(compute, memory):
            return "interconnect"
        return "compute" if compute > memory else "memory"

    def part(self, name: str) -> Component:
        """The component called `name`."""
        return next(c for c in self.components if c.name == name)


def price_pass(counts: StepCounts, gpus: int, rates: Rates, extra_overhead_s: float = 0.0) -> PassCost:
    """Turn a pass's counts into time: weights and attention as rooflines, all-reduces over the link."""
    comm_s = counts.allreduces * allreduce_seconds(counts.allreduce_bytes, gpus, rates)
    return PassCost(
        components=(
            roofline("weights", counts.matmul_flops, counts.weight_bytes + counts.activation_bytes, rates),
            roofline("attention", counts.attention_flops, counts.kv_read_bytes + counts.kv_write_bytes, rates),
            Component("communication", 0.0, counts.allreduces * counts.allreduce_bytes, comm_s, "interconnect"),
        ),
        overhead_s=rates.step_overhead_s + extra_overhead_s,
    )
