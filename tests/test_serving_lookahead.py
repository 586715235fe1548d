"""Overlap scheduling (SGLang from 0.4, TensorRT-LLM from 1.0): the scheduler chooses each step while the one before
it runs, so a request that finds the server busy waits out one more step before its prefill (issue 20's TTFT under
load).

Checked: a worked case step by step in the simulator (one decoding request, a second arriving mid-step), the closed
form against the simulation with the same scheduler, that the added wait is about one step and grows with the load,
that a server with nobody else on it (one user) changes nothing, and which published setups run it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from closed_vs_sim import misses

import tokcost.validation
from tokcost.engine.step import Segment
from tokcost.hardware.library import load_gpu
from tokcost.models.library import load_model
from tokcost.profiles import engine_for
from tokcost.serving.capacity import capacity, state_at_rate, state_at_users
from tokcost.serving.latency import percentile
from tokcost.serving.layout import Layout
from tokcost.serving.predict import predict
from tokcost.serving.replica import build_replica
from tokcost.serving.simulate import simulate
from tokcost.serving.steps import Deployment
from tokcost.serving.traffic import LengthDist, Traffic
from tokcost.serving.ttft import lookahead_step, ttft_moments
from tokcost.serving.validate import _lookahead
from tokcost.validation.serving_data import load_serving


def _replica(traffic: Traffic, chunk: int = 2048, *, lookahead: bool, model: str = "llama-3.1-8b", tp: int = 1):
    deployment = Deployment(load_gpu("h100-sxm"), Layout(tp))
    return build_replica(load_model(model), deployment, traffic, chunk, "expected", lookahead=lookahead)


def _second_lands_in_decode_step_2(output_tokens, lookahead):
    """(steps, prefill time, decode step times, simulation) of request 0 (100 prompt tokens, `output_tokens` out)
    running alone and request 1 landing halfway through request 0's decode step 2."""
    traffic = Traffic(LengthDist("fixed", 100), LengthDist("fixed", output_tokens), arrivals_s=(0.0, 0.0))
    steps = _replica(traffic, lookahead=lookahead).steps
    prefill = steps.seconds([Segment(1, 0, 100)])
    decode = [steps.seconds([Segment(1, 100 + j, 1)]) for j in range(min(output_tokens, 5))]
    landing = prefill + decode[1] + decode[2] / 2
    late = Traffic(LengthDist("fixed", 100), LengthDist("fixed", output_tokens), arrivals_s=(0.0, landing))
    return steps, prefill, decode, simulate(steps, late, 2048, requests=2, lookahead=lookahead)


@pytest.mark.parametrize("lookahead", [False, True])
def test_a_request_landing_mid_step_waits_the_next_step_too_by_hand(lookahead):
    # request 0 (100 prompt tokens, 50 out) runs alone: its prefill step, then decode steps at context 100 + j;
    # request 1 lands halfway through decode step 2. Deciding at a step's start, the engine takes it into step 3
    # beside the decode; deciding one step ahead, step 3 was chosen before it came: a decode-only step 3, then
    # its prefill in step 4
    steps, prefill, decode, result = _second_lands_in_decode_step_2(50, lookahead)
    if lookahead:
        own = steps.seconds([Segment(1, 104, 1), Segment(1, 0, 100)])
        expected = decode[2] / 2 + decode[3] + own
    else:
        expected = decode[2] / 2 + steps.seconds([Segment(1, 103, 1), Segment(1, 0, 100)])
    assert result.ttft_s[1] == pytest.approx(expected + steps.request_overhead_s, rel=1e-6)
    assert result.ttft_s[0] == pytest.approx(prefill + steps.request_overhead_s, rel=1e-9)  # an idle server: at once


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "traffic", "chunk", "loads"),
    [
        ("open loop, exponential lengths", Traffic(LengthDist("exponential", 1000), LengthDist("exponential", 200),
                                                   rate_rps=1.0), 1024, (0.1, 0.5, 0.8)),
        ("closed loop, lognormal lengths", Traffic(LengthDist("lognormal", 1500, 0.5),
                                                   LengthDist("lognormal", 300, 0.5), concurrency=4), 2048, (4, 32)),
    ],
)  # fmt: skip
def test_closed_form_matches_the_simulation_under_overlap_scheduling(name, traffic, chunk, loads):
    model, tp = ("llama-3.1-8b", 1) if traffic.concurrency is None else ("llama-3.1-70b", 4)
    found = misses(name, lambda t: _replica(t, chunk, lookahead=True, model=model, tp=tp), traffic, chunk, loads,
                   metrics=("ttft",), requests=6000, lookahead=True)  # fmt: skip
    assert not found, found


