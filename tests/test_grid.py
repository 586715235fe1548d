"""The grid path against the point path: kernels compiled once as linear forms and priced per point must give
exactly what the stage builders give stage by stage, on every built-in model and layout; the closed-form decode
mean must equal summing every step; pipeline stages on two nodes hand activations over the network."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_properties import PROPERTY, gpus, models

from tokcost.engine.compiled import microbatches
from tokcost.engine.decode import DecodeLines
from tokcost.engine.estimate import Deployment, deployment
from tokcost.engine.features import Segment
from tokcost.engine.forms import Form
from tokcost.engine.layout import Layout, layout_problem, per_dp, tp_degrees
from tokcost.engine.passcost import PassCost, Schedule, pipeline_seconds
from tokcost.engine.roofline import CollectiveRate, Rates, price_stage
from tokcost.engine.series import at, pipeline_sum
from tokcost.engine.stages import pipeline_stages
from tokcost.engine.workload import Workload
from tokcost.errors import UsageError
from tokcost.hardware.library import builtin_gpus, load_gpu, load_network
from tokcost.hardware.spec import Link
from tokcost.models.library import builtin_models, load_model
from tokcost.models.spec import ModelSpec
from tokcost.profiles import load_engine

NETWORK = load_network("ib-ndr-400")
VLLM = load_engine("vllm")
# a decode step (an odd batch: DP replicas split it unevenly), a prefill with a cached prefix, a chunked-prefill
# step of a continuous-batching server (decodes, a prompt's middle chunk, a new prompt's first)
PASSES: list[tuple[str, list[Segment], Schedule]] = [
    ("decode", [Segment(37, 3000, 1)], "steady"),
    ("prefill", [Segment(5, 1000, 2000)], "fill"),
    ("mixed", [Segment(23, 5000, 1), Segment(1, 300, 512), Segment(1, 0, 100)], "steady"),
]


def _layouts(model: ModelSpec) -> list[tuple[str, dict]]:
    """TP, uneven PP, multinode TP and TP x PP, PCIe cards, formats; for an MoE: EP, DP attention, multinode EP."""
    tps = tp_degrees(model, limit=8)
    widest, two = tps[-1], tps[1] if len(tps) > 1 else 1
    pp = next(s for s in (3, 5, 7, 2) if model.layers % s and s <= model.layers)
    out = [
        ("h100-sxm", {}),
        ("h100-sxm", {"tp": widest}),
        ("h100-sxm", {"tp": two, "pp": pp}),  # uneven stages: the first ones hold a layer more
        ("h100-sxm", {"tp": widest, "pp": 2, "gpus_per_node": widest}),  # the hop between stages crosses nodes
        ("rtx-4090", {"tp": two}),  # PCIe, no NVLink
        ("l40s", {"tp": max(d for d in tps if d <= 4), "weights_dtype": "int4", "kv_dtype": "fp8"}),
        ("h200", {"tp": widest, "weights_dtype": "fp8", "compute_dtype": "fp8"}),
        ("l4", {"weights_dtype": "q4_k_m"}),
        ("a100-80gb-pcie", {"tp": two, "pp": 2, "weights_dtype": "nf4"}),
    ]
    out += [("h100-sxm", {"tp": d}) for d in tp_degrees(model, limit=16) if d > 8][:1]  # TP across two nodes
    if model.moe:
        out += [
            ("h100-sxm", {"tp": 8, "ep": 8}),
            ("h100-sxm", {"tp": 2, "dp": 4, "ep": 8}),
            ("h100-sxm", {"tp": 1, "dp": 16, "ep": 16}),  # EP all-to-all across two nodes
            ("h200", {"tp": 4, "dp": 2, "ep": 2, "pp": 2}),
        ]
    valid = []
    for gpu, lay in out:
        degrees = {k: lay.get(k, 1) for k in ("tp", "pp", "ep", "dp")}
        if layout_problem(model, Layout(**degrees)) is None:
            valid.append((gpu, lay))
    return valid


# every built-in model: global, sliding, chunked, linear-attention and Mamba-2 layers, MLP-only and mixer-only ones
PRICED = builtin_models()
CASES = [(m, g, lay) for m in PRICED for g, lay in _layouts(load_model(m))]
# the quick tier's share: dense GQA in uneven pipeline stages, MLA with DP attention across nodes, MoE with EP,
# sliding windows over a two-node pipeline, MXFP4 experts, int4 weight-only and FP8 KV on PCIe cards, GGUF;
# chunked attention with interleaved dense and MoE layers, Gated DeltaNet with EP and DP attention, Mamba-2 hybrids
# in pipeline stages
QUICK = [
    ("llama-4-maverick", "h100-sxm", {"tp": 8, "ep": 8}),
    ("qwen3-next-80b-a3b", "h100-sxm", {"tp": 2, "dp": 4, "ep": 8}),
    ("nemotron-h-8b", "h100-sxm", {"tp": 2, "pp": 3}),
    ("llama-3.1-8b", "h100-sxm", {"tp": 2, "pp": 3}),
    ("deepseek-v3", "h100-sxm", {"tp": 1, "dp": 16, "ep": 16}),
    ("mixtral-8x7b", "h100-sxm", {"tp": 8, "ep": 8}),
    ("gemma-2-27b", "h100-sxm", {"tp": 8, "pp": 2, "gpus_per_node": 8}),
    ("gpt-oss-120b", "h100-sxm", {"tp": 8, "ep": 8}),
    ("llama-3.1-8b", "rtx-4090", {"tp": 2}),
    ("qwen2.5-72b", "l40s", {"tp": 4, "weights_dtype": "int4", "kv_dtype": "fp8"}),
    ("llama-3.2-1b", "l4", {"weights_dtype": "q4_k_m"}),
]
CASE_PARAMS = [
    pytest.param(m, g, lay, marks=() if (m, g, lay) in QUICK else pytest.mark.slow, id=f"{m}-{g}-{lay}")
    for m, g, lay in CASES
]


def _deployment(model: str, gpu: str, layout: dict, engine=VLLM) -> Deployment:
    return deployment(load_model(model), load_gpu(gpu), Workload(**layout), NETWORK, engine)


def stage_by_stage(d: Deployment, rates: Rates, segments: list[Segment], schedule: Schedule) -> PassCost:
    """The point path: the builders at the point's numbers, every stage priced on its own, the slowest kept."""
    m = microbatches(d.layout, segments)
    share = [Segment(s.sequences / m, s.cached_tokens, s.new_tokens) for s in segments]
    stages = pipeline_stages(d.model, d.precision, d.layout, share)
    priced = [tuple(price_stage(st, rates, d.links, d.layout) for st in stage) for stage in stages]
    decoding = all(s.new_tokens == 1 for s in share)
    decode_batch = sum(per_dp(s.sequences, d.layout.dp) for s in share) if decoding else 0.0
    # each stage with its overlapped collectives, its kernels' gaps and its host launches (passcost.stage_seconds)
    costs = []
    for stage in priced:
        # the kernels the era launches (collectives one each), and the host's time for each (one thread for a
        # stage's GPUs where the era says so)
        n = rates.launched(sum(p.stage.count for p in stage if p.collective is None),
                           sum(p.stage.count for p in stage if p.collective is not None))  # fmt: skip
        costs.append(
            PassCost(
                stage,
                # the host: per step, and per sequence of the busiest DP rank (each schedules its own)
                rates.step_overhead_s
                + rates.sequence_overhead_s * per_dp(sum(s.sequences for s in segments), d.layout.dp),
                d.layout.pp,
                m,
                schedule,
                rates.comm_overlap,
                frozenset(rates.overlap_ops),
                # a decode step's sequences on the busiest DP rank (none with prompt tokens), against the batch the
                # era's graphs capture
                n * rates.launch_s(d.layout.stage_gpus, decode_batch),
                n * rates.kernel_overhead_s,
            )
        )
    slowest = max(costs, key=lambda cost: cost.stage_seconds)
    return replace(slowest, stage_times_s=tuple(cost.stage_seconds for cost in costs))


