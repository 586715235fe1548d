"""A fused-MoE kernel (vLLM's and SGLang's Triton fused_moe, AITER's: `moe_gemm_kernel: fused-moe`) pays each
gathered row's elements at the GPU's row pace on top of its math (`sustained.expert_rows`, read off published fused-MoE
timings: the time per token-expert pair less its FLOPs at the GEMM rate). Fine-grained experts (a narrow width per
GPU) are slowed most; decode, bound by the weights, hardly at all; the ceiling and other kernel classes pay none."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokcost.engine.estimate import deployment, estimate
from tokcost.engine.roofline import ceiling_rates, expected_rates, hardware_x_engine, kernel_rate, kernel_slopes
from tokcost.engine.workload import Workload
from tokcost.hardware.library import load_gpu
from tokcost.models.library import load_model
from tokcost.profiles import IDENTITY, load_engine

QWEN3_30B = load_model("qwen3-30b-a3b")
ROOT_SPECS = Path(__file__).resolve().parents[1] / "tokcost" / "specs" / "gpus"


def _experts(model, gpu: str, tp: int, tokens: int):
    """The routed experts' stage of one prefill pass of `tokens` tokens at TP `tp`."""
    d = deployment(model, load_gpu(gpu), Workload(tp=tp))
    cost = d.prefill(d.rates("ceiling"), batch=1, prompt=tokens, cached=0)
    return next(p.stage for p in cost.stages if p.stage.name == "routed experts")


def test_row_flops_are_both_gemms_over_the_elements_each_pair_carries():
    stage = _experts(QWEN3_30B, "h100-sxm", 1, 256)
    h, i = QWEN3_30B.hidden_size, QWEN3_30B.moe.expert_intermediate_size  # 2048, 768
    # each pair: 2 x 3 x h x i FLOPs over h elements into gate/up and i into down
    assert stage.row_flops == pytest.approx(6 * 2048 * 768 / (2048 + 768))
    assert (h, i) == (2048, 768)
    wide = _experts(QWEN3_30B, "h100-sxm", 2, 256)  # a TP shard halves the width each row meets
    assert wide.row_flops == pytest.approx(6 * 2048 * 384 / (2048 + 384))


def test_the_rate_is_the_math_plus_the_rows_by_hand():
    gpu = load_gpu("h200")
    rates = expected_rates(gpu, "bf16", load_engine("vllm"))
    plain = kernel_rate("experts", "bf16", rates)
    row_flops = 6 * 2048 * 768 / 2816
    slowed = kernel_rate("experts", "bf16", rates, row_flops)
    pace = gpu.hardware.expert_rows["bf16"].g_elements_per_s * 1e9  # 296 G/s, vLLM PR 44818
    assert pace == pytest.approx(296e9)
    assert 1 / slowed.flops_per_s == pytest.approx(1 / plain.flops_per_s + 1 / (row_flops * pace))
    assert slowed.weight_bytes_per_s == plain.weight_bytes_per_s  # the weight stream is untouched


def test_fp8_experts_take_the_narrow_pace():
    gpu = load_gpu("h100-sxm")
    rates = expected_rates(gpu, "fp8", load_engine("vllm"))
    row_flops = 6 * 7168 * 256 / (7168 + 256)
    slowed, plain = kernel_rate("experts", "fp8", rates, row_flops), kernel_rate("experts", "fp8", rates)
    assert 1 / slowed.flops_per_s - 1 / plain.flops_per_s == pytest.approx(1 / (row_flops * 252e9))
    # the same engine's experts at 16 bits take the 16-bit pace (Triton's BF16 kernel: 296 G/s on Hopper)
    sixteen = expected_rates(gpu, "bf16", load_engine("vllm"))
    slow16, plain16 = kernel_rate("experts", "bf16", sixteen, row_flops), kernel_rate("experts", "bf16", sixteen)
    assert 1 / slow16.flops_per_s - 1 / plain16.flops_per_s == pytest.approx(1 / (row_flops * 296e9))


