"""An Estimate as plain data with stable keys (SI units and the base in every key), and the bottleneck in words.

Byte counts are integers and say their base: `_per_gpu` is the busiest GPU of the replica (one microbatch
of the slowest pipeline stage for a pass), `_total` every GPU of the replica together.
"""

from __future__ import annotations

from typing import Any

from tokcost import fmt
from tokcost.engine.band import scenario_band
from tokcost.engine.estimate import Estimate, Scenario
from tokcost.engine.journey import Journey, JourneyRow
from tokcost.engine.passcost import PassCost

SCHEMA_VERSION = 3  # 3: a bound may read "host" (an eager era's launches past the GPU)


def _pass(cost: PassCost | None) -> dict[str, Any] | None:
    if cost is None:
        return None
    return {
        "seconds": cost.seconds,
        "bound": cost.bound,
        "overhead_s": cost.overhead_s,
        "pipeline": {
            "stages": cost.pp,
            "microbatches": cost.microbatches,
            "schedule": cost.schedule,
            "stage_times": cost.pipeline_factor,  # the pass in slowest-stage times (a ratio once stages differ)
            "stage_seconds": cost.stage_seconds,  # the slowest stage, one microbatch
            "every_stage_seconds": list(cost.every_stage_s),  # each stage in order, one microbatch
        },
        "flops_per_gpu": round(cost.flops),
        "bytes_per_gpu": round(cost.bytes),
        "components": {
            c.name: {
                "flops_per_gpu": round(c.flops),
                "bytes_per_gpu": round(c.bytes),
                "seconds": c.seconds,  # over the whole pass: every pipeline stage in turn
                "stage_seconds": c.seconds / cost.pipeline_factor,  # one stage's, as its FLOPs and bytes are
                "bound": c.bound,
            }
            for c in cost.components
        },
    }


def _scenario(s: Scenario, fits: bool, provenance: str | None = None) -> dict[str, Any]:
    """One scenario's figures; no cost where the deployment does not fit in memory (as compare and sweep)."""
    out: dict[str, Any] = {
        "ttft_s": s.ttft_s,
        "tpot_s": s.tpot_s,
        "e2e_s": s.e2e_s,
        "decode_tokens_per_s": s.decode_tokens_per_s,
        "prefill_bound": s.prefill_bound,
        "decode_bound": s.decode_bound,
        "usd_per_million_input_tokens": s.usd_per_million_input_tokens if fits else None,
        "usd_per_million_output_tokens": s.usd_per_million_output_tokens if fits else None,
        "joules_per_output_token": s.joules_per_output_token if fits else None,
        "prefill": _pass(s.prefill),
        "decode_step": _pass(s.decode_step),
    }
    if provenance is not None:
        out["provenance"] = provenance
    return out


def _layer_kinds(e: Estimate) -> list[dict[str, Any]]:
    """Each (mixer, MLP) kind of the model's layers: how many, and the KV per token or state per sequence of one."""
    m, p = e.model, e.precision
    return [
        {
            "mixer": kind.mixer,
            "mlp": kind.mlp,
            "layers": n,
            "kv_bytes_per_token_per_layer": round(m.kv_bytes_per_token_per_layer(kind.mixer, p.kv)),
            "state_bytes_per_sequence_per_layer": round(m.state_bytes_per_sequence_per_layer(kind.mixer, p.state)),
        }
        for kind, n in m.plan.counts(range(m.layers)).items()
    ]