def test_every_builtin_model_and_gpu_has_cases():
    assert {m for m, _, _ in CASES} == set(PRICED)
    assert len(CASES) > 8 * len(PRICED)
    assert all(case in CASES for case in QUICK)  # each quick case is one of the cases
    assert {g for _, g, _ in CASES} <= set(builtin_gpus())


@pytest.mark.parametrize(("model", "gpu", "layout"), CASE_PARAMS)
def test_grid_path_equals_the_stage_by_stage_path(model, gpu, layout):
    d = _deployment(model, gpu, layout)
    for scenario in ("ceiling", "expected"):
        rates = d.rates(scenario)
        bound = d.bound(rates)
        for name, segments, schedule in PASSES:
            point = stage_by_stage(d, rates, segments, schedule)
            assert bound.seconds(segments, schedule=schedule) == pytest.approx(point.seconds, rel=1e-12), name
            # every compiled row, evaluated at the point's features, is the builders' stage at that point
            x = d.compiled.vector(segments)
            for rows, stages in zip(d.compiled.stages, d.compiled.point_stages(x), strict=True):
                for row, stage in zip(rows, stages, strict=True):
                    assert row.stage.name == stage.name and row.stage.count == stage.count
                    assert row.flops(x) == pytest.approx(stage.flops, rel=1e-12, abs=1e-9)
                    assert row.weight_bytes(x) == pytest.approx(stage.weight_bytes, rel=1e-12, abs=1e-9)
                    other = stage.bytes - stage.weight_bytes
                    assert row.other_bytes(x) == pytest.approx(other, rel=1e-12, abs=1e-6 * max(stage.bytes, 1))
                    if row.payload is not None:
                        assert row.payload(x) == pytest.approx(stage.payload_bytes, rel=1e-12, abs=1e-9)
            cost = bound.cost(segments, schedule=schedule)  # what --explain and the breakdown show
            assert cost.seconds == pytest.approx(point.seconds, rel=1e-12)
            assert [p.seconds for p in cost.stages] == pytest.approx([p.seconds for p in point.stages], rel=1e-12)


