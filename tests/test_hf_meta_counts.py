"""tokcost's analytic parameter count equals transformers' own: each family built on the meta device (no weights).

Small configs written from each family's published config.json (tests/assets/hf and hf/new), with the layer
count shrunk so the build is quick; the shapes of a layer, and which layer is which kind, stay as published.
Needs torch and transformers (the dev and measure extras); skipped cleanly without them.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from tokcost.models.hf_import import from_hf_config

pytestmark = pytest.mark.slow  # not in the quick tier: torch builds each family's model (test_hf_import reads them)
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

HF = Path(__file__).parent / "assets" / "hf"


def _shrunk(path: Path, layers: int, **text_keys) -> dict:
    """The published config with `layers` layers (and any key overridden) in its decoder's section."""
    data = json.loads(path.read_text())
    section = data.get("text_config", data)
    section.update(num_hidden_layers=layers, **text_keys)
    section.pop("layer_types", None)  # transformers derives it again for the shrunk depth
    return data


# (fixture, layers, overrides): each decoder family, with enough layers to hold one of each of its layer kinds
FAMILIES = [
    ("llama.json", 2, {}), ("mistral.json", 2, {}), ("mixtral.json", 2, {}), ("qwen2.json", 2, {}),
    ("qwen2_moe.json", 2, {}), ("qwen3.json", 2, {}), ("qwen3_moe.json", 2, {}), ("phi3.json", 2, {}),
    ("deepseek_v3.json", 3, {"first_k_dense_replace": 1}), ("gemma2.json", 3, {}), ("gpt_oss.json", 2, {}),
    ("new/gemma-3-27b.json", 7, {}), ("new/llama-4-scout.json", 5, {}),
    ("new/llama-4-maverick.json", 5, {"num_local_experts": 4}), ("new/qwen3-next-80b-a3b.json", 5, {"num_experts": 16}),
    ("new/kimi-k2.json", 3, {"n_routed_experts": 8}), ("new/deepseek-v2-lite.json", 3, {"n_routed_experts": 8}),
    # GELU MLPs and LayerNorms: biases as each switches them; Phi-2's and Falcon-7B's one norm per parallel block,
    # Falcon-40B's two; Falcon-7B's one multi-query KV head
    ("new/starcoder2-7b.json", 2, {}), ("new/phi-2.json", 2, {}), ("new/falcon-7b.json", 2, {}),
    ("new/falcon-40b.json", 2, {}), ("new/pythia-6.9b.json", 2, {}), ("new/nemotron-4-4b.json", 2, {}),
    ("new/starcoder2-7b.json", 2, {"use_bias": False}), ("new/falcon-7b.json", 2, {"bias": True}),
    ("new/phi-2.json", 2, {"qk_layernorm": True}), ("llama.json", 2, {"mlp_bias": True}),
    # ERNIE-4.5: its first layer dense, then MoE layers with 2 shared experts (its own key names), every other layer
    # when the interval says so (its use_bias, false in every published checkpoint, is not held: with it transformers
    # adds biases to the shared experts and the LM head); Qwen3-Coder: shared_expert_intermediate_size 0, none shared
    ("new/ernie-4.5-21b-a3b.json", 3, {"moe_num_experts": 8, "moe_layer_end_index": -1}),
    ("new/ernie-4.5-21b-a3b.json", 4, {"moe_num_experts": 8, "moe_layer_interval": 2}),
    ("new/qwen3-coder-480b-a35b.json", 2, {"num_experts": 8}),
    # DeepSeek Sparse Attention: each layer's indexer (wq_b, wk, its LayerNorm, weights_proj) beside MLA
    ("deepseek_v3.json", 3, {"first_k_dense_replace": 1, "model_type": "deepseek_v32", "index_topk": 2048,
                             "index_n_heads": 64, "index_head_dim": 128}),
    ("new/glm-5.json", 4, {"n_routed_experts": 8}),
    # Qwen3.5: Qwen3-Next's gated DeltaNet and gated attention; its MoE states no dense width (every MLP routed)
    ("new/qwen3.5-27b.json", 4, {}), ("new/qwen3.5-35b-a3b.json", 4, {"num_experts": 16}),
    # GLM-4.7-Flash: MLA with 20 heads over a hidden size of 2,048 (no head_dim of its own to state)
    ("new/glm-4.7-flash.json", 3, {"n_routed_experts": 8}),
]  # fmt: skip