@pytest.mark.parametrize("engine", ["tensorrt-llm", "tensorrt-llm@0.9", "generic", "llama.cpp", "vllm@eager"])
def test_other_kernel_classes_pay_no_rows(engine):
    rates = expected_rates(load_gpu("h100-sxm"), "fp8", load_engine(engine))
    assert kernel_rate("experts", "fp8", rates, 3000.0) == kernel_rate("experts", "fp8", rates)


ERA_KERNELS = [("vllm", "fused-moe"), ("vllm@0.6", "fused-moe"), ("vllm@enforce-eager", "fused-moe"),
               ("sglang", "fused-moe"), ("tensorrt-llm", "native"), ("tensorrt-llm@0.9", "mma-sync")]  # fmt: skip


@pytest.mark.parametrize(("engine", "kernel"), ERA_KERNELS)
def test_each_era_states_its_moe_kernel_class_and_why(engine, kernel):
    era = load_engine(engine)
    assert era.moe_gemm_kernel == kernel
    assert kernel == "native" or "grouped GEMM" in era.moe_gemm_source or "fused" in era.moe_gemm_source


@pytest.mark.parametrize("gpu", ["h100-sxm", "mi300x", "l40s"])
def test_the_ceiling_and_other_kernels_pay_no_rows(gpu):
    g = load_gpu(gpu)
    ceiling = ceiling_rates(g, "fp8" if "fp8" in g.peak_tflops else "bf16")
    assert kernel_rate("experts", "bf16", ceiling, 1000.0) == kernel_rate("experts", "bf16", ceiling)
    expected = expected_rates(g, "bf16", load_engine("vllm"))
    assert kernel_rate("matmul", "bf16", expected, 0.0) == kernel_rate("matmul", "bf16", expected)


def test_a_gpu_without_a_published_pace_pays_none():
    g = load_gpu("h20")
    assert g.hardware.expert_rows == {}
    rates = expected_rates(g, "fp8", load_engine("vllm"))
    assert kernel_rate("experts", "fp8", rates, 3000.0) == kernel_rate("experts", "fp8", rates)


def test_four_bit_experts_take_the_engines_4_bit_kernel_s_pace_not_triton_s(cli):
    g = load_gpu("b200")
    fp4 = expected_rates(g, "fp4", load_engine("vllm"))
    four_bit = g.hardware.expert_rows["fp4"].g_elements_per_s * 1e9  # FlashInfer's NVFP4 MoE, not Triton's FP8 path
    assert fp4.four_bit_expert_rows_per_s == four_bit != fp4.narrow_expert_rows_per_s
    bare = kernel_rate("experts", "nvfp4", fp4).flops_per_s
    paced = kernel_rate("experts", "nvfp4", fp4, 3000.0).flops_per_s
    assert paced == pytest.approx(1 / (1 / bare + 1 / (3000.0 * four_bit)))  # math plus each row at the 4-bit pace
    out = cli("estimate", "-m", "deepseek-r1", "-g", "b200", "--tp", "8", "--weights", "nvfp4", "--engine", "sglang",
              "--explain").stdout  # fmt: skip
    line = next(x for x in out.splitlines() if "routed experts' gathered rows" in x)
    assert f"{four_bit / 1e12:.4g} Telements/s" in line and "measured: AI Configurator" in line


# AITER's tuned fused MoE on an MI300X at BF16, Qwen3-235B-A22B's experts (E 128, K 4096, top 8), us at 16,384 and
# 32,768 tokens (ROCm/aiter qwen3_235b_bf16_tuned_fmoe.csv): one pace (315 G/s) stands for both widths
AITER_MI300X = {192: (2874.94, 5610.76), 384: (4216.91, 7767.44)}