def test_the_added_wait_is_about_one_step_and_grows_with_the_load():
    traffic = Traffic(LengthDist("exponential", 1000), LengthDist("exponential", 200), rate_rps=1.0)
    plain, ahead = _replica(traffic, lookahead=False), _replica(traffic, lookahead=True)
    saturation = capacity(plain, []).saturation_rps
    added, last = [], 0.0
    for share in (0.1, 0.3, 0.5, 0.7):
        a, b = state_at_rate(plain, share * saturation), state_at_rate(ahead, share * saturation)
        extra = ttft_moments(ahead, b).mean - ttft_moments(plain, a).mean
        # an arrival waits one more step only when it finds one running: between none and a whole step of the mix
        assert 0.0 < extra <= lookahead_step(ahead, b) * (1 + 1e-9)
        assert lookahead_step(ahead, b) >= b.decode_step_s  # at least a decode-only step
        added.append(extra)
        median = percentile(ahead, b, "ttft", 0.5)
        assert median > last  # TTFT grows with the load
        last = median
    assert added == sorted(added)  # busier servers are found busy more often


def test_one_user_finds_an_idle_server_so_nothing_changes():
    traffic = Traffic(LengthDist("fixed", 2000), LengthDist("fixed", 300), concurrency=1)
    plain, ahead = _replica(traffic, lookahead=False), _replica(traffic, lookahead=True)
    a, b = state_at_users(plain, 1, 0.0), state_at_users(ahead, 1, 0.0)
    for q in (0.5, 0.9, 0.99):
        # the same tail: its percentiles agree to the search's bracket (queueing.QUANTILE_TOLERANCE, 1e-7)
        assert percentile(ahead, b, "ttft", q) == pytest.approx(percentile(plain, a, "ttft", q), rel=1e-6)
    with_, without = (simulate(r.steps, traffic, 2048, requests=200, lookahead=la)
                      for r, la in ((ahead, True), (plain, False)))  # fmt: skip
    assert with_.ttft_s == pytest.approx(without.ttft_s, rel=1e-12)


def test_sglang_schedules_one_step_ahead_from_0_4_unless_turned_off():
    setups, _ = load_serving(Path(tokcost.validation.__file__).parent / "serving.yaml")
    sglang, vllm = engine_for("sglang"), engine_for("vllm@v0")
    assert sglang.overlap_scheduling_since == "0.4" and vllm.overlap_scheduling_since is None
    assert not _lookahead(setups["sglang030-llama31-8b-1xa100"], sglang)  # 0.3.0: decides each step at its start
    assert _lookahead(setups["dc-sglang-llama33-70b-4xh200-random1k"], sglang)  # 0.4.0.x: overlap on by default
    assert _lookahead(setups["ix-sglang057-dsr1-8xh200-1k1k"], sglang)
    off = setups["ix-sglang057-dsr1-8xh200-1k1k"].model_copy(update={"engine_flags": "--disable-overlap-schedule"})
    assert not _lookahead(off, sglang)
    assert not _lookahead(setups["vllm060-llama31-8b-1xa100"], vllm)  # an engine without an overlap scheduler


