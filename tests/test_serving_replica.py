"""The closed form of one replica: vanishing load equals estimate, Little's law, limits, goodput laws."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tiers import examples

from tokcost.engine.estimate import estimate
from tokcost.engine.features import Segment
from tokcost.engine.workload import Workload
from tokcost.hardware.library import load_gpu
from tokcost.models.library import load_model
from tokcost.profiles import GENERIC
from tokcost.serving.capacity import capacity, state_at_rate, state_at_users, users_in_system
from tokcost.serving.latency import percentile
from tokcost.serving.layout import Layout
from tokcost.serving.replica import (
    build_replica,
    clumped_companions,
    decode_context,
    held_backlog,
    held_kv_tokens,
)
from tokcost.serving.steps import Deployment, replica_kv_tokens
from tokcost.serving.traffic import LengthDist, Slo, Traffic

FIXED = Traffic(LengthDist("fixed", 2048), LengthDist("fixed", 300), rate_rps=1.0)


def _replica(model="llama-3.1-70b", gpu="h100-sxm", tp=4, traffic=FIXED, chunk=2048, scenario="expected", **kw):
    return build_replica(load_model(model), Deployment(load_gpu(gpu), Layout(tp), **kw), traffic, chunk, scenario)


@pytest.mark.parametrize(
    "model, gpu, tp, weights, prompt, output, prefix",
    [
        ("llama-3.1-8b", "h100-sxm", 1, None, 1024, 256, 0),
        ("llama-3.1-70b", "h100-sxm", 4, "fp8", 2048, 300, 0),
        ("llama-3.1-70b", "mi300x", 2, None, 4000, 500, 1000),
        ("mixtral-8x7b", "a100-80gb-sxm", 2, None, 512, 128, 0),
        ("gemma-2-9b", "l40s", 1, None, 6000, 64, 0),  # sliding-window layers
    ],
)
@pytest.mark.parametrize("scenario", ["expected", "ceiling"])
def test_vanishing_load_equals_estimate_batch_1(model, gpu, tp, weights, prompt, output, prefix, scenario):
    # the check: at 0.001 req/s, p50 TTFT and TPOT are estimate's batch-1 figures within 5%
    m, g = load_model(model), load_gpu(gpu)
    e = estimate(m, g, Workload(batch=1, prompt_tokens=prompt, output_tokens=output, gpus=tp, weights_dtype=weights,
                                cached_prefix_tokens=prefix))  # fmt: skip
    side = getattr(e, scenario)
    traffic = Traffic(LengthDist("fixed", prompt - prefix), LengthDist("fixed", output), rate_rps=0.001,
                      cached_prefix_tokens=prefix)  # fmt: skip
    r = build_replica(m, Deployment(g, Layout(tp), weights), traffic, 8192, scenario)  # one chunk holds the prompt
    pt = state_at_rate(r, 0.001)
    # the issue asks for 5%; the same step_cost parts give 0.1%, so hold it to 1%
    assert percentile(r, pt, "ttft", 0.5) == pytest.approx(side.ttft_s, rel=0.01)
    assert percentile(r, pt, "tpot", 0.5) == pytest.approx(side.tpot_s, rel=0.01)


def _rounded_exponential(mean: float) -> tuple[float, float]:
    """(E[K], E[K^2]) of K = max(1, round(X)), X exponential: P(K > k) = P(X >= k + 1/2) = r q^k with q = e^(-1/m),
    r = e^(-1/(2m)), so E[K] = 1 + r q / (1 - q) and E[K^2] = 1 + r (2 q / (1 - q)^2 + q / (1 - q))."""
    q, r = math.exp(-1 / mean), math.exp(-0.5 / mean)
    return 1 + r * q / (1 - q), 1 + r * (2 * q / (1 - q) ** 2 + q / (1 - q))


@pytest.mark.parametrize("mean", [0.5, 1.0, 3.0, 20.0, 201.0, 5000.0])
def test_length_moments_are_the_drawn_token_counts(mean):
    # the closed form counts the tokens the simulator draws, max(1, round(X)): a 1-token-mean exponential prompt is
    # 1.35 tokens on average, which the steps run and the queue must see (else it saturates below saturation)
    k1, k2 = _rounded_exponential(mean)
    law = LengthDist("exponential", mean)
    # counts to 1,024 summed one by one; past them the continuous law, whose rounding would add under 1e-6
    assert law.moment(1) == pytest.approx(k1, rel=1e-6) and law.moment(2) == pytest.approx(k2, rel=1e-6)
    if mean > 100:  # rounding and the floor at 1 move a long law's mean by under 1 / m of a token: the continuous one
        assert law.moment(1) == pytest.approx(mean, rel=1e-4) and law.moment(3) == pytest.approx(6 * mean**3, rel=1e-4)
    assert LengthDist("fixed", 2.4).moment(2) == 4 and LengthDist("fixed", 0.3).moment(1) == 1


def test_decode_context_is_estimates_mean_context_for_fixed_lengths():
    assert decode_context(FIXED) == pytest.approx(2048 + 300 / 2)
    # exponential outputs weigh long answers more: E[n^2] / E[n] ~ 2 E[n] (n = K - 1 over the drawn counts K)
    t = Traffic(LengthDist("fixed", 1000), LengthDist("exponential", 201))
    k1, k2 = _rounded_exponential(201)
    n1, n2 = k1 - 1, k2 - 2 * k1 + 1
    assert decode_context(t) == pytest.approx(1000 + (n2 + n1) / (2 * n1), rel=1e-6)
    assert decode_context(t) == pytest.approx(1000 + (2 * 201**2 - 2 * 201 + 1 + 200) / (2 * 200), rel=1e-5)


@pytest.mark.parametrize("b", [0.5, 5, 40, 120])
def test_state_obeys_littles_law(b):
    r = _replica()
    pt = r.state(b)
    assert pt.rate_rps * r.decode_steps_mean * pt.tpot_mean_s == pytest.approx(b, rel=1e-9)
    # rho is the prefill work per second; TPOT the harmonic mix of prefill and decode-only steps, as a time-random
    # life meets them, plus D / E[n], the life the backlog behind a request's own prompt adds (replica.held_backlog)
    assert pt.rho == pytest.approx(pt.rate_rps * pt.service.mean, rel=1e-9)
    mix = 1 / (pt.rate_rps * pt.steps_per_request + (1 - pt.rho) / pt.decode_step_s)
    assert pt.tpot_steady_s == pytest.approx(mix, rel=1e-9)
    held = r.held_life(pt.held_backlog)
    assert held > 0 and pt.tpot_mean_s == pytest.approx(mix + held / r.decode_steps_mean, rel=1e-5)


def test_the_clump_a_decoder_meets_is_twice_the_prefill_queue_s_population_over_a_busy_idle_cycle():
    # lambda 1/s, E[T] 0.5 s, E[S] 0.4 s, rho 0.4: a busy-idle cycle C = 0.4 / (0.4 x 0.6) = 5/3 s
    assert clumped_companions(1.0, 0.5, 0.4, 0.4, 1.0) == pytest.approx(2 * 1.0 * 0.5)  # L < C: all of it
    assert clumped_companions(1.0, 0.5, 0.4, 0.4, 5.0) == pytest.approx(1.0 * (5 / 3) / 5)  # L > C: C / L of it
    # at most the decodes the service rate lets out over the life beyond Poisson's, L (1 - rho) / E[S]
    assert clumped_companions(2.0, 0.5, 0.4, 0.4, 0.5) == pytest.approx(0.5 * 0.6 / 0.4)
    assert clumped_companions(1.0, math.inf, 0.4, 0.99, 2.0) == pytest.approx(2.0 * 0.01 / 0.4)  # an endless queue
    for idle in (0.0, 1.0):  # no prefill busy period (rho 0), or prefill every step (rho 1): no clump
        assert clumped_companions(1.0, 0.5, 0.4, idle, 1.0) == 0.0


def test_the_clump_slows_only_the_requests_that_start_behind_a_backlog():
    # 16,384-token prompts, 64-token answers: the clump a decoder meets slows its decode-only steps by dT0/db x its
    # count, and so Little's TPOT; that life falls only on the requests that start inside a prefill busy period
    t = Traffic(LengthDist("fixed", 16384), LengthDist("fixed", 64), rate_rps=1.0)
    r = build_replica(load_model("llama-3.1-8b"), Deployment(load_gpu("h100-sxm"), Layout(1)), t, 8192, "expected")
    pt = state_at_rate(r, 1.0)
    assert 0.3 < pt.rho < 0.7 and pt.clump > 0.5
    sojourn, life = pt.wait_mean_s + pt.service.mean, r.decode_steps_mean * pt.tpot_steady_s
    assert pt.clump == pytest.approx(clumped_companions(pt.rate_rps, sojourn, pt.service.mean, pt.rho, life))
    slowed_t0 = pt.decode_step_s + r.decode_slope(pt.batch + 1) * pt.clump
    slowed = 1 / (pt.rate_rps * pt.steps_per_request + (1 - pt.rho) / slowed_t0)  # Little's TPOT with T0 slowed
    slow = (slowed - pt.tpot_steady_s) / pt.rho
    assert pt.clump_step_s == pytest.approx(slow, rel=1e-9)
    # a shift of n x clump_step_s on the busy-start branch: the mean rises by rho times it, the spread by the two
    # branches drifting apart
    n, shift = 63, 63 * pt.clump_step_s
    bare = held_backlog(pt.rho, pt.backlog_busy_s, pt.wait_shape, pt.backlog_keep, n * pt.prefill_step_s, False)
    held = pt.held_backlog(n)
    assert held.mean == pytest.approx(bare.mean + pt.rho * shift, rel=1e-9)
    rest = bare.mean / pt.rho  # the busy-start branch's mean without the clump
    assert held.var - bare.var == pytest.approx(pt.rho * (1 - pt.rho) * (shift**2 + 2 * shift * rest), rel=1e-6)


def test_the_clump_is_the_prompts_behind_it_the_running_cap_has_slots_for():
    # a cap of 4 running sequences: at batch b the prompts behind a decoder have 3 - b slots, and the clump is made
    # of them, so it ends with the slots and the rate runs on smoothly there (it jumped 2.6% at b = 3 when the clump
    # counted every queued prompt, then vanished with the backlog's rest)
    t = Traffic(LengthDist("fixed", 16384), LengthDist("fixed", 64), rate_rps=1.0)
    r = build_replica(load_model("llama-3.1-8b"), Deployment(load_gpu("h100-sxm"), Layout(1)), t, 8192, "expected",
                      max_running=4)  # fmt: skip
    for b in (1.0, 2.0, 2.5, 2.9):
        pt = r.state(b)
        assert 0 < pt.clump <= 3 - b + 1e-9 and pt.clump_sojourn_s <= (3 - b) / pt.rate_rps + 1e-12
    below, at = r.state(3 - 1e-5), r.state(3.0)
    assert at.clump == 0 and below.clump < 1e-3
    assert at.rate_rps == pytest.approx(below.rate_rps, rel=1e-3)


@pytest.mark.parametrize("chunk", [256, 1024, 2048, 8192])
def test_rate_grows_with_the_batch_up_to_saturation(chunk):
    r = _replica(chunk=chunk)
    limit = r.load_limit()
    rates = [r.state(limit * i / 40).rate_rps for i in range(41)]
    assert all(a < b for a, b in zip(rates[:-1], rates[1:], strict=True))
    rhos = [r.state(limit * i / 40).rho for i in range(41)]
    assert all(0 <= x < 1 for x in rhos)


def test_saturation_batch_is_every_step_full_of_prefill():
    # E[n] C / E[P'] decode sequences: each request's 299 decode steps share steps with its prompt's chunks
    assert _replica(chunk=512).saturation_batch == pytest.approx(299 * 512 / 2048)
    r = _replica(chunk=512)
    # the limit is where the queue's budget runs out, 0.2% short of it here: a prompt's own chunks (roofline steps,
    # not linear in the offset) cost a little less than its tokens at the packed chunk's rate
    assert r.stable_batch == pytest.approx(r.saturation_batch, rel=5e-3) and r.stable_batch < r.saturation_batch
    # (a request that decodes behind its backlog lives in prefill steps there: Little's rate a little lower)
    assert r.state(r.load_limit()).rho == pytest.approx(1.0, abs=3e-3)


@pytest.mark.parametrize(
    ("cap", "prompt", "output", "chunk"), [(1, 1000, 2, 2048), (1, 1000, 300, 512), (16, 8000, 100, 2048)]
)
def test_a_running_cap_decodes_its_share_of_each_slots_time(cap, prompt, output, chunk):
    # a request holds its slot for its prompt's chunk steps, E[S] (the last yields its first token), and its O - 1
    # decode steps, E[n] TPOT: by Little's law on the slots, c of them hold a mean decode batch of
    # c E[n] TPOT / (E[n] TPOT + E[S]). Counted in steps, c (O - 1) / (O - 1 + chunks), a chunk step weighed as a
    # decode step though it runs longer, and the cap's rate came out high (it once kept a whole slot for the
    # prompt: 0)
    traffic = Traffic(LengthDist("fixed", prompt), LengthDist("fixed", output), rate_rps=1.0)
    r = build_replica(load_model("llama-3.1-8b"), Deployment(load_gpu("h100-sxm"), Layout(1)), traffic, chunk,
                      "expected", max_running=cap)  # fmt: skip
    chunks = -(-prompt // chunk)
    assert r.limit_kind() == "cap"
    limit = r.load_limit()
    assert limit < cap * (output - 1) / (output - 1 + chunks)  # below the steps' share: prefill steps are longer
    point = r.state(limit)
    held = point.rate_rps * ((output - 1) * point.tpot_mean_s + point.service.mean)  # slots busy, by Little
    assert held == pytest.approx(cap, rel=0.02)
    assert capacity(r, []).saturation_rps > 0


def test_short_requests_hold_the_kv_their_own_logits_leave():
    # KV beside the workspace of b sequences, A - w b, holds b x s tokens up to b* = A / (s + w): the fixed point,
    # where the old two-pass estimate (the logits of the batch the weights alone leave room for) went to 0
    a, w, s = 1_000_000.0, 3.0, 2.0
    kv = held_kv_tokens(lambda b: max(a - w * round(b), 0.0), s)
    b_star = a / (s + w)
    assert kv == pytest.approx(s * b_star, rel=1e-4)
    m, g = load_model("llama-3.1-8b"), load_gpu("h100-sxm")
    tiny = Traffic(LengthDist("fixed", 1), LengthDist("fixed", 1), rate_rps=1.0)
    r = build_replica(m, Deployment(g, Layout(1)), tiny, 2048, "expected")
    whole = r.kv_capacity_tokens / m.attended_tokens(2)  # sequences of 2 tokens it holds, their logits beside them
    assert r.kv_capacity_tokens >= 2 * whole > 0 and r.load_limit() > 0
    assert replica_kv_tokens(m, Deployment(g, Layout(1)), whole + 2, 1, 1) < 2 * (whole + 2)  # one more does not fit


def test_shared_prefix_is_counted_once_in_kv():
    # same 4,000-token prompts: with 3,000 shared and cached, each sequence holds ~1,000 + output of its own
    m, g = load_model("llama-3.1-8b"), load_gpu("l4")
    plain = Traffic(LengthDist("fixed", 4000), LengthDist("fixed", 200))
    shared = Traffic(LengthDist("fixed", 1000), LengthDist("fixed", 200), cached_prefix_tokens=3000)
    a = build_replica(m, Deployment(g, Layout(1)), plain, 2048, "expected")
    b = build_replica(m, Deployment(g, Layout(1)), shared, 2048, "expected")
    assert a.kv_shared == 0 and b.kv_shared == 3000
    assert b.kv_private == pytest.approx(a.kv_private - 3000)
    assert b.kv_slots() > 3 * a.kv_slots()  # 1,200 private tokens a sequence, against 4,200
    pt = b.state(2.0)
    assert pt.kv_tokens_p99 == pytest.approx(3000 + (2 + 2.326 * 2**0.5) * b.kv_private + pt.rho * 1000)


def test_goodput_never_exceeds_saturation_and_names_what_binds():
    r = _replica(tp=8, weights="fp8")
    none = capacity(r, [])
    assert none.max_rate_rps == none.saturation_rps
    for slos in ([Slo("ttft", "p90", 0.5)], [Slo("tpot", "p90", 0.03)], [Slo("e2e", "p99", 20.0)]):
        cap = capacity(r, slos)
        assert 0 < cap.max_rate_rps <= cap.saturation_rps
        assert cap.binding == f"{slos[0].label} SLO"


def test_unreachable_slo_gives_zero_goodput_with_the_reason():
    cap = capacity(_replica(), [Slo("ttft", "p50", 0.001)])
    assert cap.max_rate_rps == 0
    assert cap.binding == "ttft_p50 SLO" and cap.broken_at_zero_load


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ttft=st.floats(0.12, 3.0), tpot=st.floats(0.015, 0.2), loosen=st.floats(1.0, 3.0))
def test_looser_slos_never_lower_goodput(ttft, tpot, loosen):
    r = _replica(tp=8, chunk=1024)
    tight = [Slo("ttft", "p90", ttft), Slo("tpot", "p90", tpot)]
    loose = [Slo("ttft", "p90", ttft * loosen), Slo("tpot", "p90", tpot * loosen)]
    a, b = capacity(r, tight), capacity(r, loose)
    assert b.max_rate_rps >= a.max_rate_rps * (1 - 1e-9)
    assert b.max_rate_rps <= b.saturation_rps


def test_closed_loop_users_are_rate_times_e2e_plus_think():
    r = _replica(tp=8)
    pt = state_at_users(r, 40, 2.0)
    assert pt is not None
    assert users_in_system(r, pt, 2.0) == pytest.approx(40, rel=1e-6)
    # past the load limit the extra users wait for admission: the limit's state, TTFT longer by excess / rate
    edge = r.state(r.load_limit())
    far = state_at_users(r, 1e7, 0.0)
    assert far.batch == edge.batch and far.tpot_mean_s == edge.tpot_mean_s
    assert far.admission_wait_s == pytest.approx((1e7 - users_in_system(r, edge, 0.0)) / edge.rate_rps)


@pytest.mark.parametrize("kind", ["fixed", "lognormal"])
def test_an_admission_wait_is_erlang_where_lengths_vary_and_fixed_in_lock_step(kind):
    # 64 users of 8,000-token prompts and 1,000-token answers on 50 KV slots: 14 users ahead of each extra one are
    # admitted one per finish, so the wait is Erlang(k = wait x rate) where the finishes are random (variance
    # wait / rate on every branch) and a constant where fixed lengths finish in lock-step
    from dataclasses import replace

    from tokcost.serving.ttft import ttft_moments

    law = (lambda m: LengthDist("fixed", m)) if kind == "fixed" else (lambda m: LengthDist("lognormal", m, 0.5))
    traffic = Traffic(law(8000), law(1000), concurrency=64)
    r = _replica("llama-3.1-8b", "h100-sxm", 1, traffic, 2048)
    pt = state_at_users(r, 64, 0.0)
    assert pt.admission_wait_s * pt.rate_rps == pytest.approx(64 - users_in_system(r, r.state(r.load_limit()), 0.0))
    with_wait, without = ttft_moments(r, pt), ttft_moments(r, replace(pt, admission_wait_s=0.0))
    assert with_wait.mean - without.mean == pytest.approx(pt.admission_wait_s, rel=1e-9)
    spread = 0.0 if kind == "fixed" else pt.admission_wait_s / pt.rate_rps
    assert with_wait.var - without.var == pytest.approx(spread, rel=1e-6, abs=1e-12)
    from tokcost.serving.explain import _admission_lines

    (line,) = _admission_lines(r, pt)  # --explain names the law and its count
    assert ("lock-step" in line) == (kind == "fixed")
    assert kind == "fixed" or f"Erlang({pt.admission_wait_s * pt.rate_rps:,.1f})" in line


def test_past_saturation_there_is_no_steady_state():
    r = _replica()
    assert state_at_rate(r, capacity(r, []).saturation_rps * 1.01) is None


def test_predict_one_validation_row():
    from tokcost.serving.predict import predict

    m, g = load_model("llama-3.1-8b"), load_gpu("h100-sxm")
    open_loop = predict(m, g, tp=1, prompt_tokens=1000, output_tokens=200, rate_rps=5.0, chunk=2048)
    assert open_loop.rate_rps == pytest.approx(5.0) and not open_loop.saturated
    assert open_loop.output_tokens_per_s == pytest.approx(1000.0)
    # the same replica under 16 users and no think time: N = rate x mean E2E (fixed lengths: E2E is tight)
    closed = predict(m, g, tp=1, prompt_tokens=1000, output_tokens=200, concurrency=16, chunk=2048)
    assert closed.e2e_s is not None
    assert closed.rate_rps * closed.e2e_s["p50"] == pytest.approx(16, rel=0.1)
    too_much = predict(m, g, tp=1, prompt_tokens=1000, output_tokens=200, rate_rps=1e4)
    assert too_much.saturated and too_much.ttft_s is None and too_much.rate_rps == too_much.saturation_rps
    with pytest.raises(ValueError):
        predict(m, g, tp=1, prompt_tokens=1000, output_tokens=200)


def test_predicted_means_are_the_closed_forms_own():
    from tokcost.serving.predict import predict

    m, g = load_model("llama-3.1-8b"), load_gpu("h100-sxm")
    dist = LengthDist("exponential", 1000)
    p = predict(m, g, tp=1, prompt_tokens=1000, output_tokens=200, rate_rps=8.0, chunk=2048, prompt_dist=dist,
                output_dist=LengthDist("exponential", 200))  # fmt: skip
    means = p.means_s
    assert means is not None and p.ttft_s is not None and p.e2e_s is not None
    # Little: a request's mean TPOT is the mean gap a decoding sequence waits; a mean adds: E2E = TTFT + E[n] TPOT
    assert means["tpot_s"] == pytest.approx(p.itl_mean_s)
    steps = _rounded_exponential(200)[0] - 1  # E[n]: the drawn answer less its first token
    assert means["e2e_s"] == pytest.approx(means["ttft_s"] + steps * means["tpot_s"])
    # waits and long prompts skew TTFT and E2E to the right: each mean above its median
    assert means["ttft_s"] > p.ttft_s["p50"] and means["e2e_s"] > p.e2e_s["p50"]


def test_a_uniform_length_law_is_read_as_uniform_over_its_range():
    from tokcost.serving.validate import _length

    law = _length("uniform", 510.0, (1, 1024))  # the harness's np.random.randint(1, 1025)
    assert law.mean == 512.5 and law.moment(1) == pytest.approx(512.5)
    assert law.moment(2) == pytest.approx(sum(v * v for v in range(1, 1025)) / 1024)
    assert law.quantile(0.5) == 513 and law.quantile(0.0) == 1 and law.quantile(0.999) == 1023
    assert _length("dataset", 224.0, None) == LengthDist("exponential", 224.0)
    assert _length("fixed", 5000.0, None) == LengthDist("fixed", 5000.0)


def _assert_finite_percentiles(r, point, below_s: float) -> None:
    """Every latency's p50, p90 and p99 lies in [0, below_s); TPOT and ITL have none only without a token gap."""
    for metric in ("ttft", "tpot", "itl", "e2e"):
        for q in (0.5, 0.9, 0.99):
            value = percentile(r, point, metric, q)
            if value is None:  # no token gaps at all: one-token answers
                assert metric in ("tpot", "itl") and not r.decodes
                continue
            assert 0 <= value < below_s, (metric, q, value)