@pytest.mark.parametrize("width", sorted(AITER_MI300X))
def test_one_pace_gives_both_published_widths_slopes(width):
    gpu = load_gpu("mi300x")
    rates = hardware_x_engine(gpu, "bf16", IDENTITY, expert_rows=True)  # the kernel's time as its table reads it
    k, per_token = 8, (AITER_MI300X[width][1] - AITER_MI300X[width][0]) * 1e-6 / 16384
    flops = 2 * k * 3 * 4096 * width  # a token's FLOPs through its 8 experts
    rate = kernel_rate("experts", "bf16", rates, 6 * 4096 * width / (4096 + width))
    compute_s, _ = kernel_slopes(flops, 0.0, 0.0, rate)  # per token: the call's fixed time apart
    assert compute_s == pytest.approx(per_token, rel=0.06)


# vLLM 0.19's Triton fused MoE at 128 x 128 block FP8, DeepSeek-V3's experts at TP 8 (E 256, K 7168, N 256, top 8), ms
# at 4,096 and 16,384 tokens (AI Configurator's op tables at 095f58a5, <gpu>/moe/vllm/0.19.0/moe_perf.parquet,
# balanced routing): the GPUs' FP8 paces (medians over every such table) give both slopes
AIC_DEEPSEEK_TP8 = {"h200": (1.252811, 4.486896), "h100-sxm": (1.366299, 4.722763)}


@pytest.mark.parametrize("gpu", sorted(AIC_DEEPSEEK_TP8))
def test_the_fp8_pace_gives_a_published_block_fp8_table_s_slope(gpu):
    rates = hardware_x_engine(load_gpu(gpu), "fp8", IDENTITY, expert_rows=True)  # the kernel's time as tables read it
    k, width, hidden = 8, 2048 // 8, 7168
    low, high = AIC_DEEPSEEK_TP8[gpu]
    per_token = (high - low) * 1e-3 / (16384 - 4096)
    rate = kernel_rate("experts", "fp8", rates, 6 * hidden * width / (hidden + width))
    compute_s, _ = kernel_slopes(2 * k * 3 * hidden * width, 0.0, 0.0, rate)
    assert compute_s == pytest.approx(per_token, rel=0.10)


# vLLM's newest Triton table that holds Qwen3-30B-A3B's experts (E 128, K 2048, N 768, top 8, TP 1) on each GPU whose
# paces AI Configurator's tables gave (systems/data/<gpu>/moe/vllm/<version>/moe_perf.parquet at 095f58a5, balanced
# routing): the dtype it multiplies at, ms at 4,096 and 16,384 tokens. One shape among the hundreds each median
# pooled, so the pace prices it within the spread the specs state, not exactly
AIC_QWEN3_30B = {
    "b200": ("bf16", 0.541265, 1.817311),  # vLLM 0.22
    "b300": ("fp8", 0.427840, 1.468085),  # vLLM 0.19, FP8 w8a8
    "gb200": ("bf16", 0.550555, 1.810933),  # vLLM 0.19
    "rtx-pro-6000": ("fp8", 0.881413, 3.399147),  # vLLM 0.19, FP8 w8a8
    "l40s": ("bf16", 2.977845, 7.637120),  # vLLM 0.24
}


@pytest.mark.parametrize("gpu", sorted(AIC_QWEN3_30B))
def test_the_paces_price_vllm_s_newest_table_of_one_common_shape_within_their_spread(gpu):
    dtype, low, high = AIC_QWEN3_30B[gpu]
    rates = hardware_x_engine(load_gpu(gpu), dtype, IDENTITY, expert_rows=True)  # the kernel's time as tables read it
    k, width, hidden = 8, 768, 2048
    per_token = (high - low) * 1e-3 / (16384 - 4096)
    rate = kernel_rate("experts", dtype, rates, 6 * hidden * width / (hidden + width))
    compute_s, _ = kernel_slopes(2 * k * 3 * hidden * width, 0.0, 0.0, rate)
    assert compute_s == pytest.approx(per_token, rel=0.30)
    bare = hardware_x_engine(without_row_paces(gpu), dtype, IDENTITY, expert_rows=True)
    math_s, _ = kernel_slopes(2 * k * 3 * hidden * width, 0.0, 0.0, kernel_rate("experts", dtype, bare))
    assert math_s < 0.8 * per_token  # the rows are a cost of their own: the math alone misses the table


