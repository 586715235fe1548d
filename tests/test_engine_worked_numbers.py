"""The worked numbers of DESIGN.md and the engine issue, each reproduced exactly from the specs."""

from __future__ import annotations

import pytest

from tokcost.engine.estimate import estimate
from tokcost.engine.traffic import decode_counts, expected_distinct_experts, matmul_params_per_token, prefill_counts
from tokcost.engine.workload import Workload, resolve_precision
from tokcost.hardware.library import load_gpu
from tokcost.hardware.spec import GpuSpec
from tokcost.models.library import load_model
from tokcost.models.spec import ModelSpec


def gpu_with(bandwidth_gb_s: float, bf16_tflops: float = 989.4, memory_gb: float = 80) -> GpuSpec:
    return GpuSpec(
        name="test-gpu", source="test", memory_gb=memory_gb, memory_bandwidth_gb_s=bandwidth_gb_s,
        peak_tflops={"bf16": bf16_tflops, "fp16": bf16_tflops, "fp8": 2 * bf16_tflops}, tdp_w=700,
        link={"kind": "nvlink4", "gb_s": 450, "latency_us": 5, "source": "test"},
    )  # fmt: skip


def seven_b(dtype: str = "fp16") -> ModelSpec:
    """A 7.0B-parameter block stack with no embedding: isolates the '7B at 16 bits' arithmetic."""
    # 32 layers x (4 x 4096^2 attention + 3 x 4096 x 12,340 MLP) + norms = 7.0e9
    return ModelSpec(
        name="seven-b", layers=32, hidden_size=4096, attention_heads=32, kv_heads=32, intermediate_size=12_340,
        vocab_size=1, tied_embeddings=True, max_context=4096, dtype=dtype,
    )  # fmt: skip


def test_7b_at_16_bits_on_3000_gb_s_is_214_tokens_per_s():
    # DESIGN.md: 3000 GB/s / 14 GB per token = ~214 tokens/s
    m = seven_b()
    assert m.params_total / 1e9 == pytest.approx(7.0, rel=0.001)
    e = estimate(m, gpu_with(3000), Workload(prompt_tokens=1, output_tokens=2))
    weights = e.ceiling.decode_step.part("weights")
    assert weights.bytes == pytest.approx(14.0e9, rel=0.001)
    assert e.ceiling.decode_tokens_per_s == pytest.approx(214, rel=0.01)


def test_llama_2_7b_real_shapes_give_227_tokens_per_s():
    # the issue: with the real Llama-2-7B shapes, 13.21 GB of decode weights (embedding rows not read): 227
    e = estimate(load_model("llama-2-7b"), gpu_with(3000), Workload(prompt_tokens=1, output_tokens=2))
    assert e.ceiling.decode_step.part("weights").bytes / 1e9 == pytest.approx(13.21, abs=0.005)
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
    m = seven_b()
    p = resolve_precision(m, Workload())
    per_step = decode_counts(m, p, batch=1, context=1, gpus=1).weight_bytes
    assert 500 * per_step / 1e12 == pytest.approx(7.0, rel=0.002)


def test_llama_2_7b_prefill_1024_on_h100_is_compute_bound_14_ms():
    e = estimate(load_model("llama-2-7b"), load_gpu("h100-sxm"), Workload(prompt_tokens=1024, output_tokens=2))
    assert e.ceiling.prefill_bound == "compute"
    assert e.ceiling.ttft_s * 1e3 == pytest.approx(14, rel=0.05)
    # by hand: FLOPs = 2 x matmul params x 1024 + causal attention 4 x L x H x D x (1024 x 1025 / 2)
    m = load_model("llama-2-7b")
    body = matmul_params_per_token(m) - m.vocab_size * m.hidden_size
    by_hand = 2 * body * 1024 + 2 * m.vocab_size * m.hidden_size + 4 * 32 * 32 * 128 * 1024 * 1025 / 2
    assert e.ceiling.prefill.flops == pytest.approx(by_hand, rel=1e-12)


def test_h100_critical_batch_for_16_bit_weights_at_short_context_is_about_295():
    # ridge = 989.4 TFLOP/s / 3.35 TB/s = 295 FLOP/byte; 16-bit weights do 1 FLOP/byte per sequence
    h100 = load_gpu("h100-sxm")
    assert h100.peak_flops_per_s("bf16") / h100.bandwidth_bytes_per_s == pytest.approx(295.3, abs=0.1)
    e = estimate(load_model("llama-3.1-8b"), h100, Workload(prompt_tokens=1, output_tokens=2))
    assert e.critical_batch == pytest.approx(295, rel=0.03)


def test_long_context_gqa_never_turns_compute_bound():
    e = estimate(load_model("llama-3.1-8b"), load_gpu("h100-sxm"), Workload(prompt_tokens=32_000, output_tokens=256))
    assert e.critical_batch is None


def test_mixtral_batch_32_reads_3_65x_the_weights_of_batch_1():
    # uniform routing: distinct experts 8 x (1 - (6/8)^B); B=1 -> 2, B=32 -> ~8
    m = load_model("mixtral-8x7b")
    p = resolve_precision(m, Workload())
    one = decode_counts(m, p, batch=1, context=1, gpus=1).weight_bytes
    many = decode_counts(m, p, batch=32, context=1, gpus=1).weight_bytes
    assert expected_distinct_experts(8, 2, 1) == 2
    assert many / one == pytest.approx(3.65, abs=0.02)