@settings(max_examples=examples(30), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prompt=st.integers(1, 20_000), output=st.integers(1, 2000), kind=st.sampled_from(["fixed", "exponential"]),
       chunk=st.sampled_from([64, 512, 2048, 8192]), share=st.floats(0.001, 0.99))  # fmt: skip
def test_below_saturation_every_percentile_is_finite(prompt, output, kind, chunk, share):
    # issue 22: below saturation a queue is stable, so every latency has finite percentiles, for lengths down to 1
    # (a one-token prompt used to be charged its whole lone step as queue service, saturating a queue that is not there)
    traffic = Traffic(LengthDist(kind, prompt), LengthDist(kind, output), rate_rps=1.0)
    r = _replica("llama-3.1-8b", "h100-sxm", 1, traffic, chunk)
    point = state_at_rate(r, share * capacity(r, []).saturation_rps)
    assert point is not None
    _assert_finite_percentiles(r, point, 3600)


@pytest.mark.parametrize(
    "kind, prompt, output, chunk, share",
    [("exponential", 1, 2, 64, 0.9), ("exponential", 1, 5, 512, 0.95), ("fixed", 200, 2, 2048, 0.99),
     ("fixed", 60, 2, 512, 0.99), ("exponential", 20, 2, 2048, 0.99), ("fixed", 13109, 1, 8192, 0.99),
     ("exponential", 14817, 1, 2048, 0.99)],
)  # fmt: skip
def test_prompts_have_a_steady_state_up_to_saturation(kind, prompt, output, chunk, share):
    # the cases that once had none: exponential prompts of mean 1 are 1.35 tokens as drawn, which the queue counted
    # as 1 (its budget ran out at 73% of saturation); behind a long backlog a normal's lower node left a prompt
    # alone in its step 1 time in 6, and the last steps' fixed point cycled, the rate jumping by 3%; long prompts'
    # own chunks cost less than the packed chunk's rate, so the rate at "every step full" outran the budget
    traffic = Traffic(LengthDist(kind, prompt), LengthDist(kind, output), rate_rps=1.0)
    r = _replica("llama-3.1-8b", "h100-sxm", 1, traffic, chunk)
    saturation = capacity(r, []).saturation_rps
    point = state_at_rate(r, share * saturation)
    assert point is not None and point.rate_rps == pytest.approx(share * saturation, rel=1e-6)
    assert point.queue_rho < 1 and math.isfinite(point.wait_mean_s)
    # the budget at the load limit: prompt tokens per second never above C per full chunk step, and near it there
    budget = r.chunk / (r.prompt_moments[0] * r.state(r.load_limit()).chunk_step_s)
    assert saturation <= budget * 1.0001 and saturation >= 0.95 * budget


