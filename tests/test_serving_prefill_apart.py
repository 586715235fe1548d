"""Prefill apart (vLLM before V1 with chunked prefill off, SGLang without mixed chunks): a step that runs prompt tokens
runs nothing else, so every decoding sequence waits it out and gets no token from it (issue 20: plan as engines
really serve).

Checked: a worked case step by step in the simulator, Little's law and the closed form's TPOT = T0 / (1 - rho), the
closed form against the simulation with the same scheduler, that decodes pay more than with mixed steps at the same
load, and which engines and published setups run it.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path

import pytest
from closed_vs_sim import misses

import tokcost.validation
from tokcost.api import plan
from tokcost.cli.app import main
from tokcost.engine.step import Segment
from tokcost.errors import TokcostError
from tokcost.hardware.library import load_gpu
from tokcost.models.library import load_model
from tokcost.profiles import engine_for
from tokcost.serving.capacity import capacity, state_at_rate
from tokcost.serving.latency import borel, percentile
from tokcost.serving.layout import Layout
from tokcost.serving.predict import predict
from tokcost.serving.replica import build_replica
from tokcost.serving.simulate import simulate
from tokcost.serving.steps import Deployment
from tokcost.serving.traffic import LengthDist, Traffic
from tokcost.serving.validate import _prefill_apart
from tokcost.validation.serving_data import load_serving


def _replica(traffic: Traffic, chunk: int = 2048, *, apart: bool, model: str = "llama-3.1-8b", tp: int = 1):
    deployment = Deployment(load_gpu("h100-sxm"), Layout(tp))
    return build_replica(load_model(model), deployment, traffic, chunk, "expected", prefill_apart=apart)


def _gaps(result):
    """Every (gap, sequences) the run's measured steps gave, read out of its runs."""
    return [(r.seconds + r.slope_s * k, r.sequences) for r in result.itl_runs for k in range(r.steps)]


@pytest.mark.parametrize("apart", [False, True])
def test_a_prompt_landing_mid_decode_runs_alone_or_beside_the_decode_by_hand(apart):
    # request 0 (100 prompt tokens, 20 out) decodes alone at contexts 101, 102, ...; request 1 (100 tokens) lands
    # halfway through its second decode step. Mixed: the next step runs request 1's prompt beside request 0's decode.
    # Apart: the next step runs the prompt alone, request 0 gets no token from it, and its next gap holds that step
    # and the decode of both that follows (contexts 103 and 101: a mean of 102)
    traffic = Traffic(LengthDist("fixed", 100), LengthDist("fixed", 20), arrivals_s=(0.0, 0.0))
    steps = _replica(traffic, apart=apart).steps
    prefill = steps.seconds([Segment(1, 0, 100)])
    decode = [steps.seconds([Segment(1, 101 + j, 1)]) for j in range(2)]
    landing = prefill + decode[0] + decode[1] / 2
    late = Traffic(LengthDist("fixed", 100), LengthDist("fixed", 20), arrivals_s=(0.0, landing))
    result = simulate(steps, late, 2048, requests=2, prefill_apart=apart)
    if apart:
        both = steps.seconds([Segment(2, 102, 1)])
        assert result.ttft_s[1] == pytest.approx(decode[1] / 2 + prefill + steps.request_overhead_s, rel=1e-9)
        assert (prefill + both, 1) in [(pytest.approx(s, rel=1e-9), b) for s, b in _gaps(result)]
        assert all(s < prefill for s, b in _gaps(result) if b == 2)  # request 1's first gap is a decode step
    else:
        mixed = steps.seconds([Segment(1, 103, 1), Segment(1, 0, 100)])
        assert result.ttft_s[1] == pytest.approx(decode[1] / 2 + mixed + steps.request_overhead_s, rel=1e-9)
        assert all(s < prefill + decode[0] for s, _ in _gaps(result))  # no gap holds a prefill step and more


