"""A GpuSpec whose ceilings are what the probes measured, with their provenance (no torch here)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

import yaml

from tokcost.hardware.spec import Achievable, GpuSpec
from tokcost.units import GB, TFLOPS


@dataclass(frozen=True)
class DeviceFacts:
    """What the runtime says about the device the probes ran on."""

    kind: str  # "cuda" or "cpu"
    name: str
    memory_bytes: float
    power_limit_w: float | None
    driver: str
    torch_version: str


def calibrated_spec(
    facts: DeviceFacts, probes: dict[str, Any], dtype: str, base: GpuSpec | None, today: dt.date | None = None
) -> GpuSpec:
    """Measured ceilings: decode-like streaming read as bandwidth, the GEMM rate as the dtype's peak."""
    stream, copy, matmul = probes["stream"], probes["copy"], probes["matmul"]
    today = today or dt.date.today()
    peaks = {dtype: round(matmul.value / TFLOPS, 3)}
    if dtype in ("bf16", "fp16"):
        peaks[{"bf16": "fp16", "fp16": "bf16"}[dtype]] = peaks[dtype]
    name = f"{base.name}-calibrated" if base else f"{facts.kind}-{_slug(facts.name)}-calibrated"
    provenance = {
        "device": facts.name,
        "driver": facts.driver,
        "torch": facts.torch_version,
        "date": today.isoformat(),
        "bandwidth": f"streaming read (GEMV) of {stream.size}: {stream.value / GB:,.1f} GB/s",
        "copy_bandwidth": f"device copy of {copy.size}: {copy.value / GB:,.1f} GB/s (read + write)",
        "peak_tflops": f"{matmul.size} in {dtype}: {matmul.value / TFLOPS:,.3f} TFLOP/s",
    }
    if base:
        provenance["started_from"] = f"built-in {base.name} (tdp_w, interconnect, price kept from its datasheet)"
    return GpuSpec(
        name=name,
        source=f"measured by tokcost calibrate on {facts.name}, {today.isoformat()}"
        + (f"; unmeasured fields from {base.name}: {base.source[:200]}" if base else ""),
        memory_gb=round(facts.memory_bytes / GB, 3),
        memory_bandwidth_gb_s=round(stream.value / GB, 3),
        peak_tflops=peaks,
        tdp_w=facts.power_limit_w or (base.tdp_w if base else None),
        link=base.link if base else None,
        network=base.network if base else None,
        price_per_hour_usd=base.price_per_hour_usd if base else None,
        # measured ceilings are already what is achieved: expected = ceiling, no extra overhead
        achievable=Achievable(
            bandwidth=1.0, compute=1.0, step_overhead_us=0.0, source="calibrated: the ceilings are measured rates"
        ),  # fmt: skip
        device_names=[facts.name],
        provenance=provenance,
        notes="Written by tokcost calibrate. memory_gb is what the runtime reports (decimal GB).",
    )


def spec_yaml(spec: GpuSpec) -> str:
    """The spec as YAML that `--gpu FILE` reads back."""
    data = spec.model_dump(exclude_none=True)
    return "# written by tokcost calibrate\n" + yaml.safe_dump(data, sort_keys=False, width=100)


def _slug(text: str) -> str:
    return "-".join("".join(c if c.isalnum() else " " for c in text.lower()).split())[:40] or "device"