@pytest.mark.parametrize("rate, steps", [(1.0, 1.0), (228.0, 1.5), (2000.0, 1.5)])
def test_a_one_token_prompt_waits_a_step_not_a_queue(rate, steps):
    # the case: llama-3.1-8b on one H100, 1-token prompts, 3-token answers: at 2% of saturation each
    # prompt waits out the step in progress (uniform: half a step at the median) and runs in the next, beside the
    # decodes (at 1 req/s nothing is running: one step); a backlog forms only as often as the budget is used
    traffic = Traffic(LengthDist("fixed", 1), LengthDist("fixed", 3), rate_rps=rate)
    r = _replica("llama-3.1-8b", "h100-sxm", 1, traffic, 2048)
    point = state_at_rate(r, rate)
    assert point is not None and point.queue_rho == pytest.approx(rate * point.chunk_step_s / 2048)  # a sliver
    step = point.decode_step_s
    assert percentile(r, point, "ttft", 0.5) == pytest.approx(steps * step, rel=0.1)
    assert percentile(r, point, "ttft", 0.99) < 2.1 * step


@pytest.mark.parametrize("batch", [1, 32])
def test_multi_step_scheduling_spreads_the_host_costs_over_its_window(batch):
    # vLLM 0.6's --num-scheduler-steps k: the host schedules, prepares and processes outputs once per k steps, so a
    # step of b sequences carries (step + b x per-sequence) / k of host time: 400 us + 32 x 20 us over 4 steps
    engine = GENERIC.model_copy(update={"step_overhead_us": 400.0, "sequence_overhead_us": 20.0})
    model, gpu = load_model("llama-3.1-8b"), load_gpu("h100-sxm")

    def step_s(profile, k):
        replica = build_replica(model, Deployment(gpu, Layout(1), engine=profile), FIXED, 2048, "expected",
                                scheduler_steps=k)  # fmt: skip
        return replica.steps.seconds([Segment(batch, 1000, 1)])

    bare = step_s(GENERIC, 1)
    assert step_s(engine, 1) - bare == pytest.approx((400 + batch * 20) * 1e-6)
    assert step_s(engine, 4) - bare == pytest.approx((400 + batch * 20) * 1e-6 / 4)


