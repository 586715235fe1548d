"""One serving measurement predicted by one call: what a validation row (model, GPU, TP, formats, lengths,
request rate or concurrency -> latency percentiles and throughput) is compared with.

A row gives either `rate_rps` (open loop, Poisson) or `concurrency` (closed loop, no think time unless
given, as in vLLM's benchmark_serving --max-concurrency). The scheduler (the prefill token budget per step,
vLLM's max_num_batched_tokens; the cap on running sequences, max_num_seqs; multi-step scheduling) comes from
the engine profile for the GPU unless the row states it. `client_side`: the row was timed by a client (HTTP,
tokenization and scheduling on its TTFT: the engine's per-request cost), else inside the engine.

`requests` N makes the row a finite benchmark run, as the harnesses run one (vLLM's benchmark_serving,
SGLang's bench_serving: --num-prompts N): N requests sent from t = 0 (Poisson from the first one, all at once at
an infinite rate, or the closed loop's users until N are sent), every one counted, the rate taken over the run's
whole span, its ramp and its drain included. Its rate is the simulation of those N requests (simulate.py, the same
steps), the mean of FINITE_SEEDS seeded runs: a burst of 50 requests at 10 req/s never reaches the steady state
the closed form describes, and its output rate is the batch the 50 make, not the saturated server's. Its
latencies are the closed form's where a steady state exists at the load (a long run's ramp and drain are a small
share of its requests), else the finite run's (past saturation the queue grows through the run, and what each
request waits depends on N). A closed loop's run is priced by its simulation throughout: its C users send their
first requests together (vLLM's and SGLang's bench_serving with --max-concurrency C), and of a run of 10 C requests,
as InferenceX's, that burst is a tenth, which every statistic the harness prints counts (InferenceX's DeepSeek-R1
on 8 x H200: mean TTFT -62..-67% and p99 -91..-92% under the steady state's, -53..+11% and -73..+52% with it).
In a finite run a request starts only while the KV cache holds it whole beside the running ones (a burst sits at
that limit, where an open loop's steady batch swings around its mean).
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass, replace

from tokcost.engine.step import Scenario
from tokcost.hardware.spec import GpuSpec, Link
from tokcost.models.spec import ModelSpec
from tokcost.profiles import GENERIC, EngineProfile
from tokcost.serving.capacity import capacity, state_at_rate, state_at_users
from tokcost.serving.fleet import REPORTED, percentiles
from tokcost.serving.latency import e2e_mean
from tokcost.serving.layout import Layout
from tokcost.serving.replica import LoadPoint, Replica, build_replica
from tokcost.serving.simulate import SimResult, simulate_replica
from tokcost.serving.steps import Deployment
from tokcost.serving.traffic import QUANTILES, LengthDist, Slo, Traffic
from tokcost.serving.ttft import ttft_moments

DEFAULT_CHUNK = 2048
FINITE_SEEDS = 3  # a finite run's figures: the mean over this many seeded runs (arrival times, sampled lengths)


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
    lookahead: bool | None = None, prefill_apart: bool | None = None, requests: int | None = None,
    flash_attention: bool = True, redundant_experts: int = 0,
) -> Prediction:  # fmt: skip
    """One replica (tp x pp x dp GPUs) under the row's load (exactly one of rate_rps and concurrency); `requests`:
    a finite run of that many requests (rate_rps may then be math.inf: all sent at t = 0), else the steady state."""
    if (rate_rps is None) == (concurrency is None):
        raise ValueError("give exactly one of rate_rps and concurrency")
    if requests is not None:
        if requests < 1:
            raise ValueError(f"requests: a finite run sends at least 1 request, not {requests}")
        if rate_rps is not None and not rate_rps > 0:
            raise ValueError(f"rate_rps: a finite open loop needs a rate above 0 (inf: all at once), not {rate_rps}")
        if concurrency is not None:
            concurrency = min(concurrency, requests)  # a run of N requests never has more than N in flight
    prompt = prompt_dist or LengthDist("fixed", prompt_tokens)
    traffic = Traffic(
        prompt=prompt.shifted(cached_prefix_tokens), output=output_dist or LengthDist("fixed", output_tokens),
        rate_rps=rate_rps, concurrency=concurrency, think_time_s=think_time_s,
        cached_prefix_tokens=cached_prefix_tokens,
    )  # fmt: skip
    deployment = Deployment(gpu, Layout(tp, pp, ep, dp, redundant_experts), weights, kv_dtype, compute_dtype, network,
                            engine, flash_attention=flash_attention)  # fmt: skip
    sched = deployment.engine.scheduler(gpu_name=gpu.name, memory_bytes=gpu.memory_bytes)  # the era it runs as
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
        point = state_at_rate(replica, rate_rps or 0.0) if math.isfinite(rate_rps or 0.0) else None
    max_rate = limits.max_rate_rps if slos else None
    finite, held = None, min(replica.running_cap(), replica.kv_slots())  # a finite run: what the KV cache holds whole
    if requests is not None and held >= 1:
        finite = _finite_run(replica, traffic, requests, held, limits.saturation_rps, max_rate)
        if point is None or concurrency is not None:  # past saturation, or a closed loop's run: its burst counts
            return finite
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
        rate_rps=finite.rate_rps if finite else point.rate_rps,
        output_tokens_per_s=finite.output_tokens_per_s if finite else point.rate_rps * traffic.output.mean,
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


def _finite_run(replica: Replica, traffic: Traffic, requests: int, held: float, saturation_rps: float,
                max_rate: float | None) -> Prediction:  # fmt: skip
    """`requests` requests as a benchmark runs them (module docstring), at most `held` running at once: the mean of
    FINITE_SEEDS simulations."""
    runs: list[SimResult] = []
    for seed in range(FINITE_SEEDS):
        arrivals = _sends(traffic, requests, random.Random(seed))
        sent = replace(traffic, arrivals_s=arrivals) if arrivals else traffic
        runs.append(simulate_replica(replica, sent, requests=requests, seed=seed, max_running=held, warmup=False))

    def across(values: list[float | None]) -> float | None:  # the mean over the seeded runs
        return None if any(v is None for v in values) else statistics.fmean(values)  # type: ignore[arg-type]

    def quantiles(metric: str) -> dict[str, float | None]:
        return {name: across([r.percentile(metric, QUANTILES[name]) for r in runs]) for name in REPORTED}

    rate = statistics.fmean(r.rate_rps for r in runs)
    return Prediction(
        ttft_s=quantiles("ttft"),
        tpot_s=quantiles("tpot"),
        e2e_s=quantiles("e2e"),
        itl_s=quantiles("itl"),
        itl_mean_s=across([r.itl_mean_s for r in runs]),
        means_s={f"{m}_s": across([_mean(getattr(r, f"{m}_s")) for r in runs]) for m in ("ttft", "tpot", "e2e")},
        rate_rps=rate,
        output_tokens_per_s=rate * traffic.output.mean,
        saturation_rps=saturation_rps,
        max_rate_rps=max_rate,
        saturated=False,
    )


def _sends(traffic: Traffic, requests: int, rng: random.Random) -> tuple[float, ...]:
    """When a finite open-loop run sends each request: the first at t = 0 and Poisson gaps after it (the harnesses
    sleep an exponential gap after each send), or every one at t = 0 at an infinite rate; () for a closed loop."""
    rate = traffic.rate_rps
    if rate is None:
        return ()
    if not math.isfinite(rate):
        return (0.0,) * requests
    times, t = [0.0], 0.0
    for _ in range(requests - 1):
        t += rng.expovariate(rate)
        times.append(t)
    return tuple(times)


def _mean(values: tuple[float, ...]) -> float | None:
    return statistics.fmean(values) if values else None