def test_tensorrt_llm_schedules_one_step_ahead_from_its_pytorch_backend_1_0():
    setups, _ = load_serving(Path(tokcost.validation.__file__).parent / "serving.yaml")
    trt = engine_for("tensorrt-llm")
    assert trt.overlap_scheduling_since == "1.0"
    nim = setups["nim180-llama33-70b-2xh100-fp8-isl5000-osl500"]  # NIM 1.8.0: the container's version, not TRT's
    assert nim.framework == "nim" and not _lookahead(nim, trt)
    own = nim.model_copy(update={"framework": "tensorrt-llm", "engine_flags": ""})
    for version, on in (("0.17.0", False), ("0.21.0", False), ("1.0.0rc3", True), ("1.2.0", True)):
        assert _lookahead(own.model_copy(update={"engine_version": version}), trt) is on, version
    off = own.model_copy(update={"engine_version": "1.1.0", "engine_flags": "disable_overlap_scheduler: true"})
    assert not _lookahead(off, trt)
    # a version spelled on the command line runs as that build: an era's older builds lack the overlap scheduler
    assert engine_for("tensorrt-llm@0.17").overlap_scheduling_since is None
    assert engine_for("tensorrt-llm@1.1").overlap_scheduling_since == "1.0"
    assert engine_for("sglang@0.3.6").overlap_scheduling_since is None
    assert engine_for("sglang@0.4.3").overlap_scheduling_since == "0.4"


def test_vllm_schedules_one_step_ahead_by_default_from_0_14_and_where_its_flag_asks_before():
    setups, _ = load_serving(Path(tokcost.validation.__file__).parent / "serving.yaml")
    v1 = engine_for("vllm")
    assert v1.overlap_scheduling_since == "0.14" and engine_for("vllm@0.13").overlap_scheduling_since is None
    base = setups["aic-vllm0120-qwen3-32b-2xh100-1k1k"]
    assert not _lookahead(base, v1)  # 0.12.0 with its defaults
    cases = (("0.13.0", "", False), ("0.13.0", "--async-scheduling", True), ("0.14.0", "", True),
             ("0.18.0", "--no-async-scheduling", False), ("0.19.0", "--max-num-seqs 256", True))  # fmt: skip
    for version, flags, on in cases:
        setup = base.model_copy(update={"engine_version": version, "engine_flags": flags})
        assert _lookahead(setup, v1) is on, (version, flags)


@pytest.mark.parametrize(
    ("version", "flags", "on"),
    [("0.18.0", "--no_async_scheduling", False), ("0.13.0", "--async-scheduling=False", False),
     ("0.13.0", "--async-scheduling --no-async-scheduling", False),
     ("0.18.0", "--no-async-scheduling --async-scheduling", True), ("0.14", "", True), ("v0.14.0", "", True)],
)  # fmt: skip
def test_the_last_overlap_switch_a_setup_states_wins(version, flags, on):
    setups, _ = load_serving(Path(tokcost.validation.__file__).parent / "serving.yaml")
    setup = setups["aic-vllm0120-qwen3-32b-2xh100-1k1k"].model_copy(
        update={"engine_version": version, "engine_flags": flags}
    )
    assert _lookahead(setup, engine_for("vllm")) is on


@pytest.mark.parametrize(
    "flags", ['"disable_overlap_scheduler": true', "{'disable_overlap_scheduler': True}", "--backend tensorrt"]
)
def test_tensorrt_llm_configs_that_turn_its_overlap_scheduler_off(flags):
    setups, _ = load_serving(Path(tokcost.validation.__file__).parent / "serving.yaml")
    setup = setups["nim180-llama33-70b-2xh100-fp8-isl5000-osl500"].model_copy(
        update={"framework": "tensorrt-llm", "engine_version": "1.1.0", "engine_flags": flags}
    )
    assert not _lookahead(setup, engine_for("tensorrt-llm"))
    assert _lookahead(setup.model_copy(update={"engine_flags": "disable_overlap_scheduler: false"}),
                      engine_for("tensorrt-llm"))  # fmt: skip


