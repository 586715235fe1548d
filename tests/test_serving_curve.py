"""Step-time curves reproduce engine.step_cost from a handful of calls (serving/curve.py)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tiers import examples

from tokcost.engine.step import Segment
from tokcost.hardware.library import load_gpu
from tokcost.models.library import load_model
from tokcost.serving.curve import INTERPOLATION_TOLERANCE, build_curve
from tokcost.serving.layout import Layout
from tokcost.serving.steps import Deployment, Steps

SHAPES = {
    "decode only": (),
    "chunk of 512 at offset 1,024": (Segment(1, 1024, 512),),
    "two prompts packed": (Segment(4, 0, 2048),),
}


def _steps(model: str, gpu: str, tp: int, weights: str | None = None, scenario: str = "expected") -> Steps:
    return Steps(load_model(model), Deployment(load_gpu(gpu), Layout(tp), weights), scenario, 2200.0, 600.0)


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
@pytest.mark.parametrize(
    "model, gpu, tp, weights, scenario",
    [
        ("llama-3.1-70b", "h100-sxm", 4, "fp8", "expected"),
        ("llama-3.1-8b", "l40s", 1, None, "ceiling"),
        ("qwen2.5-7b", "a100-80gb-sxm", 2, "int4", "expected"),
    ],
)
def test_dense_curve_equals_direct_engine_calls(model, gpu, tp, weights, scenario, shape):
    steps = _steps(model, gpu, tp, weights, scenario)
    calls = []

    def price(b):
        calls.append(b)
        return steps.pass_cost(b, shape)

    curve = build_curve(price, 0.0, 600.0, linear=True)
    # dense: every term is max of two lines in b, so the curve is exact between its breakpoints
    for b in [0.0, 0.5, 1, 3, 17.25, 64, 100, 255.5, 299, 301, 480, 599.9]:
        assert curve(b) == pytest.approx(price(b).seconds, rel=1e-12)
    assert len(curve.xs) <= 2 + 3 * 2  # the ends plus at most one flip per term (weights, attention)


def test_moe_curve_within_tolerance_of_engine():
    steps = _steps("mixtral-8x7b", "h100-sxm", 2)
    curve = build_curve(lambda b: steps.pass_cost(b, ()), 0.0, 400.0, linear=False)
    worst = max(abs(curve(b) / steps.pass_cost(b, ()).seconds - 1) for b in [x * 0.37 for x in range(1, 1080)])
    # each accepted piece's midpoint lies within the tolerance of its chord; elsewhere the error is no larger
    # than a few tenths over it (the expert count E (1 - (1 - k/E)^b) is smooth and concave)
    assert worst < 1.5 * INTERPOLATION_TOLERANCE
    assert len(curve.xs) < 80


def test_slope_is_the_step_per_extra_sequence():
    steps = _steps("llama-3.1-8b", "h100-sxm", 1)
    curve = build_curve(lambda b: steps.pass_cost(b, ()), 0.0, 600.0, linear=True)
    direct = steps.pass_cost(11, ()).seconds - steps.pass_cost(10, ()).seconds
    assert curve.slope(10.5) == pytest.approx(direct, rel=1e-9)


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    chunk=st.integers(1, 16384),
    offset=st.integers(0, 100_000),
    context=st.floats(1, 200_000),
    b=st.floats(0, 2000),
    tp=st.sampled_from([1, 2, 4, 8]),
)
def test_any_dense_shape_interpolates_exactly(chunk, offset, context, b, tp):
    steps = Steps(load_model("llama-3.1-70b"), Deployment(load_gpu("h200"), Layout(tp)), "expected", context, 2000.0)
    shape = (Segment(1, offset, chunk),)
    curve = build_curve(lambda x: steps.pass_cost(x, shape), 0.0, 2000.0, linear=True)
    assert curve(b) == pytest.approx(steps.pass_cost(b, shape).seconds, rel=1e-9)


def test_below_pp_sequences_the_decode_curve_is_the_chord_between_whole_batches():
    # Gemma-3-12B in 8 stages: b whole sequences run as min(8, b) microbatches, so the step jumps where another
    # whole microbatch forms (7.99 sequences: 7 microbatches; 8: eight, the last stage 8 times). A mean batch
    # between two whole ones steps as their mixture: the curve is the chord between them, then the engine above
    steps = Steps(load_model("gemma-3-12b"), Deployment(load_gpu("h100-sxm"), Layout(1, 8)), "expected", 1100.0, 256.0)
    curve = steps.curve(())
    for k in range(1, 8):
        lo, hi = steps.pass_cost(k, ()).seconds, steps.pass_cost(k + 1, ()).seconds
        assert curve(k + 0.25) == pytest.approx(0.75 * lo + 0.25 * hi, rel=1e-12)
    assert steps.pass_cost(7.99, ()).seconds < 0.9 * steps.pass_cost(8, ()).seconds  # the jump the chord bridges
    for b in (8, 9.5, 40.0):
        assert curve(b) == pytest.approx(steps.pass_cost(b, ()).seconds, rel=2 * INTERPOLATION_TOLERANCE)
