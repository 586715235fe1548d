"""The worked numbers of DESIGN.md and the issues, each derived by hand in the test from the specs."""

from __future__ import annotations

import math
import re

import pytest

from tokcost.engine.collectives import Path, allreduce_lines
from tokcost.engine.estimate import deployment, estimate
from tokcost.engine.features import expected_distinct_experts, mla_absorbs
from tokcost.engine.memory import gpu_bytes
from tokcost.engine.stages import Segment, pipeline_stages
from tokcost.engine.workload import Workload
from tokcost.errors import UsageError
from tokcost.hardware.library import load_gpu, load_network
from tokcost.hardware.spec import GpuSpec
from tokcost.models.library import load_model
from tokcost.models.spec import ModelSpec
from tokcost.profiles import load_engine

LINK = {"kind": "nvlink4", "gb_s": 450, "latency_us": 5, "source": "test"}


def gpu_with(bandwidth_gb_s: float, bf16_tflops: float = 989.4, memory_gb: float = 80) -> GpuSpec:
    return GpuSpec(
        name="test-gpu", source="test", memory_gb=memory_gb, memory_bandwidth_gb_s=bandwidth_gb_s,
        peak_tflops={"bf16": bf16_tflops, "fp16": bf16_tflops, "fp8": 2 * bf16_tflops}, tdp_w=700, link=LINK,
    )  # fmt: skip


def seven_b(dtype: str = "fp16") -> ModelSpec:
    """A 7.0B-parameter block stack with no embedding: isolates the '7B at 16 bits' arithmetic."""
    # 32 layers x (4 x 4096^2 attention + 3 x 4096 x 12,340 MLP) + norms = 7.0e9
    return ModelSpec(
        name="seven-b", layers=32, hidden_size=4096, attention_heads=32, kv_heads=32, intermediate_size=12_340,
        vocab_size=1, tied_embeddings=True, max_context=4096, dtype=dtype,
    )  # fmt: skip


def weight_bytes(cost) -> float:
    """Weights one pass reads on the busiest GPU."""
    return sum(p.stage.count * p.stage.weight_bytes for p in cost.stages)


def stages_named(cost, name: str):
    return [p for p in cost.stages if p.stage.name == name]


def test_7b_at_16_bits_on_3000_gb_s_is_214_tokens_per_s():
    # DESIGN.md: 3000 GB/s / 14 GB per token = ~214 tokens/s
    m = seven_b()
    assert m.params_total / 1e9 == pytest.approx(7.0, rel=0.001)
    e = estimate(m, gpu_with(3000), Workload(prompt_tokens=1, output_tokens=2))
    assert weight_bytes(e.ceiling.decode_step) == pytest.approx(14.0e9, rel=0.001)
    assert e.ceiling.decode_tokens_per_s == pytest.approx(214, rel=0.01)


def test_llama_2_7b_real_shapes_give_227_tokens_per_s():
    # with the real Llama-2-7B shapes, 13.21 GB of decode weights (the embedding is a lookup, not read): 227
    e = estimate(load_model("llama-2-7b"), gpu_with(3000), Workload(prompt_tokens=1, output_tokens=2))
    assert weight_bytes(e.ceiling.decode_step) / 1e9 == pytest.approx(13.21, abs=0.005)
    assert e.ceiling.decode_tokens_per_s == pytest.approx(227, abs=1)


def test_8_bit_weights_nearly_double_the_ceiling():
    # DESIGN.md: 3000 / 7 = ~428 tokens/s
    m = seven_b()
    w16 = estimate(m, gpu_with(3000), Workload(prompt_tokens=1, output_tokens=2))
    w8 = estimate(m, gpu_with(3000), Workload(prompt_tokens=1, output_tokens=2, weights_dtype="int8"))
    assert w8.ceiling.decode_tokens_per_s == pytest.approx(428, rel=0.01)
    assert 1.9 < w8.ceiling.decode_tokens_per_s / w16.ceiling.decode_tokens_per_s <= 2.0


def test_kv_cache_80_layers_8_heads_128_is_327680_bytes_per_token():
    # 2 x 80 x 8 x 128 x 2 bytes = 327,680 B; 100,000 tokens = 32.8 GB (Llama-2-70B / Llama-3-70B shapes)
    m = load_model("llama-3.1-70b")
    assert (m.layers, m.kv_heads, m.head_dim) == (80, 8, 128)
    assert m.kv_bytes_per_token("bf16") == 327_680
    assert m.kv_cache_bytes(100_000, kv_dtype="bf16") / 1e9 == pytest.approx(32.77, abs=0.01)


def test_500_token_answer_of_7b_fp16_moves_7_tb():
    # DESIGN.md: 500 x 14 GB = 7 TB of memory traffic
    e = estimate(seven_b(), gpu_with(3000), Workload(prompt_tokens=1, output_tokens=2))
    assert 500 * e.ceiling.decode_step.bytes / 1e12 == pytest.approx(7.0, rel=0.002)