@pytest.mark.parametrize(("model", "gpu", "layout"), [("llama-3.2-1b", "h100-sxm", {}),
                                                     ("llama-3.1-8b", "a100-80gb-sxm", {"tp": 4}),
                                                     ("llama-3.1-8b", "h100-sxm", {"tp": 2, "pp": 2}),
                                                     ("mixtral-8x7b", "h100-sxm", {"tp": 2, "ep": 2})])  # fmt: skip
def test_grid_path_equals_the_stage_by_stage_path_for_one_host_thread(model, gpu, layout):
    # an eager era whose one host thread launches every GPU's kernels of a stage (llama.cpp): its launches, counted
    # as it launches kernels and paid per GPU of the stage, set some of these passes
    d = _deployment(model, gpu, layout, load_engine("llama.cpp@eager"))
    rates = d.rates("expected")
    assert rates.one_host_thread and rates.launch_s(d.layout.stage_gpus, 1.0) > 0
    bound, floors = d.bound(rates), 0
    for name, segments, schedule in [*PASSES, ("decode, one sequence", [Segment(1, 200, 1)], "steady")]:
        point = stage_by_stage(d, rates, segments, schedule)
        assert bound.seconds(segments, schedule=schedule) == pytest.approx(point.seconds, rel=1e-12), name
        floors += point.launch_bound
    assert floors  # the launches bind somewhere, so the comparison sees them


