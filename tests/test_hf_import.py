"""HuggingFace config.json import: one real config per model_type (tests/assets/hf, see EXPECTED.md there)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tokcost.errors import SpecError
from tokcost.models.hf_import import TESTED, from_hf_config
from tokcost.models.hf_quant import attention_kept
from tokcost.models.library import load_model, name_from_path

HF = Path(__file__).parent / "assets" / "hf"

# Terms counted since the import matches transformers' own count (issue 23): each family's extra weights
QWEN2_MOE_GATES = 24 * 2048  # shared_expert_gate: hidden -> 1 per MoE layer
QK_NORMS = {"qwen3": 36 * 2 * 128, "qwen3_moe": 48 * 2 * 128}  # q_norm and k_norm over one head, per layer
GEMMA2_POST_NORMS = 42 * 2 * 3584  # post-attention and post-feedforward norms
# gpt-oss: o_proj bias, sinks per head, router bias per expert, expert biases (gate_up 2 x 2880 and down 2880)
GPT_OSS_BIASES = 24 * (2880 + 64 + 32 + 32 * (2 * 2880 + 2880))

# (file, layers, hidden, heads, kv_heads, head_dim, tied, derived params_total) from EXPECTED.md
SHAPES = [
    ("llama", 16, 2048, 32, 8, 64, True, 1_235_814_400),
    ("mistral", 32, 4096, 32, 8, 128, False, 7_241_732_096),
    ("mixtral", 32, 4096, 32, 8, 128, False, 46_702_792_704),
    ("qwen2", 28, 3584, 28, 4, 128, False, 7_615_616_512),
    ("qwen2_moe", 24, 2048, 16, 16, 128, False, 14_315_735_040 + QWEN2_MOE_GATES),
    ("qwen3", 36, 4096, 32, 8, 128, False, 8_190_726_144 + QK_NORMS["qwen3"]),
    ("qwen3_moe", 48, 2048, 32, 4, 128, False, 30_532_110_336 + QK_NORMS["qwen3_moe"]),
    ("deepseek_v3", 61, 7168, 128, 128, 56, False, 671_026_404_352),
    ("gemma2", 42, 3584, 16, 8, 256, True, 9_241_404_928 + GEMMA2_POST_NORMS),
    ("phi3", 32, 3072, 32, 32, 96, False, 3_821_079_552),
    ("gpt_oss", 24, 2880, 64, 8, 64, False, 20_908_050_240 + GPT_OSS_BIASES),
]


def load(name: str):
    path = HF / f"{name}.json"
    return from_hf_config(json.loads(path.read_text()), str(path), name=name)


def test_every_fixture_is_a_type_whose_count_is_tested():
    assert {p.stem for p in HF.glob("*.json")} <= set(TESTED)


@pytest.mark.parametrize(("name", "layers", "hidden", "heads", "kv", "head_dim", "tied", "total"), SHAPES)
def test_shapes_and_counts(name, layers, hidden, heads, kv, head_dim, tied, total):
    m = load(name)
    assert (m.layers, m.hidden_size, m.attention_heads, m.kv_heads, m.head_dim) == (layers, hidden, heads, kv, head_dim)
    assert m.tied_embeddings is tied
    assert m.params_total == total


def test_moe_fields():
    assert load("mixtral").moe.model_dump(exclude_defaults=True) == {
        "experts": 8, "experts_per_token": 2, "expert_intermediate_size": 14336
    }  # fmt: skip
    q2 = load("qwen2_moe").moe
    assert (q2.experts, q2.experts_per_token, q2.shared_experts, q2.shared_expert_intermediate_size) == (60, 4, 1, 5632)
    assert load("qwen2_moe").params_active == 2_689_124_352 + QWEN2_MOE_GATES
    ds = load("deepseek_v3")
    assert (ds.moe.experts, ds.moe.experts_per_token, ds.moe.shared_experts, ds.moe.dense_layers) == (256, 8, 1, 3)
    assert ds.moe.dense_intermediate_size == 18432 and ds.moe.expert_intermediate_size == 2048
    assert load("gpt_oss").moe.expert_dtype == "fp4"
    assert load("qwen3_moe").params_active == 3_353_020_416 + QK_NORMS["qwen3_moe"]


def test_ernie_and_qwen3_coder_read_their_own_moe_keys():
    # ERNIE-4.5-21B-A3B: layer 0 dense, MoE from moe_layer_start_index on, 2 shared experts of moe_intermediate_size
    # (its own key names): it had made every layer MoE and dropped the shared experts, active 2.69B against 3.35B
    path = HF / "new" / "ernie-4.5-21b-a3b.json"
    ernie = from_hf_config(json.loads(path.read_text()), str(path))
    assert (ernie.moe.experts, ernie.moe.experts_per_token, ernie.moe.shared_experts) == (64, 6, 2)
    assert [k.mlp for k in ernie.plan.kinds][:2] == ["dense", "moe"] and ernie.moe.dense_layers == 1
    h, inter, wide = 2560, 1536, 12288  # by hand: embedding (tied) + attention + 1 dense MLP + 27 MoE layers' active
    attention = 28 * (h * 2560 * 2 + h * 512 * 2)
    active_moe = 27 * ((6 + 2) * 3 * h * inter + h * 64 + 64)  # 6 routed + 2 shared experts, router and its bias
    by_hand = 103424 * h + attention + 3 * h * wide + active_moe + (2 * 28 + 1) * h
    assert ernie.params_active == by_hand
    # Qwen3-Coder-480B states shared_expert_intermediate_size 0: no shared expert (it was refused as out of range)
    path = HF / "new" / "qwen3-coder-480b-a35b.json"
    coder = from_hf_config(json.loads(path.read_text()), str(path))
    assert coder.moe.shared_experts == 0 and coder.params_total == 480_154_875_392  # transformers' meta-device count


def test_qwen3_5_gates_its_attention_and_its_moe_needs_no_dense_width():
    # Qwen3.5's attention doubles q_proj (query and gate) with q/k norms, as Qwen3-Next's; its MoE routes every MLP
    # and states no intermediate_size (it was refused for want of one): the experts' width stands in, unused
    dense, moe = load("new/qwen3.5-27b"), load("new/qwen3.5-35b-a3b")
    assert dense.attention_gate and dense.qk_norm and moe.attention_gate and moe.moe.shared_expert_gate
    assert moe.intermediate_size == moe.moe.expert_intermediate_size == 512 and moe.dense_mlp_layers == 0
    assert "no dense MLP layer" in moe.notes
    # transformers' meta-device counts of the text models (tests/test_hf_meta_counts.py holds them layer by layer)
    assert (dense.params_total, moe.params_total) == (26_895_998_464, 34_660_610_688)


def test_mla_heads_need_no_head_dim_that_divides_the_hidden_size():
    # GLM-4.7-Flash: 20 MLA heads over a hidden size of 2,048; the heads' widths are MLA's (qk 192 + 64, v 256), so
    # "not a multiple of num_attention_heads; state head_dim" refused a config that states all it needs
    m = load("new/glm-4.7-flash")
    assert (m.mla.kv_lora_rank, m.mla.rope_head_dim, m.mla.v_head_dim) == (512, 64, 256)
    assert m.kv_bytes_per_token() == 47 * (512 + 64) * 2  # one latent and its rope key per layer, at 16 bits
    assert m.params_total == 29_943_390_976  # transformers' meta-device count at full depth


def test_nemotron_3_experts_are_ungated_and_its_latent_moe_is_refused():
    # Nemotron-3 Nano's experts are squared-ReLU MLPs (up and down) and its shared expert has its own width: counted
    # as SwiGLU experts of the routed width, the 30B model read 46.2B and "needed 2 GPUs" at bf16
    m = load("new/nemotron-3-nano-30b-a3b")
    assert not m.mlp_gated and m.params_per_expert == 2 * 2688 * 1856
    assert m.params_shared_experts_per_layer == 2 * 2688 * 3712
    assert m.params_total == 31_577_937_344  # transformers' meta-device count at full depth
    # Nemotron-3 Super's experts work in a latent width between two projections: refused by name, not miscounted
    data = json.loads((HF / "new" / "nemotron-3-nano-30b-a3b.json").read_text()) | {"moe_latent_size": 1024}
    with pytest.raises(SpecError, match="latent MoE") as err:
        from_hf_config(data, "super.json")
    assert err.value.field == "moe_latent_size"


def test_values_of_another_width_than_the_keys_are_refused_by_name():
    # MiMo-V2-Flash: 128-wide values beside 192-wide keys, and its sliding layers with KV heads of their own; read as
    # the keys' widths and heads its KV cache came out 147,456 B a token against the 222,720 its keys give
    data = json.loads((HF / "new" / "mimo-v2-flash.json").read_text())
    with pytest.raises(SpecError, match="v_head_dim 128, head_dim 192") as err:
        from_hf_config(data, "mimo.json")
    assert err.value.field == "v_head_dim"
    with pytest.raises(SpecError, match="swa_num_key_value_heads 8") as err:
        from_hf_config(data | {"v_head_dim": 192}, "mimo.json")
    assert err.value.field == "swa_num_key_value_heads"
    # transformers' own per-layer MLP list (mlp_layer_types) sets which layers are dense: its first, here
    plain = from_hf_config(data | {"v_head_dim": 192, "swa_num_key_value_heads": 4}, "mimo.json")
    assert [k.mlp for k in plain.plan.kinds][:3] == ["dense", "moe", "moe"] and plain.moe.dense_layers == 1


def test_mla_and_sliding_windows():
    ds = load("deepseek_v3")
    assert ds.mla.kv_lora_rank == 512 and ds.mla.rope_head_dim == 64 and ds.kv_elements_per_token_per_layer == 576
    assert load("mistral").sliding_window.model_dump() == {"window_tokens": 4096, "layers": "all"}
    assert load("gemma2").sliding_window.layers == "even" and load("gemma2").sliding_layers == 21
    oss = load("gpt_oss")
    assert oss.sliding_window.window_tokens == 128 and oss.sliding_window.layers == "even"  # 0, 2, ..., 22
    assert [i for i in range(24) if oss.is_sliding_layer(i)] == list(range(0, 24, 2))
    for name in ("qwen2", "qwen3", "mixtral", "llama"):
        assert load(name).sliding_window is None


def test_qkv_bias_from_the_model_type():
    assert load("qwen2").attention_bias and load("gpt_oss").attention_bias and not load("llama").attention_bias


@pytest.mark.parametrize(
    ("fixture", "builtin"),
    [("llama", "llama-3.2-1b"), ("mixtral", "mixtral-8x7b"), ("qwen2", "qwen2.5-7b"), ("qwen3_moe", "qwen3-30b-a3b"),
     ("deepseek_v3", "deepseek-v3"), ("gpt_oss", "gpt-oss-20b"), ("phi3", "phi-3-mini")],
)  # fmt: skip
def test_import_agrees_with_the_built_in_spec(fixture, builtin):
    imported, shipped = load(fixture), load_model(builtin)
    # the built-in specs keep the older convention (no q/k norms, biases or sinks: under 0.04% of any of them)
    extra = {"qwen3_moe": QK_NORMS["qwen3_moe"], "gpt_oss": GPT_OSS_BIASES}.get(fixture, 0)
    assert imported.params_total == shipped.params_total + extra
    assert imported.kv_bytes_per_token("bf16") == shipped.kv_bytes_per_token("bf16")
    assert imported.params_active == shipped.params_active + (
        extra if fixture != "gpt_oss" else 24 * (2880 + 64 + 32) + 24 * 4 * (2 * 2880 + 2880)
    )  # 4 experts' biases


def test_unsupported_type_and_missing_heads_name_the_key():
    with pytest.raises(SpecError, match=r"model_type: unsupported \('t5'\); supported: the \d+ decoder model types"):
        from_hf_config({"model_type": "t5"}, "c.json")  # an encoder-decoder: transformers has no causal LM for it
    cfg = json.loads((HF / "llama.json").read_text())
    del cfg["num_attention_heads"]
    with pytest.raises(SpecError) as err:
        from_hf_config(cfg, "c.json")
    assert "num_attention_heads" in str(err.value) and "c.json" in str(err.value)


# ---- precision as shipped: quantization_config and torch_dtype (tests/assets/hf/quant, see EXPECTED.md) ----

QUANT = HF / "quant"
# Llama-3.1-8B: 32 x (4096 x (4096 + 2 x 1024 + 4096) + 3 x 4096 x 14336) block-linear weights, and
# 2 x 128,256 x 4,096 embedding + LM head plus 65 x 4,096 norm weights at the 16-bit base dtype
LLAMA_8B_LINEAR = 32 * (4096 * (4096 + 2 * 1024 + 4096) + 3 * 4096 * 14336)
LLAMA_8B_16BIT = 2 * 128256 * 4096 + 65 * 4096


def weight_bytes(model) -> float:
    """Every weight as stored, through the engine's own count (all experts, embedding, LM head)."""
    from tokcost.engine.memory import resident_weight_bytes
    from tokcost.engine.workload import Workload, resolve_precision

    return resident_weight_bytes(model, resolve_precision(model, Workload()))