def test_little_and_the_closed_forms_tpot_with_prefill_apart():
    # decodes get a token only in decode-only steps: TPOT = T0 / (1 - rho), b = lambda E[n] TPOT, kappa = 1; the
    # same load with mixed steps gives every decoder a token in each prefill step too, so its TPOT is shorter
    traffic = Traffic(LengthDist("exponential", 1000), LengthDist("exponential", 250), rate_rps=1.0)
    apart, mixed = _replica(traffic, apart=True), _replica(traffic, apart=False)
    saturation = capacity(mixed, []).saturation_rps
    for share in (0.2, 0.5, 0.8):
        a, m = state_at_rate(apart, share * saturation), state_at_rate(mixed, share * saturation)
        assert a.tpot_steady_s == pytest.approx(a.decode_step_s / (1 - a.rho), rel=1e-6)
        # and each request starts decoding behind the backlog its own wait left (replica.held_backlog): chance rho,
        # a busy period's rest (E[W] + E[S]) / (1 - rho) on average, all of it lost (no token in a prefill step)
        assert a.backlog_busy_s == pytest.approx((a.wait_mean_s + a.service.mean) / (1 - a.rho), rel=1e-6)
        decoding = sum(w for n, w in apart.outputs if n >= 1)
        held = a.rho * a.backlog_busy_s * decoding / apart.decode_steps_mean
        assert a.tpot_mean_s == pytest.approx(a.tpot_steady_s + held, rel=1e-3)
        assert a.batch == pytest.approx(a.rate_rps * apart.decode_steps_mean * a.tpot_mean_s, rel=1e-6)
        assert a.decode_share == 1.0 and 0 < m.decode_share < 1
        assert a.tpot_mean_s > m.tpot_mean_s
        # its prefill steps are priced without the decode batch beside them
        assert a.chunk_step_s == pytest.approx(apart.steps.seconds(list(apart.packed)), rel=1e-3)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "traffic", "model", "tp", "chunk", "loads"),
    [
        ("open loop, exponential lengths", Traffic(LengthDist("exponential", 1000), LengthDist("exponential", 250),
                                                   rate_rps=1.0), "llama-3.1-8b", 1, 2048, (0.1, 0.5, 0.8)),
        ("open loop, fixed lengths, TP 4", Traffic(LengthDist("fixed", 2048), LengthDist("fixed", 300), rate_rps=1.0),
         "llama-3.1-70b", 4, 2048, (0.1, 0.5, 0.8)),
        ("closed loop, lognormal lengths", Traffic(LengthDist("lognormal", 1500, 0.5),
                                                   LengthDist("lognormal", 300, 0.5), concurrency=4),
         "llama-3.1-8b", 1, 2048, (8, 64)),
    ],
)  # fmt: skip
def test_closed_form_matches_the_simulation_with_prefill_apart(name, traffic, model, tp, chunk, loads):
    found = misses(name, lambda t: _replica(t, chunk, apart=True, model=model, tp=tp), traffic, chunk, loads,
                   metrics=("ttft", "tpot"), requests=4000, prefill_apart=True)  # fmt: skip
    assert not found, found


@pytest.mark.slow
@pytest.mark.parametrize(
    ("traffic", "loads"),
    [
        (Traffic(LengthDist("fixed", 2000), LengthDist("fixed", 300), rate_rps=1.0), (0.3, 0.5, 0.7)),
        (Traffic(LengthDist("exponential", 2000), LengthDist("exponential", 300), rate_rps=1.0), (0.4, 0.7)),
    ],
)
def test_the_token_gap_tail_with_prefill_apart_matches_the_simulation(traffic, loads):
    # a decoder's gap holds a whole prefill run: its first prompt and every one that arrives meanwhile (the Borel
    # law of an M/D/1 busy period). One mean run length put ITL p99 at 78 ms where the simulation gives 138 ms
    # (Llama-3.1-8B on an H100, 2,000 / 300 tokens, 8 req/s)
    replica = _replica(traffic, 2048, apart=True)
    saturation = capacity(replica, []).saturation_rps
    for load in loads:
        point = state_at_rate(replica, load * saturation)
        sim = simulate(replica.steps, traffic, 2048, requests=6000, seed=1, rate_rps=load * saturation,
                       prefill_apart=True)  # fmt: skip
        closed, simulated = percentile(replica, point, "itl", 0.99), sim.percentile("itl", 0.99)
        assert closed == pytest.approx(simulated, rel=0.15), (load, closed, simulated)


def test_the_engines_that_run_prefill_apart_and_the_setups_that_turn_it_off():
    h100 = load_gpu("h100-sxm")
    apart = {name: engine_for(name).scheduler(gpu_name=h100.name, memory_bytes=h100.memory_bytes).prefill_apart
             for name in ("sglang", "vllm@v0", "vllm@eager", "vllm", "tensorrt-llm", "generic")}  # fmt: skip
    assert apart == {"sglang": True, "vllm@v0": True, "vllm@eager": True, "vllm": False, "tensorrt-llm": False,
                     "generic": False}  # fmt: skip
    setups, _ = load_serving(Path(tokcost.validation.__file__).parent / "serving.yaml")
    sglang, v0, v1 = engine_for("sglang"), engine_for("vllm@v0"), engine_for("vllm")
    assert _prefill_apart(setups["sglang030-llama31-8b-1xa100"], sglang)
    assert _prefill_apart(setups["vllm060-llama31-8b-1xa100"], v0)  # --max_model_len 4096: chunked prefill off
    mixed = setups["sglang030-llama31-8b-1xa100"].model_copy(update={"engine_flags": "--enable-mixed-chunk"})
    chunked = setups["vllm060-llama31-8b-1xa100"].model_copy(update={"engine_flags": "--enable-chunked-prefill"})
    assert not _prefill_apart(mixed, sglang) and not _prefill_apart(chunked, v0)
    assert not _prefill_apart(setups["sky-vllm-084-dsr1-8xh200-in1000-out2000"], v1)


