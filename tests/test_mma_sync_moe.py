"""TensorRT-LLM 0.9's MoE plugin runs its experts in CUTLASS's Sm80 grouped GEMM on Hopper too (mma.sync, 16-bit
activations only: no FP8 runner until 0.10). The share such a kernel reaches of a Hopper GPU's own grouped GEMM is
the GPU's (`sustained.mma_sync_gemm`, measured on an H100: tgale96/grouped_gemm PR 37), the kernel class is the era's
(`moe_gemm_kernel`); it moves routed experts' compute side alone, and the ceiling keeps the GPU's own kernels."""

from __future__ import annotations

import re
import statistics

import pytest

from tokcost import Workload, estimate, load_gpu, load_model
from tokcost.engine.roofline import expected_rates, kernel_rate, mma_sync_share
from tokcost.profiles import load_engine

MIXTRAL = load_model("mixtral-8x7b")
HOPPER = ("h100-sxm", "h200", "h100-pcie", "h100-nvl")
# CUTLASS Sm80 grouped GEMM against its Sm90 cooperative one on an H100, TFLOP/s at three routing skews (PR 37)
SM80_TFLOPS, SM90_TFLOPS = (116.9, 109.2, 113.2), (160.5, 151.5, 154.3)


@pytest.mark.parametrize("gpu", HOPPER)
def test_hopper_states_the_share_with_its_basis(gpu):
    figure = load_gpu(gpu).hardware.mma_sync_gemm
    ratios = [a / b for a, b in zip(SM80_TFLOPS, SM90_TFLOPS, strict=True)]
    assert figure is not None and figure.fraction == pytest.approx(statistics.mean(ratios), abs=0.005)
    assert max(ratios) - min(ratios) <= figure.uncertainty  # the three skews lie inside the stated spread
    assert figure.basis == ("measured" if gpu == "h100-sxm" else "anchor")
    assert "grouped_gemm PR 37" in figure.source


@pytest.mark.parametrize("gpu", ["a100-80gb-sxm", "l40s", "mi300x", "b200"])
def test_gpus_whose_own_kernels_are_of_that_class_or_unmeasured_take_none(gpu):
    assert load_gpu(gpu).hardware.mma_sync_gemm is None
    assert mma_sync_share(load_gpu(gpu), load_engine("tensorrt-llm@0.9")) == 1.0


@pytest.mark.parametrize(("engine", "share"), [("tensorrt-llm@0.9", 0.73), ("tensorrt-llm@0.10", 1.0),
                                               ("tensorrt-llm", 1.0), ("vllm", 1.0), ("generic", 1.0)])  # fmt: skip
def test_the_share_follows_the_era_s_kernel_class(engine, share):
    assert mma_sync_share(load_gpu("h100-sxm"), load_engine(engine)) == pytest.approx(share)


OLD = load_engine("tensorrt-llm@0.9")
NATIVE = OLD.model_copy(update={"moe_gemm_kernel": "native"})  # the same era with the GPU's own grouped GEMM


def _both(gpu: str, dtype: str):
    """The era's expected rates with its Sm80 grouped GEMM and with a native one, on one GPU at one compute dtype."""
    return expected_rates(load_gpu(gpu), dtype, OLD), expected_rates(load_gpu(gpu), dtype, NATIVE)


def test_fp8_experts_multiply_at_16_bits_times_the_share_and_stream_as_stored():
    a, b = _both("h100-sxm", "fp8")
    slow, fast = kernel_rate("experts", "fp8", a), kernel_rate("experts", "fp8", b)
    k = OLD.kernels
    # by hand: the 16-bit rate (bf16 peak x its GEMM share) x the era's GEMM and MoE shares x 0.73
    assert slow.flops_per_s == pytest.approx(a.float16_flops_per_s * k.compute.gemm * k.compute.moe * 0.73)
    # native: the FP8 rate, twice the 16-bit peak on an H100, at the FP8 GEMM share
    assert fast.flops_per_s == pytest.approx(b.flops_per_s * k.compute.gemm * k.compute.moe)
    assert fast.flops_per_s > 2 * slow.flops_per_s
    # the 8-bit weights stream as the native class streams them: the kernel moves the compute side alone
    assert (
        slow.weight_bytes_per_s
        == fast.weight_bytes_per_s
        == pytest.approx(a.bytes_per_s * k.memory.gemv * k.memory.moe)
    )
    # dense matmuls and attention keep the era's FP8 path
    assert kernel_rate("matmul", "fp8", a) == kernel_rate("matmul", "fp8", b)
    assert kernel_rate("attention", "fp8", a) == kernel_rate("attention", "fp8", b)


@pytest.mark.parametrize("fmt", ["fp8", "fp8-block", "int8", "int4", "q4_k_m"])
@pytest.mark.parametrize("dtype", ["fp8", "int8"])
def test_every_expert_format_streams_in_its_native_class(fmt, dtype):
    # the older kernel changes the experts' multiply, never how their weights stream (block-scaled FP8 in its own
    # kernel, integer formats dequantized, plain FP8 as a GEMV)
    a, b = _both("h100-sxm", dtype)
    assert kernel_rate("experts", fmt, a).weight_bytes_per_s == kernel_rate("experts", fmt, b).weight_bytes_per_s