def test_llama_2_7b_prefill_1024_on_h100_is_compute_bound_14_ms():
    m = load_model("llama-2-7b")
    e = estimate(m, load_gpu("h100-sxm"), Workload(prompt_tokens=1024, output_tokens=2))
    assert e.ceiling.prefill_bound == "compute"
    assert e.ceiling.ttft_s * 1e3 == pytest.approx(14, rel=0.1)
    # by hand: matmul FLOPs = 2 x block params x 1024 + 2 x LM head x 1 row; attention 4 x L x H x D x 1024 x 1025 / 2
    head = m.vocab_size * m.hidden_size
    block = m.params_total - m.params_embedding - head - m.params_norms
    matmul = sum(p.stage.count * p.stage.flops for p in e.ceiling.prefill.stages if p.stage.kind == "matmul")
    attention = sum(p.stage.count * p.stage.flops for p in e.ceiling.prefill.stages if p.stage.kind == "attention")
    assert matmul == pytest.approx(2 * block * 1024 + 2 * head, rel=1e-12)
    assert attention == pytest.approx(4 * 32 * 32 * 128 * 1024 * 1025 / 2, rel=1e-12)


def test_critical_batch_of_the_weight_matmuls_is_the_ridge_point_corrected_for_activations():
    # ridge = 989.4 TFLOP/s / 3.35 TB/s = 295 FLOP/B; a 16-bit weight does 2 FLOPs per 2 bytes per sequence, so the
    # matmuls turn compute-bound near batch 295, a little later because each row also reads and writes activations
    h100, m = load_gpu("h100-sxm"), load_model("llama-3.1-8b")
    ridge = h100.peak_flops_per_s("bf16") / h100.bandwidth_bytes_per_s
    assert ridge == pytest.approx(295.3, abs=0.1)
    h, inter, layers = m.hidden_size, m.intermediate_size, m.layers
    params = m.params_total - m.params_embedding - m.params_norms  # every matmul, the LM head included
    # activation bytes per row: QKV reads h, writes Q (h); O reads h, writes h; MLP reads h + I, writes I + h;
    # the LM head reads h
    act = (layers * (6 * h + 2 * inter) + h) * 2
    by_hand = math.floor(ridge * 2 * params / (2 * params - ridge * act)) + 1
    for prompt in (1, 32_000):  # independent of context
        e = estimate(m, h100, Workload(prompt_tokens=prompt, output_tokens=2))
        assert e.critical_batch_compute == by_hand
    assert 295 < by_hand < 330


def test_critical_batch_where_kv_reads_outweigh_weights_falls_with_context():
    m, h100 = load_model("llama-3.1-8b"), load_gpu("h100-sxm")
    short = estimate(m, h100, Workload(prompt_tokens=1024, output_tokens=256))
    long = estimate(m, h100, Workload(prompt_tokens=32_000, output_tokens=256))
    # by hand: B x c x 131,072 B (plus the query read) >= 15.01 GB of weights -> B ~ 15.01e9 / (1,151 x 131,072)
    c = short.mean_decode_context
    assert short.critical_batch_kv == pytest.approx(15.01e9 / (c * 131_072), rel=0.02)
    assert long.critical_batch_kv < short.critical_batch_kv
    assert abs(long.critical_batch_kv - 15.01e9 / (long.mean_decode_context * 131_072)) < 1


def test_mixtral_batch_32_reads_3_65x_the_weights_of_batch_1():
    # uniform routing: distinct experts 8 x (1 - (6/8)^B); B=1 -> 2, B=32 -> ~8
    d = deployment(load_model("mixtral-8x7b"), load_gpu("h200"), Workload())
    rates = d.rates("ceiling")
    one, many = weight_bytes(d.decode(rates, batch=1, cached=1)), weight_bytes(d.decode(rates, batch=32, cached=1))
    assert expected_distinct_experts(8, 2, 1) == 2
    assert many / one == pytest.approx(3.65, abs=0.02)


def test_decode_matmul_flops_are_2_x_params_per_token():
    # Kaplan et al. 2020: forward pass ~ 2N FLOPs per token (N without the embedding lookup and the norms)
    m = load_model("llama-3.1-8b")
    d = deployment(m, load_gpu("h100-sxm"), Workload())
    step = d.decode(d.rates("ceiling"), batch=1, cached=1)
    matmul = sum(p.stage.count * p.stage.flops for p in step.stages if p.stage.kind == "matmul")
    assert matmul == 2 * (m.params_total - m.params_embedding - m.params_norms)