@pytest.mark.parametrize(
    ("fixture", "dtype", "weights", "compute", "bits"),
    [
        ("awq", "fp16", "int4-g128", None, 4 + 16 / 128 + 4 / 128),  # 4-bit codes, fp16 scale, 4-bit zero per 128
        ("gptq", "fp16", "int4-g128-sym", None, 4 + 16 / 128),  # sym: kernels read no zero points
        ("bnb_nf4", "bf16", "nf4-dq", None, 4 + 8 / 64 + 32 / (64 * 256)),  # QLoRA double quantization
        ("bnb_int8", "bf16", "int8", "int8", 8),  # LLM.int8(): int8 weights and activations
        ("ct_fp8", "bf16", "fp8", "fp8", 8),  # compressed-tensors FP8 W8A8 (per-channel, per-token dynamic)
        ("ct_w8a8", "bf16", "int8", "int8", 8),  # compressed-tensors INT8 W8A8
        ("ct_w4a16", "bf16", "int4-g128-sym", None, 4 + 16 / 128),  # compressed-tensors W4A16, group 128, symmetric
        ("fbgemm_fp8", "bf16", "fp8", "fp8", 8),  # fbgemm FP8 rowwise, dynamic activations
        ("fp8_dtype", "bf16", "fp8", None, 8),  # torch_dtype float8_e4m3fn, no quantization_config
    ],
)
def test_quantized_llama_8b_is_priced_as_shipped(fixture, dtype, weights, compute, bits):
    m = load_model(str(QUANT / f"{fixture}.json"))
    assert (m.dtype, m.weights_dtype, m.compute_dtype) == (dtype, weights, compute)
    assert m.params_total == LLAMA_8B_LINEAR + LLAMA_8B_16BIT  # quantization changes bytes, never the count
    assert weight_bytes(m) == pytest.approx(LLAMA_8B_LINEAR * bits / 8 + LLAMA_8B_16BIT * 2, rel=1e-12)


