"""Under "expected" a kernel hides only part of its shorter roofline side behind its longer, and an attention
kernel takes a fixed time whatever its work; the ceiling hides all and has no fixed time.

kernel_seconds prices each side with the unhidden share u of the other, so the kernel's time is
max(c, m) + u x min(c, m): at the ridge (c = m) that is (1 + u) x max, far from it almost max. The ceiling keeps
u = 0 and stays a bound. Published decode-attention microbenchmarks time a kernel as an intercept plus its KV
stream: each attention kernel (paged GQA / MHA / MQA, MLA) adds ATTENTION_FLOOR_S to both of its sides, once per
occurrence; the per-token slopes of the closed-form sums over contexts do not carry it (their exactness is checked
in test_grid and test_engine_kinds).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_properties import PROPERTY

from tokcost.engine.estimate import estimate
from tokcost.engine.roofline import (
    ATTENTION_FLOOR_S,
    UNHIDDEN_SHARE,
    KernelRate,
    ceiling_rates,
    expected_rates,
    hardware_x_engine,
    kernel_rate,
    kernel_seconds,
    kernel_slopes,
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


def test_only_attention_kernels_carry_the_floor_and_only_under_expected():
    gpu = load_gpu("h100-sxm")
    shipped = expected_rates(gpu, "bf16")
    assert 5e-6 <= ATTENTION_FLOOR_S <= 20e-6  # the published intercepts: 8-17 us on H100 and B200
    assert kernel_rate("attention", "bf16", shipped).floor_s == ATTENTION_FLOOR_S
    assert kernel_rate("attention_mla", "bf16", shipped).floor_s == ATTENTION_FLOOR_S
    assert kernel_rate("matmul", "bf16", shipped).floor_s == 0.0
    assert kernel_rate("attention", "bf16", ceiling_rates(gpu, "bf16")).floor_s == 0.0


def test_the_floor_adds_to_each_side_once_and_never_to_a_slope():
    rate = KernelRate(1e14, 2e12, 2e12, 0.5, 10e-6)
    c, m = 1e9 / 1e14, 4e6 / 2e12  # 10 us of math, 2 us of bytes: u = 0.5 adds 1 us to the larger side
    assert kernel_seconds(1e9, 4e6, 0.0, rate) == pytest.approx((c + 0.5 * m + 10e-6, m + 0.5 * c + 10e-6))
    assert kernel_slopes(1e9, 4e6, 0.0, rate) == pytest.approx((c + 0.5 * m, m + 0.5 * c))
    assert max(kernel_seconds(1e9, 4e6, 0.0, rate)) == pytest.approx(21e-6)


@pytest.mark.parametrize(("name", "layers"), [("llama-3.1-8b", 32), ("llama-3.1-70b", 80)])
def test_a_decode_step_pays_one_floor_per_layer_by_hand(name, layers):
    # one attention kernel per layer and step: Llama-3.1-8B's 32 layers add 32 floors (320 us at 10 us), whatever
    # the batch or the context, and a prefill pass the same
    model, gpu = load_model(name), load_gpu("h100-sxm")
    assert model.layers == layers
    d = estimate(model, gpu, Workload(prompt_tokens=512, output_tokens=8, tp=1 if layers == 32 else 4)).deployment
    none = hardware_x_engine(gpu, "bf16", IDENTITY, attention_floor_s=0.0)
    shipped = hardware_x_engine(gpu, "bf16", IDENTITY)
    for batch, cached in ((1, 100), (64, 2000)):
        step = [d.decode(r, batch=batch, cached=cached).seconds for r in (none, shipped)]
        assert step[1] - step[0] == pytest.approx(layers * ATTENTION_FLOOR_S, rel=1e-9)
    prefill = [d.prefill(r, batch=1, prompt=512, cached=0).seconds for r in (none, shipped)]
    assert prefill[1] - prefill[0] == pytest.approx(layers * ATTENTION_FLOOR_S, rel=1e-9)
    ceiling = ceiling_rates(gpu, "bf16")
    assert all(p.floor_s == 0 for p in d.decode(ceiling, batch=1, cached=100).stages if p.collective is None)


def _decode(model: str, gpu: str, tp: int, batch: int = 1, prompt: int = 1024):
    return estimate(load_model(model), load_gpu(gpu),
                    Workload(batch=batch, prompt_tokens=prompt, output_tokens=128, tp=tp))  # fmt: skip


def test_the_bottleneck_sentence_names_what_the_overlapped_step_waits_on():
    from tokcost.engine.report import bottleneck

    # 8B on 8 L40S, 8 sequences at 16K: the all-reduces (PCIe) take longer than the weight stream or the KV stream
    # alone, but run wholly beside the two together, so the kernels set the step and the KV read is the largest
    e = _decode("llama-3.1-8b", "l40s", 8, batch=8, prompt=16384)
    step = e.ceiling.decode_step
    comm, weights, kv = (step.part(n).seconds for n in ("communication", "weights", "attention"))
    assert weights < kv < comm < weights + kv and comm == pytest.approx(step.hidden_pass_s)
    assert bottleneck(e) == (f"decode is memory-bound: {kv / step.seconds:.0%} of each step is moving "
                             f"{step.part('attention').bytes / 1e9:.2f} GB through its attention (the KV cache and "
                             "their activations)")  # fmt: skip
    # 1B on 8 L40S: the collectives outlast the kernels beside them, so they set the step
    e = _decode("llama-3.2-1b", "l40s", 8)
    step = e.ceiling.decode_step
    assert step.bound == "interconnect" and step.part("communication").seconds > step.part("weights").seconds
    assert bottleneck(e).startswith("decode is interconnect-bound: 100% of each step is collectives moving")


@pytest.mark.parametrize(
    ("model", "gpu", "gpus", "batch", "prompt"),
    [
        ("deepseek-v3", "h200", 8, 32, 4096),
        ("kimi-k2", "b200", 8, 16, 1024),
        ("llama-3.1-70b", "h100-sxm", 8, 64, 2048),
        ("llama-3.1-70b", "h100-pcie", 8, 64, 2048),  # PCIe all-reduces outlast the decode step's kernels
    ],
)
def test_a_pass_is_bound_by_what_still_shows_after_the_overlap(model, gpu, gpus, batch, prompt):
    # The ceiling hides every collective behind the kernels (time = max(kernels, collectives)): a collective that
    # is hidden whole cannot be what bounds the pass, and the label follows the larger of the visible parts.
    est = estimate(load_model(model), load_gpu(gpu), Workload(batch=batch, prompt_tokens=prompt, gpus=gpus))
    seen = set()
    for p in filter(None, (est.ceiling.prefill, est.ceiling.decode_step)):
        kernels, serial, overlapped = p.parts_seconds
        memory = sum(s.seconds for s in p.stages if s.collective is None and s.bound == "memory")
        compute = sum(s.seconds for s in p.stages if s.collective is None and s.bound == "compute")
        if overlapped <= kernels:
            visible = {"memory": memory, "compute": compute, "interconnect": serial}
        else:  # the kernels hide behind the collectives
            visible = {"memory": 0.0, "compute": 0.0, "interconnect": serial + overlapped}
        assert p.overlap == 1.0
        assert p.bound == max(visible, key=lambda k: visible[k])
        seen.add(overlapped > kernels)
    if gpu == "h100-pcie":
        assert True in seen  # its decode step: the branch where the kernels hide behind the collectives


@pytest.mark.parametrize(
    ("model", "gpu", "workload", "network", "engine"),
    [
        ("deepseek-v3", "h200", {"gpus": 16, "tp": 1, "ep": 16, "dp": 16}, "ib-ndr-400", "sglang"),
        ("llama-3.1-70b", "h100-pcie", {"gpus": 8}, None, None),  # PCIe all-reduces outlast the kernels
        ("llama-3.1-70b", "h100-sxm", {"gpus": 8}, None, "tensorrt-llm"),
    ],
)
def test_sweep_and_estimate_name_one_decode_bound(model, gpu, workload, network, engine):
    # both read the overlap's visible share (passcost.visible_bound); the sweep's lines had counted every collective
    import tokcost

    base = {"prompt_tokens": 1024, "output_tokens": 256, **workload}
    for batch in (1, 64):
        wl = tokcost.Workload(**base, batch=batch)
        est = tokcost.estimate(model=model, gpu=gpu, workload=wl, network=network, engine=engine)
        (point,) = tokcost.sweep(model=model, gpu=gpu, batches=[batch], workload=tokcost.Workload(**base),
                                 network=network, engine=engine).points  # fmt: skip
        assert point.decode_bound == est.to_dict()["expected"]["decode_bound"]
