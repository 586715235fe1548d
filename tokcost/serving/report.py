"""A Plan as plain data with stable keys (what `tokcost plan --format json` prints; scripts depend on them).

Top level: `workload`, `slo`, `configs` (ranked: those meeting every SLO under "expected" first, cheapest
$/hour first), `load` (GPUs at multiples of the load) and `warnings` (a list of strings; never prose elsewhere).
Each config: `mode`, `gpu`, `layout`, `tp`, `prefill_tp` (disaggregated only), `weights`, `kv_dtype`,
`compute_dtype`, `chunk_tokens` and `chunk_source` (the engine's default, --chunk, or searched),
`max_running` and `max_running_source` (the engine's cap on running sequences), `prefill` and `prefill_source`
("apart": prompt steps run alone and the decodes wait them out, or "mixed"; the engine's or --prefill),
`request_overhead_s` (the
engine's per-request cost, on TTFT as a client times it), `pareto`, and `expected` and `ceiling` with the keys
of SCENARIO_KEYS (`expected` adds `band`: the engine era's 80% band, factors on time and each latency's
(low, high)); `simulated` with `ttft_s`, `tpot_s`, `e2e_s`, `itl_s` when --simulate ran for it (else
null). Latencies are `{p50, p90, p99}` in seconds (null where they do not apply, e.g. TPOT with one output
token); `ttft_lock_step_s` is TTFT were a closed loop's users in lock-step groups (fixed lengths; else null),
the other end of the range whose primary figure is `ttft_s`; money in USD, null without a price: `usd_per_hour`
is what plans rank by, `usd_per_million_tokens` spreads it over every token served, and the input/output split
is by busy time.
"""

from __future__ import annotations

from typing import Any

from tokcost.engine.band import band_of, time_band
from tokcost.serving.fleet import Fleet
from tokcost.serving.search import Plan, Row, experts_format, precision_parts
from tokcost.serving.traffic import Traffic

SCHEMA_VERSION = 2
SCENARIO_KEYS = (
    "meets_slo", "max_rate_rps", "saturation_rps", "replicas", "prefill_replicas", "gpus", "utilization",
    "ttft_s", "ttft_lock_step_s", "tpot_s", "itl_s", "e2e_s", "usd_per_hour", "usd_per_million_tokens",
    "usd_per_million_input_tokens", "usd_per_million_output_tokens", "binding",
)  # fmt: skip
CONFIG_KEYS = (
    "mode", "gpu", "layout", "tp", "gpus_per_replica", "prefill_tp", "prefill_layout", "prefill_gpus", "weights",
    "experts_dtype", "kv_dtype", "compute_dtype",
    "chunk_tokens", "chunk_source", "max_running", "max_running_source", "prefill", "prefill_source",
    "request_overhead_s", "pareto", "expected", "ceiling", "simulated",
)  # fmt: skip


def fleet_dict(f: Fleet) -> dict[str, Any]:
    """One scenario's fleet."""
    return {key: getattr(f, key) for key in SCENARIO_KEYS}


def band_dict(row: Row) -> dict[str, Any]:
    """The 80% band of the row's engine era on its GPU (engine/band.py): factors on time, basis, each latency's."""
    b = band_of(row.deployment.engine, row.deployment.gpu.platform)
    spans = {}
    for key in ("ttft_s", "tpot_s", "itl_s", "e2e_s"):
        got = getattr(row.expected, key)
        spans[key] = None if got is None else {q: None if v is None else list(time_band(v, b)) for q, v in got.items()}
    return {"time_low_factor": b.low, "time_high_factor": b.high, "basis": b.basis, **spans}


def config_dict(row: Row) -> dict[str, Any]:
    """One configuration, both scenarios."""
    weights, kv, compute = precision_parts(row)
    choice = row.choice
    return {
        "mode": row.mode,
        "gpu": row.deployment.gpu.name,
        "layout": row.deployment.layout.label,
        "tp": row.deployment.layout.tp,
        "gpus_per_replica": row.deployment.layout.gpus,  # a (decode) replica's: TP x PP x EP's ranks
        "prefill_tp": row.prefill_layout.tp if row.prefill_layout else None,
        "prefill_layout": row.prefill_layout.label if row.prefill_layout else None,  # its PP and EP too
        "prefill_gpus": row.prefill_layout.gpus if row.prefill_layout else None,  # a prefill replica's
        "weights": weights,
        "experts_dtype": experts_format(row),  # null: the experts are stored as the other weights
        "kv_dtype": kv,
        "compute_dtype": compute,
        "chunk_tokens": row.chunk,
        "chunk_source": choice.chunk_source if choice else None,
        "max_running": choice.max_running if choice else None,
        "max_running_source": choice.max_running_source if choice else None,
        "prefill": ("apart" if choice.prefill_apart else "mixed") if choice else None,
        "prefill_source": choice.prefill_source if choice else None,
        "request_overhead_s": row.replica.overhead_s if row.replica else None,
        "pareto": row.pareto,
        "expected": {**fleet_dict(row.expected), "band": band_dict(row)},
        "ceiling": fleet_dict(row.ceiling),
        "simulated": row.simulated,
    }


def workload_dict(traffic: Traffic, headroom: float, flash_attention: bool = True) -> dict[str, Any]:
    """The traffic as planned (prompt_tokens: the mean full prompt, cached prefix included)."""
    return {
        "rate_rps": traffic.rate_rps,
        "concurrency": traffic.concurrency,
        "think_time_s": traffic.think_time_s if traffic.concurrency else None,
        "prompt_tokens": traffic.prompt_mean_tokens,
        "output_tokens": traffic.output.mean,
        "prompt_dist": traffic.prompt.label,
        "output_dist": traffic.output.label,
        "cached_prefix_tokens": traffic.cached_prefix_tokens,
        "client_rtt_s": traffic.client_rtt_s if traffic.concurrency else None,
        "headroom": headroom,
        "flash_attention": flash_attention,
    }


def plan_dict(plan: Plan, explain: list[str] | None = None) -> dict[str, Any]:
    """The whole plan, JSON-ready; `explain` (a list of lines) only when asked for."""
    out: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "model": plan.model.name,
        "workload": workload_dict(plan.traffic, plan.space.headroom, plan.space.flash_attention),
        "slo": {slo.label: slo.seconds for slo in plan.slos},
        "configs": [config_dict(row) for row in plan.rows],
        "load": plan.load,
        "warnings": plan.warnings,
    }
    if explain is not None:
        out["explain"] = explain
    return out
