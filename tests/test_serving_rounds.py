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
import re
import statistics

import pytest
from hypothesis import assume, example, given, settings
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
from tokcost.serving.rounds import (
    QUEUED_ROUNDS,
    _one_round,
    _prefill_steps,
    held,
    locks_whole,
    round_at,
    whole_round,
)
from tokcost.serving.simulate import simulate_replica
from tokcost.serving.steps import Deployment
from tokcost.serving.traffic import CLIENT_RTT_S, LengthDist, Traffic


def _replica(users: int, prompt: int, output: int, *, chunk: int = 2048, apart: bool = True,
             model: str = "llama-3.1-8b", tp: int = 1, think_s: float = 0.0, prompt_kind: str = "fixed",
             lookahead: bool = False, client_side: bool = True, output_kind: str = "fixed"):  # fmt: skip
    traffic = Traffic(LengthDist(prompt_kind, prompt), LengthDist(output_kind, output), concurrency=users,
                      think_time_s=think_s)  # fmt: skip
    deployment = Deployment(load_gpu("h100-sxm"), Layout(tp), engine=engine_for("sglang"))
    return build_replica(load_model(model), deployment, traffic, chunk, "expected", prefill_apart=apart,
                         lookahead=lookahead, client_side=client_side)  # fmt: skip


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


def test_the_simulators_gaps_hold_only_the_prefill_steps_after_a_requests_own_first_token():
    # 8 users, 1,000-token prompts, 2 tokens out, chunk 2,048: four prefill steps of two prompts each, then one
    # decode step; each request has exactly one gap, from its first token to its second, so the pooled gaps are the
    # requests' TPOTs: the first pair waits out steps 2-4, the last pair none (the simulator once charged every
    # decoder all four steps)
    r = _replica(8, 1000, 2)
    sim = simulate_replica(r, r.traffic, requests=400, seed=3)
    assert sim.itl_mean_s == pytest.approx(statistics.fmean(sim.tpot_s), rel=1e-9)
    # the four values, one per pair, as the round prices them (its decode step at the mean context: 1e-4)
    assert sorted({round(x, 9) for x in sim.tpot_s}) == pytest.approx(
        sorted({x for _, x in whole_round(r, 8).tpot}), rel=1e-4
    )


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
@example(users=74, prompt=82, output=2)  # one more user opens a prefill step of its own: the rate falls
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
    # a fractional count mixes the whole counts' rounds: its rate lies between theirs, whichever is higher (one more
    # user can open a prefill step of its own, users=74 prompt=82 output=2, so the rate may fall)
    lo, hi = sorted((pt.rate_rps, one_more.rate_rps))
    assert lo * (1 - 1e-9) <= round_at(r, users + 0.5).rate_rps <= hi * (1 + 1e-9)


@pytest.mark.parametrize(
    ("kw", "expected"),
    [
        ({}, True),
        ({"apart": False}, False),  # prefill beside the decodes: groups dissolve (loop.py's partial lock)
        ({"think_s": 1.0}, False),  # a think time spreads the users' returns
        # prompts that vary still run before any decode, and answers all as long end in one step
        ({"prompt_kind": "exponential"}, True),
        ({"output_kind": "exponential"}, False),  # answers that vary end at different steps
    ],
)
def test_where_whole_rounds_apply(kw, expected):
    assert locks_whole(_replica(8, 1000, 100, **kw)) is expected


def test_a_round_of_prompts_that_vary_packs_them_end_to_end():
    # prompts of 1,500 and 700 tokens in a 2,048 chunk: step 1 runs the first whole and 548 of the second, step 2
    # the other 152; the first request's token ends step 1, the second's step 2, which the first then waits out
    r = _replica(2, 1000, 5, prompt_kind="exponential")
    steps, c = r.steps, r.overhead_s
    l1 = steps.seconds([Segment(1, 0, 1500), Segment(1, 0, 548)])
    l2 = steps.seconds([Segment(1, 548, 152)])
    assert _prefill_steps(r, [1500, 700]) == [pytest.approx(l1), pytest.approx(l2)]
    one = _one_round(r, [1500, 700])
    decode = one.decode_s
    assert (one.prefill_steps, one.prefill_s) == (2, pytest.approx(l1 + l2))
    assert [x for _, x in one.ttft] == [pytest.approx(c + l1), pytest.approx(c + l1 + l2)]
    # 4 decode steps from the mean prompt's context (1,100: the pass is linear in the contexts' sum)
    assert decode == pytest.approx(4 * steps.decode_mean(2, 1100, 1103))
    assert [x for _, x in one.tpot] == [pytest.approx((l2 + decode) / 4), pytest.approx(decode / 4)]