def test_decode_of_a_small_batch_is_no_faster_under_the_older_kernel():
    # a memory-bound step streams the same bytes at the same rate: the older kernel never speeds anything up
    for batch in (1, 8):
        slow, fast = _mixtral(OLD, 128, batch=batch), _mixtral(NATIVE, 128, batch=batch)
        assert slow.expected.tpot_s >= fast.expected.tpot_s
    deepseek = load_model("deepseek-v3")  # block-scaled FP8 experts stream in their own kernel under either class
    tpot = [estimate(model=deepseek, gpu="h200", engine=e, workload=Workload(
        batch=8, prompt_tokens=128, output_tokens=16, tp=8, weights_dtype="fp8-block")).expected.tpot_s
        for e in (OLD, NATIVE)]  # fmt: skip
    assert tpot[0] >= tpot[1]


def test_sixteen_bit_experts_take_the_share_alone():
    # the case the share was measured on: bf16 experts in an Sm80 against an Sm90 grouped GEMM
    a, b = _both("h100-sxm", "bf16")
    slow, fast = kernel_rate("experts", "bf16", a), kernel_rate("experts", "bf16", b)
    assert slow.flops_per_s == pytest.approx(0.73 * fast.flops_per_s)
    assert slow.weight_bytes_per_s == fast.weight_bytes_per_s


def test_without_the_gpu_s_figure_fp8_experts_still_multiply_at_16_bits():
    # an L40S states no share for the older kernel (its own kernels are of that generation), but the 0.9 kernel
    # still takes 16-bit activations only
    a = expected_rates(load_gpu("l40s"), "fp8", OLD)
    k = OLD.kernels
    rate = kernel_rate("experts", "fp8", a)
    assert rate.flops_per_s == pytest.approx(a.float16_flops_per_s * k.compute.gemm * k.compute.moe)
    assert kernel_rate("matmul", "fp8", a).flops_per_s > 1.5 * rate.flops_per_s


def _mixtral(engine, prompt: int, gpu: str = "h100-sxm", batch: int = 1):
    return estimate(model=MIXTRAL, gpu=gpu, engine=engine,
                    workload=Workload(batch=batch, prompt_tokens=prompt, output_tokens=16, tp=2, weights_dtype="fp8",
                                      kv_dtype="fp8", compute_dtype="fp8"))  # fmt: skip


def test_a_long_prompt_s_ttft_rises_the_ceiling_stays_a_bound():
    slow, fast = _mixtral(OLD, 2048), _mixtral(NATIVE, 2048)
    assert slow.expected.ttft_s > 1.4 * fast.expected.ttft_s  # 16 bits (x0.5) and x0.73 on most of its FLOPs
    assert slow.ceiling.ttft_s == fast.ceiling.ttft_s  # the ceiling runs the GPU's own FP8 grouped GEMM
    assert slow.ceiling.ttft_s < slow.expected.ttft_s


def test_explain_names_the_share_and_its_source(cli):
    args = ("estimate", "-m", "mixtral-8x7b", "--tp", "2", "--weights", "fp8", "--kv-dtype", "fp8",
            "--compute-dtype", "fp8", "-p", "2048", "--explain", "-g")  # fmt: skip
    old = cli(*args, "h100-sxm", "--engine", "tensorrt-llm@0.9").stdout
    line = next(x for x in old.splitlines() if "MoE grouped GEMM is an Ampere" in x)
    assert re.search(r"routed experts' compute x0\.73 on top: tensorrt-llm@static's MoE grouped GEMM", line)
    assert "measured: CUTLASS grouped GEMM built for Sm80" in line
    sixteen = next(x for x in old.splitlines() if x.strip().startswith("routed experts at 16 bits"))
    assert "under tensorrt-llm@static (TensorRT-LLM 0.9's MoE plugin runs its experts" in sixteen
    assert sixteen.count("(") == sixteen.count(")")  # the source's first clause stands on its own
    assert "the routed experts" in next(x for x in old.splitlines() if "matmuls that stay 16-bit" in x)
    new = cli(*args, "h100-sxm", "--engine", "tensorrt-llm").stdout
    assert "routed experts at 16 bits" not in new and "MoE grouped GEMM is an Ampere" not in new
    # no figure on an L40S, but the 16-bit line still says why the experts are slower
    ada = cli(*args, "l40s", "--engine", "tensorrt-llm@0.9").stdout
    assert "routed experts at 16 bits" in ada and "MoE grouped GEMM is an Ampere" not in ada
    dense = cli("estimate", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--engine", "tensorrt-llm@0.9", "--weights", "fp8",
                "--compute-dtype", "fp8", "--explain").stdout  # fmt: skip
    assert "routed experts at 16 bits" not in dense  # no routed experts, no line


def test_an_older_kernel_class_names_its_source():
    with pytest.raises(ValueError, match="moe_gemm_source: required"):
        OLD.model_validate({**OLD.model_dump(), "moe_gemm_source": ""})
