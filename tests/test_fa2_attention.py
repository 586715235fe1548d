"""FlashAttention-2-class prefill on Hopper: vLLM before 0.7, llama.cpp's own mma.sync kernels and PyTorch's SDPA
flash backend run Ampere instructions, which reach 0.58 of FlashAttention-3's rate on an H100 SXM (the FA3 paper's
head-dim-128 forward figure, 1K-16K tokens). The share is the GPU's (`sustained.fa2_attention`, measured), the kernel
class is the era's (`prefill_attention_kernel`); it touches prefill attention's compute side alone."""

from __future__ import annotations

import re

import pytest

from tokcost import Workload, estimate, load_gpu, load_model
from tokcost.engine.roofline import expected_rates, fa2_share, kernel_rate
from tokcost.profiles import load_engine

LLAMA70 = load_model("llama-3.1-70b")
HOPPER = ("h100-sxm", "h200", "h100-pcie", "h100-nvl")


@pytest.mark.parametrize("gpu", HOPPER)
def test_hopper_states_the_share_with_its_basis(gpu):
    figure = load_gpu(gpu).hardware.fa2_attention
    assert figure is not None and figure.fraction == pytest.approx(0.58)
    # measured on the SXM part; its siblings run the same SMs and say they borrow it
    assert figure.basis == ("measured" if gpu == "h100-sxm" else "anchor")
    assert "2407.08608" in figure.source


@pytest.mark.parametrize("gpu", ["a100-80gb-sxm", "l40s", "rtx-4090", "mi300x", "b200"])
def test_gpus_whose_own_kernels_are_of_that_class_or_unmeasured_take_none(gpu):
    assert load_gpu(gpu).hardware.fa2_attention is None
    assert fa2_share(load_gpu(gpu), load_engine("vllm@0.6")) == 1.0


@pytest.mark.parametrize(
    ("engine", "share"),
    [("vllm@0.5", 0.58), ("vllm@0.6", 0.58), ("vllm", 1.0), ("tensorrt-llm", 1.0), ("sglang", 1.0),
     ("llama.cpp", 0.58), ("torch-compile", 0.58), ("generic", 1.0)],
)  # fmt: skip
def test_the_share_follows_the_era_s_kernel_class(engine, share):
    assert fa2_share(load_gpu("h100-sxm"), load_engine(engine)) == pytest.approx(share)


def test_only_prefill_attention_s_compute_side_moves():
    gpu = load_gpu("h100-sxm")
    old = load_engine("vllm@0.6")
    native = old.model_copy(update={"prefill_attention_kernel": "native"})
    a, b = expected_rates(gpu, "bf16", old), expected_rates(gpu, "bf16", native)
    slow, fast = kernel_rate("attention", "bf16", a), kernel_rate("attention", "bf16", b)
    assert slow.flops_per_s == pytest.approx(0.58 * fast.flops_per_s)
    assert slow.bytes_per_s == fast.bytes_per_s  # decode attention streams the cache as before
    assert kernel_rate("matmul", "bf16", a) == kernel_rate("matmul", "bf16", b)  # GEMMs and GEMVs untouched


def test_a_long_prompt_s_ttft_rises_and_decode_stays():
    def run(kernel: str):
        engine = load_engine("vllm@0.6").model_copy(update={"prefill_attention_kernel": kernel})
        return estimate(model=LLAMA70, gpu="h100-sxm", engine=engine,
                        workload=Workload(prompt_tokens=32_768, output_tokens=16, tp=4))  # fmt: skip

    fa2, native = run("flash-attention-2"), run("native")
    assert fa2.expected.ttft_s > native.expected.ttft_s * 1.05  # attention is a third of a 32K prompt's FLOPs
    assert fa2.ceiling.ttft_s == native.ceiling.ttft_s  # the ceiling runs the GPU's own kernels
    assert fa2.expected.tpot_s == pytest.approx(native.expected.tpot_s, rel=1e-3)


def test_explain_names_the_share_and_its_source(cli):
    old = cli("estimate", "-m", "llama-3.1-70b", "-g", "h100-sxm", "--engine", "vllm@0.6", "-p", "8192", "--tp", "4",
              "--explain").stdout  # fmt: skip
    line = next(x for x in old.splitlines() if "FlashAttention-2-class" in x)
    assert re.search(r"prefill attention x0\.58 on top: vllm@v0's kernels", line)
    assert "measured: FlashAttention-2 against FlashAttention-3" in line
    new = cli("estimate", "-m", "llama-3.1-70b", "-g", "h100-sxm", "--engine", "vllm", "-p", "8192", "--tp", "4",
              "--explain").stdout  # fmt: skip
    assert "FlashAttention-2-class" not in new


def test_flash_attention_off_runs_plain_gemms_so_no_fa2_share(cli):
    # llama-bench's -fa 0: attention's matmuls go through cuBLAS, which uses Hopper's own tensor-core paths
    def ttft(engine: str, fa: bool) -> float:
        return estimate(model=load_model("llama-3.1-8b"), gpu="h100-sxm", engine=engine,
                        workload=Workload(prompt_tokens=16_384, flash_attention=fa)).expected.ttft_s  # fmt: skip

    native = load_engine("llama.cpp").model_copy(update={"prefill_attention_kernel": "native"})
    assert ttft("llama.cpp", False) == pytest.approx(ttft(native, False), rel=1e-12)
    assert ttft("llama.cpp", True) > ttft(native, True)
    off = cli("estimate", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--engine", "llama.cpp", "-p", "16384",
              "--no-flash-attention", "--explain").stdout  # fmt: skip
    assert "FlashAttention-2-class" not in off


def test_flash_attention_2_has_no_fp8_path_so_an_fp8_cache_is_multiplied_at_16_bits():
    gpu = load_gpu("h100-sxm")
    old, new = (expected_rates(gpu, "fp8", load_engine(e)) for e in ("vllm@0.6", "vllm"))
    v0 = load_engine("vllm@0.6")
    native = expected_rates(gpu, "fp8", v0.model_copy(update={"prefill_attention_kernel": "native"}))
    # the native class multiplies an FP8 cache at the FP8 peak; FlashAttention-2 at the 16-bit peak, then x0.58
    fa2, fp8 = kernel_rate("attention", "fp8", old), kernel_rate("attention", "fp8", native)
    sixteen = kernel_rate("attention", "bf16", native)
    assert fp8.flops_per_s == pytest.approx(2 * sixteen.flops_per_s, rel=0.05)  # H100: FP8 dense = 2 x BF16
    assert fa2.flops_per_s == pytest.approx(0.58 * sixteen.flops_per_s)
    assert kernel_rate("attention", "fp8", new).flops_per_s > fa2.flops_per_s * 3


def test_explain_says_an_fp8_cache_is_multiplied_at_16_bits_under_flash_attention_2(cli):
    args = ("estimate", "-m", "llama-3.1-70b", "-g", "l40s", "--tp", "4", "--weights", "fp8", "--kv-dtype", "fp8",
            "-p", "8192", "--explain", "--engine")  # fmt: skip
    assert (
        "attention at 16 bits: vllm@v0 multiplies the FP8 cache at the 16-bit rate (its kernels are Flash"
        in cli(*args, "vllm@0.6").stdout
    )  # Ada: no FA2 share, still
    assert "attention at 16 bits" not in cli(*args, "vllm").stdout
