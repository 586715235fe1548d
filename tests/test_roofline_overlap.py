"""A kernel hides only part of its shorter roofline side behind its longer under "expected"; the ceiling hides all.

kernel_seconds prices each side with the unhidden share u of the other, so the kernel's time is
max(c, m) + u x min(c, m): at the ridge (c = m) that is (1 + u) x max, far from it almost max. The ceiling keeps
u = 0 and stays a bound.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_properties import PROPERTY

from tokcost.engine.estimate import estimate
from tokcost.engine.roofline import (
    UNHIDDEN_SHARE,
    KernelRate,
    ceiling_rates,
    expected_rates,
    hardware_x_engine,
    kernel_rate,
    kernel_seconds,
)
from tokcost.engine.workload import Workload
from tokcost.hardware.library import load_gpu
from tokcost.models.library import load_model
from tokcost.profiles import IDENTITY

POSITIVE = st.floats(1e-3, 1e15, allow_nan=False, allow_infinity=False)


@PROPERTY
@given(POSITIVE, POSITIVE, POSITIVE, st.floats(0.0, 0.99))
def test_the_larger_side_is_max_plus_the_unhidden_share_of_min(flops, weights, other, u):
    rate = KernelRate(1e14, 2e12, 3e12, u)
    c, m = flops / 1e14, weights / 2e12 + other / 3e12
    compute_s, memory_s = kernel_seconds(flops, weights, other, rate)
    assert max(compute_s, memory_s) == pytest.approx(max(c, m) + u * min(c, m), rel=1e-12)
    assert (compute_s > memory_s) == (c > m)  # the bound never changes side
    assert kernel_seconds(flops, weights, other, KernelRate(1e14, 2e12, 3e12)) == (c, m)


def test_a_kernel_at_the_ridge_takes_one_plus_u_times_either_side():
    # 1 TFLOP at 100 TFLOP/s and 20 GB at 2 TB/s: 10 ms each; u = 0.5 gives 15 ms, the ceiling 10 ms
    for u, want in ((0.0, 0.010), (0.5, 0.015), (1.0, 0.020)):
        assert max(kernel_seconds(1e12, 20e9, 0.0, KernelRate(1e14, 2e12, 2e12, u))) == pytest.approx(want)


def test_ceiling_hides_everything_and_expected_carries_the_shipped_share():
    gpu = load_gpu("h100-sxm")
    assert ceiling_rates(gpu, "bf16").unhidden == 0.0
    assert expected_rates(gpu, "bf16").unhidden == UNHIDDEN_SHARE > 0
    assert hardware_x_engine(gpu, "bf16", IDENTITY, unhidden=0.0).unhidden == 0.0
    assert kernel_rate("matmul", "bf16", expected_rates(gpu, "bf16")).unhidden == UNHIDDEN_SHARE


def test_prefill_near_the_ridge_costs_more_than_far_from_it():
    # Llama-3.1-8B on an H100: a 256-token prefill sits near the bf16 ridge (about 295 FLOP/B), so its matmuls pay
    # almost u of their shorter side; at batch 1 decode the compute side is ~1/300 of the memory side: no change
    model, gpu = load_model("llama-3.1-8b"), load_gpu("h100-sxm")
    e = estimate(model, gpu, Workload(prompt_tokens=256, output_tokens=8))
    zero = hardware_x_engine(gpu, "bf16", IDENTITY, unhidden=0.0)
    shipped = hardware_x_engine(gpu, "bf16", IDENTITY)
    d = e.deployment
    prefill = [d.prefill(r, batch=1, prompt=256, cached=0).seconds for r in (zero, shipped)]
    decode = [d.decode(r, batch=1, cached=100).seconds for r in (zero, shipped)]
    assert prefill[1] / prefill[0] > 1 + 0.5 * UNHIDDEN_SHARE
    assert decode[1] / decode[0] < 1.01