def test_awq_8b_is_5_7_gb_not_16():
    # issue 10: an AWQ 4-bit Llama-3.1-8B was priced at fp16 (16.06 GB); as shipped it is ~5.7 GB
    assert weight_bytes(load_model(str(QUANT / "awq.json"))) == pytest.approx(5.728e9, rel=1e-3)


def test_deepseek_v3_fp8_checkpoint_is_671_gb_not_1342():
    ds = load(name="deepseek_v3")
    assert (ds.weights_dtype, ds.compute_dtype) == ("fp8", "fp8")  # quant_method fp8, 128x128 blocks, dynamic
    sixteen_bit = ds.params_embedding + ds.params_lm_head + ds.params_norms  # bf16 in the checkpoint
    expected = (ds.params_total - sixteen_bit) * 1 + sixteen_bit * 2
    assert weight_bytes(ds) == pytest.approx(expected, rel=1e-12)
    assert 671e9 < weight_bytes(ds) < 675e9  # 671B params at ~1 byte, not 1,342 GB of bf16


def test_gpt_oss_mxfp4_stays_on_the_experts():
    oss = load("gpt_oss")
    assert (oss.weights_dtype, oss.compute_dtype, oss.moe.expert_dtype) == (None, None, "fp4")


def quant_of(quant: dict, **config) -> tuple:
    """(weights_dtype, compute_dtype) of the Llama-3.1-8B AWQ fixture with another quantization_config."""
    cfg = {**json.loads((QUANT / "awq.json").read_text()), **config, "quantization_config": quant}
    m = from_hf_config(cfg, "c.json")
    return m.weights_dtype, m.compute_dtype


@pytest.mark.parametrize(
    ("quant", "weights", "compute"),
    [
        ({"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": False}, "int4-g128", None),
        ({"quant_method": "gptq", "bits": 4, "group_size": 32, "sym": True}, "int4-g32-sym", None),
        ({"quant_method": "gptq", "bits": 8, "group_size": 128, "sym": True}, "int8-g128-sym", None),
        # per-channel (-1): one scale per row of hidden_size inputs
        ({"quant_method": "gptq", "bits": 4, "group_size": -1, "sym": True}, "int4-g4096-sym", None),
        # AutoAWQ's own key names
        ({"quant_method": "awq", "w_bit": 4, "q_group_size": 128, "zero_point": True}, "int4-g128", None),
        ({"quant_method": "awq", "bits": 4, "group_size": 64, "zero_point": False}, "int4-g64-sym", None),
        ({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}, "nf4", None),
        ({"quant_method": "bitsandbytes", "load_in_4bit": True}, "bnb-fp4", None),  # transformers' default type
        ({"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}, "fp8", "fp8"),
        (
            {"quant_method": "compressed-tensors", "config_groups": {"g": {
                "weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16},
                "input_activations": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16}}}},
            "nvfp4", "fp4",
        ),
        (
            {"quant_method": "compressed-tensors", "config_groups": {"g": {
                "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128,
                            "symmetric": False}}}},
            "int4-g128", None,
        ),
    ],
)  # fmt: skip
def test_group_sizes_and_zero_points_name_the_format(quant, weights, compute):
    assert quant_of(quant) == (weights, compute)