def _brute_mean(d: Deployment, rates: Rates, batch: float, first: int, last: int) -> float:
    bound = d.bound(rates)
    return sum(bound.seconds([Segment(batch, c, 1)]) for c in range(first, last + 1)) / (last - first + 1)


@pytest.mark.parametrize(
    ("model", "layout", "batch", "first", "last"),
    [
        ("llama-3.1-8b", {}, 7, 1000, 1040),
        ("gemma-2-9b", {}, 9, 4070, 4130),  # the window (4,096) fills inside the range
        ("gemma-2-9b", {"tp": 2, "pp": 3}, 11, 4090, 4100),
        ("mixtral-8x7b", {"tp": 2, "ep": 2}, 33, 0, 40),
        ("qwen3-30b-a3b", {"tp": 2, "dp": 2, "ep": 4}, 5, 100, 160),  # DP attention: 5 sequences split 3 / 2
        ("deepseek-v3", {"tp": 8, "pp": 2, "weights_dtype": "fp8", "kv_dtype": "fp8"}, 64, 0, 70),
        ("llama-3.1-70b", {"tp": 4, "pp": 3}, 3, 1, 30),
        ("llama-4-scout", {"tp": 4}, 5, 8150, 16_420),  # two chunk boundaries (8,192, 16,384): the sawtooth
        ("llama-4-maverick", {"tp": 8, "pp": 2}, 6, 8180, 8200),
        ("qwen3-next-80b-a3b", {"tp": 4}, 7, 0, 40),  # the state is first read at c = 1
        ("qwen3-next-80b-a3b", {"tp": 2, "dp": 2, "ep": 4}, 9, 4000, 4050),
        ("nemotron-h-8b", {"tp": 2, "pp": 3}, 11, 0, 60),
        ("gemma-3-27b", {"tp": 2}, 3, 1000, 1050),  # the window (1,024) fills inside the range
    ],
)
def test_decode_mean_equals_the_sum_of_every_step(model, layout, batch, first, last):
    d = _deployment(model, "h100-sxm", layout)
    for scenario in ("ceiling", "expected"):
        rates = d.rates(scenario)
        brute = _brute_mean(d, rates, batch, first, last)
        # both exact paths: the work of each span priced at its ends (estimate, validate, the fit) and the decode
        # lines of a batch (sweep, the simulator)
        assert d.bound(rates).decode_mean(batch=batch, first=first, last=last) == pytest.approx(brute, rel=1e-12)
        assert DecodeLines(d.bound(rates), batch).mean(first, last) == pytest.approx(brute, rel=1e-12)


def _attention_flip(d: Deployment, rates: Rates, batch: int, first: int, last: int) -> bool:
    """Whether some kernel that reads the cache changes bound between the two ends."""
    ends = [d.bound(rates).cost([Segment(batch, c, 1)], schedule="steady") for c in (first, last)]
    return any(a.bound != b.bound for a, b in zip(ends[0].stages, ends[1].stages, strict=True))


def test_decode_mean_is_exact_where_a_kernel_turns_compute_bound():
    # DeepSeek-V3's absorbed MLA attention on one GPU per DP rank, FP8 cache and compute: 2 x 128 x (2 x 512 + 64)
    # FLOPs per 576-byte latent token is past the H200's FP8 ridge (483 > 412 FLOP/B), while each query's 80 kB
    # of activations holds it memory-bound at short contexts: it turns compute-bound near c = 816
    layout = {"tp": 1, "dp": 8, "ep": 8, "weights_dtype": "fp8", "kv_dtype": "fp8", "compute_dtype": "fp8"}
    d = _deployment("deepseek-v3", "h200", layout)
    rates = d.rates("ceiling")
    first, last = 700, 900
    assert _attention_flip(d, rates, 64, first, last)
    brute = _brute_mean(d, rates, 64, first, last)
    assert DecodeLines(d.bound(rates), 64).mean(first, last) == pytest.approx(brute, rel=1e-12)
    assert d.bound(rates).decode_mean(batch=64, first=first, last=last) == pytest.approx(brute, rel=1e-12)