def test_tensor_parallel_divides_weights_and_adds_two_one_shot_allreduces_per_layer():
    m, h100 = load_model("llama-3.1-70b"), load_gpu("h100-sxm")
    one = deployment(m, h100, Workload())
    four = deployment(m, h100, Workload(gpus=4))
    rates1, rates4 = one.rates("ceiling"), four.rates("ceiling")
    s1, s4 = one.decode(rates1, batch=4, cached=1000), four.decode(rates4, batch=4, cached=1000)

    def matmul_weights(cost) -> float:  # norms are replicated on every rank; every matmul splits 4 ways
        return sum(p.stage.count * p.stage.weight_bytes for p in cost.stages if p.stage.kind == "matmul")

    assert matmul_weights(s4) == pytest.approx(matmul_weights(s1) / 4, rel=1e-9)
    kv1 = stages_named(s1, "attention (KV cache read)")[0].stage
    kv4 = stages_named(s4, "attention (KV cache read)")[0].stage
    assert kv4.bytes_read - 4 * 8192 // 4 * 2 == pytest.approx((kv1.bytes_read - 4 * 8192 * 2) / 4)  # 8 KV heads / 4
    ar = [p for p in s4.stages if p.collective is not None and p.collective.op == "all-reduce"]
    assert sum(p.stage.count for p in ar) == 2 * 80
    # and once per pass the logits, each rank's quarter of the vocabulary, are gathered whole for sampling: the
    # 4-GPU group's latency floor once (as a one-shot all-reduce pays it), each rank receiving 3/4 of 4 rows x 128,256
    # x 2 B
    (gather,) = [p for p in s4.stages if p.collective is not None and p.collective.op == "all-gather"]
    assert gather.stage.count == 1 and gather.collective.payload_bytes == 4 * 128_256 * 2
    assert gather.seconds == pytest.approx(7.7e-6 + 3 / 4 * 4 * 128_256 * 2 / 450e9)
    # one-shot wins for a 64 KiB message: the link's 12.5 us at 8 GPUs less 2 x 0.6 us a GPU fewer = 7.7 us at 4,
    # + 3 x (4 x 8192 x 2 B) / 450 GB/s, 160 times
    assert h100.link.latency_at_s(4) == pytest.approx((12.5 - 2 * 4 * 0.6) * 1e-6)
    one_shot = 7.7e-6 + 3 * (4 * 8192 * 2) / 450e9
    assert all(p.collective.algorithm == "one-shot" for p in ar)
    assert sum(p.seconds for p in ar) == pytest.approx(160 * one_shot)


def test_large_prefill_messages_switch_to_two_shot():
    d = deployment(load_model("llama-3.1-70b"), load_gpu("h100-sxm"), Workload(gpus=8))
    pre = d.prefill(d.rates("ceiling"), batch=1, prompt=8192, cached=0)
    ar = [p for p in pre.stages if p.collective is not None][0]
    size = 8192 * 8192 * 2  # tokens x hidden x 2 B = 134 MB
    assert ar.collective.payload_bytes == size
    assert ar.collective.algorithm in ("two-shot", "ring")
    assert ar.collective.seconds == pytest.approx(2 * 12.5e-6 + 2 * 7 / 8 * size / 450e9)


def test_kv_replicated_when_tp_exceeds_kv_heads_and_said_so():
    m, h100 = load_model("llama-3.1-8b"), load_gpu("h100-sxm")  # 8 KV heads, 32 query heads
    eight = estimate(m, h100, Workload(gpus=8))
    sixteen = estimate(m, h100, Workload(gpus=16), load_network("ib-ndr-400"))
    assert sixteen.memory.per_gpu.kv == eight.memory.per_gpu.kv  # one KV head per GPU at the least
    assert any("replicated on 2 GPUs" in w for w in sixteen.warnings)
    assert not any("replicated" in w for w in eight.warnings)


@pytest.mark.parametrize("gpus", [3, 5, 64])
def test_tp_that_does_not_divide_the_heads_is_refused_with_the_valid_degrees(gpus):
    with pytest.raises(UsageError, match="valid degrees: 1, 2, 4, 8, 16, 32"):
        estimate(load_model("llama-3.1-8b"), load_gpu("h100-sxm"), Workload(gpus=gpus))


def test_mla_kv_bytes_and_absorbed_decode_flops():
    # DeepSeek-V3: 61 layers x (512 latent + 64 rope) x 2 bytes = 70,272 B per token
    m = load_model("deepseek-v3")
    assert m.kv_bytes_per_token("bf16") == 61 * 576 * 2
    # absorbed decode: scores over latent + rope, values in the latent: 2 x 128 heads x (2 x 512 + 64) per layer
    d = deployment(m, load_gpu("h200"), Workload(weights_dtype="fp8"))
    rates = d.rates("ceiling")

    def attention_flops(cached: int) -> float:  # every layer kind (3 dense layers, 58 MoE layers)
        return sum(
            p.stage.count * p.stage.flops
            for p in stages_named(d.decode(rates, batch=1, cached=cached), "attention (KV cache read)")
        )

    per_cached_token = (attention_flops(2000) - attention_flops(1000)) / 1000
    assert per_cached_token == pytest.approx(2 * 128 * (2 * 512 + 64) * 61)
    assert per_cached_token / 1e6 == pytest.approx(17.0, abs=0.05)
    # 242 FLOP/B at TP 1: above the H200's bf16 ridge (989.4 / 4.8 = 206), so decode attention is compute-bound
    assert per_cached_token / (61 * 576 * 2) == pytest.approx(241.8, abs=0.1)
    big = d.decode(rates, batch=64, cached=4000)
    assert stages_named(big, "attention (KV cache read)")[0].bound == "compute"