@pytest.mark.parametrize(
    ("quant", "needle"),
    [
        ({"quant_method": "hqq"}, "quantization_config.quant_method: unsupported ('hqq'); supported: awq, gptq"),
        ({"bits": 4}, "quantization_config.quant_method: unsupported (a mapping without quant_method)"),
        ({"quant_method": "gptq", "bits": 3}, "quantization_config.bits: must be one of: 4, 8 (got 3)"),
        ({"quant_method": "awq", "bits": True}, "quantization_config.bits: must be one of: 4, 8 (got True)"),
        ({"quant_method": "gptq", "bits": 4, "group_size": 0}, "quantization_config.group_size"),
        ({"quant_method": "bitsandbytes"}, "load_in_4bit and load_in_8bit are both false"),
        (
            {"quant_method": "compressed-tensors", "config_groups": {
                "attn": {"weights": {"num_bits": 8, "type": "float"}},
                "mlp": {"weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128}}}},
            "config_groups differ (attn: fp8 x bf16, mlp: int4-g128-sym x bf16)",
        ),
    ],
)  # fmt: skip
def test_a_quantization_config_tokcost_cannot_price_is_named(quant, needle):
    with pytest.raises(SpecError) as err:
        quant_of(quant)
    assert str(err.value).startswith("c.json: ") and needle in str(err.value)


@pytest.mark.parametrize("dtype", ["float64", "bfloat17", "auto", 16])
def test_an_unknown_torch_dtype_is_an_error_never_bf16(dtype):
    cfg = {**json.loads((HF / "llama.json").read_text()), "torch_dtype": dtype}
    with pytest.raises(SpecError, match=r"c\.json: torch_dtype: unknown dtype .*; known: float32, float16, bfloat16"):
        from_hf_config(cfg, "c.json")


def test_new_dtype_key_and_torch_prefix_are_read():
    cfg = json.loads((HF / "llama.json").read_text())
    del cfg["torch_dtype"]
    assert from_hf_config({**cfg, "dtype": "float16"}, "c.json").dtype == "fp16"  # transformers >= 4.56
    fp32 = from_hf_config({**cfg, "torch_dtype": "torch.float32"}, "c.json")  # stored so, served at 16 bits
    assert fp32.dtype == "bf16" and "stored at fp32, priced at 16 bits" in fp32.notes


@pytest.mark.parametrize("value", ["\n", 1, "LlamaForCausalLM", {"a": 1}])
def test_architectures_that_is_not_a_list_of_names_is_one_line(value):
    # hypothesis found `architectures: 1` raising a TypeError and `"\n"` read letter by letter into a two-line error
    cfg = {**json.loads((HF / "llama.json").read_text()), "architectures": value}
    with pytest.raises(SpecError) as caught:
        from_hf_config(cfg, "c.json")
    assert str(caught.value).startswith("c.json: architectures: a list of class names") and "\n" not in str(
        caught.value
    )


def test_a_config_without_torch_dtype_is_priced_at_bf16_and_says_so():
    # the audit of 2026-12-05: a missing torch_dtype became bf16 with no note, where a missing shape key is noted
    cfg = json.loads((HF / "llama.json").read_text())
    cfg.pop("torch_dtype", None)
    cfg.pop("dtype", None)
    spec = from_hf_config(cfg, "c.json")
    assert spec.dtype == "bf16" and "no torch_dtype: priced at bf16" in spec.notes
    cfg["quantization_config"] = {"quant_method": "fp8", "modules_to_not_convert": ["model.layers.0.self_attn.q_proj"]}
    notes = from_hf_config(cfg, "c.json").notes  # both said, one after the other
    assert "no torch_dtype: priced at bf16" in notes and "keeps 1 module(s) unquantized" in notes


def test_modules_left_unquantized_are_named_in_the_notes():
    quant = {"quant_method": "fbgemm_fp8", "modules_to_not_convert": ["lm_head", "model.layers.0.self_attn.q_proj"]}
    cfg = {**json.loads((QUANT / "fbgemm_fp8.json").read_text()), "quantization_config": quant}
    notes = from_hf_config(cfg, "c.json").notes
    assert "keeps 1 module(s) unquantized (model.layers.0.self_attn.q_proj" in notes and "at fp8" in notes
    assert load_model(str(QUANT / "fbgemm_fp8.json")).notes == ""  # lm_head is at bf16 anyway
    # norms, biases and a router are no block linear: Qwen3-Coder-FP8 lists 124 layernorms, MiniMax-M2 its `gate` and
    # its router's e_score_correction_bias, and each had read as modules "priced at fp8"
    nothing = ["model.layers.0.input_layernorm", "model.norm", "gate", "model.layers.3.block_sparse_moe.gate",
               "e_score_correction_bias"]  # fmt: skip
    cfg["quantization_config"] = {**quant, "modules_to_not_convert": nothing}
    assert "unquantized" not in from_hf_config(cfg, "c.json").notes


# ---- sliding windows follow transformers, per model type ----


def qwen2(**keys):
    return from_hf_config({**json.loads((HF / "qwen2.json").read_text()), **keys}, "c.json")


@pytest.mark.parametrize(
    ("keys", "layers"),
    [
        ({"use_sliding_window": True, "max_window_layers": 0}, "all"),  # i >= 0: every layer (Qwen2Config)
        ({"use_sliding_window": True, "max_window_layers": 20}, list(range(20, 28))),
        ({"use_sliding_window": True, "max_window_layers": 28}, None),  # i >= 28 of 28 layers: none
        ({"use_sliding_window": True}, None),  # the key's default is 28
        ({"use_sliding_window": False, "max_window_layers": 0}, None),  # no window without the flag
        ({"use_sliding_window": True, "layer_types": ["full_attention"] * 27 + ["sliding_attention"]}, [27]),
    ],
)
def test_qwen2_sliding_layers(keys, layers):
    sw = qwen2(**keys).sliding_window
    assert (sw.layers if sw else None) == layers


def test_qwen_moe_rules_differ_from_qwen2():
    q2 = json.loads((HF / "qwen2_moe.json").read_text())
    sw = from_hf_config({**q2, "use_sliding_window": True, "max_window_layers": 6}, "c.json").sliding_window
    assert sw.layers == [0, 2, 4]  # Qwen2MoeConfig: even i below max_window_layers
    q3 = json.loads((HF / "qwen3_moe.json").read_text())
    sw = from_hf_config({**q3, "use_sliding_window": True, "sliding_window": 4096}, "c.json").sliding_window
    assert sw.layers == "all"  # Qwen3Moe reads no max_window_layers: every layer


@pytest.mark.parametrize(
    ("layer_types", "got"),
    [(["sliding_attention"] * 27, "a list of 27"), ("sliding_attention", "'sliding_attention'"),
     (["sliding_attention"] * 27 + ["chunked"], "'chunked' at layer 27")],  # the first unknown kind
)  # fmt: skip
def test_layer_types_must_list_every_layer(layer_types, got):
    with pytest.raises(SpecError) as err:
        qwen2(use_sliding_window=True, layer_types=layer_types)
    assert "c.json: layer_types: must be a list of 28 entries (one per layer)" in str(err.value)
    assert f"(got {got})" in str(err.value)


def test_errors_use_config_json_names():
    ds = json.loads((HF / "deepseek_v3.json").read_text())
    with pytest.raises(SpecError) as err:
        from_hf_config({**ds, "first_k_dense_replace": 100}, "c.json")
    assert str(err.value) == "c.json: first_k_dense_replace (100) exceeds num_hidden_layers (61)"
    with pytest.raises(SpecError, match=r"c\.json: n_routed_experts: must be an integer from 1 to 4,096 \(got True\)"):
        from_hf_config({**ds, "n_routed_experts": True}, "c.json")


def test_a_folder_name_becomes_a_one_line_name_of_at_most_200_characters():
    cfg = json.loads((HF / "llama.json").read_text())
    assert from_hf_config(cfg, "c.json", name="my\nmodel\t v2").name == "my model v2"
    assert from_hf_config(cfg, "c.json", name="x" * 240).name == "x" * 200


def test_a_name_given_stays_whole_and_a_configs_own_path_gives_its_last_part():
    cfg = json.loads((HF / "llama.json").read_text())
    assert from_hf_config(cfg, "c.json", name="meta-llama/Llama-3.1-8B").name == "meta-llama/Llama-3.1-8B"
    assert from_hf_config({**cfg, "_name_or_path": "/ckpt/org/My-Model/"}, "c.json").name == "My-Model"
    assert from_hf_config({k: v for k, v in cfg.items() if k != "_name_or_path"}, "c.json").name == "llama"


def test_import_names_the_spec_as_given_or_after_the_configs_folder(cli, tmp_path, monkeypatch):
    folder = tmp_path / "Qwen3-Tiny"
    folder.mkdir()
    (folder / "config.json").write_text((HF / "llama.json").read_text())
    monkeypatch.chdir(folder)
    named = cli("specs", "import", "config.json", "--name", "org/Qwen3-Tiny-v2")
    assert named.exit_code == 0 and yaml.safe_load(named.stdout)["name"] == "org/Qwen3-Tiny-v2"
    plain = cli("specs", "import", "config.json")  # no folder in the path: the working one
    assert plain.exit_code == 0 and yaml.safe_load(plain.stdout)["name"] == "Qwen3-Tiny"


# ---- issue 22: one strict rule for a config value's type; contradictory quantization flags refused ----


@pytest.mark.parametrize(
    ("keys", "needle"),
    [
        ({"use_sliding_window": "false"}, "use_sliding_window: must be true or false (got 'false')"),
        ({"use_sliding_window": 0}, "use_sliding_window: must be true or false (got 0)"),
        ({"max_window_layers": "all"}, "max_window_layers: must be an integer from 0 to 10,000 (got 'all')"),
        ({"sliding_window": "4096"}, "sliding_window: must be an integer"),
        ({"tie_word_embeddings": "no"}, "tie_word_embeddings: must be true or false (got 'no')"),
        ({"num_key_value_heads": 4.0}, "num_key_value_heads: must be an integer from 1 to 10,000 (got 4.0)"),
    ],
)  # fmt: skip
def test_a_config_value_of_the_wrong_type_names_the_key(keys, needle):
    with pytest.raises(SpecError) as err:
        qwen2(**keys)
    assert str(err.value) == f"c.json: {needle}" or str(err.value).startswith(f"c.json: {needle}")


def test_a_text_false_never_applies_a_window():
    assert qwen2(use_sliding_window=False, max_window_layers=0).sliding_window is None
    with pytest.raises(SpecError, match="use_sliding_window"):
        qwen2(use_sliding_window="false", max_window_layers=0)


def test_a_text_config_key_is_named_with_its_section():
    cfg = json.loads((HF / "new" / "gemma-3-27b.json").read_text())
    cfg["text_config"]["sliding_window"] = "1024"
    with pytest.raises(SpecError, match=r"c\.json: text_config\.sliding_window: must be an integer"):
        from_hf_config(cfg, "c.json")


def test_bitsandbytes_4bit_and_8bit_together_are_refused():
    quant = {"quant_method": "bitsandbytes", "load_in_4bit": True, "load_in_8bit": True}
    with pytest.raises(SpecError, match="quantization_config: load_in_4bit and load_in_8bit are both true"):
        quant_of(quant)


def test_a_checkpoint_that_keeps_every_layers_attention_unquantized_ships_it_at_the_model_dtype():
    # Meta's Llama-3.1-405B FP8 (fbgemm_fp8): the first and last layers whole, every other layer's self_attn
    base = json.loads((QUANT / "fbgemm_fp8.json").read_text())
    layers = base["num_hidden_layers"]
    kept = ["lm_head", "model.layers.0", f"model.layers.{layers - 1}"]
    kept += [f"model.layers.{i}.self_attn" for i in range(1, layers - 1)]
    spec = from_hf_config({**base, "quantization_config": {"quant_method": "fbgemm_fp8",
                                                          "modules_to_not_convert": kept}}, "c.json")  # fmt: skip
    assert (spec.weights_dtype, spec.attention_dtype, spec.compute_dtype) == ("fp8", "bf16", "fp8")
    assert "attention_dtype bf16, and 2 more module(s) (model.layers.0, ...)" in spec.notes
    # one layer's attention missing: not every layer's, so one format for all block linears, said in the notes
    partial = [m for m in kept if m != "model.layers.3.self_attn"]
    spec = from_hf_config({**base, "quantization_config": {"quant_method": "fbgemm_fp8",
                                                          "modules_to_not_convert": partial}}, "c.json")  # fmt: skip
    assert spec.attention_dtype is None and "tokcost prices every block linear at fp8" in spec.notes
    # a pattern over every layer's attention (compressed-tensors' ignore list), and one projection only (not all)
    assert attention_kept(["re:.*self_attn.*"], layers) and not attention_kept(["re:.*self_attn.q_proj"], layers)


# Families whose MLP is ungated (up, down) with LayerNorms: each count by hand equals its model card's exact figure
# Pythia-6.9B: 32 x (QKV 4,096 x 12,288 + 12,288, dense 4,096^2 + 4,096, MLP 2 x 4,096 x 16,384 + 16,384 + 4,096,
# two LayerNorms 2 x 2 x 4,096) + final LayerNorm 2 x 4,096 + embedding and untied head 2 x 50,432 x 4,096
PYTHIA = 32 * (4096 * 12288 + 12288 + 4096**2 + 4096 + 2 * 4096 * 16384 + 16384 + 4096 + 4 * 4096) + 2 * 4096
UNGATED = [  # (fixture, published total, KV bytes per token at 16 bits, tied)
    ("starcoder2-7b", 7_173_923_840, 2 * 32 * 4 * 128 * 2, True),  # bigcode: 7.17B
    ("phi-2", 2_779_683_840, 2 * 32 * 32 * 80 * 2, False),  # microsoft/phi-2 safetensors: 2,779,683,840
    ("falcon-7b", 6_921_720_704, 2 * 32 * 1 * 64 * 2, True),  # tiiuae/falcon-7b: 6,921,720,704; one KV head (MQA)
    ("pythia-6.9b", PYTHIA + 2 * 50432 * 4096, 2 * 32 * 32 * 128 * 2, False),  # EleutherAI: 6,857,302,016
    # Nemotron-4 (Minitron-4B): squared-ReLU MLP, LayerNorm1P with biases; counted gated it was 21.6% over (5.10B):
    # 32 x (q, o 2 x 3,072^2; k, v 2 x 3,072 x 1,024; up, down 2 x 3,072 x 9,216; two norms 2 x 2 x 3,072)
    # + final norm 2 x 3,072 + embedding and head 2 x 256,000 x 3,072 = 4,190,509,056 (its card: 4.19B)
    (
        "nemotron-4-4b",
        32 * (2 * 3072**2 + 2 * 3072 * 1024 + 2 * 3072 * 9216 + 4 * 3072) + 2 * 3072 + 2 * 256000 * 3072,
        2 * 32 * 8 * 128 * 2,
        False,
    ),
]


@pytest.mark.parametrize(("name", "total", "kv", "tied"), UNGATED, ids=[u[0] for u in UNGATED])
def test_ungated_layernorm_families_count_as_published(name, total, kv, tied):
    m = load(f"new/{name}")
    assert (m.params_total, m.kv_bytes_per_token("bf16"), m.tied_embeddings) == (total, kv, tied)
    assert not m.mlp_gated and m.norm_bias and "Llama's layout" not in m.notes
    assert PYTHIA + 2 * 50432 * 4096 == 6_857_302_016


def test_a_vision_config_with_its_text_keys_at_the_top_level_imports():
    # Qwen2.5-VL keeps its decoder's keys at the top level (no text_config): its decoder is Qwen2.5-7B's, q/k/v
    # biases included, and its LM head is its own (tie_word_embeddings false at the top level)
    m = load("new/qwen2.5-vl-7b")
    assert (m.params_total, m.tied_embeddings, m.attention_bias) == (7_615_616_512, False, True)
    assert "vision tower is not counted" in m.notes


@pytest.mark.parametrize("name", ["jamba-v0.1", "falcon-mamba-7b"])
def test_mamba_1_state_layers_are_refused_by_name(name):
    with pytest.raises(SpecError) as err:
        load(f"new/{name}")
    assert err.value.field == "layer_types" and "not modelled yet" in str(err.value) and "Mamba-1" in str(err.value)


def test_a_text_type_over_a_vision_models_sections_is_refused_in_one_line(cli, tmp_path):
    # a text model's type at the top level of a vision config (mlc-llm's Ministral-3 preset) left text_config a
    # raw dict, and the import died on it with a traceback
    data = json.loads((HF / "new" / "gemma-3-27b.json").read_text())
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**data, "model_type": data["text_config"]["model_type"]}))
    r = cli("estimate", "-m", str(config), "-g", "h100-sxm")
    assert r.exit_code == 2 and "Traceback" not in r.stderr
    assert "model_type: 'gemma3_text' is a text model's type, but the file has a text_config" in r.stderr