@pytest.mark.parametrize(("users", "prompt", "chunk"), [(6, 500, 4096), (16, 1000, 2048), (48, 2000, 8192)])
def test_rounds_of_prompts_that_vary_meet_the_simulation(users, prompt, chunk):
    # exponential prompts, fixed answers, prefill apart: the users still come back in one round (the closed form
    # counted them unlocked: p50 TTFT 57-95% under the simulation's); priced as rounds of drawn prompts, the round's
    # p50 and p90 TTFT and TPOT meet the simulated clients' within 15%
    r = _replica(users, prompt, 100, chunk=chunk, prompt_kind="exponential")
    found = round_at(r, users)
    sim = simulate_replica(r, r.traffic, requests=200 * users, seed=1)
    for metric in ("ttft", "tpot"):
        for q in (0.5, 0.9):
            assert found.quantile(metric, q) == pytest.approx(sim.percentile(metric, q), rel=0.15), (metric, q)


def test_users_past_what_a_round_holds_wait_for_a_slot_on_ttft_not_tpot():
    # 64 users on 32 running slots: rounds of 32 back to back (a full group waits whenever one ends; the simulator's
    # steady state, rounds.queued), each request waiting its turn, W = users / rate - (r + the round's E2E); TPOT
    # is the 32-user round's
    model, h100 = load_model("llama-3.1-8b"), load_gpu("h100-sxm")
    kw = {"tp": 1, "prompt_tokens": 1000, "output_tokens": 100, "engine": engine_for("sglang"), "prefill_apart": True,
          "max_running": 32, "chunk": 2048}  # fmt: skip
    under, over = predict(model, h100, concurrency=32, **kw), predict(model, h100, concurrency=64, **kw)
    assert over.tpot_s == pytest.approx(under.tpot_s, rel=1e-3)  # the simulator prices each step's own context
    r = _replica(64, 1000, 100)
    r.max_running = 32
    one = whole_round(r, 32)
    rate = 32 / (one.prefill_s + one.decode_s)
    wait = 64 / rate - CLIENT_RTT_S - one.mean("e2e")
    assert over.rate_rps == pytest.approx(rate, rel=1e-3)
    assert over.means_s["ttft_s"] == pytest.approx(under.means_s["ttft_s"] + wait, rel=1e-3)
    assert wait > under.means_s["e2e_s"] * 0.9  # about a whole round more


@pytest.mark.parametrize(("users", "lookahead"), [(33, False), (33, True), (48, False), (100, True)])
def test_past_the_cap_a_loop_is_the_simulators_steady_state(users, lookahead):
    # past 32 running slots the groups split as slots free: a few users left over get a prefill step of their own
    # and overlap scheduling staggers them (rounds of 32 back to back put p50 TTFT at 916 ms against the 112 ms
    # simulated at 33 users, 2,000 / 50 tokens). So the figures are the simulator's over a benchmark's length
    # (QUEUED_ROUNDS requests a user): its latencies and pooled gaps read back as the simulation reads them,
    # Little's law holds, and every request still waits out at least its own prefill
    r = _replica(users, 1000, 100, lookahead=lookahead)
    r.max_running = 32
    pt = state_at_users(r, users, 0.0)
    assert pt is not None and pt.round is not None and pt.round.wait_s >= 0  # staggered, 33 may wait less than 32
    sim = simulate_replica(r, r.traffic, requests=QUEUED_ROUNDS * users, seed=5, max_running=32)
    for metric in ("ttft", "tpot", "e2e", "itl"):
        for q in (0.5, 0.9):
            assert percentile(r, pt, metric, q) == pytest.approx(sim.percentile(metric, q), rel=0.02), (metric, q)
    assert pt.rate_rps == pytest.approx(sim.rate_rps, rel=0.01)
    assert users == pytest.approx(pt.rate_rps * (e2e_mean(r, pt) + CLIENT_RTT_S), rel=0.02)  # Little
    assert min(x for _, x in pt.round.ttft) >= r.overhead_s + whole_round(r, 1).prefill_s * (1 - 1e-9)


