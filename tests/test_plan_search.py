"""The plan's search and sizing: laws across loads and SLOs, layouts, precisions, prices, cost split, Pareto."""

from __future__ import annotations

import math

import pytest

from tokcost.hardware.library import load_gpu, load_network
from tokcost.models.library import load_model
from tokcost.serving.capacity import capacity, state_at_users, users_capacity
from tokcost.serving.latency import broken_slos
from tokcost.serving.search import Space, plan, precision_parts
from tokcost.serving.traffic import LengthDist, Slo, Traffic

MODEL = load_model("llama-3.1-70b")
H100, H200, A100 = load_gpu("h100-sxm"), load_gpu("h200"), load_gpu("a100-80gb-sxm")
SLOS = [Slo("ttft", "p90", 0.5), Slo("tpot", "p90", 0.04)]


def _traffic(rate: float) -> Traffic:
    return Traffic(LengthDist("fixed", 2048), LengthDist("fixed", 300), rate_rps=rate)


def _space(**kw) -> Space:
    base = {"gpus": (H100,), "tps": (2, 4, 8), "weights": ("fp8",), "chunks": (1024, 2048)}
    return Space(**{**base, **kw})


@pytest.fixture(scope="module")
def plan_at_20():
    """The plan at 20 req/s on the base space, which several tests read (a plan is a pure function of its inputs)."""
    return plan(MODEL, _traffic(20), SLOS, _space())


def _cheapest(p) -> tuple[int, float]:
    row = next(r for r in p.rows if r.expected.meets_slo)
    return row.expected.gpus, row.expected.usd_per_hour


@pytest.mark.slow  # eight plans (the quick tier plans at 20 req/s below)
def test_more_rate_never_needs_fewer_gpus():
    cheapest = [_cheapest(plan(MODEL, _traffic(rate), SLOS, _space())) for rate in (0.5, 1, 2, 5, 10, 20, 40, 80)]
    assert all(a[1] <= b[1] for a, b in zip(cheapest[:-1], cheapest[1:], strict=True))
    assert cheapest[0][0] < cheapest[-1][0]


@pytest.mark.slow  # five plans
def test_looser_slos_never_need_more_gpus():
    runs = []
    for loosen in (1.0, 1.25, 1.5, 2.0, 4.0):
        slos = [Slo(s.metric, s.percentile, s.seconds * loosen) for s in SLOS]
        runs.append(_cheapest(plan(MODEL, _traffic(20), slos, _space())))
    assert all(a[1] >= b[1] for a, b in zip(runs[:-1], runs[1:], strict=True))


def test_default_layouts_start_at_the_smallest_that_fits():
    p = plan(MODEL, _traffic(5), SLOS, Space(gpus=(H100,), weights=("bf16",), chunks=(2048,)))
    # 70B at bf16 (141 GB) needs two 80 GB cards before any KV fits
    assert sorted({r.deployment.layout.tp for r in p.rows}) == [2, 4, 8]
    explicit = plan(MODEL, _traffic(5), SLOS, Space(gpus=(H100,), tps=(1, 3), weights=("bf16",), chunks=(2048,)))
    reasons = {r.deployment.layout.tp: r.expected.binding for r in explicit.rows}
    assert reasons[1].startswith("does not fit")
    assert reasons[3].startswith("--tp: 3 does not divide llama-3.1-70b's 64 attention heads")


def test_fp8_weights_run_fp8_matmuls_only_where_the_gpu_has_them():
    p = plan(MODEL, _traffic(5), SLOS, Space(gpus=(H100, A100), tps=(4,), weights=("fp8", "int4"), chunks=(2048,)))
    found = {(r.deployment.gpu.name, precision_parts(r)[0]): precision_parts(r)[2] for r in p.rows}
    assert found[("h100-sxm", "fp8")] == "fp8"
    assert found[("a100-80gb-sxm", "fp8")] == "bf16"  # Ampere lists no fp8 peak: weight-only
    assert found[("h100-sxm", "int4")] == "bf16"  # integer formats stay weight-only


def test_prices_override_and_missing_prices_warn():
    p = plan(MODEL, _traffic(10), SLOS, _space(gpus=(H100, H200), prices={"h200": 3.5}))
    for row in p.rows:
        x = row.expected
        if x.meets_slo:
            per_gpu = 3.5 if row.deployment.gpu.name == "h200" else 3.78
            assert x.usd_per_hour == pytest.approx(per_gpu * x.gpus)
    assert not p.warnings
    unpriced = H200.model_copy(update={"price_per_hour_usd": None, "price_range_usd": None})  # as a user's file may be
    warnings = plan(MODEL, _traffic(10), SLOS, _space(gpus=(unpriced,))).warnings
    assert any(w.startswith("h200: no price") for w in warnings)