def test_mla_prefill_on_a_cached_prefix_up_projects_it_or_scores_absorbed():
    # DeepSeek-V3 at TP 8 (16 heads a rank), a prompt of 8,000 tokens with 7,000 served from the cache. Per head
    # (vLLM's context chunks) each cached latent is up-projected to K (128) and V (128) for every head first:
    # 2 x 16 x 512 x 256 FLOPs per cached token and layer, on top of the 1,000 new tokens' projection
    m = load_model("deepseek-v3")
    d = deployment(m, load_gpu("h200"), Workload(tp=8, weights_dtype="fp8"))
    rates = d.rates("ceiling")

    def qkv(cached: int, new: int):
        return stages_named(d.prefill(rates, batch=1, prompt=cached + new, cached=cached), "QKV projection")[0].stage

    fresh, cached = qkv(0, 1000), qkv(7000, 1000)
    assert cached.flops - fresh.flops == pytest.approx(7000 * 2 * 16 * 512 * 256)
    assert cached.bytes_read - fresh.bytes_read == pytest.approx(7000 * 576 * 2)  # the 16-bit latents read once
    assert cached.bytes_written - fresh.bytes_written == pytest.approx(7000 * 16 * 256 * 2)  # K and V, 16 bits
    # absorbed, a pair costs 2 x 128 x (2 x 512 + 64) against 2 x 128 x (192 + 128) per head, and nothing is
    # up-projected: over 100,000 cached tokens per head is cheaper from 171 new tokens on, absorbed below
    # (pairs x (1,088 - 320) < 100,000 x 512 x 256, pairs = new x (100,000 + (new + 1) / 2))
    assert mla_absorbs(m, 170 * (100_000 + 171 / 2), 100_000)
    assert not mla_absorbs(m, 171 * (100_000 + 172 / 2), 100_000)
    assert qkv(100_000, 170).flops == pytest.approx(qkv(0, 170).flops)  # absorbed: no up-projection
    assert not mla_absorbs(m, 1000 * 500.5, 0)  # a fresh prompt: per head, nothing to up-project


def test_sliding_window_caps_the_cache():
    m = load_model("gemma-2-9b")  # 42 layers, every other one a 4096-token window
    full = 2 * 42 * 8 * 256 * 2
    assert m.kv_bytes_per_token() == full
    assert m.kv_cache_bytes(100_000) == pytest.approx((21 * 4096 + 21 * 100_000) / 42 * full)
    e = estimate(m, load_gpu("h200"), Workload(prompt_tokens=100_000 - 256, output_tokens=256))
    assert e.memory.per_gpu.kv == pytest.approx(m.kv_cache_bytes(100_000))


def test_cached_prefix_skips_its_compute_reads_its_kv_and_is_stored_once():
    m, h200 = load_model("llama-3.1-8b"), load_gpu("h200")
    d = deployment(m, h200, Workload())
    rates = d.rates("ceiling")
    cold, warm = d.prefill(rates, batch=1, prompt=2048, cached=0), d.prefill(rates, batch=1, prompt=2048, cached=1024)
    flops = lambda cost: sum(p.stage.count * p.stage.flops for p in cost.stages if p.stage.kind == "matmul")  # noqa: E731
    assert flops(warm) < 0.51 * flops(cold)
    kv = stages_named(warm, "attention (KV cache read)")[0].stage
    assert kv.count * (kv.bytes_read - 1024 * 4096 * 2) == 1024 * m.kv_bytes_per_token()  # cached KV + queries
    # memory: 8 sequences sharing a 1,024-token prefix hold it once: (1024 + 8 x (2048 + 256 - 1024)) tokens
    shared = estimate(m, h200, Workload(batch=8, prompt_tokens=2048, cached_prefix_tokens=1024))
    assert shared.memory.per_gpu.kv == (1024 + 8 * (2048 + 256 - 1024)) * m.kv_bytes_per_token()
    alone = estimate(m, h200, Workload(batch=8, prompt_tokens=2048))
    assert shared.memory.max_batch > alone.memory.max_batch


def test_tpot_is_the_mean_step_over_the_growing_context():
    m, g = load_model("llama-3.1-8b"), load_gpu("h100-sxm")
    wl = Workload(prompt_tokens=1000, output_tokens=9)
    e = estimate(m, g, wl)
    rates = e.deployment.rates("ceiling")
    steps = [e.deployment.decode(rates, batch=1, cached=c).seconds for c in range(1000, 1008)]  # cached P .. P + O - 2
    assert e.ceiling.tpot_s == pytest.approx(sum(steps) / len(steps), rel=1e-12)
    assert e.ceiling.e2e_s == pytest.approx(e.ceiling.ttft_s + 8 * e.ceiling.tpot_s)


def test_one_output_token_has_no_tpot():
    e = estimate(load_model("llama-3.1-8b"), load_gpu("h100-sxm"), Workload(output_tokens=1))
    assert e.ceiling.tpot_s is None and e.expected.tpot_s is None
    assert e.ceiling.decode_tokens_per_s is None and e.ceiling.usd_per_million_output_tokens is None
    assert e.ceiling.e2e_s == e.ceiling.ttft_s


def test_economics_by_hand():
    e = estimate(load_model("llama-3.1-8b"), load_gpu("h100-sxm"), Workload(batch=8, price_per_hour_usd=2.0))
    c = e.ceiling
    assert c.usd_per_million_output_tokens == pytest.approx(2.0 / 3600 * c.tpot_s / 8 * 1e6)
    assert c.usd_per_million_input_tokens == pytest.approx(2.0 / 3600 * c.ttft_s / (8 * 1024) * 1e6)
    assert c.joules_per_output_token == pytest.approx(700 * c.tpot_s / 8)
    assert c.decode_tokens_per_s == pytest.approx(8 / c.tpot_s)