def estimate_dict(e: Estimate) -> dict[str, Any]:
    """Stable JSON-ready keys; `ceiling` and `expected` share one shape (expected adds its provenance)."""
    mem, lay, b = e.memory, e.layout, e.memory.per_gpu
    return {
        "schema_version": SCHEMA_VERSION,
        "model": e.model.name,
        "gpu": e.gpu.name,
        "workload": {**e.workload.model_dump(), "price_per_hour_usd": e.price_per_hour_usd},
        "layout": {
            "tp": lay.tp,
            "pp": lay.pp,
            "ep": lay.ep,
            "dp": lay.dp,
            "redundant_experts": lay.redundant_experts,
            "gpus": lay.gpus,
            "gpus_per_node": lay.gpus_per_node,
            "nodes": lay.nodes,
        },
        "precision": e.precision.model_dump(),
        "memory": {
            "weights_bytes_per_gpu": round(b.weights),
            "kv_cache_bytes_per_gpu": round(b.kv),
            "workspace_bytes_per_gpu": round(b.workspace),
            "reserve_bytes_per_gpu": round(b.reserve),
            "used_bytes_per_gpu": round(b.total),
            "capacity_bytes_per_gpu": round(mem.capacity_bytes_per_gpu),
            "capacity_basis": mem.capacity_basis,
            "weights_bytes_total": round(mem.weights_bytes_total),
            "kv_cache_bytes_total": round(mem.kv_cache_bytes_total),
            "kv_bytes_per_token_total": round(mem.kv_bytes_per_token),
            "state_bytes_per_gpu": round(b.state),
            "state_bytes_total": round(mem.state_bytes_total),
            "state_bytes_per_sequence_total": round(mem.state_bytes_per_sequence),
            "fits": mem.fits,
            "max_batch": mem.max_batch,
            "max_context": mem.max_context,
            "min_gpus": mem.min_gpus,
            "min_layout": mem.min_layout,
        },
        "layer_kinds": _layer_kinds(e),
        "mean_decode_context_tokens": e.mean_decode_context,
        "critical_batch_compute": e.critical_batch_compute,
        "critical_batch_kv": e.critical_batch_kv,
        "bottleneck": bottleneck(e),
        "warnings": list(e.warnings),
        "ceiling": _scenario(e.ceiling, mem.fits),
        "expected": {
            **_scenario(e.expected, mem.fits, e.gpu.expected_provenance_at(e.precision.compute)),
            "engine": e.deployment.engine.label,
            "band": band_dict(e),
        },
    }


def _spans(e: Estimate) -> dict[str, tuple[float, float] | None]:
    """(low, high) of expected's TTFT, TPOT, E2E and decode tokens/s under its band (engine/band.py), bounded by
    the ceiling's."""
    x, c = e.expected, e.ceiling
    ceiling = {"ttft_s": c.ttft_s, "tpot_s": c.tpot_s, "e2e_s": c.e2e_s, "decode_tokens_per_s": c.decode_tokens_per_s}
    return scenario_band(e.band, times_s={"ttft_s": x.ttft_s, "tpot_s": x.tpot_s, "e2e_s": x.e2e_s},
                         rates={"decode_tokens_per_s": x.decode_tokens_per_s}, ceiling=ceiling)  # fmt: skip


def band_dict(e: Estimate) -> dict[str, Any]:
    """The 80% band around expected: its factors on time, where they come from, each figure's (low, high)."""
    b = e.band
    return {"time_low_factor": b.low, "time_high_factor": b.high, "rows": b.rows, "sources": b.sources,
            "basis": b.basis, **{k: (list(v) if v else None) for k, v in _spans(e).items()}}  # fmt: skip


def journey_row_dict(r: JourneyRow) -> dict[str, Any]:
    return {
        "name": r.name,
        "block": r.block,
        "count": r.count,
        "flops_per_gpu": round(r.flops),
        "bytes_read_per_gpu": round(r.bytes_read),
        "bytes_written_per_gpu": round(r.bytes_written),
        "ceiling_s": r.ceiling_s,
        "expected_s": r.expected_s,
        "share": r.share,
        "bound": r.bound,
        "note": r.note,
    }


def journey_dict(j: Journey) -> dict[str, Any]:
    """The journey's rows, decode step and prefill, with the pass times they add up to."""
    return {
        "decode_step": [journey_row_dict(r) for r in j.decode] if j.decode is not None else None,
        "decode_step_seconds": j.decode_seconds,
        "prefill": [journey_row_dict(r) for r in j.prefill],
        "prefill_seconds": j.prefill_seconds,
    }


