"""Calibration that predicts its own loop: TPOT = t_step + bytes / BW_loop, written as a GpuSpec (no torch).

- t_step: the decode step of a skeleton, a model of the same depth, layer kinds, routing and windows at
  near-zero width, timed by the same loop (kernel launches, Python dispatch, norms, sampling);
- BW_loop: the model's own linears at M = batch (F.linear, as the loop calls them), net of the same
  number of near-zero linears, over the model's own weights (or, for `calibrate`, a working set several
  times the last-level cache at the loop's thread count);
- compute: the prefill's GEMMs (one block's linears at M = batch x prompt rows).
They become `achievable` (the loop's rates as shares of the ceilings, and step_overhead_us, basis: measured);
the copy and GEMM probes become the `sustained` block (shares of the same ceilings). The ceilings are the
datasheet's when the device matches a built-in spec (raised to any measurement above them), else the largest
rates measured. An all-reduce probe adds a measured `link` for tensor parallelism.
"""

from __future__ import annotations

import datetime as dt
import statistics
from dataclasses import dataclass
from typing import Any, Protocol

import yaml

from tokcost.errors import MeasureError
from tokcost.hardware.spec import MIN_BANDWIDTH_GB_S, MIN_TFLOPS, Achievable, GpuSpec, Link, Platform
from tokcost.hardware.sustained import SIXTEEN_BIT_PARTNER, Sustained, SustainedFigure
from tokcost.models.spec import ModelSpec
from tokcost.units import GB, MIB, TFLOPS

SKELETON_HEAD_DIM = 8  # the narrowest head RoPE and SDPA take comfortably
SKELETON_WIDTH = 16  # hidden, intermediate and latent widths of the skeleton (per rank)
MIN_SHARE = 0.01  # a loop rate under 1% of what the same device reached elsewhere is a stalled measurement
# ... but a prefill GEMM of a few rows fills a matrix engine's tiles that much less: 8 rows of the 0.6M-parameter
# test model run at 11-13 GFLOP/s net of their call cost on a Xeon core whose AMX multiplies large bf16 GEMMs at 1.3
# TFLOP/s (0.8-1%); under FULL_ROWS rows the GEMMs' stall floor shrinks with them, to no less than MIN_GEMM_SHARE
FULL_ROWS = 256
MIN_GEMM_SHARE = 1e-4


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
    platform: Platform = "cuda"  # ROCm where torch is a HIP build; a CPU runs no engine's GPU kernels (no gap)


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


def stream_label(stream: dict) -> str:
    """What a stream rate timed, for provenance: 'N linears', with the grouped expert layers where any ran."""
    grouped = stream.get("grouped_layers", 0)
    return f"{stream['matrices']} linears" + (f" (the routed experts of {grouped} layers as grouped matmuls)"
                                              if grouped else "")  # fmt: skip


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
    # the datasheet's fabric where one is known; else the class tokcost prices an unnamed fabric as (one-shot,
    # two-shot or ring, the cheapest): gloo's shared memory on one host, or NCCL on a GPU no datasheet names
    kind = base.link.kind if base and base.link else "nvlink"
    gb_s = _measured("the all-reduce's bus bandwidth", probe["bus_gb_s"], MIN_BANDWIDTH_GB_S, "GB/s")
    # the latency is this many ranks'; other group sizes scale by the datasheet link's hop where it states one
    hop = base.link.latency_hop_us if base and base.link else None
    ranks = int(probe["ranks"]) if hop is not None and int(probe["ranks"]) >= 2 else None
    # a mesh (the datasheet link's peer_links): the group measured drove only its ranks - 1 peers' links, so the
    # node's whole rate is the measured one over that share (Link.group_bytes_per_s gives it back at any group size)
    peers = base.link.peer_links if base and base.link else None
    if peers:
        gb_s = round(gb_s * peers / min(max(int(probe["ranks"]), 2) - 1, peers), 3)
    return Link(
        name=f"measured {probe['backend']} all-reduce over {probe['ranks']} ranks",
        kind=kind,
        gb_s=gb_s,
        latency_us=round(probe["latency_us"], 3),
        latency_ranks=ranks,
        latency_hop_us=hop if ranks is not None else None,
        peer_links=peers,
        source=(f"measured by tokcost: {probe['summary']}" + (f"; the latency at other group sizes: "
                f"{hop} us a ring hop, the datasheet link's" if ranks is not None else ""))[:4000],
    )  # fmt: skip