@settings(max_examples=examples(20), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prompt=st.integers(1, 20_000), output=st.integers(1, 2000), kind=st.sampled_from(["fixed", "exponential"]),
       chunk=st.sampled_from([64, 512, 2048, 8192]), users=st.integers(1, 2000),
       think=st.sampled_from([0.0, 1.0]))  # fmt: skip
def test_any_closed_loop_has_finite_percentiles(prompt, output, kind, chunk, users, think):
    # a closed loop always has a state: past its load limit the extra users wait for admission, on TTFT alone
    traffic = Traffic(LengthDist(kind, prompt), LengthDist(kind, output), concurrency=users, think_time_s=think)
    r = _replica("llama-3.1-8b", "h100-sxm", 1, traffic, chunk)
    point = state_at_users(r, users, think)
    assert point is not None
    _assert_finite_percentiles(r, point, 1e6)


@pytest.mark.parametrize("output", [2, 128])
def test_the_backlog_a_request_decodes_behind_leaves_saturation_where_prefill_fills_every_step(output):
    # 8,192-token prompts on an H100: Little's rate with the backlog priced is lower at each batch, so the rate
    # without it can find the queue full where the priced state holds; priced as nothing there, the limit state sat
    # on the lower branch, at 4.72 req/s with 2-token answers (rho 0.89, a wait of 0.78 s) where the simulation
    # serves 4.94 at 5.0 and the saturation is 5.18 (prefill in every step, rho -> 1)
    traffic = Traffic(LengthDist("fixed", 8192), LengthDist("fixed", output), rate_rps=1.0)
    r = build_replica(load_model("llama-3.1-8b"), Deployment(load_gpu("h100-sxm"), Layout(1)), traffic, 2048,
                      "expected")  # fmt: skip
    cap = capacity(r, [])
    limit = r.state(cap.load)
    assert cap.saturation_rps == pytest.approx(limit.rate_rps)
    assert limit.rho > 0.97
    below = r.state(0.5 * cap.load)
    assert below.backlog_busy_s > 0 and below.tpot_mean_s > below.tpot_steady_s  # priced below the edge
