"""HuggingFace config.json import: one real config per model_type (tests/assets/hf, see EXPECTED.md there)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tokcost.errors import SpecError
from tokcost.models.hf_import import SUPPORTED, from_hf_config
from tokcost.models.library import load_model

HF = Path(__file__).parent / "assets" / "hf"

# (file, layers, hidden, heads, kv_heads, head_dim, tied, derived params_total) from EXPECTED.md
SHAPES = [
    ("llama", 16, 2048, 32, 8, 64, True, 1_235_814_400),
    ("mistral", 32, 4096, 32, 8, 128, False, 7_241_732_096),
    ("mixtral", 32, 4096, 32, 8, 128, False, 46_702_792_704),
    ("qwen2", 28, 3584, 28, 4, 128, False, 7_615_616_512),
    ("qwen2_moe", 24, 2048, 16, 16, 128, False, 14_315_735_040),
    ("qwen3", 36, 4096, 32, 8, 128, False, 8_190_726_144),
    ("qwen3_moe", 48, 2048, 32, 4, 128, False, 30_532_110_336),
    ("deepseek_v3", 61, 7168, 128, 128, 56, False, 671_026_404_352),
    ("gemma2", 42, 3584, 16, 8, 256, True, 9_241_404_928),
    ("phi3", 32, 3072, 32, 32, 96, False, 3_821_079_552),
    ("gpt_oss", 24, 2880, 64, 8, 64, False, 20_908_050_240),
]


def load(name: str):
    path = HF / f"{name}.json"
    return from_hf_config(json.loads(path.read_text()), str(path), name=name)


def test_every_supported_type_has_a_fixture():
    assert sorted(p.stem for p in HF.glob("*.json")) == sorted(SUPPORTED)


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
    assert load("qwen2_moe").params_active == 2_689_124_352
    ds = load("deepseek_v3")
    assert (ds.moe.experts, ds.moe.experts_per_token, ds.moe.shared_experts, ds.moe.dense_layers) == (256, 8, 1, 3)
    assert ds.moe.dense_intermediate_size == 18432 and ds.moe.expert_intermediate_size == 2048
    assert load("gpt_oss").moe.expert_dtype == "fp4"
    assert load("qwen3_moe").params_active == 3_353_020_416


def test_mla_and_sliding_windows():
    ds = load("deepseek_v3")
    assert ds.mla.kv_lora_rank == 512 and ds.mla.rope_head_dim == 64 and ds.kv_elements_per_token_per_layer == 576
    assert load("mistral").sliding_window.model_dump() == {"window_tokens": 4096, "layers": "all"}
    assert load("gemma2").sliding_window.layers == "even" and load("gemma2").sliding_layers == 21
    oss = load("gpt_oss")
    assert oss.sliding_window.window_tokens == 128 and oss.sliding_window.layers == list(range(0, 24, 2))
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
    assert imported.params_total == shipped.params_total
    assert imported.kv_bytes_per_token("bf16") == shipped.kv_bytes_per_token("bf16")
    assert imported.params_active == shipped.params_active


def test_unsupported_type_and_missing_heads_name_the_key():
    with pytest.raises(SpecError, match="model_type: unsupported.*'bert'.*supported: llama"):
        from_hf_config({"model_type": "bert"}, "c.json")
    cfg = json.loads((HF / "llama.json").read_text())
    del cfg["num_attention_heads"]
    with pytest.raises(SpecError) as err:
        from_hf_config(cfg, "c.json")
    assert "num_attention_heads" in str(err.value) and "c.json" in str(err.value)