class Probe(Protocol):
    """A microbenchmark's result (probes.ProbeResult): its rate, what ran, and every repeat's time."""

    value: float
    size: str
    seconds_all: list[float]


def spec_from_rates(
    facts: DeviceFacts, dtype: str, *, bytes_per_s: float, flops_per_s: float, step_overhead_s: float,
    provenance: dict[str, str], base: GpuSpec | None = None, link: Link | None = None,
    name: str | None = None, today: dt.date | None = None, probes: dict[str, Probe] | None = None,
    gemm_rows: int | None = None,
) -> GpuSpec:  # fmt: skip
    """A GpuSpec of measured rates as shares of their ceilings, with unmeasured fields (TDP, price) from `base`.

    Ceilings are the datasheet's (`base`), raised to any measurement above them, else the largest rate measured
    (the loop's or a probe's); every measured rate is a share of its ceiling, so the spec is valid whatever the
    machine measured. `probes` (copy, matmul) give the `sustained` block; the loop's own rates give `achievable`.
    """
    today = today or dt.date.today()
    bandwidth_gb_s, peak_tflops = _ceilings(dtype, base, bytes_per_s, flops_per_s, probes)
    bandwidth, peak = bandwidth_gb_s * GB, peak_tflops * TFLOPS
    provenance = {
        "device": facts.name,
        "driver": facts.driver,
        "torch": facts.torch_version,
        "date": today.isoformat(),
        **provenance,
        "ceilings": _ceilings_note(base, dtype, bandwidth, peak),
    }
    if base:
        provenance["started_from"] = f"built-in {base.name} (tdp_w, price and unmeasured links kept)"
    # the loop's own rates over the ceilings: expected = exactly what this loop streams and multiplies
    how = provenance.get("step_overhead_us", "step overhead of the loop")
    achievable = Achievable(bandwidth=_share("the loop's weight stream", bytes_per_s, bandwidth),
                            compute=_share("the loop's prefill GEMMs", flops_per_s, peak, gemm_floor(gemm_rows)),
                            step_overhead_us=round(step_overhead_s * 1e6, 3), basis="measured",
                            source=f"measured: {how}"[:2000])  # fmt: skip
    return GpuSpec(
        name=name or (f"{base.name}-calibrated" if base else f"{facts.kind}-{_slug(facts.name)}-calibrated"),
        source=f"measured by tokcost calibrate on {facts.name}, {today.isoformat()}"
        + (f"; unmeasured fields from {base.name}: {base.source[:200]}" if base else ""),
        memory_gb=round(facts.memory_bytes / GB, 3), memory_runtime_mib=round(facts.memory_bytes / MIB, 1),
        memory_bandwidth_gb_s=bandwidth_gb_s, peak_tflops=_peaks(dtype, peak_tflops, base),
        tdp_w=facts.power_limit_w or (base.tdp_w if base else None), link=link or (base.link if base else None),
        host_link=base.host_link if base and not link else None,
        network=base.network if base else None, gpus_per_node=base.gpus_per_node if base else 8,
        price_per_hour_usd=base.price_per_hour_usd if base else None,
        price_range_usd=base.price_range_usd if base else None, achievable=achievable,
        sustained=_sustained(facts, dtype, probes, bandwidth=bandwidth, peak=peak, base=base, today=today,
                             loop_flops=flops_per_s, gemm_rows=gemm_rows) if probes else None,
        device_names=[facts.name], provenance=provenance, platform=_platform(facts, base),
        notes="Written by tokcost calibrate. memory_runtime_mib is what the runtime reports.",
    )  # fmt: skip


def _platform(facts: DeviceFacts, base: GpuSpec | None) -> Platform:
    """The software stack engines run on the measured device: its runtime's (a HIP build of torch is ROCm); a CPU's
    is the datasheet's it started from, else CUDA's, which no engine profile prices a gap for."""
    if facts.kind == "cuda":
        return facts.platform
    return base.platform if base else "cuda"