def test_runtime_capacity_not_marketed_gigabytes():
    # an "80 GB" H100 reports 81,559 MiB = 85.52e9 B; the 70B on 4 GPUs at 1,024 + 256 tokens holds ~390, not ~346
    h100 = load_gpu("h100-sxm")
    assert h100.memory_bytes == 81_559 * 2**20
    m, wl = load_model("llama-3.1-70b"), Workload(gpus=4)
    e = estimate(m, h100, wl)
    d = e.deployment

    def used(batch: int) -> float:  # weights + KV + workspace (grows with the batch's logits) + 10% reserve
        return gpu_bytes(m, h100, d.precision, d.layout, wl, batch, 1024, 1280).total

    b = e.memory.max_batch
    assert used(b) <= h100.memory_bytes < used(b + 1)
    # KV over 4 ranks + the fp32 logits of the whole vocabulary (gathered on every rank) per sequence
    assert used(b) - used(b - 1) == pytest.approx(1280 * 327_680 / 4 + 128_256 * 4)
    assert 380 <= b <= 400
    ds = estimate(load_model("deepseek-v3"), load_gpu("h200"), Workload(gpus=8, weights_dtype="fp8"))
    assert 540 <= ds.memory.max_batch <= 580  # ~571 by the count, 473 with marketed GB


def test_doesnt_fit_is_a_result_with_the_smallest_layout():
    e = estimate(load_model("llama-3.1-70b"), load_gpu("h100-sxm"), Workload())
    assert not e.memory.fits and e.memory.max_batch == 0
    assert e.memory.min_gpus == 2 and e.memory.min_layout == "TP 2"
    assert estimate(load_model("llama-3.1-70b"), load_gpu("h100-sxm"), Workload(gpus=2)).memory.fits
    big = estimate(load_model("llama-3.1-405b"), load_gpu("h100-sxm"), Workload())
    assert big.memory.min_layout == "TP 8 x PP 2" and big.memory.min_gpus == 16


@pytest.mark.parametrize("engine", ["generic", "torch-compile"])
@pytest.mark.parametrize(("model", "gpu", "tp", "batch"), [("llama-2-70b", "h100-sxm", 2, 32),
                                                          ("llama-3.1-70b", "l4", 8, 1)])  # fmt: skip
def test_the_smallest_layout_named_fits_under_the_same_engine(engine, model, gpu, tp, batch):
    # the review of 2026-12-05: the search built its own layouts, so under torch-compile (the LM head and embedding
    # whole on every rank) it named TP 2 for a 70B that TP 2 does not hold
    profile, m, g = load_engine(engine), load_model(model), load_gpu(gpu)
    e = estimate(m, g, Workload(tp=tp, batch=batch), engine=profile)
    if e.memory.fits or e.memory.min_layout is None:
        return
    tp_pp = [int(x) for x in re.findall(r"\d+", e.memory.min_layout)] + [1]
    at = estimate(m, g, Workload(tp=tp_pp[0], pp=tp_pp[1], batch=batch), engine=profile)
    assert at.memory.fits and at.deployment.layout.gpus == e.memory.min_gpus


def test_moe_memory_holds_all_experts_but_reads_few():
    m = load_model("mixtral-8x7b")
    e = estimate(m, load_gpu("h200"), Workload())
    assert e.memory.per_gpu.weights == pytest.approx(m.params_total * 2)
    assert weight_bytes(e.ceiling.decode_step) < 0.3 * e.memory.per_gpu.weights


def test_deepseek_v3_expert_parallel_all_to_all_bytes_at_ep16():
    # EP 16 x DP 16 on 16 H100s, fp8 weights, batch 256 (16 sequences per DP rank). Each token sends hidden x 2 B to its
    # 8 experts; the busiest of 16 ranks receives mean + sigma sqrt(2 ln 16) token-expert pairs, 15/16 from other ranks.
    m = load_model("deepseek-v3")
    e = estimate(m, load_gpu("h100-sxm"), Workload(ep=16, dp=16, weights_dtype="fp8", batch=256),
                 load_network("ib-ndr-400"))  # fmt: skip
    step = e.ceiling.decode_step
    dispatch = stages_named(step, "expert dispatch (all-to-all)")[0]
    tokens, k, experts, ep = 256, 8, 256, 16
    mean = tokens * k / ep
    sigma = math.sqrt(tokens * k * (1 / ep) * (1 - 1 / ep) * (experts - k) / (experts - 1))
    pairs = mean + sigma * math.sqrt(2 * math.log(ep))
    # across 2 nodes a token crosses the network once per remote node hosting any of its 8 experts (DeepEP):
    # (1 - (1/2)^8) copies per token instead of 8/2 remote pairs; only FP8 compute dispatches at 1 B per element
    dedupe = (1 - 0.5**8) * 2 / 8
    dispatch_bytes = 1 if e.precision.compute == "fp8" else 2  # bf16 here: fp8 weights on H100 compute in bf16
    assert dispatch.collective.payload_bytes == pytest.approx(pairs * 7168 * dispatch_bytes * 15 / 16 * dedupe)
    combine = stages_named(step, "expert combine (all-to-all)")[0]
    assert combine.collective.payload_bytes == pytest.approx(pairs * 7168 * 2 * 15 / 16 * dedupe)  # bf16 back
    assert dispatch.stage.count == 58  # MoE layers
    assert dispatch.collective.path.nodes == 2  # 16 GPUs on nodes of 8: half the volume crosses the network
    assert e.memory.fits and e.layout.gpus == 16


