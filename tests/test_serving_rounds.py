"""Whole lock-step rounds (serving/rounds.py): a closed loop with fixed lengths and no think time on an engine that
runs prefill apart comes back as one group, every prompt before any decode.

Checked: a round by hand from the engine's own step prices, the round against the discrete-event simulation (an
independent implementation of the same scheduler, step by step), Little's law on the users, monotonicity in the
users, where rounds apply and where they do not, and plan's sizing and JSON on them.
"""

from __future__ import annotations

import contextlib
import io
import json

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tokcost.cli.app import main
from tokcost.engine.step import Segment
from tokcost.hardware.library import load_gpu
from tokcost.models.library import load_model
from tokcost.profiles import engine_for
from tokcost.serving.capacity import state_at_users
from tokcost.serving.latency import e2e_mean, percentile
from tokcost.serving.layout import Layout
from tokcost.serving.predict import predict
from tokcost.serving.replica import build_replica
from tokcost.serving.rounds import held, locks_whole, round_at, whole_round
from tokcost.serving.simulate import simulate_replica
from tokcost.serving.steps import Deployment
from tokcost.serving.traffic import CLIENT_RTT_S, LengthDist, Traffic


def _replica(users: int, prompt: int, output: int, *, chunk: int = 2048, apart: bool = True,
             model: str = "llama-3.1-8b", tp: int = 1, think_s: float = 0.0, prompt_kind: str = "fixed"):  # fmt: skip
    traffic = Traffic(LengthDist(prompt_kind, prompt), LengthDist("fixed", output), concurrency=users,
                      think_time_s=think_s)  # fmt: skip
    deployment = Deployment(load_gpu("h100-sxm"), Layout(tp), engine=engine_for("sglang"))
    return build_replica(load_model(model), deployment, traffic, chunk, "expected", prefill_apart=apart)


def test_a_round_by_hand_from_the_engines_step_prices():
    # 3 users, 1,000-token prompts, 5 tokens out, chunk 2,048: step 1 runs prompts 1 and 2 whole and 48 tokens of
    # prompt 3, step 2 the other 952; users 1 and 2 wait out step 2 after their first token, user 3 nothing
    r = _replica(3, 1000, 5)
    steps, c = r.steps, r.overhead_s
    l1 = steps.seconds([Segment(1, 0, 1000), Segment(1, 0, 1000), Segment(1, 0, 48)])
    l2 = steps.seconds([Segment(1, 48, 952)])
    t0 = [steps.seconds([Segment(3, 1000 + i, 1)]) for i in range(4)]  # the 4 decode steps, contexts 1,000-1,003
    d = sum(t0)
    found = whole_round(r, 3)
    assert found.prefill_steps == 2 and found.prefill_s == pytest.approx(l1 + l2, rel=1e-12)
    assert found.decode_s == pytest.approx(d, rel=1e-6)  # linear in the context: the mean step prices the sum
    assert sorted(x for _, x in found.ttft) == pytest.approx([c + l1, c + l1, c + l1 + l2], rel=1e-12)
    assert sorted(x for _, x in found.tpot) == pytest.approx([d / 4, (l2 + d) / 4, (l2 + d) / 4], rel=1e-6)
    assert found.e2e == ((1.0, pytest.approx(c + l1 + l2 + d, rel=1e-6)),)
    assert found.rate_rps == pytest.approx(3 / (CLIENT_RTT_S + c + l1 + l2 + d), rel=1e-6)
    # the first gap of users 1 and 2 holds step 2 and the first decode step: 2 of the 12 gaps
    assert found.quantile("itl", 1.0) == pytest.approx(l2 + t0[0], rel=1e-12)
    assert found.tail("itl", t0[-1] * 1.001) == pytest.approx(2 / 12)


@pytest.mark.parametrize(
    ("users", "prompt", "output", "chunk", "model", "tp"),
    [
        (16, 1024, 128, 8192, "llama-3.1-8b", 1),  # several prompts a step
        (24, 3000, 64, 2048, "llama-3.1-70b", 4),  # prompts across steps, packed end to end, TP
        (12, 700, 200, 2048, "mixtral-8x7b", 2),  # MoE
        (1, 4096, 32, 1024, "llama-3.1-8b", 1),  # one user: its own chunks, then its decodes
    ],
)
def test_the_round_is_what_the_simulation_runs(users, prompt, output, chunk, model, tp):
    r = _replica(users, prompt, output, chunk=chunk, model=model, tp=tp)
    assert locks_whole(r)
    pt = state_at_users(r, users, 0.0)
    assert pt is not None and pt.round is not None
    sim = simulate_replica(r, r.traffic, requests=40 * users, seed=3)
    for metric in ("ttft", "tpot", "e2e", "itl"):
        for q in (0.5, 0.9):
            assert percentile(r, pt, metric, q) == pytest.approx(sim.percentile(metric, q), rel=0.02), (metric, q)
    assert pt.rate_rps == pytest.approx(sim.rate_rps, rel=0.02)


