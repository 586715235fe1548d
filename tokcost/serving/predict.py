"""One serving measurement predicted by one call: what a validation row (model, GPU, TP, formats, lengths,
request rate or concurrency -> latency percentiles and throughput) is compared with.

A row gives either `rate_rps` (open loop, Poisson) or `concurrency` (closed loop, no think time unless
given, as in vLLM's benchmark_serving --max-concurrency). The scheduler (the prefill token budget per step,
vLLM's max_num_batched_tokens; the cap on running sequences, max_num_seqs; multi-step scheduling) comes from
the engine profile for the GPU unless the row states it. `client_side`: the row was timed by a client (HTTP,
tokenization and scheduling on its TTFT: the engine's per-request cost), else inside the engine.
"""

from __future__ import annotations

from dataclasses import dataclass

from tokcost.engine.step import Scenario
from tokcost.hardware.spec import GpuSpec, Link
from tokcost.models.spec import ModelSpec
from tokcost.profiles import GENERIC, EngineProfile
from tokcost.serving.capacity import capacity, state_at_rate, state_at_users
from tokcost.serving.fleet import percentiles
from tokcost.serving.latency import e2e_mean
from tokcost.serving.layout import Layout
from tokcost.serving.replica import LoadPoint, Replica, build_replica
from tokcost.serving.steps import Deployment
from tokcost.serving.traffic import LengthDist, Slo, Traffic
from tokcost.serving.ttft import ttft_moments

DEFAULT_CHUNK = 2048


@dataclass(frozen=True, slots=True)
class Prediction:
    """Percentiles ({p50, p90, p99} seconds) at the row's load, throughput, and the replica's limits."""

    ttft_s: dict[str, float | None] | None
    tpot_s: dict[str, float | None] | None
    e2e_s: dict[str, float | None] | None
    rate_rps: float  # requests/s served (closed loop: what the users' pace produces)
    output_tokens_per_s: float
    saturation_rps: float
    max_rate_rps: float | None  # at the SLOs given, else None
    saturated: bool  # the load is at or past saturation: no percentiles
    itl_s: dict[str, float | None] | None = None  # the gap between two tokens, pooled over every gap
    itl_mean_s: float | None = None  # its mean: the mean step a decoding sequence waits
    means_s: dict[str, float | None] | None = None  # {ttft_s, tpot_s, e2e_s}: each metric's mean over requests


def predict(
    model: ModelSpec, gpu: GpuSpec, *, tp: int, prompt_tokens: float, output_tokens: float,
    rate_rps: float | None = None, concurrency: int | None = None, think_time_s: float = 0.0,
    weights: str | None = None, kv_dtype: str | None = None, compute_dtype: str | None = None,
    chunk: int | None = None, cached_prefix_tokens: int = 0, prompt_dist: LengthDist | None = None,
    output_dist: LengthDist | None = None, slos: list[Slo] | None = None, scenario: Scenario = "expected",
    pp: int = 1, ep: int = 1, dp: int = 1, engine: EngineProfile = GENERIC, network: Link | None = None,
    scheduler_steps: int | None = None, max_running: int | None = None, client_side: bool = True,
    lookahead: bool | None = None, prefill_apart: bool | None = None,
) -> Prediction:  # fmt: skip
    """One replica (tp x pp x dp GPUs) under the row's load (exactly one of rate_rps and concurrency)."""
    if (rate_rps is None) == (concurrency is None):
        raise ValueError("give exactly one of rate_rps and concurrency")
    prompt = prompt_dist or LengthDist("fixed", prompt_tokens)
    traffic = Traffic(
        prompt=prompt.shifted(cached_prefix_tokens), output=output_dist or LengthDist("fixed", output_tokens),
        rate_rps=rate_rps, concurrency=concurrency, think_time_s=think_time_s,
        cached_prefix_tokens=cached_prefix_tokens,
    )  # fmt: skip
    deployment = Deployment(gpu, Layout(tp, pp, ep, dp), weights, kv_dtype, compute_dtype, network, engine)
    sched = engine.scheduler(gpu_name=gpu.name, memory_bytes=gpu.memory_bytes)
    replica = build_replica(
        model, deployment, traffic, chunk or sched.chunk_tokens or DEFAULT_CHUNK, scenario,
        max_running=max_running or sched.max_running_sequences, client_side=client_side,
        scheduler_steps=scheduler_steps or sched.scheduler_steps,
        lookahead=sched.overlap if lookahead is None else lookahead,  # None: as the engine's scheduler runs
        prefill_apart=sched.prefill_apart if prefill_apart is None else prefill_apart,
    )  # fmt: skip
    limits = capacity(replica, slos or [])
    if concurrency is not None:
        point = state_at_users(replica, concurrency, think_time_s)
    else:
        point = state_at_rate(replica, rate_rps or 0.0)
    max_rate = limits.max_rate_rps if slos else None
    if point is None:
        rate = limits.saturation_rps
        return Prediction(None, None, None, rate, rate * traffic.output.mean, limits.saturation_rps, max_rate, True)
    return Prediction(
        ttft_s=percentiles(replica, point, "ttft"),
        tpot_s=percentiles(replica, point, "tpot"),
        e2e_s=percentiles(replica, point, "e2e"),
        itl_s=percentiles(replica, point, "itl"),
        itl_mean_s=point.tpot_mean_s if replica.decodes else None,
        means_s=_means(replica, point),
        rate_rps=point.rate_rps,
        output_tokens_per_s=point.rate_rps * traffic.output.mean,
        saturation_rps=limits.saturation_rps,
        max_rate_rps=max_rate,
        saturated=False,
    )


def _means(replica: Replica, point: LoadPoint) -> dict[str, float | None]:
    """Each latency's mean over requests: TTFT's mixture mean, TPOT's Little mean (b / (lambda E[n])), and E2E's
    (one replica serving both phases: no KV transfer)."""
    ttft = ttft_moments(replica, point).mean if replica.prompts else None
    tpot = point.tpot_mean_s if replica.decodes else None
    return {"ttft_s": ttft, "tpot_s": tpot, "e2e_s": e2e_mean(replica, point) if replica.prompts else None}