def test_decode_mean_is_exact_where_the_slowest_pipeline_stage_changes():
    # Llama-3.1-8B in 3 stages (11, 11, 10 layers): the last holds the LM head and is slowest at short contexts;
    # as the KV read grows, a stage with 11 layers takes over
    d = _deployment("llama-3.1-8b", "h100-sxm", {"pp": 3})
    rates = d.rates("ceiling")
    bound, batch = d.bound(rates), 64
    slowest = [bound.slowest(d.compiled.vector([Segment(batch, c, 1)])) for c in (0, 20_000)]
    assert slowest[0] != slowest[1]
    lo, hi = 0, 20_000
    while hi - lo > 1:  # the switch, then a range around it
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if bound.slowest(d.compiled.vector([Segment(batch, mid, 1)])) == slowest[0] else (lo, mid)
    brute = _brute_mean(d, rates, batch, hi - 25, hi + 25)
    assert DecodeLines(bound, batch).mean(hi - 25, hi + 25) == pytest.approx(brute, rel=1e-12)
    assert bound.decode_mean(batch=batch, first=hi - 25, last=hi + 25) == pytest.approx(brute, rel=1e-12)


def test_decode_mean_is_exact_where_every_stage_once_overtakes_the_slowest_m_times():
    # Llama-3.2-1B in 4 stages (4 layers each, the LM head of 263 M parameters on the last), 3 sequences: 3
    # microbatches. At short contexts the last stage serving each microbatch in turn (3 x its time) outlasts a token
    # passing all four; each stage's KV read grows alike, so the sum of four overtakes three of one
    d = _deployment("llama-3.2-1b", "h100-sxm", {"pp": 4})
    batch = 3
    for scenario in ("ceiling", "expected"):
        rates = d.rates(scenario)
        bound = d.bound(rates)

        def every_stage_leads(c: int, bound=bound) -> bool:
            times = bound.stage_seconds(d.compiled.vector([Segment(batch, c, 1)]))
            return sum(times) > batch * max(times)

        lo, hi = 0, 100_000
        assert not every_stage_leads(lo) and every_stage_leads(hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if every_stage_leads(mid) else (mid, hi)
        brute = _brute_mean(d, rates, batch, hi - 25, hi + 25)
        assert DecodeLines(bound, batch).mean(hi - 25, hi + 25) == pytest.approx(brute, rel=1e-12)
        assert bound.decode_mean(batch=batch, first=hi - 25, last=hi + 25) == pytest.approx(brute, rel=1e-12)
        line_s, slope, until = DecodeLines(bound, batch).line(hi - 30)
        assert until <= hi  # the line ends where the other way of counting the pass takes over
        assert line_s + 10 * slope == pytest.approx(bound.seconds([Segment(batch, hi - 20, 1)]), rel=1e-9)


def test_decode_step_at_a_context_is_the_pass_and_its_bound():
    d = _deployment("gemma-2-27b", "h100-sxm", {"tp": 2, "pp": 2})
    rates = d.rates("expected")
    lines = DecodeLines(d.bound(rates), 48)
    for c in (10, 4095, 4096, 30_000, 2500.5):
        cost = d.decode(rates, batch=48, cached=c)
        assert lines.at(c) == (pytest.approx(cost.seconds, rel=1e-12), cost.bound)


_LINE = st.tuples(st.floats(0, 10), st.floats(0, 10))
_VARIANT = st.tuples(st.floats(0, 5), st.lists(st.tuples(_LINE, _LINE), max_size=3))


@PROPERTY
@given(st.lists(st.lists(_VARIANT, min_size=1, max_size=3), min_size=1, max_size=5), st.integers(1, 60),
       st.integers(1, 6), st.booleans())  # fmt: skip
def test_pipeline_sum_equals_the_pass_summed_point_by_point(stages, n, m, fill):
    m = min(m, len(stages))  # a microbatch per stage at most (compiled.microbatches)
    if n == 1:  # one point: each line's first and last value are the same value
        stages = [[(c, [((x[0], x[0]), (y[0], y[0])) for x, y in ks]) for c, ks in v] for v in stages]

    def stage_at(variants, i):
        return max(c + sum(max(at(x, i, n), at(y, i, n)) for x, y in kernels) for c, kernels in variants)

    brute = sum(pipeline_seconds([stage_at(v, i) for v in stages], m, "fill" if fill else "steady") for i in range(n))
    assert pipeline_sum(stages, n, m, fill=fill) == pytest.approx(brute, rel=1e-9, abs=1e-9)


def test_a_product_of_two_features_is_refused():
    with pytest.raises(TypeError, match="not linear"):
        Form.feature(0) * Form.feature(1)
    assert (2 * Form.feature(3) + 5 - Form.feature(3))([0, 0, 0, 7]) == 12


# ---- pipeline stages on different nodes: the hop rides the network (issue 22) -------------------------------


SLOW = Link(kind="ethernet", gb_s=0.1, latency_us=1_000_000, source="test: 0.1 GB/s, 1 s")


def _tpot(layout: dict, network: Link) -> float:
    wl = Workload(batch=8, prompt_tokens=1000, output_tokens=100, **layout)
    d = deployment(load_model("llama-3.1-70b"), load_gpu("h100-sxm"), wl, network)
    return DecodeLines(d.bound(d.rates("ceiling")), 8).mean(1000, 1098)


def test_pipeline_stages_on_two_nodes_send_over_the_network():
    # TP 8 x PP 2 on 8-GPU nodes: stage 0 on node 0, stage 1 on node 1; each step hands 8 x 8192 x 2 B over the NIC
    fast, slow = _tpot({"tp": 8, "pp": 2}, NETWORK), _tpot({"tp": 8, "pp": 2}, SLOW)
    assert slow > fast + 1.0  # a 1 s link latency per hop, every step
    d = deployment(load_model("llama-3.1-70b"), load_gpu("h100-sxm"), Workload(tp=8, pp=2), NETWORK)
    row, rate = d.bound(d.rates("ceiling")).stages[0][-1]  # stage 0 ends with its send to stage 1
    assert row.stage.name == "send to next stage" and isinstance(rate, CollectiveRate)
    assert rate.path.name == "ib-ndr-400" and rate.path.nodes == 2
    # 8 sequences in 2 microbatches: 4 x 8192 hidden x 2 B over 50 GB/s per GPU, plus the NIC's latency
    assert row.payload is not None
    payload = row.payload(d.compiled.vector([Segment(8, 1000, 1)]))
    assert payload == 4 * 8192 * 2
    assert rate.seconds(payload) == pytest.approx(NETWORK.latency_s + payload / NETWORK.bytes_per_s, rel=1e-12)


def test_pipeline_stages_inside_one_node_never_touch_the_network():
    assert _tpot({"tp": 4, "pp": 2}, NETWORK) == _tpot({"tp": 4, "pp": 2}, SLOW)


@pytest.mark.parametrize(
    ("tp", "pp", "per_node", "crossing"),
    [
        (8, 2, 8, [True]),
        (4, 4, 8, [False, True, False]),
        (3, 4, 8, [False, True, True]),  # GPUs 3-5 send to 6-8: GPU 5 -> 8 straddles node 0 / node 1
        (16, 2, 8, [True]),
        (1, 8, 8, [False] * 7),
    ],
)
def test_which_hops_cross_a_node_boundary(tp, pp, per_node, crossing):
    layout = Layout(tp=tp, pp=pp, gpus_per_node=per_node)
    assert [layout.hop_crosses_nodes(i) for i in range(pp - 1)] == crossing


def test_a_hop_across_nodes_without_a_network_is_refused():
    d = deployment(load_model("llama-3.1-70b"), load_gpu("h100-sxm"), Workload(tp=8, pp=2), None)
    with pytest.raises(UsageError, match="send to the next spans 2 nodes.*--network"):
        d.decode(d.rates("ceiling"), batch=1, cached=10)


# ---- properties over generated specs (the strategies of test_properties.py) --------------------------------

segments = st.lists(
    st.builds(
        Segment,
        st.integers(1, 300).map(float) | st.floats(0.5, 300),
        st.integers(0, 50_000).map(float),
        st.integers(1, 4096).map(float),
    ),
    min_size=1,
    max_size=4,
)


def _generated(model: ModelSpec, gpu, tp: int, pp: int) -> Deployment:
    tp = max(d for d in tp_degrees(model, limit=tp))
    return deployment(model, gpu, Workload(tp=tp, pp=min(pp, model.layers)), NETWORK)


@pytest.mark.slow
@PROPERTY
@given(models(), gpus(), segments, st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 3]))
def test_grid_equals_the_point_path_on_generated_specs(model, gpu, segs, tp, pp):
    d = _generated(model, gpu, tp, pp)
    for scenario in ("ceiling", "expected"):
        rates = d.rates(scenario)
        point = stage_by_stage(d, rates, segs, "steady")
        assert d.bound(rates).seconds(segs) == pytest.approx(point.seconds, rel=1e-11)