@settings(max_examples=15, deadline=None)
@given(users=st.integers(1, 120), prompt=st.integers(50, 6000), output=st.integers(2, 400))
def test_rounds_hold_littles_law_and_grow_with_the_users(users, prompt, output):
    r = _replica(users, prompt, output)
    assume(users + 1 <= held(r))  # past the KV cache's sequences the extra users queue for a slot (below)
    pt = state_at_users(r, users, 0.0)
    assert pt is not None and pt.round is not None
    # each user's cycle is its E2E and the client's round trip
    assert users == pytest.approx(pt.rate_rps * (e2e_mean(r, pt) + CLIENT_RTT_S), rel=1e-9)
    one_more = whole_round(r, users + 1)
    assert one_more.quantile("ttft", 0.9) >= pt.round.quantile("ttft", 0.9)
    assert one_more.mean("e2e") > pt.round.mean("e2e")
    # the rate is users over the cycle, which the steps fill: one user more can cost a nearly empty prefill step,
    # so it need not rise, but it never passes the users over the round's busy seconds
    assert pt.rate_rps < users / (pt.round.prefill_s + pt.round.decode_s)
    # a fractional count mixes the whole counts' rounds: its rate lies between theirs
    assert pt.rate_rps <= round_at(r, users + 0.5).rate_rps <= one_more.rate_rps * (1 + 1e-9)


@pytest.mark.parametrize(
    ("kw", "expected"),
    [
        ({}, True),
        ({"apart": False}, False),  # prefill beside the decodes: groups dissolve (loop.py's partial lock)
        ({"think_s": 1.0}, False),  # a think time spreads the users' returns
        ({"prompt_kind": "exponential"}, False),  # lengths that vary end at different steps
    ],
)
def test_where_whole_rounds_apply(kw, expected):
    assert locks_whole(_replica(8, 1000, 100, **kw)) is expected


def test_users_past_what_a_round_holds_wait_for_a_slot_on_ttft_not_tpot():
    # 64 users on 32 running slots: rounds of 32 back to back (a full group waits whenever one ends), each request
    # waiting its turn, W = users / rate - (r + the round's E2E); TPOT is the 32-user round's
    model, h100 = load_model("llama-3.1-8b"), load_gpu("h100-sxm")
    kw = {"tp": 1, "prompt_tokens": 1000, "output_tokens": 100, "engine": engine_for("sglang"), "prefill_apart": True,
          "max_running": 32, "chunk": 2048}  # fmt: skip
    under, over = predict(model, h100, concurrency=32, **kw), predict(model, h100, concurrency=64, **kw)
    assert over.tpot_s == under.tpot_s
    r = _replica(64, 1000, 100)
    r.max_running = 32
    one = whole_round(r, 32)
    rate = 32 / (one.prefill_s + one.decode_s)
    wait = 64 / rate - CLIENT_RTT_S - one.mean("e2e")
    assert over.rate_rps == pytest.approx(rate, rel=1e-9)
    assert over.means_s["ttft_s"] == pytest.approx(under.means_s["ttft_s"] + wait, rel=1e-6)
    assert wait > under.means_s["e2e_s"] * 0.9  # about a whole round more


def _plan_json(*extra: str) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(["plan", "-m", "qwen3-32b", "--concurrency", "64", "--prompt", "4096", "--output", "128",
                     "--gpu", "h100-sxm", "--tp", "4", "--engine", "sglang", "--format", "json", *extra])  # fmt: skip
    assert code == 0
    return json.loads(out.getvalue())


def test_plan_sizes_rounds_so_that_one_user_more_would_break_the_slo():
    slo = 3.0
    expected = _plan_json("--slo", f"ttft_p90={slo}s")["configs"][0]["expected"]
    assert expected["binding"] == "ttft_p90 SLO"
    assert expected["ttft_s"]["p90"] <= slo
    # the users a replica takes: the most whose round meets the SLO
    deployment = Deployment(load_gpu("h100-sxm"), Layout(4), engine=engine_for("sglang"))
    traffic = Traffic(LengthDist("fixed", 4096), LengthDist("fixed", 128), concurrency=64)
    r = build_replica(load_model("qwen3-32b"), deployment, traffic, 8192, "expected", prefill_apart=True)
    per_replica = expected["pools"][0][0] if "pools" in expected else None
    held = max(n for n in range(1, 65) if whole_round(r, n).quantile("ttft", 0.9) <= slo)
    assert whole_round(r, held + 1).quantile("ttft", 0.9) > slo
    assert expected["replicas"] == -(-round(64 * 1.2) // held)
    if per_replica is not None:
        assert per_replica == held
    # the fleet's TTFT is the round of its users per replica
    users = 64 / expected["replicas"]
    assert expected["ttft_s"]["p90"] == pytest.approx(round_at(r, users).quantile("ttft", 0.9), rel=1e-9)