def _ceilings(dtype: str, base: GpuSpec | None, bytes_per_s: float, flops_per_s: float,
              probes: dict[str, Probe] | None) -> tuple[float, float]:  # fmt: skip
    """(GB/s, TFLOP/s) every share is of: the datasheet's or above, the largest measured; 4 digits, floors checked."""
    copy, gemm = (probes["copy"].value, probes["matmul"].value) if probes else (0.0, 0.0)
    sheet_bw = base.bandwidth_bytes_per_s if base else 0.0
    sheet_peak = (base.peak_flops_per_s(dtype) or 0.0) if base else 0.0
    bandwidth = _measured("the bandwidth", max(sheet_bw, bytes_per_s, copy) / GB, MIN_BANDWIDTH_GB_S, "GB/s")
    peak = _measured(f"the {dtype} GEMM rate", max(sheet_peak, flops_per_s, gemm) / TFLOPS, MIN_TFLOPS, "TFLOP/s")
    return bandwidth, peak


def _peaks(dtype: str, tflops: float, base: GpuSpec | None) -> dict[str, float]:
    """The datasheet's dense peaks (when its sustained block can cover them), the measured dtype's at its ceiling."""
    if base is not None and base.sustained is not None:
        return {**base.peak_tflops, dtype: tflops}
    peaks = {dtype: tflops}
    if dtype in SIXTEEN_BIT_PARTNER:  # the same tensor cores at the same rate
        peaks[SIXTEEN_BIT_PARTNER[dtype]] = tflops
    return peaks


def _ceilings_note(base: GpuSpec | None, dtype: str, bandwidth: float, peak: float) -> str:
    """Where memory_bandwidth_gb_s and the measured dtype's peak come from."""
    if base is None:
        return (f"no datasheet for this device: memory_bandwidth_gb_s ({bandwidth / GB:,.4g} GB/s) and the {dtype} "
                f"peak ({peak / 1e12:,.4g} TFLOP/s) are the largest rates measured here, so a measured figure that "
                "sets its ceiling is a share of 1")  # fmt: skip
    raised = [what for what, ceiling, sheet in (("memory_bandwidth_gb_s", bandwidth, base.bandwidth_bytes_per_s),
              (f"peak_tflops.{dtype}", peak, base.peak_flops_per_s(dtype) or 0.0)) if ceiling > sheet]  # fmt: skip
    note = f"{base.name}'s datasheet"
    return note + (f", raised to what was measured for {' and '.join(raised)}" if raised else "")