@pytest.mark.parametrize(("model_type", "why"), [("falcon_h1", "attention and a Mamba-2 mixer side by side"),
                                                  ("gemma3n_text", "per-layer embeddings"),
                                                  ("minimax", "lightning attention")])  # fmt: skip
def test_families_without_kernels_are_refused_by_name(model_type, why):
    # Falcon-H1 was refused over a layer_types its file does not have (transformers fills it), Gemma-3n over a
    # list intermediate_size, MiniMax-Text-01 as a state-space model
    data = {**json.loads((HF / "llama.json").read_text()), "model_type": model_type}
    with pytest.raises(SpecError) as err:
        from_hf_config(data, "c.json")
    assert err.value.field == "model_type" and why in str(err.value) and "not modelled yet" in str(err.value)


def test_an_unknown_family_and_an_fp32_checkpoint_say_so_on_import(cli, tmp_path):
    data = {**json.loads((HF / "llama.json").read_text()), "model_type": "olmo", "torch_dtype": "float32"}
    config = tmp_path / "config.json"
    config.write_text(json.dumps(data))
    r = cli("specs", "import", str(config), "-o", str(tmp_path / "m.yaml"))
    assert r.exit_code == 0, r.output
    notes = [line for line in r.stderr.splitlines() if line.startswith("note: ")]
    assert any("olmo: counted with Llama's layout" in n for n in notes), r.stderr
    assert any("stored at fp32, priced at 16 bits" in n for n in notes), r.stderr