def test_a_quantile_on_the_edge_between_two_values_reads_as_numpy_over_many_rounds():
    # 10 users, prompts of one chunk each: 10 TTFTs, one a step; p90 sits on the edge between the 9th and the 10th,
    # where numpy's linear rule over R rounds of 10 gives the 9th + (1 - 0.9) of the step up (the midpoint put it 4%
    # over the simulation)
    r = _replica(10, 2048, 20)
    found = whole_round(r, 10)
    values = sorted(x for _, x in found.ttft)
    assert found.quantile("ttft", 0.9) == pytest.approx(values[8] + 0.1 * (values[9] - values[8]), rel=1e-12)
    assert found.quantile("ttft", 0.5) == pytest.approx((values[4] + values[5]) / 2, rel=1e-12)
    sim = simulate_replica(r, r.traffic, requests=400, seed=1)
    assert found.quantile("ttft", 0.9) == pytest.approx(sim.percentile("ttft", 0.9), rel=0.01)


def test_multi_step_scheduling_is_not_priced_as_whole_rounds():
    # under --num-scheduler-steps a prompt that finishes mid-window waits for its end: not a round
    r = _replica(16, 1000, 100)
    assert locks_whole(r)
    r.scheduler_steps = 8
    assert not locks_whole(r)


def test_plan_meets_an_slo_whose_tail_does_not_grow_with_every_user():
    # ITL's p99 falls when one more prompt fills a prefill step (55.9 ms at 8 users, 20.7 at 9, 105.2 at 16, 92.9 at
    # 19): a bisection on users took 19 a replica while 16, what the fleet deployed, broke the SLO it said it met
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(["plan", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--tp", "1", "--concurrency", "80", "--prompt",
                     "500", "--output", "50", "--chunk", "2048", "--headroom", "0", "--engine", "sglang",
                     "--slo", "itl_p99=100ms", "--format", "json"])  # fmt: skip
    assert code == 0
    for config in json.loads(out.getvalue())["configs"]:
        expected = config["expected"]
        if expected["meets_slo"]:
            assert expected["itl_s"]["p99"] <= 0.1


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


def test_explain_splits_a_rounds_cost_by_its_own_steps():
    # the input share --explain prints is the round's sum L / (sum L + D), the figures it names
    plan = _plan_json("--explain")
    line = next(x for x in plan["explain"] if "busy-time split" in x)
    found = re.search(r"= ([\d.,]+) ms / \(([\d.,]+) ms \+ ([\d.,]+) ms\): input share ([\d.]+)%", line)
    assert found, line
    prefill, again, decode, share = (float(g.replace(",", "")) for g in found.groups())
    assert prefill == again
    assert share == pytest.approx(100 * prefill / (prefill + decode), abs=0.15)  # printed to 0.1% and 0.1 ms
    assert plan["configs"][0]["expected"]["usd_per_hour"] > 0


@pytest.mark.parametrize("apart", [True, False])
def test_timing_at_the_engine_drops_the_request_cost_from_ttft_not_from_the_clients_cycle(apart):
    # the per-request cost (HTTP, tokenization) sits between a client's send and the scheduler: a harness timing
    # at the engine leaves it out of TTFT and E2E, while each closed-loop client still pays it every cycle, so the
    # rate is the same (it once rose 23% at 4 users of 100 / 2 tokens, prefill apart, where the cycle lost it)
    client, engine = (_replica(4, 100, 2, apart=apart, client_side=side) for side in (True, False))
    cost = client.request_cost_s
    assert cost > 0 and engine.overhead_s == 0
    at_client, at_engine = (state_at_users(r, 4, 0.0) for r in (client, engine))
    assert at_engine.rate_rps == pytest.approx(at_client.rate_rps, rel=1e-9)
    for metric in ("ttft", "e2e"):
        gap = percentile(client, at_client, metric, 0.5) - percentile(engine, at_engine, metric, 0.5)
        assert gap == pytest.approx(cost, rel=1e-6), metric
    sims = [simulate_replica(r, r.traffic, requests=200, seed=3) for r in (client, engine)]
    assert sims[1].rate_rps == pytest.approx(sims[0].rate_rps, rel=1e-9)
    assert sims[0].percentile("ttft", 0.5) - sims[1].percentile("ttft", 0.5) == pytest.approx(cost, rel=1e-6)
