"""Redundant experts (EPLB) and DP ranks that schedule their own sequences: the layouts large-EP deployments run.

DeepSeek-V3 has 256 routed experts; DeepSeek's own EP144 decode and SGLang's EP72 decode add 32 copies (a pool of
288 slots, lmsys blog 2025-05-05: "EPLB's use of 288 experts enables ... parallelism sizes of 12 or 72"). Each
number below is worked from the model's config by hand.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tokcost.engine.estimate import deployment, estimate
from tokcost.engine.layout import Layout, layout_problem
from tokcost.engine.workload import Workload
from tokcost.errors import UsageError
from tokcost.hardware.library import load_gpu, load_network
from tokcost.models.library import load_model
from tokcost.profiles import load_engine

DSV3 = load_model("deepseek-v3")
MIXTRAL = load_model("mixtral-8x7b")
H100 = load_gpu("h100-sxm")
EXPERT_BYTES_FP8 = 3 * 7168 * 2048  # gate, up and down of one routed expert at 1 byte a weight
MOE_LAYERS = 58  # 61 layers, the first 3 dense


def _wl(**kw) -> Workload:
    base = {"tp": 1, "weights_dtype": "fp8", "kv_dtype": "bf16", "compute_dtype": "fp8"}
    return Workload(**{**base, **kw})


def test_ep_72_needs_the_pool_of_288_and_the_refusal_says_how():
    with pytest.raises(
        UsageError,
        match=r"--ep: 72 does not divide deepseek-v3's 256 experts; valid for 72 GPUs: "
        r"1, 2, 4, 8 \(redundant experts enlarge the pool: use --redundant-experts R\)",
    ):
        estimate(DSV3, H100, _wl(dp=72, ep=72))
    assert layout_problem(DSV3, Layout(1, 1, 72, 72, 8, 32)) is None
    # with 32 copies, 288 = 2^5 x 3^2 slots: every divisor of 72 = 2^3 x 3^2 spreads them evenly (EP 1 holds no copies)
    assert (layout_problem(DSV3, Layout(1, 1, 5, 72, 8, 32)) or "").endswith(
        "valid: 2, 3, 4, 6, 8, 9, 12, 18, 24, 36, 72"
    )
    # 287 = 7 x 41 slots: no EP degree of 72 GPUs above 1 divides them
    message = layout_problem(DSV3, Layout(1, 1, 72, 72, 8, 31)) or ""
    # ... so it names the copies that would: 256 + R divisible by 72 first at R = 32 (288), then every 72 more
    assert message.endswith("256 experts + 31 redundant = 287 slots; valid for 72 GPUs: none (or "
                            "--redundant-experts 32, 104, ...: experts + copies divisible by EP 72)")  # fmt: skip


def test_more_copies_than_every_rank_holding_every_expert_are_refused():
    # at EP 2, 8 experts fill 16 slots when each rank holds all 8: a ninth copy would put an expert twice on a rank
    assert layout_problem(MIXTRAL, Layout(1, 1, 2, 2, 8, 8)) is None
    assert layout_problem(MIXTRAL, Layout(1, 1, 2, 2, 8, 10)) == (
        "--redundant-experts: 10 copies put an expert twice on one of 2 EP ranks (mixtral-8x7b has 8 experts); "
        "valid: 0..8"
    )


@pytest.mark.parametrize(
    ("model", "layout", "words"),
    [
        ("llama-3.1-8b", Layout(1, redundant_experts=32), "llama-3.1-8b has no routed experts to copy"),
        ("deepseek-v3", Layout(8, redundant_experts=32), "at one EP rank every GPU holds all 256 experts"),
    ],
)
def test_copies_without_expert_ranks_to_hold_them_are_refused(model, layout, words):
    assert words in (layout_problem(load_model(model), layout) or "")


def test_each_rank_holds_its_share_of_the_pool():
    # EP 8 over 8 GPUs: 256 / 8 = 32 experts a rank, 288 / 8 = 36 with 32 copies: 4 more experts in each MoE layer
    plain = estimate(DSV3, H100, _wl(dp=8, ep=8)).memory.per_gpu.weights
    pooled = estimate(DSV3, H100, _wl(dp=8, ep=8, redundant_experts=32)).memory.per_gpu.weights
    assert pooled - plain == pytest.approx(MOE_LAYERS * 4 * EXPERT_BYTES_FP8)
    assert pooled - plain == pytest.approx(10_217_324_544)


def test_a_full_decode_step_reads_every_slot_on_the_busiest_rank():
    # 256 sequences a rank x 72 ranks = 18,432 tokens, 8 experts each: every one of a rank's 4 slots is hit
    d = deployment(DSV3, H100, _wl(dp=72, ep=72, redundant_experts=32, batch=18432), load_network("ib-ndr-400"))
    cost = d.decode(d.rates("ceiling"), batch=18432, cached=2000)
    routed = [p.stage for p in cost.stages if p.stage.name == "routed experts"]
    assert len(routed) == 1 and routed[0].count == MOE_LAYERS
    assert routed[0].weight_bytes == pytest.approx(4 * EXPERT_BYTES_FP8, rel=1e-9)
    assert "of 4 expert slots on the busiest rank" in routed[0].note


@given(copies=st.sampled_from([0, 8, 24, 32, 56, 64]))
def test_more_copies_never_take_less_memory_or_time(copies):
    # EP 8 divides 256 + 8k; each copy a rank holds is memory, and a full step reads it
    wl = _wl(dp=8, ep=8, batch=2048, prompt_tokens=1000, output_tokens=100)
    base = estimate(DSV3, H100, wl)
    more = estimate(DSV3, H100, wl.model_copy(update={"redundant_experts": copies}))
    assert more.memory.per_gpu.weights >= base.memory.per_gpu.weights
    assert more.ceiling.tpot_s >= base.ceiling.tpot_s * (1 - 1e-12)
    assert (more.memory.per_gpu.weights > base.memory.per_gpu.weights) == (copies > 0)


def test_each_dp_rank_schedules_its_own_sequences():
    # SGLang's profile: 300 us a step + 5 us a sequence; at DP 72 the host of the busiest rank takes 256 of 18,432
    wl, net = _wl(dp=72, ep=72, redundant_experts=32), load_network("ib-ndr-400")
    rates = deployment(DSV3, H100, wl, net, load_engine("sglang")).rates("expected")
    assert rates.host_s(18432, 72) == pytest.approx(rates.step_overhead_s + rates.sequence_overhead_s * 256)
    assert rates.host_s(18432, 1) == pytest.approx(rates.step_overhead_s + rates.sequence_overhead_s * 18432)
    assert rates.host_s(100, 8) == pytest.approx(rates.step_overhead_s + rates.sequence_overhead_s * 13)  # rounds up


def test_the_cli_takes_the_pool_and_says_it(cli):
    args = ("estimate", "-m", "deepseek-v3", "-g", "h100-sxm", "--tp", "1", "--dp", "72", "--ep", "72",
            "--batch", "18432", "--prompt", "2000", "--output", "2")  # fmt: skip
    refused = cli(*args)
    assert refused.exit_code == 2 and "--redundant-experts" in refused.stderr
    assert "Traceback" not in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
    run = cli(*args, "--redundant-experts", "32", "--format", "json")
    assert run.exit_code == 0, run.stderr
    data = json.loads(run.stdout)
    assert data["layout"]["redundant_experts"] == 32 and data["workload"]["redundant_experts"] == 32
    explained = cli(*args, "--redundant-experts", "32", "--explain")
    assert "experts: 256 + 32 redundant = 288 slots, 4 on each of 72 EP ranks" in explained.stdout
    dense = cli("estimate", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--redundant-experts", "4")
    assert dense.exit_code == 2 and "no routed experts to copy" in dense.stderr


def test_plan_puts_the_copies_on_its_ep_layouts_only(cli):
    run = cli("plan", "-m", "deepseek-v3", "--rate", "20", "--prompt", "2000", "--output", "300", "--gpu", "h100-sxm",
              "--tp", "1", "--dp", "72", "--ep", "1,72", "--redundant-experts", "32", "--format", "json")  # fmt: skip
    assert run.exit_code == 0, run.stderr
    labels = {c["layout"] for c in run.json()["configs"]}
    assert labels == {"DP72xEP72+32", "DP72"}  # EP 1 holds every expert on each GPU: no copies to add


def test_plan_refuses_copies_no_searched_layout_holds(cli):
    # Mixtral's 8 experts + 3 copies: no EP degree divides 11 slots, so plan had priced its TP rows alone, the flag
    # dropped without a word ("Planned 3 configurations"); 8 copies make 16 slots, which EP 2, 4 and 8 hold
    refused = cli("plan", "-m", "mixtral-8x7b", "-g", "h100-sxm", "--rate", "1", "--redundant-experts", "3")
    assert refused.exit_code == 2 and "--redundant-experts: no expert-parallel layout searched holds them" in (
        refused.stderr)  # fmt: skip
    held = cli("plan", "-m", "mixtral-8x7b", "-g", "h100-sxm", "--rate", "1", "--redundant-experts", "8", "-f", "json")
    assert held.exit_code == 0, held.stderr
    assert any("EP" in c["layout"] for c in held.json()["configs"])
