"""A finite benchmark run (`requests` N: vLLM's benchmark_serving and SGLang's bench_serving with --num-prompts N):
N requests sent from t = 0, every one counted, the rate over the run's whole span (issue 20: plan as engines really
serve; the published serving rows state N).

Checked: a burst worked step by step against the engine's own step prices, a light Poisson run whose rate is its
arrival rate less the drain and whose latencies stay the steady state's, a burst past saturation that still answers
and runs slower than the saturated server, and a burst the KV cache holds only part of at once.
"""

from __future__ import annotations

import math

import pytest

from tokcost.engine.step import Segment
from tokcost.hardware.library import load_gpu
from tokcost.models.library import load_model
from tokcost.serving.layout import Layout
from tokcost.serving.predict import predict
from tokcost.serving.replica import build_replica
from tokcost.serving.steps import Deployment
from tokcost.serving.traffic import LengthDist, Traffic

EIGHT_B, H100 = load_model("llama-3.1-8b"), load_gpu("h100-sxm")


def _steps(prompt: int, output: int):
    traffic = Traffic(LengthDist("fixed", prompt), LengthDist("fixed", output), arrivals_s=(0.0,))
    return build_replica(EIGHT_B, Deployment(H100, Layout(1)), traffic, 2048, "expected").steps


def test_a_burst_of_four_is_one_prefill_step_then_the_decodes_of_four_by_hand():
    # 4 requests of 100 prompt tokens and 20 out, all sent at t = 0, chunk 2048: one step prefills the 4 prompts
    # (each request's first token), then 19 decode steps of batch 4 at contexts 101, 102, ... give the rest
    steps = _steps(100, 20)
    prefill = steps.seconds([Segment(1, 0, 100)] * 4)
    decode = sum(steps.seconds([Segment(4, 101 + j, 1)]) for j in range(19))
    p = predict(EIGHT_B, H100, tp=1, prompt_tokens=100, output_tokens=20, rate_rps=math.inf, requests=4, chunk=2048)
    assert p.rate_rps == pytest.approx(4 / (prefill + decode), rel=1e-9)
    assert p.output_tokens_per_s == pytest.approx(4 * 20 / (prefill + decode), rel=1e-9)
    assert p.ttft_s["p50"] == pytest.approx(prefill, rel=1e-9)  # the generic engine has no per-request cost
    assert p.e2e_s["p99"] == pytest.approx(prefill + decode, rel=1e-9)
    assert not p.saturated


def test_every_request_of_a_burst_counts_its_last_included():
    # 30 prompts of 1000 tokens and 2 out, sent at t = 0, prefill two a step (chunk 2048): the last two get their
    # second token in the step after the 15th, at the run's end, and the benchmark counts them (no warm-up cut, as a
    # steady-state simulation makes), so the p99 E2E is the run's span
    p = predict(EIGHT_B, H100, tp=1, prompt_tokens=1000, output_tokens=2, rate_rps=math.inf, requests=30, chunk=2048)
    assert p.e2e_s["p99"] == pytest.approx(30 / p.rate_rps, rel=1e-9)
    assert p.ttft_s["p50"] > 5 * _steps(1000, 2).seconds([Segment(1, 0, 1000)] * 2)  # the median waits 7-8 steps


def test_a_light_poisson_run_serves_its_arrival_rate_less_the_drain_with_the_steady_states_latencies():
    kw = dict(tp=1, prompt_tokens=500, output_tokens=200, rate_rps=15.0, chunk=2048)
    steady = predict(EIGHT_B, H100, **kw)
    assert not steady.saturated and steady.saturation_rps > 45  # 15 req/s is under a third of saturation
    finite = predict(EIGHT_B, H100, requests=2000, **kw)
    # 2,000 sends span about 133 s; the last answer comes one E2E (under two seconds) later
    span, e2e = 2000 / 15, steady.means_s["e2e_s"]
    assert 0.95 * 15 * span / (span + e2e) < finite.rate_rps < 1.03 * 15
    assert finite.ttft_s == steady.ttft_s and finite.tpot_s == steady.tpot_s  # a steady state exists at this load
    assert finite.saturation_rps == steady.saturation_rps


