"""Passes past the batch an era's CUDA graphs capture run eager: SGLang captures decode batches up to
`--cuda-graph-max-bs` (32 below TP 4 on a 48 GB GPU, 256 on an 80 GB one), and a larger pass launches every kernel
from the host. The era states that launch cost (`eager_launch_us`, from published pairs of one decode with and
without graphs) and every pricing path reads it through Rates.launch_s: a floor on the pass, as in eager eras."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from test_grid import stage_by_stage

from tokcost import Workload, load_gpu, load_model
from tokcost.engine.compiled import mean_step_seconds
from tokcost.engine.decode import DecodeLines
from tokcost.engine.estimate import deployment, estimate
from tokcost.engine.features import Segment
from tokcost.engine.work import pass_sum
from tokcost.profiles import EngineProfile, load_engine
from tokcost.serving.layout import Layout
from tokcost.serving.steps import Deployment as ServingDeployment
from tokcost.serving.steps import Steps

SGLANG = load_engine("sglang")
SMALL = load_model("llama-3.2-1b")
L40S, H100 = load_gpu("l40s"), load_gpu("h100-sxm")


def _rows(d) -> float:
    """Kernels one GPU's pass launches: the compiled rows (SGLang launches one per row) and collectives."""
    rows = [row for stage in d.compiled.stages for row in stage]
    rates = d.rates("expected")
    return rates.launched(sum(r.stage.count for r in rows if r.payload is None),
                          sum(r.stage.count for r in rows if r.payload is not None))  # fmt: skip


def test_the_cap_is_the_era_s_on_this_gpu_and_tp_and_the_cost_its_stated_figure():
    assert SGLANG.eager_launch_us == 27.0 and "PRs 1401" in SGLANG.eager_launch_source
    for gpu, tp, cap in [(L40S, 1, 32), (L40S, 4, 160), (H100, 1, 256), (H100, 4, 512)]:
        rates = deployment(SMALL if tp == 1 else load_model("llama-3.1-8b"), gpu, Workload(tp=tp),
                           engine=SGLANG).rates("expected")  # fmt: skip
        assert rates.graph_cap_tokens == cap
        # up to the cap a graph replay launches every kernel: no host time per kernel; one token past it, 27 us
        assert rates.launch_s(1, cap) == 0.0
        assert rates.launch_s(1, cap + 1) == pytest.approx(27e-6)
    # the ceiling and an era that states no eager cost price no launches at any batch
    d = deployment(SMALL, L40S, Workload(), engine=load_engine("vllm"))
    assert d.rates("ceiling").launch_s(1, 1e6) == 0.0 and d.rates("expected").launch_s(1, 1e6) == 0.0


def test_a_decode_step_past_the_cap_is_no_faster_than_its_launches_by_hand():
    # Llama-3.2-1B on one H100 under SGLang: 256 sequences replay a graph; 257 launch 116 kernels (16 layers x 7
    # rows + embedding, final norm, LM head, sampling's gather) at 27 us each = 3.13 ms, a floor on the step
    wl = Workload(batch=257, prompt_tokens=64, output_tokens=64)
    past = estimate(SMALL, H100, wl, engine=SGLANG)
    below = estimate(SMALL, H100, wl.model_copy(update={"batch": 256}), engine=SGLANG)
    step, under = past.expected.decode_step, below.expected.decode_step
    assert _rows(past.deployment) == 116
    assert under.launch_s == 0.0
    assert step.launch_s == pytest.approx(116 * 27e-6)
    assert step.launch_bound and past.expected.decode_bound == "host"  # the GPU's step is shorter at this context
    assert step.seconds == pytest.approx(step.launch_s + step.overhead_s)
    assert past.expected.tpot_s > below.expected.tpot_s
    # the ceiling has no host: one more sequence costs it almost nothing
    assert past.ceiling.tpot_s == pytest.approx(below.ceiling.tpot_s, rel=0.01)


@pytest.mark.parametrize(("gpu", "layout", "batch"), [("l40s", {}, 33), ("h100-sxm", {}, 300),
                                                      ("h100-sxm", {"tp": 2, "pp": 2}, 700)])  # fmt: skip
def test_every_pricing_path_reads_the_same_floor(gpu, layout, batch):
    d = deployment(SMALL, load_gpu(gpu), Workload(**layout), engine=SGLANG)
    rates = d.rates("expected")
    bound = d.bound(rates)
    floors = 0
    for segments, schedule in [([Segment(batch, 100, 1)], "steady"), ([Segment(2, 0, 400)], "fill"),
                               ([Segment(3, 50, 1)], "steady")]:  # fmt: skip
        point = stage_by_stage(d, rates, segments, schedule)  # the builders at the point, stage by stage
        assert bound.seconds(segments, schedule=schedule) == pytest.approx(point.seconds, rel=1e-12)
        work = d.compiled.work(segments)  # the grid's path, as sweeps and the fit price whole grids
        assert pass_sum(work, bound.table, schedule) + point.overhead_s == pytest.approx(point.seconds, rel=1e-12)
        floors += point.launch_s > 0
    assert floors == 1  # the decode past the cap; 3 sequences replay a graph, and prefill is not priced so
    # the decode lines (estimate's TPOT) and the grid's decode spans
    seconds, _ = DecodeLines(bound, batch).at(100)
    assert seconds == pytest.approx(bound.seconds([Segment(batch, 100, 1)]), rel=1e-9)
    spans = d.compiled.decode_work(batch, 100, 120)
    brute = sum(bound.seconds([Segment(batch, c, 1)]) for c in range(100, 121)) / 21
    assert mean_step_seconds(spans, bound.table, overhead_s=rates.host_s(batch, d.layout.dp)) == pytest.approx(
        brute, rel=1e-9
    )


def test_plan_s_step_curve_holds_the_jump_at_the_cap():
    # the serving curve in the decode batch: exact on both sides of the last captured batch
    dep = ServingDeployment(L40S, Layout(tp=1), engine=SGLANG)
    steps = Steps(SMALL, dep, "expected", decode_context=300.0, batch_limit=200.0)
    curve = steps.curve(())
    for b in (31.0, 32.0, 32.001, 33.0, 100.0, 200.0):
        assert curve(b) == pytest.approx(steps.pass_cost(b, ()).seconds, rel=1e-6), b
    assert curve(33) > curve(32)  # the step rises past the cap
    assert steps.pass_cost(33, ()).launch_s > 0 == steps.pass_cost(32, ()).launch_s
    # a step that carries prompt tokens is not priced so, at any batch (SGLang's piecewise prefill graphs)
    mixed = (Segment(1, 0, 10),)
    assert all(steps.pass_cost(b, mixed).launch_s == 0 for b in (10.0, 100.0))


def test_the_note_says_the_eager_steps_are_priced():
    note = SGLANG.graph_note(64, gpu_name=L40S.name, memory_bytes=L40S.memory_bytes, tp=1)
    assert note is not None and "priced as 27 us per launched kernel" in note and "--cuda-graph-max-bs" in note
    assert SGLANG.graph_note(32, gpu_name=L40S.name, memory_bytes=L40S.memory_bytes, tp=1) is None
    v1 = load_engine("vllm")
    note = v1.graph_note(600, gpu_name=H100.name, memory_bytes=H100.memory_bytes, tp=1)
    assert note is not None and "do not price" in note  # V1 states no eager cost: said, not priced


def test_an_eager_cost_names_its_source():
    with pytest.raises(ValidationError, match="eager_launch_source"):
        EngineProfile(name="mine", source="test", eager_launch_us=10.0)