def test_expert_parallel_under_tp_alone_all_reduces_and_moves_no_tokens():
    # Mixtral at TP 2 x EP 2, no DP attention: both ranks hold every token (the attention's all-reduce gave them),
    # each runs the tokens routed to its own 4 experts, and their partial sums are all-reduced, as vLLM runs it
    # (FusedMoEParallelConfig.use_all2all_kernels = dp_size > 1 and use_ep); an audit found dispatch and combine priced
    m, g = load_model("mixtral-8x7b"), load_gpu("h100-sxm")
    e = estimate(m, g, Workload(tp=2, ep=2, batch=8))
    step = e.ceiling.decode_step
    assert not stages_named(step, "expert dispatch (all-to-all)") and not stages_named(
        step, "expert combine (all-to-all)"
    )
    (reduce,) = stages_named(step, "MoE all-reduce")
    assert reduce.collective.payload_bytes == 8 * 4096 * 2 and reduce.collective.ranks == 2  # tokens x hidden, bf16
    # with DP attention the ranks hold different tokens, and they cross in all-to-alls
    spread = estimate(m, g, Workload(dp=2, ep=2, batch=8)).ceiling.decode_step
    assert stages_named(spread, "expert dispatch (all-to-all)") and not stages_named(spread, "MoE all-reduce")


@pytest.mark.parametrize(("tp", "links"), [(2, 1), (4, 3), (8, 7)])
def test_a_fully_connected_xgmi_group_reaches_its_peers_links_only(tp, links):
    # MI300X: one 64 GB/s point-to-point xGMI link to each of 7 peers (448 GB/s the 7 together); a group of n GPUs
    # drives its n - 1 peers' links, a TP 2 pair one (ROCm blog, 2025-03-02); before, every group got all 448
    e = estimate(load_model("llama-3.1-70b"), load_gpu("mi300x"), Workload(tp=tp, batch=8))
    (reduce, *_) = stages_named(e.ceiling.decode_step, "attention all-reduce")
    assert reduce.collective.path.bytes_per_s == pytest.approx(links * 64e9)
    usable = e.deployment.links.path(tp, e.layout, expected=True).bytes_per_s
    assert usable == pytest.approx(links * 48e9)  # RCCL's usable 48 of each link's 64 GB/s (efficiency 0.75)


def test_pipeline_bubble_for_llama_405b_at_pp2_tp8():
    # one prompt through 2 stages: m = 1 microbatch, so TTFT = the first stage then the second; decode at batch 8
    # cycles m = pp = 2 microbatches through the slowest stage
    e = estimate(load_model("llama-3.1-405b"), load_gpu("h100-sxm"), Workload(tp=8, pp=2), load_network("ib-ndr-400"))
    pre = e.ceiling.prefill
    first_s, last_s = pre.every_stage_s
    assert (pre.pp, pre.microbatches) == (2, 1) and pre.stage_seconds == max(first_s, last_s)
    assert pre.seconds == pytest.approx(first_s + last_s)
    first = pipeline_stages(e.model, e.precision, e.layout, [Segment(1, 0, 1024)])[0]
    send = [s for s in first if s.name == "send to next stage"]
    assert send and send[0].payload_bytes == 1024 * 16384 * 2
    batched = estimate(load_model("llama-3.1-405b"), load_gpu("h100-sxm"), Workload(tp=8, pp=2, batch=8),
                       load_network("ib-ndr-400"))  # fmt: skip
    pre = batched.ceiling.prefill
    assert pre.microbatches == 2 and pre.seconds == pytest.approx(sum(pre.every_stage_s) + pre.stage_seconds)
    step = batched.ceiling.decode_step
    assert step.microbatches == 2 and step.seconds == pytest.approx(2 * step.stage_seconds)
    # the turns the pipeline adds to the slowest stage's one (the journey's count): the other stage and one more
    # microbatch from empty; one more microbatch in steady decode
    assert (e.ceiling.prefill.extra_turns, pre.extra_turns, step.extra_turns) == (1, 2, 1)


def test_a_token_through_unbalanced_pipeline_stages_pays_each_stage_once():
    # Gemma-3-12B in 8 stages of 6 layers; the last also reads the tied 262,208 x 3,840 embedding as its LM head
    # (2.01 GB at 16 bits, a third more than 6 layers). At batch 1 a token passes the 8 stages in turn, so the step
    # reads every weight once, as one GPU would: not 8 times the last stage's time
    model, gpu = load_model("gemma-3-12b"), load_gpu("h100-sxm")
    one = estimate(model, gpu, Workload(), load_network("ib-ndr-400")).ceiling.decode_step
    piped = estimate(model, gpu, Workload(pp=8), load_network("ib-ndr-400")).ceiling.decode_step
    times = piped.every_stage_s
    assert len(times) == 8 and max(times) == times[-1] > 1.5 * times[0]
    assert piped.seconds == pytest.approx(sum(times))
    # the same bytes; the 7 hops of 3,840 x 2 B hide behind the kernels in the ceiling
    assert piped.seconds == pytest.approx(one.seconds, rel=1e-9)
    assert piped.seconds < 0.7 * 8 * max(times)