@pytest.mark.slow
@PROPERTY
@given(models(), gpus(), segments, st.integers(0, 2), st.floats(1.0, 4.0), st.sampled_from([1, 2, 4]))
def test_more_tokens_are_never_cheaper(model, gpu, segs, which, factor, tp):
    # more sequences, more cached tokens or more new tokens in any segment never make a pass faster
    d = _generated(model, gpu, tp, 1)
    grown = list(segs)
    s = grown[0]
    grown[0] = Segment(
        s.sequences * (factor if which == 0 else 1),
        s.cached_tokens * (factor if which == 1 else 1),
        s.new_tokens * (factor if which == 2 else 1),
    )
    for scenario in ("ceiling", "expected"):
        bound = d.bound(d.rates(scenario))
        assert bound.seconds(grown) >= bound.seconds(segs) * (1 - 1e-12)
        assert bound.seconds([*segs, Segment(1, 0, 1)]) >= bound.seconds(segs) * (1 - 1e-12)


@pytest.mark.slow
@PROPERTY
@given(models(), gpus(), st.integers(1, 600), st.integers(0, 20_000), st.integers(0, 40), st.sampled_from([1, 2, 3]))
def test_decode_mean_is_the_mean_of_every_step_on_generated_specs(model, gpu, batch, first, steps, pp):
    d = _generated(model, gpu, 1, pp)
    rates = d.rates("expected")
    brute = _brute_mean(d, rates, batch, first, first + steps)
    assert DecodeLines(d.bound(rates), batch).mean(first, first + steps) == pytest.approx(brute, rel=1e-11)
    assert d.bound(rates).decode_mean(batch=batch, first=first, last=first + steps) == pytest.approx(brute, rel=1e-11)


