"""Kernels per stage row: an engine whose graph runs each op as its own kernel (llama.cpp's ggml graph, about 30
kernels a Llama layer where tokcost prices 7 stage rows) pays the per-kernel GPU gap, and in eager eras the host's
launch, on every one of them (EraFields.kernels_per_row). Fused engines launch about one kernel per row: 1."""

from __future__ import annotations

import re

import pytest

from tokcost import Workload, load_gpu, load_model
from tokcost.cli.app import main
from tokcost.engine.estimate import estimate
from tokcost.engine.journey import journey
from tokcost.engine.roofline import expected_rates
from tokcost.eras import builtin_files
from tokcost.profiles import load_engine

LLAMA7 = load_model("llama-2-7b")
GPU = load_gpu("h100-pcie")
WORK = Workload(prompt_tokens=512, output_tokens=64, weights_dtype="q4_k_m")


@pytest.mark.parametrize("era", ["eager", "graphs"])
def test_llama_cpp_eras_state_their_count_with_its_source(era):
    profile = builtin_files()["llama.cpp"].profile(era)
    assert profile.kernels_per_row == pytest.approx(4.3)
    assert "graph nodes  = 1030" in profile.kernels_per_row_source  # 32 nodes a layer, 32 layers


@pytest.mark.parametrize("engine", ["generic", "vllm", "vllm@0.6", "sglang", "tensorrt-llm", "torch-compile"])
def test_fused_engines_launch_one_kernel_per_row(engine):
    assert load_engine(engine).kernels_per_row == 1.0


def test_the_rates_count_kernel_rows_by_the_era_and_collectives_once():
    engine = load_engine("llama.cpp@eager")
    rates = expected_rates(GPU, "fp16", engine)
    assert rates.kernels_per_row == pytest.approx(4.3)
    assert rates.launched(10, 0) == pytest.approx(43.0)
    assert rates.launched(10, 3) == pytest.approx(46.0)  # an all-reduce is one kernel, whatever the engine's graph


def _decode(per_row: float):
    engine = load_engine("llama.cpp").model_copy(update={"kernels_per_row": per_row})
    return estimate(LLAMA7, GPU, WORK, engine=engine)


def test_the_decode_step_pays_every_row_s_kernels_gaps():
    one, many = _decode(1.0), _decode(4.3)
    step_one, step_many = one.expected.decode_step, many.expected.decode_step
    rows = sum(p.stage.count for p in step_one.stages)
    gap = load_engine("llama.cpp").kernel_overhead_us * 1e-6
    assert step_one.gap_s == pytest.approx(rows * gap)
    assert step_many.gap_s == pytest.approx(rows * 4.3 * gap)
    # by hand: graphs era, batch 1, no launch floor: the step grows by the extra kernels' gaps and nothing else
    assert step_many.seconds - step_one.seconds == pytest.approx(rows * 3.3 * gap, rel=1e-6)
    assert many.expected.tpot_s > one.expected.tpot_s


def test_the_journey_counts_kernels_not_rows():
    e = _decode(4.3)
    rows = sum(p.stage.count for p in e.expected.decode_step.stages)
    gaps = [r for r in journey(e).decode or [] if r.name == "gaps between kernels"]
    assert len(gaps) == 1 and gaps[0].count == round(rows * 4.3)
    assert gaps[0].expected_s == pytest.approx(e.expected.decode_step.gap_s)


def test_an_eager_era_s_launch_floor_counts_every_kernel():
    engine = load_engine("llama.cpp@eager").model_copy(update={"launch_overhead_us": 30.0})
    e = estimate(LLAMA7, GPU, WORK, engine=engine)
    step = e.expected.decode_step
    rows = sum(p.stage.count for p in step.stages)
    assert step.launch_s == pytest.approx(rows * 4.3 * 30e-6)
    # 30 us per launch x ~980 kernels is 29 ms: the host's launches set the step, well past the GPU's work
    assert step.seconds >= step.launch_s


def test_explain_names_the_count_and_its_source(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "2000")
    code = main(["estimate", "-m", "llama-2-7b", "-g", "h100-pcie", "--engine", "llama.cpp", "--weights", "q4_k_m",
                 "--explain"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    line = next(x for x in out.splitlines() if "GPU gap per kernel" in x)
    assert re.search(
        r"\(both paid on 4\.3 kernels per kernel row, one per collective: llama\.cpp's ggml graph "
        r"launches about 30 kernels a Llama layer",
        line,
    )


def test_collectives_count_once_under_tensor_parallelism():
    work = Workload(prompt_tokens=512, output_tokens=64, weights_dtype="q4_k_m", tp=2)
    for per_row in (1.0, 4.3):
        engine = load_engine("llama.cpp@eager").model_copy(update={"kernels_per_row": per_row})
        step = estimate(LLAMA7, GPU, work, engine=engine).expected.decode_step
        kernels = sum(p.stage.count for p in step.stages if p.collective is None)
        collectives = sum(p.stage.count for p in step.stages if p.collective is not None)
        # an all-reduce after attention and after the MLP, every layer, and the logits gathered once for sampling
        assert collectives == 2 * LLAMA7.layers + 1
        gap = engine.kernel_overhead_us * 1e-6
        assert step.gap_s == pytest.approx((kernels * per_row + collectives) * gap)