def _meta_count(data: dict) -> int:
    """sum(p.numel()) of the model transformers builds for `data`, allocated on the meta device."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText
    from transformers.models.auto import modeling_auto

    config = {k: v for k, v in data.items() if k not in ("_source", "quantization_config")}
    if config["model_type"] == "kimi_k2":  # remote code: the architecture it names, as tokcost reads it
        config["model_type"] = "deepseek_v3"
    cfg = transformers.AutoConfig.for_model(**config)
    multimodal = config["model_type"] in modeling_auto.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES
    auto = AutoModelForImageTextToText if multimodal and "vision_config" in config else AutoModelForCausalLM
    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        model = auto.from_config(cfg)
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize(("fixture", "layers", "keys"), FAMILIES, ids=[f"{f[0]}{f[2] or ''}" for f in FAMILIES])
def test_count_equals_transformers_on_the_meta_device(fixture, layers, keys):
    data = _shrunk(HF / fixture, layers, **keys)
    spec = from_hf_config(data, fixture)
    assert spec.params_with_encoder == _meta_count(data)


def test_nemotron_h_hybrid_count_equals_transformers():
    # Mamba-2, attention and MLP-only blocks: the first 8 of the published pattern "M-M-M-M*-..."
    data = json.loads((HF / "new" / "nemotron-h-8b.json").read_text())
    data.update(num_hidden_layers=8, hybrid_override_pattern="M-M-M-M*")
    spec = from_hf_config(data, "nemotron")
    assert [k.mixer for k in spec.plan.kinds] == ["mamba", "none"] * 3 + ["mamba", "global"]
    assert spec.params_total == _meta_count(data)


def test_nemotron_3_moe_count_equals_transformers():
    # Nemotron-3 Nano: Mamba-2, attention and MoE blocks ("MEM*E": the published pattern's first kinds), experts of
    # squared ReLU (up and down only) and a shared expert of its own width (moe_shared_expert_intermediate_size)
    data = json.loads((HF / "new" / "nemotron-3-nano-30b-a3b.json").read_text())
    data.update(num_hidden_layers=5, hybrid_override_pattern="MEM*E", n_routed_experts=8)
    spec = from_hf_config(data, "nemotron-3")
    assert [k.mlp for k in spec.plan.kinds] == ["none", "moe", "none", "none", "moe"]
    assert spec.params_total == _meta_count(data)


def test_mistral3_vision_tower_equals_transformers():
    # transformers 5.x ties a Mistral-3 LM head by the top-level default (True); the published checkpoint
    # ships its own LM head, and tokcost reads text_config's tie_word_embeddings (false). Stated both ways here.
    data = _shrunk(HF / "new" / "mistral-small-24b.json", 2)
    untied = from_hf_config({**data, "tie_word_embeddings": False}, "m")
    assert untied.params_with_encoder == _meta_count({**data, "tie_word_embeddings": False})
    tied = from_hf_config({**data, "tie_word_embeddings": True}, "m")
    assert tied.params_with_encoder == _meta_count({**data, "tie_word_embeddings": True})


def test_qwen2_5_vl_decoder_equals_transformers_without_its_vision_tower():
    # its text keys at the top level, no text_config (the import crashed reading tie_word_embeddings there); the
    # vision tower is not counted, so the decoder alone is held equal: Qwen2.5-7B's 7,615,616,512 at full depth
    data = _shrunk(HF / "new" / "qwen2.5-vl-7b.json", 2)
    data["vision_config"]["depth"] = 1
    spec = from_hf_config(data, "qwen2.5-vl")
    from transformers import AutoModelForImageTextToText

    cfg = transformers.AutoConfig.for_model(**{k: v for k, v in data.items() if k != "_source"})
    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        model = AutoModelForImageTextToText.from_config(cfg)
    decoder = sum(p.numel() for name, p in model.named_parameters() if ".visual." not in f".{name}")
    assert (spec.params_total, spec.encoder_params, spec.tied_embeddings) == (decoder, 0, False)