def test_a_short_burst_past_saturation_still_answers_and_runs_below_the_saturated_server():
    # 50 requests at 10 req/s of 1000 in / 2000 out (SkyPilot's DeepSeek-R1 run's shape): the steady state is past
    # saturation, but the run ends: its 50 sequences decode together, a batch far under the saturated server's
    kw = dict(tp=1, prompt_tokens=1000, output_tokens=2000, rate_rps=10.0)
    steady = predict(EIGHT_B, H100, **kw)
    assert steady.saturated and steady.ttft_s is None
    rates = [predict(EIGHT_B, H100, requests=n, **kw).rate_rps for n in (10, 50, 400)]
    assert rates[0] < rates[1] < rates[2] < steady.saturation_rps
    burst = predict(EIGHT_B, H100, requests=50, **kw)
    assert burst.ttft_s["p50"] is not None and burst.ttft_s["p50"] <= burst.ttft_s["p99"]
    # each request decodes 1999 tokens at one step each, a step no shorter than a lone sequence's
    lone = _steps(1000, 2000).seconds([Segment(1, 1001, 1)])
    assert burst.tpot_s["p50"] >= lone
    assert burst.rate_rps <= 50 / (1999 * lone)


def test_a_burst_runs_only_the_sequences_the_kv_cache_holds_whole():
    # Llama-3.1-70B at 16 bits on two H100s leaves room for a few 2,500-token sequences: a burst of 400 runs in
    # turns of that many, so no more than that many ever decode together
    model, kw = load_model("llama-3.1-70b"), dict(tp=2, prompt_tokens=2000, output_tokens=500)
    traffic = Traffic(LengthDist("fixed", 2000), LengthDist("fixed", 500), arrivals_s=(0.0,))
    replica = build_replica(model, Deployment(H100, Layout(2)), traffic, 2048, "expected")
    slots = replica.kv_slots()
    assert 3 <= slots < 100
    burst = predict(model, H100, rate_rps=math.inf, requests=400, **kw)
    lone = replica.steps.seconds([Segment(1, 2001, 1)])
    # every slot is held for at least 499 decode steps, each no shorter than a lone sequence's step
    assert burst.rate_rps <= slots / (499 * lone)
    unbounded = 400 / (499 * lone)  # what 400 decoding at once at a lone step's pace would give
    assert burst.rate_rps < unbounded / 4


def test_a_finite_run_refuses_what_cannot_run_and_never_has_more_users_than_requests():
    kw = dict(tp=1, prompt_tokens=100, output_tokens=20)
    with pytest.raises(ValueError, match="requests"):
        predict(EIGHT_B, H100, rate_rps=5.0, requests=0, **kw)
    with pytest.raises(ValueError, match="rate above 0"):
        predict(EIGHT_B, H100, rate_rps=0.0, requests=10, **kw)
    # 2 requests from 4 closed-loop users: only 2 are ever in flight, as 2 users would run them
    two = predict(EIGHT_B, H100, concurrency=2, requests=2, **kw)
    assert predict(EIGHT_B, H100, concurrency=4, requests=2, **kw) == two


def test_a_closed_loops_run_counts_its_first_burst():
    # 32 users' first prompts of 2,000 tokens arrive together (bench_serving --max-concurrency 32), 64,000 tokens of
    # prefill: the last of that burst waits some 30 chunk steps, and a run of 320 requests counts it in every figure
    # (InferenceX's DeepSeek-R1 rows: p99 TTFT 91-92% under the steady state, 52% over to 73% under with it)
    kw = dict(tp=1, prompt_tokens=2000, output_tokens=200, concurrency=32, chunk=2048)
    steady, run = predict(EIGHT_B, H100, **kw), predict(EIGHT_B, H100, requests=320, **kw)
    assert run.ttft_s["p99"] > 5 * steady.ttft_s["p99"] and run.means_s["ttft_s"] > 1.5 * steady.means_s["ttft_s"]
    assert run.ttft_s["p50"] == pytest.approx(steady.ttft_s["p50"], rel=0.05)  # the rest run at the steady state
