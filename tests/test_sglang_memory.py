"""SGLang keeps weights and its KV pool within its default mem_fraction_static of each GPU (memory_reserve "sglang"),
which its builds derive from the GPU's memory, the layout and their own defaults; activations and CUDA graphs live in
the rest. vLLM keeps 0.1 of the GPU beside weights, KV cache and activations."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokcost.engine.estimate import estimate
from tokcost.engine.memory import RESERVE_FRACTION, engine_reserve, sglang_static_share
from tokcost.engine.workload import Workload
from tokcost.hardware.library import load_gpu
from tokcost.models.library import load_model
from tokcost.profiles import load_engine

H100_MIB = 81_559  # the H100 SXM's memory as the driver reports it (its spec's runtime capacity)


def test_the_h100_figures_by_hand_for_each_rule():
    h100 = load_gpu("h100-sxm")
    assert h100.memory_bytes == H100_MIB * 2**20
    share = {v: sglang_static_share(load_engine(f"sglang@{v}"), h100, 1, 1) for v in ("0.4.6", "0.5.1", "0.5.3")}
    assert share["0.4.6"] == 0.88  # the share by TP size
    assert share["0.5.1"] == round((H100_MIB - (9.5 + 1 / 2) * 1024) / H100_MIB, 3) == 0.874  # 9.5 GiB + TP x PP / 2
    # 512 MiB + 1.5 x the 8,192-token chunk + 2 x the 256 sequences its graphs capture + 128 x 1 GPU
    assert share["0.5.3"] == round((H100_MIB - (512 + 1.5 * 8192 + 2 * 256 + 128)) / H100_MIB, 3) == 0.835
    assert sglang_static_share(load_engine("sglang"), h100, 1, 1) == 0.835  # the newest build: the newest rule
    assert sglang_static_share(load_engine("sglang@0.4.5"), h100, 8, 1) == 0.81


def test_the_newest_rule_on_a_b200_at_tp_8_by_hand():
    b200 = load_gpu("b200")
    mib = b200.memory_bytes / 2**20
    # B200's tier: a 16,384-token chunk, graphs of up to 512 sequences from TP 4, 128 MiB per GPU of the stage
    reserved = 512 + 1.5 * 16384 + 2 * 512 + 128 * 8
    assert sglang_static_share(load_engine("sglang"), b200, 8, 1) == round((mib - reserved) / mib, 3) == 0.852


@pytest.mark.parametrize("build", ["@0.4.5", "@0.5.1", ""])
@pytest.mark.parametrize("gpu", ["h100-sxm", "h200", "b200", "mi300x", "l40s"])
def test_more_gpus_per_stage_never_leave_the_kv_pool_more(gpu, build):
    engine, g = load_engine("sglang" + build), load_gpu(gpu)
    shares = [sglang_static_share(engine, g, tp, 1) for tp in (1, 2, 4, 8)]
    assert shares == sorted(shares, reverse=True)
    assert all(0.6 < s < 0.95 for s in shares)


def test_a_qwen3_32b_on_one_h100_holds_half_the_sequences_vllm_s_reserve_would():
    model, h100 = load_model("qwen3-32b"), load_gpu("h100-sxm")
    wl = Workload(batch=1, prompt_tokens=2048, output_tokens=512)
    sglang = estimate(model, h100, wl, engine=load_engine("sglang")).memory
    vllm = estimate(model, h100, wl, engine=load_engine("vllm")).memory
    per_sequence = 64 * 8 * 128 * 2 * 2 * 2560  # 262,144 B a token over 2,560 tokens
    weights = sglang.per_gpu.weights
    # weights and KV within 0.835 of the GPU: (0.835 x 85.52 GB - 65.52 GB) / 0.671 GB = 8.8 sequences
    assert sglang.max_batch == int((0.835 * h100.memory_bytes - weights) // per_sequence) == 8
    assert vllm.max_batch == 15  # 0.9 of the GPU, less its activations beside
    assert engine_reserve(load_engine("vllm"), h100, 1, 1) == (RESERVE_FRACTION, False)


def test_explain_derives_the_reserve(cli):
    args = ("estimate", "-m", "qwen3-32b", "-g", "h100-sxm", "-p", "2048", "-o", "512", "--explain", "--engine")
    line = next(x for x in cli(*args, "sglang@0.5.8").stdout.splitlines() if x.strip().startswith("reserve:"))
    assert line.strip().startswith("reserve: max(0.165 x 85.52 GB - ")
    assert "sglang 0.5.8's default mem_fraction_static 0.835" in line


def test_a_run_s_own_share_flag_sets_the_reserve_and_prose_about_other_runs_does_not():
    from tokcost.serving.validate import ASIDE, MEMORY_FLAG
    from tokcost.validation.serving_data import load_serving

    setups, _ = load_serving(Path(__file__).resolve().parents[1] / "tokcost" / "validation" / "serving.yaml")
    read = {k: MEMORY_FLAG.search(ASIDE.sub("", s.engine_flags)) for k, s in setups.items()}
    assert float(read["dc-sglang-llama31-405b-8xh200-random1k"][1]) == 0.87  # --mem-frac 0.87
    assert float(read["ix-sglang057-dsr1-8xh200-1k1k"][1]) == 0.82  # --mem-fraction-static 0.82
    assert read["sglang030-llama31-70b-4xh100"] is None  # "(... the offline runs add --mem-frac 0.88)": not its own
    h200 = load_gpu("h200")
    flagged = load_engine("sglang").model_copy(update={"memory_share": 0.87})
    assert engine_reserve(flagged, h200, 8, 1) == (0.13, True)
    vllm = load_engine("vllm").model_copy(update={"memory_share": 0.95})
    assert engine_reserve(vllm, h200, 1, 1) == (0.05, False)  # vLLM's activations stay beside its share


def test_gpus_under_35_gib_reserve_their_own_tier_in_0_4_7_to_0_5_2():
    rtx4090 = load_gpu("rtx-4090")
    mib = rtx4090.memory_bytes / 2**20  # 24,564 MiB
    # 2.8 GiB + TP x PP / 10 GiB below 35 GiB, not the 9.5 + TP x PP / 2 of GPUs up to 90 GiB
    assert sglang_static_share(load_engine("sglang@0.5.1"), rtx4090, 1, 1) == round((mib - 2.9 * 1024) / mib, 3)
    assert sglang_static_share(load_engine("sglang@0.5.1"), rtx4090, 1, 1) == 0.879


def test_the_smallest_layout_takes_the_reserve_of_its_own_tp():
    # Llama-3.1-70B in FP8 (72.7 GB of weights) estimated at TP 8 under SGLang 0.4.5 (0.81 of each GPU at TP 8):
    # at TP 1 SGLang keeps 0.88 of the H100 (75.3 GB), which holds it; TP 8's 0.81 (69.3 GB) would not
    r = estimate(load_model("llama-3.1-70b"), load_gpu("h100-sxm"),
                 Workload(batch=1, prompt_tokens=1024, output_tokens=128, tp=8, weights_dtype="fp8"),
                 engine=load_engine("sglang@0.4.5"))  # fmt: skip
    assert (
        0.81 * load_gpu("h100-sxm").memory_bytes
        < r.memory.weights_bytes_total
        < 0.88 * load_gpu("h100-sxm").memory_bytes
    )
    assert (r.memory.min_gpus, r.memory.min_layout) == (1, "TP 1")