def test_cost_split_adds_back_to_the_hourly_cost(plan_at_20):
    for row in plan_at_20.rows:
        x = row.expected
        if not x.meets_slo:
            continue
        # $/1M in x input tokens + $/1M out x output tokens over an hour = the fleet's $/hour
        hourly = (
            x.usd_per_million_input_tokens * 20 * 2048 / 1e6 + x.usd_per_million_output_tokens * 20 * 300 / 1e6
        ) * 3600
        assert hourly == pytest.approx(x.usd_per_hour, rel=1e-9)


def test_max_gpus_turns_big_fleets_into_failures():
    p = plan(MODEL, _traffic(40), SLOS, _space(max_gpus=16))
    for row in p.rows:
        x = row.expected
        if x.gpus is not None and x.gpus > 16:
            assert not x.meets_slo and x.binding == f"needs {x.gpus} GPUs > --max-gpus 16"


def test_pareto_rows_are_not_dominated():
    p = plan(MODEL, _traffic(20), SLOS, _space(tps=(2, 4, 8), weights=("fp8", "bf16")))
    meeting = [r for r in p.rows if r.expected.meets_slo]
    assert any(r.pareto for r in meeting)
    for row in meeting:
        usd = row.expected.usd_per_million_output_tokens
        tpot, ttft = row.expected.tpot_s["p90"], row.expected.ttft_s["p90"]
        dominated_tpot = any(
            o.expected.usd_per_million_output_tokens <= usd and o.expected.tpot_s["p90"] <= tpot
            and (o.expected.usd_per_million_output_tokens < usd or o.expected.tpot_s["p90"] < tpot)
            for o in meeting if o is not row
        )  # fmt: skip
        dominated_ttft = any(
            o.expected.usd_per_million_output_tokens <= usd and o.expected.ttft_s["p90"] <= ttft
            and (o.expected.usd_per_million_output_tokens < usd or o.expected.ttft_s["p90"] < ttft)
            for o in meeting if o is not row
        )  # fmt: skip
        assert row.pareto == (not dominated_tpot or not dominated_ttft)


def test_load_table_grows_with_the_load(plan_at_20):
    p = plan_at_20
    gpus = [entry["gpus"] for entry in p.load]
    assert [entry["multiple"] for entry in p.load] == [0.25, 0.5, 1.0, 2.0, 4.0]
    assert all(a <= b for a, b in zip(gpus[:-1], gpus[1:], strict=True))
    assert p.load[2]["gpus"] == _cheapest(p)[0]


def test_disaggregated_pools_add_up():
    alone = plan(MODEL, _traffic(20), SLOS, _space(mode="disaggregated"))
    # 20 req/s needs more than one 8-GPU node, and this plan was given no network to move KV between nodes
    assert alone.rows[0].expected.binding == "no link or network to move KV between pools on h100-sxm"
    p = plan(MODEL, _traffic(20), SLOS, _space(mode="disaggregated", networks={"h100-sxm": load_network("ib-ndr-400")}))
    row = next(r for r in p.rows if r.expected.meets_slo)
    x = row.expected
    assert row.prefill_layout is not None
    assert x.gpus == x.prefill_replicas * row.prefill_layout.gpus + x.replicas * row.deployment.layout.gpus
    # the decode pool's TPOT includes the KV's trip: every TPOT percentile at least the transfer / n
    assert row.replica.transfer_s > 0 and x.tpot_s["p50"] > row.replica.transfer_s / 299


def test_closed_loop_sizes_by_users():
    traffic = Traffic(LengthDist("fixed", 2048), LengthDist("fixed", 300), concurrency=200, think_time_s=5.0)
    p = plan(MODEL, traffic, SLOS, _space())
    row = next(r for r in p.rows if r.expected.meets_slo)
    pt = row.expected.point
    per_replica = 200 / row.expected.replicas
    # users = rate x (E2E + think) per replica, and the fleet keeps 20% of its users' capacity free
    users_cap = row.expected.pools[0][0]
    assert math.ceil(200 * 1.2 / users_cap - 1e-9) == row.expected.replicas
    assert pt.rate_rps > 0 and per_replica <= users_cap