def test_a_short_version_is_read_padded_with_zeros():
    assert engine_for("tensorrt-llm@1").overlap_scheduling_since == "1.0"  # 1 is 1.0, not before it
    assert engine_for("vllm@0.14").overlap_scheduling_since == "0.14"


def test_no_engine_schedules_ahead_across_pipeline_stages():
    traffic = Traffic(LengthDist("fixed", 1000), LengthDist("fixed", 200), concurrency=32)
    model, h100 = load_model("llama-3.1-8b"), load_gpu("h100-sxm")
    for engine in ("vllm", "sglang", "tensorrt-llm"):
        one = build_replica(model, Deployment(h100, Layout(1), engine=engine_for(engine)), traffic, 2048, "expected",
                            lookahead=True)  # fmt: skip
        two = build_replica(model, Deployment(h100, Layout(1, 2), engine=engine_for(engine)), traffic, 2048,
                            "expected", lookahead=True)  # fmt: skip
        assert one.lookahead and not two.lookahead, engine


def test_plan_and_predict_schedule_as_the_engine_does():
    h100 = load_gpu("h100-sxm")
    assert engine_for("sglang").scheduler(gpu_name=h100.name, memory_bytes=h100.memory_bytes).overlap
    assert engine_for("vllm").scheduler(gpu_name=h100.name, memory_bytes=h100.memory_bytes).overlap  # V1 from 0.14
    assert not engine_for("vllm@v0").scheduler(gpu_name=h100.name, memory_bytes=h100.memory_bytes).overlap
    model = load_model("llama-3.1-8b")
    kw = {"tp": 1, "prompt_tokens": 1000, "output_tokens": 200, "rate_rps": 20.0}
    sglang = predict(model, h100, engine=engine_for("sglang"), **kw)
    off = predict(model, h100, engine=engine_for("sglang"), lookahead=False, **kw)
    on = predict(model, h100, engine=engine_for("sglang"), lookahead=True, **kw)
    assert sglang.ttft_s == on.ttft_s and on.ttft_s["p50"] > off.ttft_s["p50"]  # the default is the engine's own


def test_explain_prints_the_next_step_an_arrival_waits():
    from tokcost.serving.explain import _lookahead_lines

    traffic = Traffic(LengthDist("exponential", 1000), LengthDist("exponential", 200), rate_rps=6.0)
    ahead, plain = _replica(traffic, lookahead=True), _replica(traffic, lookahead=False)
    point = state_at_rate(ahead, 6.0)
    (line,) = _lookahead_lines(ahead, point)
    assert line.startswith("overlap scheduling:"), line
    # "n = (f / Tp ms) / (f / Tp ms + (1 - f) x P / T0 ms); (1 - n) T0 + n Tp = A x T0 ms + n x Tp ms = total ms",
    # read back: n is the prefill steps' share by count, the sum holds and is the closed form's term
    f, tp, _, _, rest, p_dec, t0 = (
        float(x)
        for x in re.findall(
            r"\(([\d.]+) / ([\d.]+) ms\) / \(([\d.]+) / ([\d.]+) ms \+ ([\d.]+) x ([\d.]+) / ([\d.]+) ms\)", line
        )[0]
    )
    a, t0_again, n, tp_again, total = (float(x) for x in re.findall(
        r"([\d.]+) x ([\d.]+) ms \+ ([\d.]+) x ([\d.]+) ms = ([\d.]+) ms", line)[0])  # fmt: skip
    assert f + rest == pytest.approx(1.0, abs=2e-4) and (t0_again, tp_again) == (t0, tp)
    assert n == pytest.approx((f / tp) / (f / tp + rest * p_dec / t0), rel=5e-3) and 0 < n < f
    assert a + n == pytest.approx(1.0, abs=2e-4) and t0 == pytest.approx(point.decode_step_s * 1e3, rel=1e-3)
    assert total == pytest.approx(a * t0 + n * tp, rel=2e-3)
    assert total == pytest.approx(lookahead_step(ahead, point) * 1e3, rel=1e-3)
    assert _lookahead_lines(plain, state_at_rate(plain, 6.0)) == []