def bottleneck(e: Estimate) -> str:
    """One sentence naming what limits decode, e.g. 'decode is memory-bound: 94% of each step is moving ...'."""
    step = e.ceiling.decode_step or e.ceiling.prefill
    phase = "decode" if e.ceiling.decode_step else "prefill"
    # collectives that run beside the kernels limit the step only where they outlast them (its bound says which)
    beside = [c for c in step.components if c.name != "communication"] or list(step.components)
    top = step.part("communication") if step.bound == "interconnect" else max(beside, key=lambda c: c.seconds)
    share = top.seconds / step.seconds if step.seconds else 0.0
    if top.name == "communication":
        what = f"collectives moving {top.bytes / 1e6:.2f} MB per GPU over the links"
    elif top.bound == "compute":
        kernels = {"weights": "matmuls", "state": "state scans"}.get(top.name, "attention")
        what = f"{top.flops / 1e12:.2f} TFLOP of {kernels}"
    else:  # the component's bytes: what its kernels read (weights, the KV cache, state) and their activations
        named = {"weights": ("matmuls", "weights"), "attention": ("attention", "KV cache"),
                 "state": ("state scans", "recurrent state")}  # fmt: skip
        kernels, target = named.get(top.name, ("other kernels", ""))
        what = f"moving {top.bytes / 1e9:.2f} GB through its {kernels}" + (
            f" (the {target} and their activations)" if target else " (activations)"
        )
    return f"{phase} is {step.bound}-bound: {share:.0%} of each {'step' if phase == 'decode' else 'pass'} is {what}"


def host_bound(e: Estimate) -> str | None:
    """A sentence where an eager era's kernel launches, not the GPU, set expected's decode step (else None): the
    launches' time against the GPU's (passcost.PassCost.launch_bound)."""
    step = e.expected.decode_step
    if step is None or not step.launch_bound:
        return None
    launches, label = fmt.ms(step.launch_s), e.deployment.engine.label
    where = "a step" if step.pp == 1 else f"a microbatch on the slowest of {step.pp} pipeline stages"
    return (f"expected decode is host-bound: the host launches the kernels one by one, {launches} {where} against "
            f"the GPU's {fmt.ms(step.gpu_s)} ({label}; --journey counts the kernels)")  # fmt: skip


def compare_row(e: Estimate) -> dict[str, object]:
    """The flat record of one (model, GPU) pair: stable keys for JSON and CSV (no cost when it does not fit). As in
    sweep's points, a figure without a prefix is expected, as its cost and energy are, and `ceiling_` names the
    bound."""
    c, x, mem = e.ceiling, e.expected, e.memory
    fits = mem.fits
    return {
        "model": e.model.name,
        "gpu": e.gpu.name,
        "gpus": e.layout.gpus,
        "layout": e.layout.label(),
        "weights": e.precision.weights,
        "kv_dtype": e.precision.kv,
        "compute_dtype": e.precision.compute,
        "flash_attention": e.precision.fused_attention,
        # the workload it was priced at, as sweep's points carry it (the table says it in its title only)
        "batch": e.workload.batch,
        "prompt_tokens": e.workload.prompt_tokens,
        "output_tokens": e.workload.output_tokens,
        "cached_prefix_tokens": e.workload.cached_prefix_tokens,
        "fits": fits,
        "min_gpus": mem.min_gpus,
        "ttft_s": x.ttft_s,  # unprefixed figures are expected ones, as in sweep's points and the cost columns
        "tpot_s": x.tpot_s,
        "decode_tokens_per_s": x.decode_tokens_per_s,
        "ceiling_ttft_s": c.ttft_s,
        "ceiling_tpot_s": c.tpot_s,
        "ceiling_decode_tokens_per_s": c.decode_tokens_per_s,
        **{f"expected_{k}_band": (list(v) if v else None) for k, v in _spans(e).items()},
        "expected_engine": e.deployment.engine.label,
        "expected_provenance": e.gpu.expected_provenance_at(e.precision.compute),
        "max_batch": mem.max_batch,
        "critical_batch_compute": e.critical_batch_compute,
        "critical_batch_kv": e.critical_batch_kv,
        "price_per_hour_usd": e.price_per_hour_usd,
        "usd_per_million_input_tokens": x.usd_per_million_input_tokens if fits else None,
        "usd_per_million_output_tokens": x.usd_per_million_output_tokens if fits else None,
        "joules_per_output_token": x.joules_per_output_token if fits else None,
    }
