"""A queued prompt's packed work: its chunks attend over the ones before it, so a long prompt's work grows faster than
its tokens (Replica.work_tokens), and the backlog it makes waits with it."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokcost.hardware.library import load_gpu
from tokcost.models.library import load_model
from tokcost.serving.capacity import capacity, state_at_rate
from tokcost.serving.latency import percentile
from tokcost.serving.layout import Layout
from tokcost.serving.replica import build_replica
from tokcost.serving.simulate import simulate
from tokcost.serving.steps import Deployment
from tokcost.serving.traffic import LengthDist, Traffic


def _replica(model, gpu, tp, prompt, output, chunk, scenario="expected"):  # noqa: ANN001, ANN202
    traffic = Traffic(prompt, output, rate_rps=1.0)
    return build_replica(load_model(model), Deployment(load_gpu(gpu), Layout(tp)), traffic, chunk, scenario)


def test_prefix_slope_is_the_attention_flops_at_the_peak():
    # under the ceiling a chunk one chunk deeper adds C x C query-key pairs a layer, each 4 FLOPs a head dimension
    # (QK^T and PV), at the dense peak: c1 = 4 L H d / peak (Llama-3.1-8B: 32 layers, 32 heads of 128; H100 989 TFLOP/s)
    model, gpu = load_model("llama-3.1-8b"), load_gpu("h100-sxm")
    r = _replica("llama-3.1-8b", "h100-sxm", 1, LengthDist("lognormal", 4000, 0.8), LengthDist("fixed", 200), 2048,
                 "ceiling")  # fmt: skip
    flops = 4 * model.layers * model.attention_heads * model.head_dim
    assert r.prefix_slope() == pytest.approx(flops / gpu.peak_flops_per_s("bf16"), rel=0.01)


def test_fixed_prompts_work_as_their_tokens():
    # one length: (1 - k t) P + k P^2 = P, so the moments are the tokens' own, whatever the slope
    r = _replica("llama-3.1-70b", "h100-sxm", 4, LengthDist("fixed", 6000), LengthDist("fixed", 300), 2048)
    alpha = r._main_curves()[1](20.0) / r.chunk
    assert r.work_slope(alpha) > 0
    assert r.work_tokens(alpha) == pytest.approx(r.prompt_moments, rel=1e-9)


@settings(max_examples=12, deadline=None)
@given(mean=st.sampled_from([500, 2000, 5000, 12000]), cv=st.sampled_from([0.3, 0.8, 1.5]),
       kind=st.sampled_from(["lognormal", "exponential"]), chunk=st.sampled_from([512, 2048, 8192]))  # fmt: skip
def test_work_moments_are_the_quadratic_work_of_the_prompts_drawn(mean, cv, kind, chunk):
    # the mean is alpha E[P'] (alpha prices a token at the average token's prefix); the second and third moments are
    # those of (1 - k t) P + k P^2 over the prompts drawn, and heavier than the tokens' own
    r = _replica("qwen3-30b-a3b", "h200", 1, LengthDist(kind, mean, cv), LengthDist("fixed", 200), chunk)
    alpha = r._main_curves()[1](30.0) / r.chunk
    m1, m2, m3 = r.prompt_moments
    k = r.work_slope(alpha)
    assert 0 < k * m2 / m1 < 1
    w1, w2, w3 = r.work_tokens(alpha)
    assert w1 == pytest.approx(m1, rel=1e-9)
    assert w2 > m2 and w3 > m3
    rng = random.Random(7)
    draws = [r.traffic.prompt.sample(rng) for _ in range(200_000)]
    work = [(1 - k * m2 / m1) * p + k * p * p for p in draws]
    assert sum(work) / len(work) == pytest.approx(m1, rel=0.02)
    if cv <= 0.8:  # (heavier tails' sample second moment converges too slowly to check this way)
        assert sum(x * x for x in work) / len(work) == pytest.approx(w2, rel=0.05)


@pytest.mark.slow  # a 12,000-request simulation
def test_long_varied_prompts_wait_behind_their_own_work_not_their_tokens():
    # Qwen3-30B-A3B on an H200, lognormal 5,000-token prompts (cv 0.8) in 2,048-token chunks, 0.8 of saturation: the
    # backlog drained at alpha a token (the average token's prefix) priced p90 TTFT 34% under the simulation's, whose
    # long prompts' late chunks attend over thousands of tokens each; as their own work, within 15%
    r = _replica("qwen3-30b-a3b", "h200", 1, LengthDist("lognormal", 5000, 0.8), LengthDist("lognormal", 200, 0.8),
                 2048)  # fmt: skip
    rate = 0.8 * capacity(r, []).saturation_rps
    pt = state_at_rate(r, rate)
    sim = simulate(r.steps, r.traffic, r.chunk, requests=12000, seed=1, rate_rps=rate)
    for q in (0.5, 0.9):
        closed, simulated = percentile(r, pt, "ttft", q), sim.percentile("ttft", q)
        assert closed == pytest.approx(simulated, rel=0.15), (q, closed, simulated)