def test_fine_grained_experts_slow_prefill_far_more_than_decode():
    def times(gpu: str):
        r = estimate(load_model("deepseek-r1"), gpu, Workload(batch=8, prompt_tokens=2048, output_tokens=256, tp=8),
                     engine=load_engine("sglang"))  # fmt: skip
        return r.expected.ttft_s, r.expected.tpot_s

    (ttft, tpot), (ttft0, tpot0) = times(load_gpu("h200")), times(without_row_paces("h200"))
    # 16,384 tokens through 256 experts of width 256: at 286 G/s the rows alone run at 1 / 424 TFLOP/s, so the
    # experts' math takes 1 + 1226 / 424 = 3.9x its time at SGLang's share of the FP8 GEMM rate (0.815 x 1504)
    assert ttft / ttft0 > 1.3
    assert 1.0 <= tpot / tpot0 < 1.05  # eight sequences: the weight stream hides the rows


def test_explain_prints_the_pace_its_bound_and_its_source(cli):
    out = cli("estimate", "-m", "deepseek-r1", "-g", "h200", "--tp", "8", "--engine", "sglang", "--explain").stdout
    line = next(x for x in out.splitlines() if "routed experts' gathered rows" in x)
    row_flops = 6 * 7168 * 256 / (7168 + 256)  # 1,483 FLOPs per element at TP 8
    assert f"{row_flops:,.0f} FLOPs each" in line
    assert f"1 / {row_flops * 286e9 / 1e12:.4g} TFLOP/s" in line  # 424.1: the rows alone at 286 G elements/s
    assert "286.0 Gelements/s" in line and "measured: AI Configurator's published op tables" in line
    bare = cli("estimate", "-m", "qwen3-30b-a3b", "-g", "h20", "--engine", "vllm", "--explain").stdout
    assert "vllm@v1's fused-MoE kernel has no pace published for h20 at bf16, none priced" in bare
    cutlass = cli("estimate", "-m", "deepseek-r1", "-g", "h200", "--tp", "8", "--engine", "tensorrt-llm", "--explain")
    assert "gathered rows" not in cutlass.stdout
    dense = cli("estimate", "-m", "llama-3.1-8b", "-g", "h200", "--explain").stdout
    assert "gathered rows" not in dense


def without_row_paces(name: str):
    """The built-in GPU without its row paces (sustained.expert_rows): no gathered-row cost."""
    g = load_gpu(name)
    return g.model_copy(update={"sustained": g.hardware.model_copy(update={"expert_rows": {}})})


def test_a_pace_for_a_dtype_with_no_such_kernel_class_is_refused_in_one_line(cli, tmp_path):
    text = (ROOT_SPECS / "h200.yaml").read_text().replace("  expert_rows:\n    bf16:", "  expert_rows:\n    int4:", 1)
    path = tmp_path / "my-h200.yaml"
    path.write_text(text.replace("name: h200", "name: my-h200", 1))
    before = path.read_text()
    r = cli("estimate", "-m", "qwen3-30b-a3b", "-g", str(path))
    assert r.exit_code == 2
    assert (
        r.stderr.strip()
        == f"error: {path}: sustained.expert_rows.int4.[key]: Input should be 'bf16', 'fp8' or 'fp4' (got 'int4')"
    )
    assert path.read_text() == before  # nothing the user wrote is touched


BLACKWELL_TABLES = ("bf16", "fp8", "fp4")