def test_each_note_prints_whole_on_its_own_line(cli, tmp_path):
    # notes are parted by "; " and printed one a line: notes that held "; " themselves printed as fragments
    # ("note: set dtype: fp32 in an imported spec ..."); a block-scaled FP8 checkpoint says how it is priced
    quant = {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
    data = {**json.loads((HF / "llama.json").read_text()), "torch_dtype": "float32", "quantization_config": quant}
    del data["intermediate_size"]  # a third note: a defaulted shape
    config = tmp_path / "config.json"
    config.write_text(json.dumps(data))
    r = cli("specs", "import", str(config), "-o", str(tmp_path / "m.yaml"))
    assert r.exit_code == 0, r.output
    notes = [line.removeprefix("note: ") for line in r.stderr.splitlines() if line.startswith("note: ")]
    assert len(notes) == 3, notes
    assert any(n.startswith("block-scaled FP8 (weight_block_size) priced as fp8") and n.endswith("an engine prior)")
               for n in notes), notes  # fmt: skip
    assert any(n.startswith("stored at fp32") and n.endswith("prices fp32") for n in notes), notes
    assert any(n.startswith("not in the config") for n in notes), notes


def test_a_composite_saves_text_precision_in_its_text_config_is_read():
    # a vision-language save may state the text model's dtype and quantization only in text_config: an AWQ text
    # model imported at bf16 with no word, and "no torch_dtype" said of a file that states one
    data = json.loads((HF / "new" / "mistral-small-24b.json").read_text())
    del data["torch_dtype"]
    data["text_config"] |= {
        "dtype": "bfloat16",
        "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True},
    }
    spec = from_hf_config(data, "c.json")
    assert spec.weights_dtype == "int4-g128" and "no torch_dtype" not in spec.notes
    data["quantization_config"] = {"quant_method": "fp8"}  # the top level's own keys win
    assert from_hf_config(data, "c.json").weights_dtype == "fp8"


def test_cross_attention_layers_are_refused_not_priced_as_self_attention():
    # Llama-3.2-11B-Vision: 8 of its 40 layers attend to the image's tokens (cached once per sequence), which the
    # import priced as 40 self-attention layers, 25% more KV per token than the 32 that cache one
    with pytest.raises(SpecError) as err:
        load("new/llama-3.2-11b-vision")
    assert err.value.field == "text_config.cross_attention_layers" and "not modelled yet" in str(err.value)


def test_a_shape_key_the_config_leaves_out_is_said(cli, tmp_path):
    # a cut or hand-written config takes transformers' class default for a missing shape key: Llama's
    # intermediate_size 11,008 (Llama-2-7B's) priced a 3.1-8B config as a 6.7B model without a word
    data = json.loads((HF / "llama.json").read_text())
    del data["intermediate_size"]
    config = tmp_path / "config.json"
    config.write_text(json.dumps(data))
    r = cli("specs", "import", str(config), "-o", str(tmp_path / "m.yaml"))
    assert r.exit_code == 0, r.output
    assert "note: not in the config, so transformers' defaults for llama: intermediate_size 11008" in r.stderr
    whole = cli("specs", "import", str(HF / "llama.json"), "-o", str(tmp_path / "w.yaml"))
    assert "not in the config" not in whole.stderr


def test_estimate_and_validate_say_it_too(cli, tmp_path):
    # a config read straight by estimate or checked by validate is the same guess as an import: they say so
    data = json.loads((HF / "llama.json").read_text())
    del data["intermediate_size"]
    config = tmp_path / "config.json"
    config.write_text(json.dumps(data))
    said = "not in the config, so transformers' defaults for llama: intermediate_size 11008"
    r = cli("estimate", "-m", str(config), "-g", "h100-sxm", "-f", "json")
    assert r.exit_code == 0 and [w for w in r.json()["warnings"] if said in w] == [f"{tmp_path.name}: {said}"]
    r = cli("specs", "validate", str(config))
    assert r.exit_code == 0 and r.stdout.strip().endswith(f"(warning: {said})")
    whole = cli("estimate", "-m", str(HF / "llama.json"), "-g", "h100-sxm", "-f", "json")
    assert not any("not in the config" in w for w in whole.json()["warnings"])


@pytest.mark.parametrize(
    ("keys", "said"),
    [({"decoder_sparse_step": 1000}, "decoder_sparse_step: the config has 128 experts, but decoder_sparse_step "
      "leaves none of its 48 layers an MoE layer"),
     ({"mlp_only_layers": list(range(48))}, "mlp_only_layers: the config has 128 experts, but mlp_only_layers leaves "
      "none of its 48 layers an MoE layer"),
     ({"mlp_only_layers": [999, -1]}, "mlp_only_layers: layer 999 is outside 0..47 (the model has 48 layers)")],
)  # fmt: skip
def test_layer_rules_that_drop_every_expert_or_name_missing_layers_are_refused(keys, said):
    # Qwen3-MoE's experts: 128, over 48 layers; rules that route no layer to them priced a dense 3.3B model
    q3 = json.loads((HF / "qwen3_moe.json").read_text())
    with pytest.raises(SpecError) as err:
        from_hf_config({**q3, **keys}, "c.json")
    assert str(err.value) == f"c.json: {said}"


def test_import_refuses_an_existing_out_before_it_loads_transformers(tmp_path):
    """The refusal comes before the import's work (transformers' seconds), and the file keeps what the user wrote."""
    out = tmp_path / "mine.yaml"
    out.write_text("keep: me\n")
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "tokcost", "specs", "import", str(HF / "llama.json"),
                        "-o", str(out)], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 2 and f"error: {out}: already exists; pass --force to replace it" in r.stderr
    assert "transformers" not in r.stderr and out.read_text() == "keep: me\n"