@pytest.mark.parametrize(
    ("model", "gpu", "layout", "batch", "contexts"),
    [
        ("gemma-2-9b", "h100-sxm", {}, 9, [0.0, 100.25, 4000.0, 4094.5, 4095.0, 4095.5, 4096.0, 9000.75]),
        ("llama-3.1-8b", "h100-sxm", {"pp": 3}, 64, [0.0, 3000.0, 7000.5, 15_000.0]),
        (
            "deepseek-v3",
            "h200",
            {"tp": 1, "dp": 8, "ep": 8, "weights_dtype": "fp8", "kv_dtype": "fp8", "compute_dtype": "fp8"},
            64,
            [700.0, 800.5, 816.0, 850.0],
        ),
    ],  # fmt: skip
)
def test_decode_line_holds_exactly_as_far_as_it_says(model, gpu, layout, batch, contexts):
    d = _deployment(model, gpu, layout)
    rates = d.rates("ceiling")
    bound, lines = d.bound(rates), DecodeLines(d.bound(rates), batch)
    ends = []
    for c in contexts:
        seconds, slope, until = lines.line(c)
        assert until > c - 1e-9
        ends.append(until)
        for j in range(80):
            if c + j >= until:
                break
            step = bound.seconds([Segment(batch, c + j, 1)])
            assert seconds + slope * j == pytest.approx(step, rel=1e-12), (c, j)
        assert lines.at(c)[0] == pytest.approx(bound.seconds([Segment(batch, c, 1)]), rel=1e-12)
    assert min(ends) < max(contexts) + 80  # some line stops at a kink ahead, not at infinity