def test_pcie_tensor_parallel_for_llama_70b_int4_on_two_rtx_4090s():
    g = load_gpu("rtx-4090")
    e = estimate(load_model("llama-3.1-70b"), g, Workload(tp=2, weights_dtype="int4"))
    comm = e.ceiling.decode_step.part("communication")
    assert comm.seconds > 0 and e.memory.fits
    ar = [p for p in e.ceiling.decode_step.stages if p.collective is not None][0]
    assert ar.collective.path.name in (g.link.name, g.link.kind)
    # one-shot on PCIe: latency + 1 x (8192 x 2 B) / link bandwidth, per all-reduce; the latency is a pair's:
    # 42.1 us measured on 8 GPUs less 2 x 1.0 us (NCCL's PCIe hop) for each of the 6 GPUs fewer = 30.1 us
    assert ar.collective.seconds == pytest.approx(30.1e-6 + 8192 * 2 / g.link.bytes_per_s)


def test_vllm_a40_kv_blocks_for_llama_3_8b():
    # vllm-project/vllm issue 6623: vLLM 0.5.2 on an A40 (46,068 MiB) at gpu_memory_utilization 0.9 allocated 13,078
    # blocks of 16 tokens = 209,248 tokens of KV for Llama-3-8B. tokcost's capacity after weights and the 10%
    # reserve, with no activation workspace, lands within 0.1%; its 8,192-token prefill workspace costs 2.7% more.
    from tokcost.engine.step import kv_capacity

    m, a40 = load_model("llama-3-8b"), load_gpu("a40")
    assert a40.memory_runtime_mib == 46_068
    bare = kv_capacity(m, a40, Workload(prompt_tokens=1, output_tokens=1))
    assert bare == pytest.approx(209_248, rel=0.001)
    with_workspace = kv_capacity(m, a40, Workload(prompt_tokens=8192, output_tokens=1))
    assert with_workspace == pytest.approx(209_248, rel=0.03) and with_workspace < bare


def test_int4_compute_runs_at_the_int4_peak_where_the_gpu_lists_one():
    # the A100's dense INT4 tensor peak is 1,248 TOPS (datasheet); the H100 lists none, so it is refused
    m = load_model("llama-3.1-8b")
    e = estimate(m, load_gpu("a100-80gb-sxm"), Workload(weights_dtype="int4", compute_dtype="int4"))
    qkv = stages_named(e.ceiling.prefill, "QKV projection")[0]
    assert qkv.compute_s == pytest.approx(qkv.stage.count * qkv.stage.flops / 1248e12)
    with pytest.raises(UsageError, match="no dense peak for int4"):
        estimate(m, load_gpu("h100-sxm"), Workload(weights_dtype="int4", compute_dtype="int4"))


def test_prefill_moves_the_mlp_intermediate_once_each_way():
    # the gate/up matmul writes the SwiGLU output (I per token) and the down projection reads it back: with the
    # hidden input read and output written, the MLP kernel's activations are T x (h + I) read and T x (I + h) written
    m = load_model("llama-3.1-8b")
    d = deployment(m, load_gpu("h100-sxm"), Workload())
    mlp = stages_named(d.prefill(d.rates("ceiling"), batch=1, prompt=2048, cached=0), "MLP (gate, up, down)")[0].stage
    h, inter, t = 4096, 14336, 2048
    assert mlp.bytes_read == 3 * h * inter * 2 + t * (h + inter) * 2
    assert mlp.bytes_written == t * (inter + h) * 2


def test_expert_parallel_busiest_rank_reads_whole_experts():
    # Mixtral at EP 8: each rank holds one whole expert (3 x 4,096 x 14,336 = 176.2M params, 352.3 MB at bf16); a
    # batch-1 token's two experts sit on two ranks, and each reads all of its expert in every layer: 32 x 352.3 MB
    # on the busiest rank (it was charged a quarter, the mean over ranks), as TP 8 reads an eighth of both (2/8)
    from tokcost.engine.features import busiest_rank_experts

    expert_bytes = 3 * 4096 * 14336 * 2
    e = estimate(load_model("mixtral-8x7b"), load_gpu("h100-sxm"), Workload(tp=8, ep=8))
    rows = {p.stage.name: p for p in e.ceiling.decode_step.stages}
    assert rows["routed experts"].stage.weight_bytes == pytest.approx(expert_bytes, rel=1e-6)
    tp = estimate(load_model("mixtral-8x7b"), load_gpu("h100-sxm"), Workload(tp=8))
    tp_rows = {p.stage.name: p for p in tp.ceiling.decode_step.stages}
    assert tp_rows["routed experts"].stage.weight_bytes == pytest.approx(2 * expert_bytes / 8, rel=1e-6)
    # DeepSeek-V3 at EP 8, batch 8: ~13.3 pairs on the busiest rank's 32 experts touch 32 (1 - (31/32)^13.3) = 11.0
    assert busiest_rank_experts(32, 13.32, 57.4 / 8) == pytest.approx(32 * (1 - (31 / 32) ** 13.32))
    assert busiest_rank_experts(256, 512, 222.44) == 222.44  # one rank: the whole model's distinct count