def test_a_model_loads_and_a_config_is_named_when_the_working_folder_is_gone(monkeypatch, tmp_path):
    (tmp_path / "My-Model").mkdir()
    (tmp_path / "My-Model" / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "My-Model" / "sub")
    assert name_from_path("../config.json") == "My-Model"  # the folder the path names, not ".."

    def gone() -> str:
        raise FileNotFoundError(2, "No such file or directory")

    monkeypatch.setattr(os, "getcwd", gone)
    assert load_model("llama-3.1-8b").name == "llama-3.1-8b"  # a built-in name asks nothing of the folder
    assert name_from_path("config.json") == "config" and name_from_path("a/b/config.json") == "b"


BLOOM = {"architectures": ["BloomForCausalLM"], "model_type": "bloom", "hidden_size": 4096, "n_head": 32,
         "n_layer": 30, "vocab_size": 250880}  # fmt: skip
GPT2 = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": 768, "n_head": 12, "n_layer": 12,
        "n_positions": 1024, "vocab_size": 50257}  # fmt: skip


@pytest.mark.parametrize(
    ("data", "field", "said"),
    [
        # transformers' BloomConfig has no max_position_embeddings (ALiBi): it was an AttributeError traceback
        (BLOOM, "model_type", "bloom: tokcost cannot read this architecture's config ('BloomConfig' object has no "),
        # GPT-2's MLP width is n_inner or 4 x hidden, ungated: it said "intermediate_size ... (got None)"
        (GPT2, "intermediate_size", "gpt2 states no intermediate_size, the MLP width tokcost reads"),
    ],
)
def test_an_architecture_the_import_cannot_read_is_one_line_naming_its_type(data, field, said):
    with pytest.raises(SpecError) as err:
        from_hf_config(data, "config.json")
    assert err.value.field == field and said in str(err.value) and "\n" not in str(err.value)
    assert "write a spec YAML by hand" in str(err.value)