@pytest.mark.slow
def test_validate_prices_a_row_without_the_rest_of_an_estimate(monkeypatch):
    # validate prints each row's metric from its TTFT and mean TPOT: no memory report, critical batch or breakdown
    from tokcost.cli.validate_cmd import DEFAULT_DATA, load_specs
    from tokcost.engine import compiled, estimate
    from tokcost.validation.data import load_rows
    from tokcost.validation.folds import load_folds
    from tokcost.validation.run import price_rows, shipped_profiles

    def refuse(*args, **kwargs):
        raise AssertionError("validate computed what it does not print")

    for name in ("memory_report", "critical_batch_compute", "critical_batch_kv"):
        monkeypatch.setattr(estimate, name, refuse)
    monkeypatch.setattr(compiled.BoundPass, "cost", refuse)
    rows = load_rows(DEFAULT_DATA)[::10]
    models, gpus = load_specs(rows, str(DEFAULT_DATA))
    results = price_rows(rows, models, gpus, shipped_profiles(), folds=load_folds())
    assert len(results) == len(rows) and all(r.expected > 0 and r.ceiling > 0 for r in results)
    assert all(r.held_out and r.held_out > 0 for r in results if r.used)  # each under its left-out fold


@pytest.mark.parametrize(("model", "pp"), [("gemma-3-12b", 8), ("llama-3.1-8b", 3)])
def test_a_prompt_is_not_split_across_microbatches(model, pp):
    # a step carrying one prompt's chunk beside decodes runs as one microbatch: the prompt passes every stage whole,
    # so adding decodes never makes the step faster than the prompt alone (it priced 3 decodes + a 1,024-token
    # prompt at PP 8 as 4 microbatches of 256 prompt tokens each, 3x faster than the prompt alone)
    d = _deployment(model, "h100-sxm", {"pp": pp})
    for scenario in ("ceiling", "expected"):
        bound = d.bound(d.rates(scenario))
        alone = bound.seconds([Segment(1, 0, 1024)], schedule="fill")
        beside = bound.seconds([Segment(3, 1100, 1), Segment(1, 0, 1024)], schedule="fill")
        assert microbatches(d.layout, [Segment(3, 1100, 1), Segment(1, 0, 1024)]) == 1
        assert beside >= alone
        assert microbatches(d.layout, [Segment(8, 1100, 1)]) == pp  # decodes alone still fill the pipeline
        # prompts count the same packed in one segment or one a segment (the closed form and the simulator)
        packed = [Segment(8, 1100, 1), Segment(2, 0, 256)]
        apart = [Segment(8, 1100, 1), Segment(1, 0, 256), Segment(1, 0, 256)]
        assert microbatches(d.layout, packed) == microbatches(d.layout, apart) == 2
        assert bound.seconds(packed) == pytest.approx(bound.seconds(apart), rel=1e-9)