def test_a_request_landing_in_the_last_step_before_idle_starts_when_it_ends():
    # request 0 (100 prompt tokens, 3 out) ends with decode step 2; request 1 lands halfway through it. Nothing is
    # left to run, so either way the server takes it at that step's end, alone: never earlier than it came
    for lookahead in (False, True):
        steps, prefill, decode, result = _second_lands_in_decode_step_2(3, lookahead)
        assert result.ttft_s[1] == pytest.approx(decode[2] / 2 + prefill + steps.request_overhead_s, rel=1e-6)


@pytest.mark.slow  # two simulations of 6,000 requests
@pytest.mark.parametrize("share", [0.3, 0.5])
def test_overlap_scheduling_with_prefill_apart_matches_the_simulation(share):
    # SGLang without mixed chunks: prefill steps of their own, each step chosen as the one before it starts. A
    # prompt that comes during a prefill step runs two steps later, after a decode step has given the decoders a
    # token: a gap seldom holds two prefill steps (the closed form chained them as deciding at each step's start
    # does, and put the p99 token gap at two prefills, 164.5 ms against the simulation's 91.1 on 8B / A100), and
    # the step an arrival also waits out is a decode step or a prefill step, not their mean (TTFT p50 +22%).
    traffic = Traffic(LengthDist("fixed", 1024), LengthDist("fixed", 256), rate_rps=1.0)
    deployment = Deployment(load_gpu("a100-80gb-sxm"), Layout(1), engine=engine_for("sglang"))
    replica = build_replica(load_model("llama-3.1-8b"), deployment, traffic, 8192, "expected", lookahead=True,
                            prefill_apart=True)  # fmt: skip
    rate = share * capacity(replica, []).saturation_rps
    point = state_at_rate(replica, rate)
    sim = simulate(replica.steps, traffic, 8192, requests=6000, seed=1, rate_rps=rate, lookahead=True,
                   prefill_apart=True)  # fmt: skip
    checks = [("ttft", 0.5), ("ttft", 0.9), ("itl", 0.99)]
    errors = {f"{m} p{q * 100:.0f}": percentile(replica, point, m, q) / sim.percentile(m, q) - 1 for m, q in checks}
    assert all(abs(e) <= 0.15 for e in errors.values()), errors


@pytest.mark.parametrize("lookahead", [False, True])
def test_lock_step_rounds_under_overlap_wait_out_the_group_ahead_as_the_simulator_does(lookahead):
    # pairs of 4,096-token prompts fill 8,192-token chunks: 3 to 9 users make 2 to 5 groups a round. Overlap
    # scheduling prefills a group two steps after it comes back: the second group waits out the first's step, the
    # third and later the steps of the two ahead (p90 about three steps where it was two)
    misses = []
    for users in (3, 5, 7, 9):
        traffic = Traffic(LengthDist("fixed", 4096), LengthDist("fixed", 128), concurrency=users)
        r = _replica(traffic, 8192, lookahead=lookahead).lock_step()
        assert r is not None
        point = state_at_users(r, users, 0.0)
        sim = simulate(r.steps, traffic, 8192, requests=40 * users, seed=1, lookahead=lookahead)
        for q in (0.5, 0.9):
            error = percentile(r, point, "ttft", q) / sim.percentile("ttft", q) - 1
            if abs(error) > 0.15:
                misses.append(f"{users} users, p{q * 100:.0f}: {error:+.1%}")
    assert not misses, misses