def test_an_all_reduce_across_nodes_of_one_gpu_each_has_no_step_inside_a_node():
    # hierarchical all-reduce: 2 NVLink latencies inside each node (g GPUs), then 2 (nodes - 1) network latencies and
    # the S/g share across; with one GPU a node there is nothing to reduce inside it
    path = Path("ib-ndr-400", 50e9, 5e-6, nodes=2, intra_bytes_per_s=450e9, intra_latency_s=12.5e-6)
    (one_a_node,) = allreduce_lines(2, path)
    assert one_a_node.seconds(8192) == pytest.approx(2 * 5e-6 + 2 * 1 / 2 * 8192 / 50e9)
    (four_a_node,) = allreduce_lines(8, path)
    assert four_a_node.seconds(8192) == pytest.approx(2 * 12.5e-6 + 2 * 5e-6 + 2 * 3 / 4 * 8192 / 450e9
                                                      + 2 * 1 / 2 * 8192 / 4 / 50e9)  # fmt: skip
    # the bytes one GPU puts on the links: its NVLink legs (2 (g - 1)/g S) and its NIC's share (2 (N - 1)/N S/g); an
    # audit found the NVLink legs left out of "collectives moving ... per GPU over the links"
    assert four_a_node.link_bytes_per_byte == pytest.approx(2 * 3 / 4 + 2 * 1 / 2 / 4)
    assert one_a_node.link_bytes_per_byte == pytest.approx(2 * 1 / 2)


@pytest.mark.parametrize("tp", [1, 2])
def test_a_vision_tower_is_held_in_memory_and_never_read_by_decode(tp):
    # Gemma-3-27B's SigLIP tower and projector (423,060,336 parameters, at bf16) sit on the GPUs beside the decoder
    # (a server loads them to read images), sharded over TP; a decode step reads none of them
    model, gpu = load_model("gemma-3-27b"), load_gpu("h100-sxm")
    text_only = model.model_copy(update={"encoder_params": 0})
    with_tower = estimate(model, gpu, Workload(tp=tp))
    without = estimate(text_only, gpu, Workload(tp=tp))
    tower_bytes = 423_060_336 * 2
    assert with_tower.memory.per_gpu.weights - without.memory.per_gpu.weights == pytest.approx(tower_bytes / tp)
    assert with_tower.memory.weights_bytes_total - without.memory.weights_bytes_total == pytest.approx(tower_bytes)
    assert with_tower.ceiling.tpot_s == without.ceiling.tpot_s


def test_a_gpu_that_lists_only_an_fp32_peak_prices_an_fp32_run():
    # a CPU calibrated at --dtype fp32 lists peak_tflops {fp32: ...}: the ceiling's 16-bit path asked it for a bf16
    # peak and refused every estimate ("lists no dense peak for bf16"); with no 16-bit peak there is no such path
    cpu = GpuSpec(name="cpu-fp32", source="test", memory_gb=64, memory_bandwidth_gb_s=20, peak_tflops={"fp32": 0.07})
    wl = Workload(weights_dtype="fp32", kv_dtype="fp32", compute_dtype="fp32", prompt_tokens=16, output_tokens=4)
    got = estimate(load_model("llama-3.2-1b").at_dtype("fp32"), cpu, wl)
    # decode is memory-bound: every weight but the embedding table, 4 bytes each, over 20 GB/s
    m = load_model("llama-3.2-1b")
    read = (m.params_total - (0 if m.tied_embeddings else m.params_embedding)) * 4
    assert got.ceiling.tpot_s == pytest.approx(read / 20e9, rel=0.01)


def test_nvfp4_runs_at_fp4_on_blackwell_and_dequantized_on_cdna4():
    # NVFP4's FP8 E4M3 scale per 16 weights is Blackwell's; MI355X's FP4 instructions take the MX formats (E8M0 per
    # 32): an audit found NVFP4 priced at MI355X's 10 PFLOP/s FP4 peak, a prefill 3.8x too short
    model = load_model("llama-3.1-70b")
    amd = estimate(model, load_gpu("mi355x"), Workload(weights_dtype="nvfp4"))
    assert amd.precision.compute == "bf16"
    assert estimate(model, load_gpu("mi355x"), Workload(weights_dtype="fp4")).precision.compute == "fp4"  # MXFP4
    assert estimate(model, load_gpu("b200"), Workload(weights_dtype="nvfp4")).precision.compute == "fp4"
    # the prefill of 1,024 tokens at the bf16 peak: 2 x linear params x tokens / 2,516.6 TFLOP/s, plus attention
    linear = 2 * (model.params_active - model.params_embedding) * 1024 / 2516.6e12
    assert amd.ceiling.ttft_s == pytest.approx(linear, rel=0.03)