def test_a_null_shape_key_takes_its_default_with_a_note():
    data = json.loads((HF / "llama.json").read_text())
    spec = from_hf_config({**data, "num_key_value_heads": None}, "config.json")
    assert spec.kv_heads == spec.attention_heads  # transformers' default: one KV head per query head, said
    assert "num_key_value_heads 32" in spec.notes


def test_a_huggingface_cache_snapshot_is_named_by_its_repository(tmp_path):
    # models--ORG--NAME/snapshots/COMMIT/config.json, a link to ../../blobs/HASH: it was named 'blobs' (or COMMIT)
    repo = tmp_path / "models--Qwen--Qwen3-8B"
    (repo / "blobs").mkdir(parents=True)
    (repo / "blobs" / "a8c3").write_text((HF / "qwen3.json").read_text())
    snapshot = repo / "snapshots" / "b968826d"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").symlink_to(Path("..") / ".." / "blobs" / "a8c3")
    assert name_from_path(str(snapshot / "config.json")) == "Qwen3-8B"
    assert load_model(str(snapshot / "config.json")).name == "Qwen3-8B"


def test_a_text_config_that_leaves_its_shape_to_its_class_takes_the_defaults_with_a_note():
    # llava-hf's llava-1.5-7b: its text_config names llama and leaves the shape to LlamaConfig (Vicuna-7B); refused
    text = {"architectures": ["LlamaForCausalLM"], "max_position_embeddings": 4096, "model_type": "llama",
            "rms_norm_eps": 1e-05, "torch_dtype": "float16", "vocab_size": 32064}  # fmt: skip
    vision = {"hidden_size": 1024, "image_size": 336, "intermediate_size": 4096, "model_type": "clip_vision_model",
              "num_attention_heads": 16, "num_hidden_layers": 24, "patch_size": 14, "projection_dim": 768}  # fmt: skip
    data = {"architectures": ["LlavaForConditionalGeneration"], "model_type": "llava", "text_config": text,
            "vision_config": vision, "torch_dtype": "float16"}  # fmt: skip
    spec = from_hf_config(data, "config.json")
    assert (spec.layers, spec.hidden_size, spec.attention_heads, spec.intermediate_size) == (32, 4096, 32, 11008)
    # 32 x (4 x 4096^2 + 3 x 4096 x 11008 + 2 x 4096) + 2 x 32064 x 4096 + 4096 = 6,738,939,904 (Vicuna-7B)
    assert spec.params_total == 6_738_939_904
    assert "num_hidden_layers 32, hidden_size 4096, num_attention_heads 32" in spec.notes
    with pytest.raises(SpecError) as err:  # a top-level file that leaves out its depth is still refused
        from_hf_config({"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32}, "config.json")
    assert err.value.field == "num_hidden_layers"


def test_an_encoders_checkpoint_is_refused_by_the_class_it_names():
    # BERT's type has a causal-LM class, so a BertForMaskedLM checkpoint was priced as a decoder
    bert = {"architectures": ["BertForMaskedLM"], "model_type": "bert", "hidden_size": 768, "num_hidden_layers": 12,
            "num_attention_heads": 12, "intermediate_size": 3072, "vocab_size": 30522}  # fmt: skip
    with pytest.raises(SpecError) as err:
        from_hf_config(bert, "config.json")
    assert err.value.field == "architectures" and "BertForMaskedLM is not a decoder that generates tokens" in str(
        err.value
    )
