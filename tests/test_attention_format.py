"""A checkpoint that keeps attention's projections apart from its other block linears (Meta's Llama-3.1-405B FP8:
FP8 MLPs, BF16 attention) is priced as shipped: its weights in memory and in each step's reads, by hand."""

from __future__ import annotations

import pytest

from tokcost.engine.blocks import attention_params_per_rank
from tokcost.engine.estimate import deployment, estimate
from tokcost.engine.memory import memory_report
from tokcost.engine.workload import Workload, resolve_precision
from tokcost.hardware.library import load_gpu
from tokcost.models.library import load_model

WL = Workload(batch=1, prompt_tokens=128, output_tokens=16, tp=8)


def _weights_per_gpu(model_name: str, weights: str | None = None) -> float:
    model, gpu = load_model(model_name), load_gpu("h100-sxm")
    wl = WL.model_copy(update={"weights_dtype": weights})
    d = deployment(model, gpu, wl)
    return memory_report(model, gpu, wl, d.precision, d.layout).per_gpu.weights


def test_meta_fp8_checkpoint_keeps_attention_at_16_bits():
    meta, plain = load_model("llama-3.1-405b-fp8"), load_model("llama-3.1-405b")
    p = resolve_precision(meta, WL)
    assert (p.weights, p.attention, p.compute) == ("fp8", "bf16", "fp8")
    # against the same shapes all at FP8: each attention weight holds one more byte, 126 layers of q/k/v/o per rank
    qkv, out = attention_params_per_rank(plain, 8)
    assert qkv == 16384 * (16384 + 2 * 1024) / 8 and out == 16384 * 16384 / 8
    extra = 126 * (qkv + out) * (2 - 1)
    assert _weights_per_gpu("llama-3.1-405b-fp8") - _weights_per_gpu("llama-3.1-405b", "fp8") == pytest.approx(extra)
    assert extra == pytest.approx(8.99e9, rel=1e-3)  # 71.9B attention params / 8 GPUs x 1 byte


def test_a_decode_step_reads_attention_at_its_own_format():
    model, gpu = load_model("llama-3.1-405b-fp8"), load_gpu("h100-sxm")
    e = estimate(model, gpu, WL)
    formats = {s.stage.name: s.stage.weight_format for s in e.ceiling.decode_step.stages}
    assert formats["QKV projection"] == formats["output projection"] == "bf16"
    assert formats["MLP (gate, up, down)"] == "fp8"
    plain = estimate(load_model("llama-3.1-405b"), gpu, WL.model_copy(update={"weights_dtype": "fp8"}))
    read = sum(s.stage.count * s.stage.weight_bytes for s in e.ceiling.decode_step.stages)
    read_plain = sum(s.stage.count * s.stage.weight_bytes for s in plain.ceiling.decode_step.stages)
    qkv, out = attention_params_per_rank(model, 8)
    assert read - read_plain == pytest.approx(126 * (qkv + out))  # the same extra byte per attention weight
    assert e.ceiling.tpot_s > plain.ceiling.tpot_s


def test_weights_naming_the_shipped_format_keep_it_as_shipped_another_requantizes_all():
    meta = load_model("llama-3.1-405b-fp8")
    assert resolve_precision(meta, WL.model_copy(update={"weights_dtype": "fp8"})).attention == "bf16"
    p = resolve_precision(meta, WL.model_copy(update={"weights_dtype": "int4"}))
    assert (p.weights, p.attention) == ("int4", "int4")
    assert resolve_precision(load_model("llama-3.1-8b"), WL).attention == "bf16"  # no split: at the weights' format
