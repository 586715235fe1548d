"""Calibration that predicts its own loop: TPOT = t_step + bytes / BW_loop, written as a GpuSpec (no torch).

- t_step: the decode step of a skeleton, a model of the same depth, layer kinds, routing and windows at
  near-zero width, timed by the same loop (kernel launches, Python dispatch, norms, sampling);
- BW_loop: the model's own linears at M = batch (F.linear, as the loop calls them), net of the same
  number of near-zero linears, over the model's own weights (or, for `calibrate`, a working set several
  times the last-level cache at the loop's thread count);
- compute: the prefill's GEMMs (one block's linears at M = batch x prompt rows).
They become `achievable.step_overhead_us` (basis: measured), `memory_bandwidth_gb_s` and `peak_tflops`,
with provenance; an all-reduce probe adds a measured `link` for tensor parallelism.
"""

from __future__ import annotations

import datetime as dt
import statistics
from dataclasses import dataclass
from typing import Any

import yaml

from tokcost.hardware.spec import Achievable, GpuSpec, Link
from tokcost.models.spec import ModelSpec
from tokcost.units import GB, MIB

SKELETON_HEAD_DIM = 8  # the narrowest head RoPE and SDPA take comfortably
SKELETON_WIDTH = 16  # hidden, intermediate and latent widths of the skeleton (per rank)


@dataclass(frozen=True)
class DeviceFacts:
    """What the runtime says about the device the probes ran on."""

    kind: str  # "cuda" or "cpu"
    name: str
    memory_bytes: float  # total, as the runtime reports it (torch.cuda.mem_get_info; MemTotal on a CPU)
    power_limit_w: float | None
    driver: str
    torch_version: str
    uuid: str | None = None


def step_overhead(skeleton_loop: Any) -> tuple[float, str]:
    """The skeleton's median TPOT less the cache flushes it ran on the CPU (flush.py), and how it was found."""
    flush = skeleton_loop.flush_s_per_step
    net = max(skeleton_loop.tpot_s - (flush or 0.0), 0.0)
    s = skeleton_loop
    how = (f"median TPOT of a {s.tp}-rank skeleton (same depth, near-zero width, batch {s.batch}, mode {s.mode}): "
           f"{s.tpot_s * 1e6:,.1f} us")  # fmt: skip
    if flush is not None:
        how += f", less {flush * 1e6:,.1f} us of cache flushes standing in for the real linears' streams"
    return net, how


def skeleton(spec: ModelSpec, tp: int = 1) -> ModelSpec:
    """The same depth, layer kinds, experts and windows at near-zero width: its step time is the overhead."""
    w = SKELETON_WIDTH * tp
    data = spec.model_dump(by_alias=True)
    data.update(name=f"{spec.name}-skeleton", hidden_size=SKELETON_WIDTH, attention_heads=2 * tp, kv_heads=tp,
                head_dim=SKELETON_HEAD_DIM, intermediate_size=w, vocab_size=4 * w, params_total=None,
                weights_dtype=None, compute_dtype=None)  # fmt: skip
    if spec.moe:
        data["moe"].update(expert_intermediate_size=w, shared_expert_intermediate_size=None,
                           dense_intermediate_size=w, expert_dtype=None)  # fmt: skip
    if spec.mla:
        data["attention_heads"] = data["kv_heads"] = 2 * tp
        data["mla"].update(kv_lora_rank=SKELETON_WIDTH, rope_head_dim=SKELETON_HEAD_DIM,
                           q_lora_rank=SKELETON_WIDTH if spec.mla.q_lora_rank else None,
                           nope_head_dim=SKELETON_HEAD_DIM, v_head_dim=SKELETON_HEAD_DIM)  # fmt: skip
    return ModelSpec.model_validate(data)


