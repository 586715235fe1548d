"""The physics the published rows need, checked by hand: offline runs in waves, engine efficiencies capped at the
datasheet, the MI300X TP-8 decode step's all-reduces, the engine profiles, and the multinode rows' pricing."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokcost.engine.estimate import deployment, estimate
from tokcost.engine.memory import gpu_bytes, memory_report
from tokcost.engine.workload import Workload
from tokcost.eras import builtin_files
from tokcost.errors import SpecError
from tokcost.formats import get as get_format
from tokcost.hardware.library import load_gpu, load_network
from tokcost.models.library import load_model
from tokcost.profiles import (
    GENERIC,
    CollectiveCosts,
    ComputeSide,
    EngineProfile,
    KernelEfficiency,
    MemorySide,
    WeightOnly,
    kernel_family,
    load_engine,
)  # fmt: skip
from tokcost.validation.cells import Cell
from tokcost.validation.compare import (
    Wave,
    WaveTimes,
    max_running,
    predict_metric,
    price_row,
    run_metric,
    waves_of,
    workload_of,
)
from tokcost.validation.data import parse_rows
from tokcost.validation.folds import load_folds
from tokcost.validation.multinode import network_of, price_multinode
from tokcost.validation.serving_data import load_multinode

MULTINODE = Path(__file__).resolve().parents[1] / "tokcost" / "validation" / "multinode.yaml"


def _row(**changes: object):
    base: dict[str, object] = {
        "id": "r", "source_id": "s", "source": "somewhere", "quote": "| 1 |", "model": "llama-3.1-405b",
        "gpu": "h100-sxm", "gpus": 8, "weights": "fp8", "kv": "bf16", "compute": "fp8", "batch": 16,
        "prompt_tokens": 32784, "output_tokens": 2048, "framework": "vllm", "engine": "vllm",
        "metric": "total_throughput_tokens_per_s", "value": 600.0,
    }  # fmt: skip
    base.update(changes)
    return parse_rows({"rows": [base]}, "t.yaml")[0]


# ---- offline runs that offer more than the engine runs at once: waves -----------------------------------------


def test_an_offline_run_over_the_kv_cache_runs_in_waves():
    # dstack's 8 x H100 Llama-3.1-405B FP8 run offers 16 prompts of 32,784 + 2,048 tokens at once: the KV cache
    # (126 layers x 8 KV heads x 128 x 2 (K, V) x 2 B = 516 KB per token, 18 GB per sequence) holds fewer
    row, model, gpu = _row(), load_model("llama-3.1-405b"), load_gpu("h100-sxm")
    assert model.kv_bytes_per_token("bf16") == 126 * 8 * 128 * 2 * 2
    held = max_running(row, model, gpu, load_engine("vllm"))
    d = deployment(model, gpu, workload_of(row))
    fits = memory_report(model, gpu, workload_of(row), d.precision, d.layout).max_batch
    assert held == fits and 1 < held < 16
    tokens = row.prompt_tokens + row.output_tokens
    assert (
        gpu_bytes(model, gpu, d.precision, d.layout, workload_of(row), held, row.prompt_tokens, tokens).total
        <= (gpu.memory_bytes)
        < gpu_bytes(model, gpu, d.precision, d.layout, workload_of(row), held + 1, row.prompt_tokens, tokens).total
    )
    plan = waves_of(row, model, gpu, load_engine("vllm"))
    engine = load_engine("vllm")
    request_s = engine.request_overhead_us * 1e-6
    assert row.measured_at != "client" and plan == (Wave(held, 16 // held),) + (
        (Wave(16 % held, 1),) if 16 % held else ()
    )
    # the run's time is the waves' end-to-end times one after another, every token of all 16 requests counted
    total = 0.0
    for wave in plan:
        e = estimate(model, gpu, workload_of(row, wave.batch), engine=engine).expected
        # an offline run is timed by the engine itself: no per-request (client-side) cost on its TTFT
        total += wave.count * (e.ttft_s - request_s + (row.output_tokens - 1) * e.tpot_s)
    priced = price_row(row, model, gpu, Cell("vllm", engine.era, "cuda"), engine)
    assert priced.waves == sum(w.count for w in plan)
    assert priced.expected == pytest.approx(16 * tokens / total, rel=1e-12)


def test_a_run_that_states_its_kv_capacity_runs_in_the_waves_it_holds():
    # dstack's 8 x H100 command sets --max-model-len 91680, the KV capacity vLLM reported: 91,680 // (32,784 +
    # 2,048) = 2 sequences at a time, so 16 prompts run as 8 waves of 2, whatever tokcost's memory model would hold
    stated = _row(model="llama-3.1-405b-fp8", kv_tokens=91680)
    model, gpu, vllm = load_model("llama-3.1-405b-fp8"), load_gpu("h100-sxm"), load_engine("vllm")
    assert max_running(stated, model, gpu, vllm) == 2
    assert waves_of(stated, model, gpu, vllm) == (Wave(2, 8),)
    assert max_running(_row(model="llama-3.1-405b-fp8"), model, gpu, vllm) > 2  # the memory model holds more
    # short requests: the engine's own cap (256) still binds first; a capacity under one sequence is a misread row
    # (an engine refuses such a request: vLLM's --max-model-len is a sequence's limit)
    assert waves_of(_row(kv_tokens=10**9, batch=300, prompt_tokens=128), model, gpu, vllm) == (
        Wave(256, 1),
        Wave(44, 1),
    )
    with pytest.raises(SpecError, match=r"kv_tokens \(1,000\) must hold one whole sequence"):
        _row(kv_tokens=1000)


def test_the_engine_caps_running_sequences():
    # vLLM's default max_num_seqs = 256: 1,000 short prompts offered at once run as 256, 256, 256, 232
    row = _row(model="llama-2-7b", gpu="mi300x", gpus=1, weights="fp16", kv="fp16", compute="fp16", batch=1000,
               prompt_tokens=512, output_tokens=128)  # fmt: skip
    vllm = load_engine("vllm")
    assert vllm.max_running_sequences == 256
    assert waves_of(row, load_model("llama-2-7b"), load_gpu("mi300x"), vllm) == (Wave(256, 3), Wave(232, 1))
    # without the cap the KV cache decides: 640 tokens x 512 KB (32 layers x 32 KV heads x 128 x 2 x 2 B) each
    uncapped = vllm.model_copy(update={"max_running_sequences": None})
    held = max_running(row, load_model("llama-2-7b"), load_gpu("mi300x"), uncapped)
    assert 256 < held < 1000
    plan = waves_of(row, load_model("llama-2-7b"), load_gpu("mi300x"), uncapped)
    assert plan[0] == Wave(held, 1000 // held) and sum(w.batch * w.count for w in plan) == 1000


def test_a_queued_request_waits_for_the_waves_before_it():
    # two waves of 2 then 1 request, TTFT 1 s and TPOT 0.1 s each, 11 output tokens: each wave takes 1 + 10 x 0.1
    # = 2 s; the third request starts at 2 s, so the mean TTFT is (2 x 1 + 1 x (2 + 1)) / 3 = 5/3 s
    waves = [WaveTimes(2, 1, 1.0, 0.1), WaveTimes(1, 1, 1.0, 0.1)]
    assert run_metric(_row(batch=3, output_tokens=11, metric="ttft_s"), waves) == pytest.approx(5 / 3)
    assert run_metric(_row(batch=3, output_tokens=11, metric="tpot_ms"), waves) == pytest.approx(100.0)
    assert run_metric(_row(batch=3, output_tokens=11, metric="throughput_tokens_per_s"), waves) == pytest.approx(
        3 * 11 / 4.0
    )
    one = _row(batch=3, output_tokens=11, metric="e2e_s")
    assert run_metric(one, [WaveTimes(3, 1, 1.0, 0.1)]) == predict_metric(one, 1.0, 0.1) == pytest.approx(2.0)


# ---- engine efficiencies -----------------------------------------------------------------------------------


def test_weight_only_efficiency_by_format_family_else_the_gemv():
    k = KernelEfficiency(memory=MemorySide(gemv=0.9, weight_only=WeightOnly(int4=0.5)))
    assert k.memory_of("weight_only", "int4-g128") == 0.5 and k.memory_of("weight_only", "q4_0") == 0.9
    assert k.memory_of("gemv") == 0.9 and k.compute_of("gemm") == 1.0
    assert [kernel_family(f) for f in ("int4-g64-z16", "q4_k_m", "nvfp4", "fp4", "int8", "fp8", "nf4")] == [
        "int4", "gguf", "fp4", "fp4", "int8", "fp8", "nf4"
    ]  # fmt: skip


def test_block_scaled_fp8_is_its_own_kernel_family_at_fp8_compute():
    # DeepSeek-V3's checkpoint: FP8 codes and one fp32 scale per 128 x 128 block: 8 + 32 / 16,384 bits per weight
    assert get_format("fp8-block").bits == 8 + 32 / 16_384 and kernel_family("fp8-block") == "fp8_block"
    model, gpu = load_model("deepseek-v3"), load_gpu("h200")
    copy = gpu.hardware.copy_bandwidth.fraction
    engine = GENERIC.model_copy(update={"kernels": KernelEfficiency(memory=MemorySide(
        gemv=1.0, weight_only=WeightOnly(fp8_block=0.3)))})  # fmt: skip
    for weights, share in (("fp8-block", 0.3), ("fp8", 1.0)):  # per-tensor FP8 stays a plain GEMV
        wl = Workload(batch=1, prompt_tokens=100, output_tokens=2, tp=8, weights_dtype=weights, compute_dtype="fp8")
        d = estimate(model, gpu, wl, engine=engine).deployment
        ceiling, expected = (d.decode(d.rates(s), batch=1, cached=100) for s in ("ceiling", "expected"))
        matmuls = [(c, x) for c, x in zip(ceiling.stages, expected.stages, strict=True)
                   if c.stage.kind in ("matmul", "experts") and c.stage.weight_format == weights]  # fmt: skip
        assert matmuls  # the projections and the experts; the LM head stays bf16
        for c, x in matmuls:
            assert x.memory_s == pytest.approx(c.memory_s / (copy * share)), (weights, c.stage.name)


def test_an_efficiency_lifts_a_kernel_up_to_the_datasheet_and_no_further():
    # H100 SXM's measured copy share 0.87 x a GEMV efficiency of 1.5 would be 1.3 of the peak: capped at 1.0
    model, gpu = load_model("llama-3.1-8b"), load_gpu("h100-sxm")
    copy = gpu.hardware.copy_bandwidth.fraction
    fast = GENERIC.model_copy(update={"kernels": KernelEfficiency(memory=MemorySide(gemv=1.5))})
    e = estimate(model, gpu, Workload(batch=1, prompt_tokens=100, output_tokens=2), engine=fast)
    d = e.deployment
    ceiling, expected = (d.decode(d.rates(s), batch=1, cached=100) for s in ("ceiling", "expected"))
    for c, x in zip(ceiling.stages, expected.stages, strict=True):
        if c.stage.kind == "matmul":
            assert x.memory_s == pytest.approx(c.memory_s)  # at the datasheet, not above it
        elif c.stage.kind == "memory":
            assert x.memory_s == pytest.approx(c.memory_s / copy)  # norms and KV writes: the copy share alone
    assert e.expected.tpot_s >= e.ceiling.tpot_s


def test_a_slow_compute_side_never_drags_memory_bound_decode():
    model, gpu = load_model("llama-3.1-8b"), load_gpu("h100-sxm")
    wl = Workload(batch=1, prompt_tokens=2048, output_tokens=64)
    slow = GENERIC.model_copy(update={"kernels": KernelEfficiency(compute=ComputeSide(gemm=0.4, attention=0.4))})
    base, worse = estimate(model, gpu, wl), estimate(model, gpu, wl, engine=slow)
    assert worse.expected.ttft_s > 2 * base.expected.ttft_s  # prefill is compute-bound
    # decode streams weights: its compute side is ~1/300 of its memory side at batch 1, and only the unhidden share
    # of it (roofline.UNHIDDEN_SHARE) reaches the step, so a compute side at 0.4 moves TPOT by well under 1%
    assert worse.expected.tpot_s == pytest.approx(base.expected.tpot_s, rel=0.01)


def test_engine_fixed_costs_add_per_step_request_kernel_and_collective():
    model, gpu = load_model("llama-3.1-70b"), load_gpu("h100-sxm")
    wl = Workload(batch=1, prompt_tokens=100, output_tokens=3, tp=4)
    costs = GENERIC.model_copy(update={"step_overhead_us": 100.0, "request_overhead_us": 2000.0,
                                       "collective_overhead_us": CollectiveCosts(nvlink=10.0)})  # fmt: skip
    base, more = estimate(model, gpu, wl), estimate(model, gpu, wl, engine=costs)
    collectives = 2 * model.layers + 1  # all-reduces after attention and MLP, per layer, and the logits' gather
    assert more.expected.tpot_s - base.expected.tpot_s == pytest.approx(100e-6 + collectives * 10e-6)
    assert more.expected.ttft_s - base.expected.ttft_s == pytest.approx(100e-6 + 2000e-6 + collectives * 10e-6)
    assert more.ceiling.tpot_s == base.ceiling.tpot_s  # the ceiling has no fixed cost
    gap = GENERIC.model_copy(update={"kernel_overhead_us": 2.0})
    step = base.expected.decode_step
    kernels = sum(p.stage.count for p in step.stages)  # every kernel and collective of the decode step
    assert estimate(model, gpu, wl, engine=gap).expected.tpot_s - base.expected.tpot_s == pytest.approx(kernels * 2e-6)


@pytest.mark.parametrize("batch", [1, 16, 256])
def test_the_host_pays_per_sequence_in_every_pass(batch):
    # a Python scheduler's step grows with the batch: each sequence's inputs, sampling and output, serial to the GPU.
    # 10 us a sequence adds batch x 10 us to every decode step and to the prefill pass of the batch's prompts
    model, gpu = load_model("llama-3.1-8b"), load_gpu("h100-sxm")
    wl = Workload(batch=batch, prompt_tokens=100, output_tokens=5)
    per_seq = GENERIC.model_copy(update={"sequence_overhead_us": 10.0})
    base, more = estimate(model, gpu, wl), estimate(model, gpu, wl, engine=per_seq)
    assert more.expected.tpot_s - base.expected.tpot_s == pytest.approx(batch * 10e-6)
    assert more.expected.ttft_s - base.expected.ttft_s == pytest.approx(batch * 10e-6)
    assert more.ceiling.tpot_s == base.ceiling.tpot_s  # the ceiling has no host cost
    step = more.expected.decode_step
    assert step.overhead_s == pytest.approx(batch * 10e-6)  # --explain's step shows it as the pass's overhead


def test_an_eager_era_is_no_faster_than_its_launches():
    # the host launches every kernel of the pass one by one: at 200 us each, Llama-3.1-8B's decode step is the
    # launches (its ~300 kernels take far longer to launch than 15 GB take to stream), and they scale with depth
    model, gpu = load_model("llama-3.1-8b"), load_gpu("h100-sxm")
    wl = Workload(batch=1, prompt_tokens=100, output_tokens=3)
    eager = GENERIC.model_copy(update={"launch_overhead_us": 200.0})
    step = estimate(model, gpu, wl).expected.decode_step
    kernels = sum(p.stage.count for p in step.stages)
    assert kernels >= 7 * model.layers  # norms, projections, attention, MLP: 7 a layer, and the head
    assert estimate(model, gpu, wl, engine=eager).expected.tpot_s == pytest.approx(kernels * 200e-6)


def test_the_ceiling_hides_the_expert_all_to_all_behind_compute():
    # two-batch overlap at best: the ceiling's MoE pass is max(kernels, all-to-all), never their sum
    model, gpu = load_model("deepseek-v3"), load_gpu("h100-sxm")
    wl = Workload(batch=256, prompt_tokens=4096, output_tokens=1, tp=1, ep=32, dp=32, gpus_per_node=8,
                  weights_dtype="fp8", kv_dtype="bf16", compute_dtype="fp8")  # fmt: skip
    e = estimate(model, gpu, wl, load_network("ib-ndr-400"), load_engine("sglang"))
    pre = e.ceiling.prefill
    kernels, serial, overlapped = pre.parts_seconds
    assert overlapped > 0 and pre.stage_seconds == pytest.approx(serial + max(kernels, overlapped))


def test_the_mi300x_tp8_decode_step_is_a_sixth_to_half_all_reduces():
    # vLLM, Llama-3.1-405B bf16 on 8 x MI300X, batch 1: 126 layers x 2 all-reduces of one token's hidden state
    # (16,384 x 2 B). One-shot on xGMI: RCCL's 23.2 us step latency + 7 x 32,768 B / (448 GB/s x 0.75), plus the
    # engine's own launch and synchronization per collective (its fitted collective_overhead_us).
    model, gpu, vllm = load_model("llama-3.1-405b"), load_gpu("mi300x"), load_engine("vllm")
    e = estimate(model, gpu, Workload(batch=1, prompt_tokens=80, output_tokens=85, tp=8), engine=vllm)
    step = e.expected.decode_step
    collectives = [p for p in step.stages if p.collective is not None and p.collective.op == "all-reduce"]
    assert sum(p.stage.count for p in collectives) == 2 * 126
    one = 23.2e-6 + 7 * 16384 * 2 / (448e9 * 0.75) + vllm.collective_overhead_us.nvlink * 1e-6  # xGMI: a fabric
    assert all(p.collective.seconds == pytest.approx(one) for p in collectives)
    share = step.part("communication").seconds / step.seconds
    # the share follows vLLM's fitted per-collective cost: 60 us on issue 12's 206 rows gave 46%, 16 us on the
    # 377 rows of issue 19 gives 17%; RCCL's own 23.2 us latency alone keeps it well above a tenth
    assert 0.15 < share < 0.5
    # the weight stream alone at the datasheet: 405B x 2 B / 8 GPUs / 5.3 TB/s = 19 ms; the rest is physics above
    assert step.part("weights").seconds > 405e9 * 2 / 8 / 5.3e12 * 0.99


# ---- engine profiles --------------------------------------------------------------------------------------


def test_every_era_loads_with_its_source_and_the_fits_digest():
    digest = load_folds().digest
    for name, engine_file in builtin_files().items():
        for era in engine_file.eras:
            profile = engine_file.profile(era)
            assert isinstance(profile, EngineProfile) and profile.name == name and profile.source.strip()
            assert (digest in profile.fit) if name != "generic" else "never fitted" in profile.fit, profile.label


def test_generic_is_the_identity_in_its_kernels():
    generic = load_engine("generic")
    assert generic.kernels == GENERIC.kernels == KernelEfficiency()


def test_estimate_differs_by_engine(cli):
    args = ("estimate", "-m", "llama-2-7b", "-g", "rtx-4090", "--weights", "q4_0", "--format", "json")
    runs = {engine: cli(*args, "--engine", engine) for engine in ("vllm", "llama.cpp")}
    for run in runs.values():
        assert run.exit_code == 0, run.stderr
    tpot = {engine: run.json()["expected"]["tpot_s"] for engine, run in runs.items()}
    ceiling = runs["vllm"].json()["ceiling"]["tpot_s"]
    assert tpot["vllm"] != tpot["llama.cpp"] and min(tpot.values()) >= ceiling


# ---- multinode rows ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def multinode():
    rows = load_multinode(MULTINODE)
    models = {r.model: load_model(r.model) for r in rows}
    gpus = {r.gpu: load_gpu(r.gpu) for r in rows}
    return {r.id: price_multinode(r, models, gpus, load_engine(r.engine)) for r in rows}


def test_multinode_rows_not_built_in_or_unstated_are_listed_with_the_reason(multinode):
    assert "production traffic" in (multinode["deepseek-day6-prefill-input-per-node"].reason or "")
    assert "lengths not stated" in (multinode["vllm-blog-mi300x-405b-tp8-default-qps16"].reason or "")


@pytest.mark.parametrize("row_id", ["sglang-large-ep-decode-ep72-in2000", "rtp-llm-dsv3-decode-ep144-c13200-per-user",
                                    "rtp-llm-dsv3-decode-ep144-c13200-per-gpu"])  # fmt: skip
def test_ep_72_and_144_decode_rows_are_priced_over_their_pool_of_288(multinode, row_id):
    # 256 experts + 32 copies (EPLB): EP 72 holds 4 slots a GPU, EP 144 two; without the copies neither divides 256
    m = multinode[row_id]
    assert m.row.redundant_experts == 32 and m.reason is None and not m.violation
    assert m.expected is not None and m.ceiling is not None and m.expected <= m.ceiling
    assert m.row.value == pytest.approx(m.expected, rel=0.5)  # within a factor of 1.5 of what was measured


def test_an_h800_prefill_row_is_priced_per_gpu_and_bounded(multinode):
    # RTP-LLM: "one GPU runs 2 4K requests in 1.5 s" on a 32-GPU EP prefill pool: 2 prompts per GPU, 64 in the pass;
    # read as 2 for the whole pool, its ceiling (2,255 tokens/s a GPU) sat under the 5,333 measured
    m = multinode["rtp-llm-dsv3-prefill-ep32-per-gpu"]
    assert m.row.gpu == "h800" and m.row.batch_scope == "gpu" and m.reason is None
    assert m.expected is not None and m.ceiling is not None
    assert m.ceiling >= m.row.value >= m.expected * 0.5 and not m.violation


def test_a_prefill_pool_row_is_its_pass_rate_per_node(multinode):
    # SGLang EP32 prefill, 4 nodes of 8 H100: 4 prompts of 4,096 per GPU (DP rank) x 32 ranks in one pass
    m = multinode["sglang-large-ep-prefill-ep32-in4096"]
    r = m.row
    wl = Workload(batch=4 * 32, prompt_tokens=4096, output_tokens=1, tp=1, ep=32, dp=32, gpus_per_node=8,
                  weights_dtype="fp8", kv_dtype="bf16", compute_dtype="fp8")  # fmt: skip
    e = estimate(load_model("deepseek-v3"), load_gpu("h100-sxm"), wl, load_network("ib-ndr-400"), load_engine("sglang"))
    assert m.expected == pytest.approx(128 * 4096 / e.expected.ttft_s / r.nodes)
    assert m.network == "ib-ndr-400"


def test_the_network_is_the_stated_kind_or_the_gpus_default(multinode):
    rows = {r.id: r for r in load_multinode(MULTINODE)}
    moreh = rows["moreh-dsr1-40xmi300x-isl512-sharegpt-output-tps"]  # 'InfiniBand HDR'
    assert network_of(moreh, load_gpu("mi300x")).name == "ib-hdr-200"
    sglang = rows["sglang-large-ep-prefill-ep32-in1000"]  # 'InfiniBand', rate not stated: the H100 spec's default
    assert network_of(sglang, load_gpu("h100-sxm")).name == load_gpu("h100-sxm").network
