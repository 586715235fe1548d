"""An Estimate as plain data with stable keys (SI units, unit in every key), and the bottleneck in words."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from tokcost.engine.estimate import Estimate, Scenario
from tokcost.engine.roofline import PassCost

SCHEMA_VERSION = 1


def _pass(cost: PassCost) -> dict[str, Any]:
    return {
        "flops": cost.flops,
        "bytes": cost.bytes,
        "seconds": cost.seconds,
        "bound": cost.bound,
        "overhead_s": cost.overhead_s,
        "components": {
            c.name: {"flops": c.flops, "bytes": c.bytes, "seconds": c.seconds, "bound": c.bound}
            for c in cost.components
        },
    }


def _scenario(s: Scenario) -> dict[str, Any]:
    step = _pass(s.decode_step)
    step["weight_bytes"] = s.decode_step.part("weights").bytes
    step["kv_bytes"] = s.decode_step.part("attention").bytes
    return {
        "ttft_s": s.ttft_s,
        "tpot_s": s.tpot_s,
        "e2e_s": s.e2e_s,
        "decode_tokens_per_s": s.decode_tokens_per_s,
        "prefill_bound": s.prefill_bound,
        "decode_bound": s.decode_bound,
        "usd_per_million_input_tokens": s.usd_per_million_input_tokens,
        "usd_per_million_output_tokens": s.usd_per_million_output_tokens,
        "joules_per_output_token": s.joules_per_output_token,
        "prefill": _pass(s.prefill),
        "decode_step": step,
    }


def estimate_dict(e: Estimate) -> dict[str, Any]:
    """Stable JSON-ready keys; `ceiling` and `expected` share one shape."""
    wl = e.workload
    return {
        "schema_version": SCHEMA_VERSION,
        "model": e.model.name,
        "gpu": e.gpu.name,
        "workload": {
            "gpus": wl.gpus,
            "batch": wl.batch,
            "prompt_tokens": wl.prompt_tokens,
            "output_tokens": wl.output_tokens,
            "cached_prefix_tokens": wl.cached_prefix_tokens,
            "price_per_hour_usd": e.price_per_hour_usd,
        },
        "precision": e.precision.model_dump(),
        "memory": asdict(e.memory),
        "mean_decode_context_tokens": e.mean_decode_context,
        "critical_batch": e.critical_batch,
        "bottleneck": bottleneck(e),
        "ceiling": _scenario(e.ceiling),
        "expected": _scenario(e.expected),
    }


def bottleneck(e: Estimate) -> str:
    """One sentence naming what limits decode, e.g. 'decode is memory-bound: 94% of each step is reading ...'."""
    step = e.ceiling.decode_step
    top = max(step.components, key=lambda c: c.seconds)
    share = top.seconds / step.seconds if step.seconds else 0.0
    if top.name == "communication":
        what = f"all-reduces of {top.bytes / 1e6:.2f} MB over the interconnect"
    elif top.bound == "compute":
        what = f"{top.flops / 1e12:.2f} TFLOP of {'matmuls' if top.name == 'weights' else 'attention'}"
    else:
        target = "weights" if top.name == "weights" else "KV cache"
        what = f"reading {top.bytes / 1e9:.2f} GB of {target}"
    return f"decode is {step.bound}-bound: {share:.0%} of each step is {what}"