def fit_allreduce(rows: list[dict], ranks: int, backend: str) -> dict:
    """Least-squares t = a + b x over x = 2 (N-1)/N x bytes: latency a, bus bandwidth 1 / b."""
    xs = [2 * (ranks - 1) / ranks * r["bytes"] for r in rows]
    ts = [r["seconds"] for r in rows]
    mx, mt = statistics.fmean(xs), statistics.fmean(ts)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (t - mt) for x, t in zip(xs, ts, strict=True)) / sxx if sxx else 0.0
    latency = max(mt - slope * mx, 0.0)
    bus = 1 / slope / 1e9 if slope > 0 else max(x / t for x, t in zip(xs, ts, strict=True)) / 1e9
    for r, x in zip(rows, xs, strict=True):
        r["bus_gb_s"] = x / r["seconds"] / 1e9
    sizes = f"{len(rows)} sizes {rows[0]['bytes']:,}..{rows[-1]['bytes']:,} B"
    fit = f"latency {latency * 1e6:,.1f} us, bus bandwidth {bus:,.3f} GB/s"
    summary = f"{backend} all-reduce over {ranks} ranks, {sizes}: {fit}"
    return {"backend": backend, "ranks": ranks, "latency_us": latency * 1e6, "bus_gb_s": bus, "sizes": rows,
            "summary": summary}  # fmt: skip


def measured_link(probe: dict[str, Any], base: GpuSpec | None) -> Link:
    """A link whose bandwidth and latency are the all-reduce probe's fit."""
    kind = base.link.kind if base and base.link else probe["backend"]
    return Link(
        name=f"measured {probe['backend']} all-reduce over {probe['ranks']} ranks",
        kind=kind,
        gb_s=round(max(probe["bus_gb_s"], 0.1), 3),
        latency_us=round(probe["latency_us"], 3),
        source=f"measured by tokcost: {probe['summary']}"[:4000],
    )


def spec_from_rates(
    facts: DeviceFacts, dtype: str, *, bytes_per_s: float, flops_per_s: float, step_overhead_s: float,
    provenance: dict[str, str], base: GpuSpec | None = None, link: Link | None = None,
    name: str | None = None, today: dt.date | None = None,
) -> GpuSpec:  # fmt: skip
    """A GpuSpec of measured rates, with the datasheet's unmeasured fields (TDP, price, links) kept from `base`."""
    today = today or dt.date.today()
    peaks = {dtype: round(flops_per_s / 1e12, 6)}
    if dtype in ("bf16", "fp16"):
        peaks[{"bf16": "fp16", "fp16": "bf16"}[dtype]] = peaks[dtype]
    provenance = {"device": facts.name, "driver": facts.driver, "torch": facts.torch_version,
                  "date": today.isoformat(), **provenance}  # fmt: skip
    if base:
        provenance["started_from"] = f"built-in {base.name} (tdp_w, price and unmeasured links kept)"
    return GpuSpec(
        name=name or (f"{base.name}-calibrated" if base else f"{facts.kind}-{_slug(facts.name)}-calibrated"),
        source=f"measured by tokcost calibrate on {facts.name}, {today.isoformat()}"
        + (f"; unmeasured fields from {base.name}: {base.source[:200]}" if base else ""),
        memory_gb=round(facts.memory_bytes / GB, 3),
        memory_runtime_mib=round(facts.memory_bytes / MIB, 1),
        memory_bandwidth_gb_s=round(bytes_per_s / GB, 4),
        peak_tflops=peaks,
        tdp_w=facts.power_limit_w or (base.tdp_w if base else None),
        link=link or (base.link if base else None),
        network=base.network if base else None,
        gpus_per_node=base.gpus_per_node if base else 8,
        price_per_hour_usd=base.price_per_hour_usd if base else None,
        # measured rates are what this loop achieves: expected = ceiling plus the measured step overhead
        achievable=Achievable(
            bandwidth=1.0,
            compute=1.0,
            step_overhead_us=round(step_overhead_s * 1e6, 3),
            basis="measured",
            source=f"measured: {provenance.get('step_overhead_us', 'step overhead of the loop')}"[:2000],
        ),  # fmt: skip
        device_names=[facts.name],
        provenance=provenance,
        notes="Written by tokcost calibrate. memory_runtime_mib is what the runtime reports.",
    )


def spec_yaml(spec: GpuSpec) -> str:
    """The spec as YAML that `--gpu FILE` reads back."""
    data = spec.model_dump(exclude_none=True)
    return "# written by tokcost calibrate\n" + yaml.safe_dump(data, sort_keys=False, width=100)


def _slug(text: str) -> str:
    return "-".join("".join(c if c.isalnum() else " " for c in text.lower()).split())[:40] or "device"