@pytest.mark.parametrize(
    ("gpu", "dtypes"),
    [("h100-sxm", ("bf16", "fp8")), ("h200", ("fp8",)), ("l40s", ("bf16",)), ("b200", BLACKWELL_TABLES),
     ("b300", BLACKWELL_TABLES), ("gb200", BLACKWELL_TABLES), ("rtx-pro-6000", BLACKWELL_TABLES)],
)  # fmt: skip
def test_each_sku_with_a_published_table_states_its_own_paces(gpu, dtypes):
    paces = load_gpu(gpu).hardware.expert_rows
    for dtype in dtypes:
        pace = paces[dtype]
        assert pace.basis == "measured"
        assert "AI Configurator" in pace.source and f"median {pace.g_elements_per_s:,.0f} G/s" in pace.source


@pytest.mark.parametrize(("gpu", "parent"), [("h800", "h100-sxm"), ("h200-nvl", "h200")])
def test_gh100_siblings_take_their_parent_s_paces_as_anchors_with_their_sources(gpu, parent):
    own, theirs = load_gpu(gpu).hardware.expert_rows, load_gpu(parent).hardware.expert_rows
    assert {k: v.g_elements_per_s for k, v in own.items()} == {k: v.g_elements_per_s for k, v in theirs.items()}
    assert own["fp8"].basis == "anchor" and "AI Configurator" in own["fp8"].source


# vLLM 0.24's table of FlashInfer's TensorRT-LLM BF16 MoE (kernel_source ..._trtllmbf16experts) for the same shape: ms
# at 4,096 and 16,384 tokens (systems/data/<gpu>/moe/vllm/0.24.0/moe_perf.parquet at 095f58a5, balanced routing)
AIC_QWEN3_30B_TRTLLM = {
    "b200": (0.382053, 1.351515),
    "b300": (0.375557, 1.295755),
    "gb200": (0.365968, 1.277216),
}


def _per_token_s(rates) -> float:
    """One token's time through Qwen3-30B-A3B's routed experts (E 128, K 2048, N 768, top 8, TP 1) under `rates`."""
    k, width, hidden = 8, 768, 2048
    rate = kernel_rate("experts", "bf16", rates, 6 * hidden * width / (hidden + width))
    return kernel_slopes(2 * k * 3 * hidden * width, 0.0, 0.0, rate)[0]


@pytest.mark.parametrize("gpu", sorted(AIC_QWEN3_30B_TRTLLM))
def test_builds_that_run_flashinfer_s_kernel_pay_its_pace_and_triton_s_would_miss_its_table(gpu):
    low, high = AIC_QWEN3_30B_TRTLLM[gpu]
    per_token = (high - low) * 1e-3 / (16384 - 4096)
    switch = load_engine("vllm").moe_row_kernels  # the newest build's: BF16 experts in FlashInfer's TRT-LLM kernel
    flashinfer = hardware_x_engine(load_gpu(gpu), "bf16", IDENTITY, expert_rows=True, row_kernels=switch)
    triton = hardware_x_engine(load_gpu(gpu), "bf16", IDENTITY, expert_rows=True)
    assert _per_token_s(flashinfer) == pytest.approx(per_token, rel=0.30)
    assert _per_token_s(triton) > 1.3 * per_token  # Triton's pace prices another kernel: 42-74% too slow here


@pytest.mark.parametrize("gpu", ["b200", "b300", "gb200"])
def test_vllm_switches_bf16_experts_to_flashinfer_on_sm100_from_0_20_only(gpu):
    g = load_gpu(gpu)
    builds = ("vllm@0.19.1", "vllm@0.20", "vllm")
    pace = {v: expected_rates(g, "bf16", load_engine(v)).expert_rows_per_s for v in builds}
    triton = g.hardware.expert_rows["bf16"].g_elements_per_s * 1e9
    flashinfer = g.hardware.kernel_expert_rows["flashinfer-trtllm"]["bf16"].g_elements_per_s * 1e9
    assert pace == {"vllm@0.19.1": triton, "vllm@0.20": flashinfer, "vllm": flashinfer}  # unversioned: the newest
    assert flashinfer > 2.5 * triton  # 912-987 against 265-353 G/s
    fp8 = {v: expected_rates(g, "fp8", load_engine(v)).narrow_expert_rows_per_s for v in ("vllm@0.19.1", "vllm")}
    assert fp8["vllm@0.19.1"] == fp8["vllm"] == g.hardware.expert_rows["fp8"].g_elements_per_s * 1e9  # no FP8 switch


