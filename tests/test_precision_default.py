"""One meaning for --weights in every command: a weight format's default compute dtype (issue 22, class 4).

fp8 and fp4 run their matmuls natively (W8A8, W4A4) where the GPU lists that dense peak, and dequantize into the
model's dtype where it does not (vLLM: W8A8 FP8 on compute capability >= 8.9, W8A16 FP8 Marlin below); integer
and GGUF formats are weight-only unless --compute-dtype says otherwise; a checkpoint that states its compute
(DeepSeek-V3's FP8) runs it where the GPU can. estimate, compare, sweep, plan and the API resolve it in one place.
"""

from __future__ import annotations

import pytest

from tokcost import Workload, estimate, load_gpu, load_model
from tokcost.engine.workload import is_weight_only, resolve_precision

LLAMA = load_model("llama-3.1-8b")


@pytest.mark.parametrize(
    ("gpu", "weights", "compute"),
    [
        ("h100-sxm", "fp8", "fp8"),  # Hopper: FP8 tensor cores, W8A8
        ("l40s", "fp8", "fp8"),  # Ada
        ("mi300x", "fp8", "fp8"),  # CDNA3 lists an FP8 peak
        ("a100-80gb-sxm", "fp8", "bf16"),  # Ampere: no FP8 peak, W8A16 (FP8 Marlin)
        ("h100-sxm", "int8", "bf16"),  # W8A16 unless a W8A8 (SmoothQuant) checkpoint or --compute-dtype says so
        ("h100-sxm", "int4", "bf16"),  # W4A16 (AWQ/GPTQ)
        ("h100-sxm", "q4_k_m", "bf16"),  # GGUF: always dequantized
        ("b200", "nvfp4", "fp4"),  # Blackwell: FP4 tensor cores
        ("h100-sxm", "nvfp4", "bf16"),  # Hopper has none: dequantized
    ],
)
def test_a_weight_format_runs_natively_only_where_the_gpu_has_its_peak(gpu, weights, compute):
    p = resolve_precision(LLAMA, Workload(weights_dtype=weights), load_gpu(gpu))
    assert p.compute == compute
    assert is_weight_only(p) == (compute == "bf16")


def test_compute_dtype_overrides_and_a_checkpoints_stated_compute_needs_the_gpu():
    h100, a100 = load_gpu("h100-sxm"), load_gpu("a100-80gb-sxm")
    assert resolve_precision(LLAMA, Workload(weights_dtype="int8", compute_dtype="int8"), h100).compute == "int8"
    assert resolve_precision(LLAMA, Workload(weights_dtype="fp8", compute_dtype="bf16"), h100).compute == "bf16"
    deepseek = load_model("deepseek-v3")  # its checkpoint states FP8 W8A8
    assert resolve_precision(deepseek, Workload(), h100).compute == "fp8"
    assert resolve_precision(deepseek, Workload(), a100).compute == "bf16"  # was refused, naming an unused flag


def test_fp8_halves_a_compute_bound_prefill_on_hopper_and_not_on_ampere():
    def ttft(gpu: str, weights: str) -> float:
        return estimate(model=LLAMA, gpu=gpu, workload=Workload(weights_dtype=weights)).ceiling.ttft_s

    # H100 SXM: 1,978.9 dense FP8 TFLOP/s against 989.4 BF16: a compute-bound prefill about twice as fast
    assert ttft("h100-sxm", "fp8") / ttft("h100-sxm", "bf16") == pytest.approx(0.5, abs=0.08)
    # A100: the same FLOPs at the same BF16 peak (the weight bytes halve, but the prefill is compute-bound)
    assert ttft("a100-80gb-sxm", "fp8") / ttft("a100-80gb-sxm", "bf16") == pytest.approx(1.0, abs=0.03)


def test_estimate_compare_sweep_and_plan_give_fp8_one_meaning(cli):
    for gpu, compute in (("h100-sxm", "fp8"), ("a100-80gb-sxm", "bf16")):
        one = cli("estimate", "-m", "llama-3.1-8b", "-g", gpu, "--weights", "fp8", "-f", "json").json()
        assert one["precision"]["compute"] == compute
        row = cli("compare", "-m", "llama-3.1-8b", "-g", gpu, "--weights", "fp8", "-f", "json").json()["rows"][0]
        assert (row["weights"], row["compute_dtype"]) == ("fp8", compute)
        assert row["tpot_s"] == one["expected"]["tpot_s"] and row["ceiling_tpot_s"] == one["ceiling"]["tpot_s"]
        point = cli("sweep", "-m", "llama-3.1-8b", "-g", gpu, "--weights", "fp8", "-f", "json").json()["points"][0]
        assert point["compute_dtype"] == compute  # sweep prices its grid in one pass: the same sum in another order
        assert point["tpot_s"] == pytest.approx(one["expected"]["tpot_s"], rel=1e-12)
        plan = cli("plan", "-m", "llama-3.1-8b", "-g", gpu, "--rate", "1", "--weights", "fp8", "--tp", "1",
                   "-f", "json").json()  # fmt: skip
        assert {c["compute_dtype"] for c in plan["configs"]} == {compute}


def test_compare_and_sweep_take_the_list_plan_takes(cli):
    rows = cli("compare", "-m", "llama-3.1-8b", "-g", "h100-sxm,l40s", "--weights", "bf16,fp8,int4",
               "-f", "json").json()["rows"]  # fmt: skip
    assert [(r["gpu"], r["weights"]) for r in rows] == [
        (g, w) for g in ("h100-sxm", "l40s") for w in ("bf16", "fp8", "int4")
    ]  # GPUs outer, formats inner
    table = cli("compare", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--weights", "bf16,fp8").stdout
    assert "weights / KV / compute" in table and "fp8/bf16/fp8" in table  # under the model, on a terminal
    points = cli("sweep", "-m", "llama-3.1-8b", "-g", "h100-sxm", "-b", "1,8", "--weights", "bf16,fp8",
                 "--kv-dtype", "bf16,fp8", "-f", "json").json()["points"]  # fmt: skip
    assert [(p["weights"], p["kv_dtype"], p["batch"]) for p in points] == [
        (w, k, b) for w in ("bf16", "fp8") for k in ("bf16", "fp8") for b in (1, 8)
    ]
    refused = cli("estimate", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--weights", "bf16,fp8")
    assert refused.exit_code == 2 and "'bf16,fp8' is a list; give one format here" in refused.stderr


def test_the_formats_count_in_the_bounds(cli):
    batches = ",".join(str(b) for b in range(1, 5_001))
    r = cli("sweep", "-m", "llama-3.1-8b", "-g", "h100-sxm", "-b", batches, "--weights", "bf16,fp8,int4")
    assert r.exit_code == 2 and "5,000 --batch values x 1 --context values x 3 formats make 15,000 points" in r.stderr