def test_predict_runs_prefill_as_the_engine_does():
    model, h100 = load_model("llama-3.1-8b"), load_gpu("h100-sxm")
    kw = {"tp": 1, "prompt_tokens": 1000, "output_tokens": 200, "rate_rps": 10.0}
    default = predict(model, h100, engine=engine_for("sglang"), **kw)
    apart = predict(model, h100, engine=engine_for("sglang"), prefill_apart=True, **kw)
    mixed = predict(model, h100, engine=engine_for("sglang"), prefill_apart=False, **kw)
    assert default.tpot_s == apart.tpot_s and apart.tpot_s["p50"] > mixed.tpot_s["p50"]


def _plan_json(*extra: str) -> dict:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(
            [
                "plan",
                "-m",
                "llama-3.1-8b",
                "-g",
                "h100-sxm",
                "--engine",
                "sglang",
                "--rate",
                "20",
                "--prompt",
                "1000",
                "--output",
                "250",
                "--tp",
                "1",
                "--weights",
                "bf16",
                "--top",
                "1",
                "-f",
                "json",
                *extra,
            ]
        )
    assert code == 0, err.getvalue()
    return json.loads(out.getvalue())["configs"][0]  # fmt: skip


def test_plan_schedules_prefill_as_the_engine_does_unless_told():
    default, apart, mixed = _plan_json(), _plan_json("--prefill", "apart"), _plan_json("--prefill", "mixed")
    assert (default["prefill"], default["prefill_source"]) == ("apart", "sglang default")
    assert (apart["prefill"], apart["prefill_source"], mixed["prefill"]) == ("apart", "--prefill", "mixed")
    assert default["expected"]["tpot_s"] == apart["expected"]["tpot_s"]
    assert apart["expected"]["tpot_s"]["p50"] > mixed["expected"]["tpot_s"]["p50"]  # the decodes wait prompt steps
    with pytest.raises(TokcostError, match=r"^prefill: 'sideways' is not one of engine, apart, mixed$"):
        plan(model="llama-3.1-8b", gpus=["h100-sxm"], rate_rps=2.0, prefill="sideways")


@pytest.mark.parametrize("q", [0.0, 0.3, 0.6, 0.85, 0.95, 0.99])
def test_the_borel_law_of_a_busy_periods_prompts(q):
    # P(n) = exp(-q n) (q n)^(n - 1) / n!: it sums to 1, has mean 1 / (1 - q) (near saturation too, where the terms
    # kept stop short of the tail), and P(1) = exp(-q), P(2) = q exp(-2q)
    law = dict(borel(q))
    assert sum(law.values()) == pytest.approx(1.0, abs=1e-12)
    assert sum(n * p for n, p in law.items()) == pytest.approx(1 / (1 - q), rel=1e-9)
    assert law[1] == pytest.approx(math.exp(-q), rel=1e-4)
    if q:
        assert law[2] == pytest.approx(q * math.exp(-2 * q), rel=1e-4)


def test_steps_apart_stop_where_their_prefill_queue_stops():
    # steps apart have no saturation batch (the batch grows as their queue fills), so the stable batch is searched
    # up to the KV slots: past it the prefill queue has no steady state. Llama-3.2-1B, 200-token prompts and answers
    # on 4 H100s in 8,192-token chunks: the KV cache holds about 20,000 sequences, and at 12,000 the queue had filled
    # (every step prefill, an infinite wait) while plan sized a fleet there: `plan --engine sglang` crashed
    traffic = Traffic(LengthDist("fixed", 200), LengthDist("fixed", 200), concurrency=300)
    deployment = Deployment(load_gpu("h100-sxm"), Layout(4), engine=engine_for("sglang"))
    replica = build_replica(load_model("llama-3.2-1b"), deployment, traffic, 8192, "expected", prefill_apart=True)
    limits = replica.load_limits()
    assert limits["saturation"] < limits["KV memory"]
    edge = replica.state(limits["saturation"])
    assert math.isfinite(edge.wait_mean_s) and edge.queue_rho < 1
    assert not math.isfinite(replica.state(min(1.5 * limits["saturation"], limits["KV memory"])).wait_mean_s)
    # and the plan that crashed prices every configuration with a finite TTFT
    result = plan(model="llama-3.2-1b", gpus=["h100-sxm"], concurrency=300, prompt_tokens=200, output_tokens=200,
                  slos=["tpot_p90=30ms"], engine="sglang").to_dict()  # fmt: skip
    assert result["configs"] and all(math.isfinite(c["expected"]["ttft_s"]["p90"]) for c in result["configs"])
    # a closed loop's goodput (the rate of the whole users a replica takes) never reads past its saturation: the
    # ceiling's TP1 read 607.8 req/s against 603.4, its rate a hair higher below the limit than at it
    fleets = [c[s] for c in result["configs"] for s in ("expected", "ceiling")]
    assert all(f["max_rate_rps"] <= f["saturation_rps"] for f in fleets)