def test_gpus_without_the_kernel_s_pace_keep_the_default_one_whatever_the_build():
    for gpu in ("h100-sxm", "h200", "l40s", "rtx-pro-6000"):
        g = load_gpu(gpu)
        assert "flashinfer-trtllm" not in g.hardware.kernel_expert_rows  # the TRT-LLM MoE kernels are SM100's
        newest, old = (expected_rates(g, "bf16", load_engine(v)).expert_rows_per_s for v in ("vllm", "vllm@0.19"))
        assert newest == old == g.hardware.expert_rows["bf16"].g_elements_per_s * 1e9
    # an engine with no switch pays the default kernel's pace on SM100 too
    b200 = load_gpu("b200")
    assert load_engine("sglang").moe_row_kernels == ()
    assert expected_rates(b200, "bf16", load_engine("sglang")).expert_rows_per_s == 353e9


def test_validation_prices_each_row_with_the_kernels_its_build_ran():
    from tokcost.models.library import load_model as model_of
    from tokcost.validation.cases import row_cell
    from tokcost.validation.compare import price_row
    from tokcost.validation.data import load_rows

    data = ROOT_SPECS.parents[1] / "validation" / "published.yaml"
    found = next(r for r in load_rows(data) if r.id == "mlenergy-b200-qwen3-30b-a3b-tp1-bs8-itl")
    assert found.engine_version == "0.11.1"
    # the same run as a prefill, where the experts' rows count: 8 prompts of 8,192 tokens
    row = found.model_copy(update={"metric": "ttft_ms", "prompt_tokens": 8192, "output_tokens": 1})
    model, gpu = model_of(row.model), load_gpu("b200")

    def ttft(r, engine: str) -> float:
        return price_row(r, model, gpu, row_cell(r, gpu), load_engine(engine)).expected

    # the newest profile prices a 0.11 build as that build ran it: Triton's pace, not the newest build's kernel
    assert ttft(row, "vllm") == ttft(row, "vllm@0.11.1")
    newer = row.model_copy(update={"engine_version": "0.20.1"})
    assert ttft(newer, "vllm") == ttft(newer, "vllm@0.20.1") < 0.95 * ttft(row, "vllm")


def test_explain_names_the_kernel_a_build_switched_to(cli):
    args = ("estimate", "-m", "qwen3-30b-a3b", "-g", "b200", "-p", "4096", "--explain", "--engine")
    line = next(x for x in cli(*args, "vllm").stdout.splitlines() if "routed experts' gathered rows" in x)
    assert "987.0 Gelements/s in flashinfer-trtllm (the kernel vllm@v1 runs bf16 experts in on b200 from 0.20)" in line
    assert "[measured: AI Configurator's published op tables" in line  # the switched kernel's own figure and source
    old = next(x for x in cli(*args, "vllm@0.19").stdout.splitlines() if "routed experts' gathered rows" in x)
    assert "353.0 Gelements/s in vllm@v1's fused-MoE kernel" in old


def test_a_kernel_the_specs_do_not_know_is_refused_with_its_field(tmp_path, cli):
    text = (ROOT_SPECS / "b200.yaml").read_text().replace("    flashinfer-trtllm:\n", "    cutlass:\n", 1)
    path = tmp_path / "b200.yaml"
    path.write_text(text)
    result = cli("estimate", "-m", "qwen3-30b-a3b", "-g", str(path))
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: {path}: sustained.kernel_expert_rows.cutlass.[key]: Input should be "
        "'flashinfer-trtllm' (got 'cutlass')\n"
    )