def _sustained(facts: DeviceFacts, dtype: str, probes: dict[str, Probe], *, bandwidth: float, peak: float,
               base: GpuSpec | None, today: dt.date, loop_flops: float,
               gemm_rows: int | None) -> Sustained:  # fmt: skip
    """The copy and GEMM probes as shares of the ceilings; the datasheet's other GEMM shares kept from `base`.

    A GEMM's share is the best GEMM rate seen: the probe's square shape, or the loop's own prefill linears where they
    beat it (a probe's one shape is a floor of what the units sustain, not their rate: on a CPU a square bf16 GEMM of
    1,024 ran at 0.93 GFLOP/s where the model's linears ran at 10.8, and a share of 0.086 priced every GEMM of
    `estimate -g` on the spec 12x slower than the loop that set its peak). The copy stays the probe's: a decode
    stream past it is an engine's kernel at work (m.gemv, up to 1.12 of a copy), not the memory's rate."""
    where = f"on {facts.name}, torch {facts.torch_version}, {today.isoformat()}"
    copy, gemm = probes["copy"], probes["matmul"]
    copy_share = _share("the copy probe", copy.value, bandwidth)
    gemm_share = _share("the GEMM probe", max(gemm.value, loop_flops), peak)
    over = f"{base.name}'s datasheet" if base else "the largest rate measured on this device (no datasheet)"
    kept = dict(base.sustained.gemm) if base is not None and base.sustained is not None else {}
    gemm_what = f"GEMM probe ({gemm.size}, {dtype}) {where}: {gemm.value / 1e12:,.4g} TFLOP/s"
    if loop_flops > gemm.value:
        gemm_what = (f"loop's prefill GEMMs ({dtype}, {gemm_rows or '?'} rows) {where}: "
                     f"{loop_flops / 1e12:,.4g} TFLOP/s, above the GEMM probe's {gemm.value / 1e12:,.4g} "
                     f"({gemm.size})")  # fmt: skip
    return Sustained(
        copy_bandwidth=SustainedFigure(
            fraction=copy_share, uncertainty=_spread(copy_share, copy.seconds_all), basis="measured",
            source=f"tokcost calibrate copy probe ({copy.size}) {where}: {copy.value / GB:,.4g} GB/s over "
                   f"{bandwidth / GB:,.4g} GB/s, {over}; uncertainty: half the spread of its repeats",
        ),
        gemm={**kept, dtype: SustainedFigure(
            fraction=gemm_share, uncertainty=_spread(gemm_share, gemm.seconds_all), basis="measured",
            source=f"tokcost calibrate {gemm_what} over {peak / 1e12:,.4g} TFLOP/s, {over}; uncertainty: half the "
                   "spread of the probe's repeats",
        )},
        # what no probe here measures stays the base spec's: an older kernel class's share of the GPU's own
        fa2_attention=base.sustained.fa2_attention if base is not None and base.sustained is not None else None,
        mma_sync_gemm=base.sustained.mma_sync_gemm if base is not None and base.sustained is not None else None,
        expert_rows=dict(base.sustained.expert_rows) if base is not None and base.sustained is not None else {},
    )  # fmt: skip


def gemm_floor(rows: int | None) -> float:
    """The stall floor of the loop's prefill GEMM share at `rows` rows: MIN_SHARE from FULL_ROWS on, in proportion
    below (None: rows unknown, the full floor)."""
    return max(MIN_SHARE * min(1.0, (rows or FULL_ROWS) / FULL_ROWS), MIN_GEMM_SHARE)


def _spread(share: float, seconds: list[float]) -> float:
    """Half the relative spread of the repeats, on the share: share x (max - min) / 2 / median, at most 0.5."""
    median = statistics.median(seconds)
    return round(min(share * (max(seconds) - min(seconds)) / 2 / median, 0.5), 4)


def _share(what: str, rate: float, ceiling: float, floor: float = MIN_SHARE) -> float:
    """rate / ceiling, or a one-line refusal when a rate is under `floor` of the ceiling (a stalled measurement)."""
    share = rate / ceiling
    if not share >= floor:
        raise MeasureError(
            f"{what} ran at {_percent(share)} of the {_rate(ceiling)} the device otherwise reached; the measurement "
            "stalled (a loaded machine?): nothing was written, rerun on a quieter machine"
        )
    return min(float(f"{share:.4g}"), 1.0)


def _measured(what: str, value: float, floor: float, unit: str) -> float:
    """A measured figure rounded to 4 significant digits, or a one-line refusal under the spec's floor."""
    rounded = float(f"{value:.4g}")
    if not rounded >= floor:
        raise MeasureError(f"{what} measured {value:.3g} {unit}, under the {floor:g} {unit} a spec can hold; "
                           "nothing was written: rerun on a quieter machine")  # fmt: skip
    return rounded


def _percent(share: float) -> str:
    """0.20%, or two significant digits under 0.1% (0.0077%)."""
    return f"{share:.2%}" if share >= 1e-3 else f"{share * 100:.2g}%"


def _rate(bytes_or_flops_per_s: float) -> str:
    return f"{bytes_or_flops_per_s:.4g}/s"


def spec_yaml(spec: GpuSpec) -> str:
    """The spec as YAML that `--gpu FILE` reads back."""
    data = spec.model_dump(exclude_none=True)
    return "# written by tokcost calibrate\n" + yaml.safe_dump(data, sort_keys=False, width=100)


def _slug(text: str) -> str:
    return "-".join("".join(c if c.isalnum() else " " for c in text.lower()).split())[:40] or "device"