def test_plan_enumerates_expert_parallel_layouts_for_moe():
    # an MoE model gets each TP degree twice: experts split tensor-parallel (EP 1) and spread whole (EP = TP)
    moe = load_model("mixtral-8x7b")
    p = plan(moe, _traffic(2), SLOS, Space(gpus=(H100,), tps=(2, 4), weights=("fp8",), chunks=(1024,),
                                         eps=(1, 2, 4)))  # fmt: skip
    layouts = {(r.deployment.layout.tp, r.deployment.layout.ep) for r in p.rows}
    assert {(2, 1), (2, 2), (4, 1), (4, 4)} <= layouts
    assert all(r.deployment.layout.ep <= r.deployment.layout.tp for r in p.rows if r.expected.meets_slo)
    default = plan(moe, _traffic(2), SLOS, Space(gpus=(H100,), tps=(2,), weights=("fp8",), chunks=(1024,)))
    assert {r.deployment.layout.label for r in default.rows} == {"TP2", "TP2xEP2"}


def test_a_model_no_node_holds_is_planned_on_pipeline_stages_of_full_nodes():
    big = load_model("llama-3.1-405b")  # 811 GB at bf16: more than 8 H100s hold
    # its stages sit on different nodes: each hands its activations to the next over the network
    space = Space(gpus=(H100,), weights=("bf16",), chunks=(2048,), networks={H100.name: load_network("ib-ndr-400")})
    p = plan(big, _traffic(1), [Slo("tpot", "p90", 0.2)], space)
    labels = [r.deployment.layout.label for r in p.rows]
    assert labels and all(label.startswith("TP8xPP") for label in labels)
    top = p.rows[0]
    assert top.expected.meets_slo and top.deployment.layout.gpus == 16


def test_each_gpu_runs_its_engines_scheduler_unless_told_otherwise():
    from tokcost.profiles import load_engine
    from tokcost.serving.search import scheduler_choice

    vllm = load_engine("vllm")
    # vLLM V1's get_batch_defaults: >= 70 GiB and not an A100 -> 8192 tokens and 1,024 sequences; else 2048 / 256
    h100 = scheduler_choice(Space(gpus=(H100,), engine=vllm), H100)
    assert (h100.chunks, h100.max_running, h100.chunk_source) == ((8192,), 1024, "vllm default")
    a100 = scheduler_choice(Space(gpus=(A100,), engine=vllm), A100)
    assert (a100.chunks, a100.max_running) == ((2048,), 256)
    told = scheduler_choice(Space(gpus=(H100,), engine=vllm, chunks=(512,), max_running=64), H100)
    assert (told.chunks, told.chunk_source, told.max_running, told.max_running_source) == (
        (512,), "--chunk", 64, "--max-running")  # fmt: skip
    searched = scheduler_choice(Space(gpus=(H100,), chunks=(256, 512, 1024)), H100)
    assert searched.chunk_source == "searched" and searched.max_running is None  # generic: the KV cache caps it
    # SGLang's chunked_prefill_size by GPU memory: 4096 under 60 GiB (L40S), 8192 under 160, 16384 above
    sglang = load_engine("sglang")
    budgets = {g: scheduler_choice(Space(gpus=(load_gpu(g),), engine=sglang), load_gpu(g)).chunks for g in
               ("l40s", "h100-sxm", "h200", "mi300x")}  # fmt: skip
    assert budgets == {"l40s": (4096,), "h100-sxm": (8192,), "h200": (8192,), "mi300x": (16384,)}
    # --chunk search tries the engine's own budget beside the list, so searching never does worse than the default
    from tokcost.serving.rows import DEFAULT_CHUNKS

    mi300x = load_gpu("mi300x")
    searched = scheduler_choice(Space(gpus=(mi300x,), engine=sglang, chunks=DEFAULT_CHUNKS), mi300x)
    assert searched.chunks == (*DEFAULT_CHUNKS, 16384) and searched.chunk_source == "searched"


def test_the_cheapest_fleet_is_ranked_first_and_starred_and_costs_add_up():
    prices = {"h100-sxm": 3.0, "h200": 4.0}
    p = plan(MODEL, _traffic(20), SLOS, _space(gpus=(H100, H200), prices=prices, chunks=None))
    meeting = [r for r in p.rows if r.expected.meets_slo]
    assert meeting[0].pareto and meeting[0].expected.usd_per_hour == min(r.expected.usd_per_hour for r in meeting)
    for row in meeting:
        x = row.expected
        # $/1M tokens blends the hour's cost over the hour's tokens: 20 req/s x (2,048 + 300) tokens
        assert x.usd_per_million_tokens == pytest.approx(x.usd_per_hour / 3600 / (20 * 2348) * 1e6, rel=1e-9)
        assert row.ceiling.gpus <= x.gpus  # the datasheet never needs more GPUs than expected
        assert x.itl_s["p99"] >= x.tpot_s["p50"] * 0.5  # the worst gap is at least a typical step