def test_decode_flops_are_about_2_x_params_per_token():
    # Kaplan et al. 2020: forward pass ~ 2N FLOPs per token (N without the embedding lookup)
    m = load_model("llama-3.1-8b")
    p = resolve_precision(m, Workload())
    counts = decode_counts(m, p, batch=1, context=1, gpus=1)
    assert counts.matmul_flops == 2 * (m.params_total - m.params_embedding - m.params_norms)


def test_tensor_parallel_divides_weights_and_adds_two_allreduces_per_layer():
    m, p = load_model("llama-3.1-70b"), resolve_precision(load_model("llama-3.1-70b"), Workload())
    one = decode_counts(m, p, batch=4, context=1000, gpus=1)
    four = decode_counts(m, p, batch=4, context=1000, gpus=4)
    assert four.weight_bytes == pytest.approx(one.weight_bytes / 4)
    assert four.kv_read_bytes == pytest.approx(one.kv_read_bytes / 4)  # 8 KV heads split over 4 GPUs
    assert four.allreduces == 2 * 80 and one.allreduces == 0
    e = estimate(m, load_gpu("h100-sxm"), Workload(gpus=4, batch=4))
    comm = e.ceiling.decode_step.part("communication")
    # ring: 2 (n-1)/n x (4 x 8192 x 2 bytes) / 450 GB/s + 5 us, 160 times
    assert comm.seconds == pytest.approx(160 * (2 * 3 / 4 * 4 * 8192 * 2 / 450e9 + 5e-6))


def test_kv_replicated_when_gpus_exceed_kv_heads():
    m = load_model("llama-3.1-8b")  # 8 KV heads
    p = resolve_precision(m, Workload())
    eight = decode_counts(m, p, batch=1, context=1000, gpus=8).kv_read_bytes
    sixteen = decode_counts(m, p, batch=1, context=1000, gpus=16).kv_read_bytes
    assert sixteen == eight  # one KV head per GPU at the least


def test_mla_kv_bytes():
    # DeepSeek-V3: 61 layers x (512 latent + 64 rope) x 2 bytes = 70,272 B per token
    assert load_model("deepseek-v3").kv_bytes_per_token("bf16") == 61 * 576 * 2


def test_sliding_window_caps_the_cache():
    m = load_model("gemma-2-9b")  # 42 layers, every other one a 4096-token window
    full = 2 * 42 * 8 * 256 * 2
    assert m.kv_bytes_per_token() == full
    assert m.kv_cache_bytes(100_000) == pytest.approx((21 * 4096 + 21 * 100_000) / 42 * full)


def test_cached_prefix_skips_its_compute_but_reads_its_kv():
    m = load_model("llama-3.1-8b")
    p = resolve_precision(m, Workload())
    cold = prefill_counts(m, p, batch=1, prompt=2048, cached=0, gpus=1)
    warm = prefill_counts(m, p, batch=1, prompt=2048, cached=1024, gpus=1)
    assert warm.matmul_flops < 0.51 * cold.matmul_flops
    assert warm.kv_read_bytes == 1024 * m.kv_bytes_per_token()


def test_tpot_integrates_over_the_growing_context():
    m, g = load_model("llama-3.1-8b"), load_gpu("h100-sxm")
    wl = Workload(prompt_tokens=1000, output_tokens=9)
    e = estimate(m, g, wl)
    from tokcost.engine.estimate import decode_step
    from tokcost.engine.roofline import ceiling_rates

    rates = ceiling_rates(g, "bf16")
    steps = [decode_step(m, wl, e.precision, rates, c).seconds for c in range(1001, 1009)]
    assert e.ceiling.tpot_s == pytest.approx(sum(steps) / len(steps), rel=1e-12)
    assert e.ceiling.e2e_s == pytest.approx(e.ceiling.ttft_s + 8 * e.ceiling.tpot_s)


def test_economics_by_hand():
    e = estimate(load_model("llama-3.1-8b"), load_gpu("h100-sxm"), Workload(batch=8, price_per_hour_usd=2.0))
    c = e.ceiling
    assert c.usd_per_million_output_tokens == pytest.approx(2.0 / 3600 * c.tpot_s / 8 * 1e6)
    assert c.usd_per_million_input_tokens == pytest.approx(2.0 / 3600 * c.ttft_s / (8 * 1024) * 1e6)
    assert c.joules_per_output_token == pytest.approx(700 * c.tpot_s / 8)
    assert c.decode_tokens_per_s == pytest.approx(8 / c.tpot_s)


def test_doesnt_fit_is_a_result_with_min_gpus():
    e = estimate(load_model("llama-3.1-70b"), load_gpu("h100-sxm"), Workload())
    assert not e.memory.fits and e.memory.max_batch == 0
    assert e.memory.min_gpus == 2
    assert estimate(load_model("llama-3.1-70b"), load_gpu("h100-sxm"), Workload(gpus=2)).memory.fits


def test_moe_memory_holds_all_experts_but_reads_few():
    e = estimate(load_model("mixtral-8x7b"), load_gpu("h200"), Workload())
    assert e.memory.weights_bytes == pytest.approx(load_model("mixtral-8x7b").params_total * 2)
    assert e.ceiling.decode_step.part("weights").bytes < 0.3 * e.memory.weights_bytes


def test_truncated_spec_recounts_its_parameters():
    m = load_model("llama-3.1-8b")
    assert m.params_total > 0  # fill the cached counts first
    two = m.truncated(2)
    assert two.layers == 2
    assert two.params_total == 2 * (m.params_attention_per_layer + m.params_dense_mlp_per_layer) + (
        5 * m.hidden_size + m.params_embedding + m.params_lm_head
    )
    ds = load_model("deepseek-v3").truncated(2)
    assert ds.moe.dense_layers == 2 and ds.moe_layers == 0