def test_ceiling_never_needs_more_gpus_than_expected_for_a_crowd_of_users():
    # 100,000 users with no think time (issue 22): no fleet rests on an endless admission queue
    traffic = Traffic(LengthDist("fixed", 1024), LengthDist("fixed", 256), concurrency=100_000)
    p = plan(load_model("llama-3.1-8b"), traffic, [], Space(gpus=(H100,), tps=(1, 2), chunks=(2048,)))
    for row in p.rows:
        assert row.ceiling.gpus <= row.expected.gpus
        assert row.expected.ttft_s["p99"] < 60  # users queue for a slot only past the knee the fleet is sized at


def test_every_engine_profile_states_where_its_scheduler_defaults_come_from():
    from tokcost.profiles import ENGINES, load_engine

    for name in ENGINES:
        profile = load_engine(name)
        assert profile.scheduler_source.strip(), name
        assert profile.scheduler_steps == 1, name  # multi-step only where an era has it (none of today's profiles)
        for tier in profile.scheduler_tiers:  # each tier changes something, on GPUs with more memory
            assert tier.max_running_sequences or tier.chunk_tokens, name
    vllm = load_engine("vllm")
    # the engine's own device-name rule: an A100 80GB stays on the base defaults although it has >= 70 GiB
    assert vllm.scheduler(gpu_name="a100-80gb-sxm", memory_bytes=80e9).max_running_sequences == 256
    assert vllm.scheduler(gpu_name="h200", memory_bytes=141e9).chunk_tokens == 8192


@pytest.mark.parametrize("users", [2, 7, 200])
def test_a_closed_loop_s_replicas_hold_whole_users_that_meet_the_slo(users):
    # users are whole: a replica whose SLOs hold 1.25 users takes one (two users of 70B on 4 x L40S at 2,000 / 300
    # tokens miss p90 TTFT 1 s: 1.27 s), so 200 users need 240 replicas at 20% headroom, not the 192 that spread
    # 1.25 a replica; and the busiest replica, ceil(users / replicas), meets every SLO
    traffic = Traffic(LengthDist("fixed", 2000), LengthDist("fixed", 300), concurrency=users)
    slos = [Slo("ttft", "p90", 1.0), Slo("tpot", "p90", 0.05)]
    space = Space(gpus=(load_gpu("l40s"),), tps=(4,), weights=("bf16",), chunks=(2048,), headroom=0.2)
    row = plan(MODEL, traffic, slos, space).rows[0]
    x = row.expected
    assert x.meets_slo and x.replicas is not None
    busiest = math.ceil(users / x.replicas)
    r = row.replica
    assert r is not None
    per = users_capacity(r, capacity(r, slos), 0.0)
    assert isinstance(per, int) and x.replicas == math.ceil(users * 1.2 / max(per, 1) - 1e-9)
    point = state_at_users(r, busiest, 0.0)
    assert point is not None and not broken_slos(r, point, slos)


def test_a_disaggregated_fleet_grows_for_its_e2e_slo_so_more_rate_never_costs_less():
    # pools sized for TTFT and TPOT alone missed p90 E2E 6.5 s at 9 req/s (8.6 s: 2 prefill + 1 decode replica), so
    # 9 req/s took 12 GPUs where 10 took 8; now a pool grows until the E2E SLO holds
    slos = [Slo("e2e", "p90", 6.5)]
    space = Space(gpus=(H100,), tps=(2,), weights=("fp8",), mode="disaggregated")
    fleets = [plan(MODEL, _traffic(rate), slos, space).rows[0].expected for rate in (9, 10)]
    assert all(f.meets_slo and f.e2e_s is not None and f.e2e_s["p90"] <= 6.5 for f in fleets)
    assert fleets[0].gpus <= fleets[1].gpus


def test_a_closed_loop_s_goodput_is_the_rate_of_the_whole_users_a_replica_takes():
    # 70B on 4 x L40S at 2,000 / 300 tokens: a replica takes one user (1.25 meet the SLOs); its goodput is that
    # user's rate, 1 / (TTFT + 299 TPOT + round trip), not the 1.25 users' the bisection found
    traffic = Traffic(LengthDist("fixed", 2000), LengthDist("fixed", 300), concurrency=200)
    slos = [Slo("ttft", "p90", 1.0), Slo("tpot", "p90", 0.05)]
    space = Space(gpus=(load_gpu("l40s"),), tps=(4,), weights=("bf16",), chunks=(2048,))
    row = plan(MODEL, traffic, slos, space).rows[0]
    r = row.replica
    assert r is not None
    per = users_capacity(r, capacity(r, slos), 0.0)
    whole = state_at_users(r, max(per, 1), 0.0)
    assert whole is not None and row.expected.max_rate_rps == pytest.approx(whole.rate_rps)
    assert row.expected.max_rate_rps < capacity(r, slos).max_rate_rps
