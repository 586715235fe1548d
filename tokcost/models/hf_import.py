"""HuggingFace `config.json` -> ModelSpec for the decoder families tokcost knows.

Key names, defaults and sliding-window rules follow transformers' configuration classes (LlamaConfig,
MistralConfig, MixtralConfig, Qwen2Config, Qwen2MoeConfig, Qwen3Config, Qwen3MoeConfig, DeepseekV3Config,
Gemma2Config, Phi3Config, GptOssConfig). The values are copied, not checked, here: ModelSpec's strict
types and bounds check them, and an error names the config.json key the value came from.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError

from tokcost.errors import SpecError
from tokcost.models.hf_quant import shipped
from tokcost.models.spec import ModelSpec
from tokcost.spec_errors import validation_error

SUPPORTED = (
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe",
    "deepseek_v3", "gemma2", "phi3", "gpt_oss",
)  # fmt: skip
_QKV_BIAS = ("qwen2", "qwen2_moe")  # always carry q/k/v biases (no config flag); others state attention_bias
_TIED_BY_DEFAULT = ("gemma2",)
_QWEN = ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe")  # a window only with use_sliding_window: true
LAYER_TYPES = ("full_attention", "sliding_attention")
MAX_WINDOW_LAYERS_DEFAULT = 28  # Qwen2Config, Qwen2MoeConfig, Qwen3Config

# ModelSpec key <- the config.json key it is copied from (also how an error names the key)
_SHAPES = {
    "layers": "num_hidden_layers", "hidden_size": "hidden_size", "attention_heads": "num_attention_heads",
    "kv_heads": "num_key_value_heads", "head_dim": "head_dim", "intermediate_size": "intermediate_size",
    "vocab_size": "vocab_size", "max_context": "max_position_embeddings", "tied_embeddings": "tie_word_embeddings",
    "attention_bias": "attention_bias", "sliding_window.window_tokens": "sliding_window",
}  # fmt: skip
_EXPERTS = {"experts_per_token": "num_experts_per_tok"}
_MOE = {
    "mixtral": {"experts": "num_local_experts", "expert_intermediate_size": "intermediate_size"},
    "gpt_oss": {"experts": "num_local_experts", "expert_intermediate_size": "intermediate_size"},
    "qwen2_moe": {"experts": "num_experts", "expert_intermediate_size": "moe_intermediate_size",
                  "shared_expert_intermediate_size": "shared_expert_intermediate_size"},
    "qwen3_moe": {"experts": "num_experts", "expert_intermediate_size": "moe_intermediate_size"},
    "deepseek_v3": {"experts": "n_routed_experts", "expert_intermediate_size": "moe_intermediate_size",
                    "shared_experts": "n_shared_experts", "dense_layers": "first_k_dense_replace",
                    "dense_intermediate_size": "intermediate_size"},
}  # fmt: skip
_MLA = {"kv_lora_rank": "kv_lora_rank", "rope_head_dim": "qk_rope_head_dim", "q_lora_rank": "q_lora_rank",
        "nope_head_dim": "qk_nope_head_dim", "v_head_dim": "v_head_dim"}  # fmt: skip


def _copy(data: dict[str, Any], keys: dict[str, str]) -> dict[str, Any]:
    """{ModelSpec key: config value} for the keys the config has (absent or null: ModelSpec's default)."""
    return {ours: data[theirs] for ours, theirs in keys.items() if data.get(theirs) is not None and "." not in ours}


def _sliding_layers(data: dict[str, Any], model_type: str, layers: int, where: str) -> str | list[int]:
    """Which layers slide: `layer_types` when given, else the model type's default in transformers."""
    types = data.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != layers or not all(t in LAYER_TYPES for t in types):
            got = f"a list of {len(types)}" if isinstance(types, list) else f"{types!r:.40}"
            raise SpecError(where, f"must be a list of {layers} entries (one per layer), each one of "
                                   f"{', '.join(LAYER_TYPES)} (got {got})", field="layer_types")  # fmt: skip
        return [i for i, kind in enumerate(types) if kind == "sliding_attention"]
    if model_type in ("gemma2", "gpt_oss"):
        return "even"  # layer_types default: sliding when (i + 1) % 2
    first = data.get("max_window_layers", MAX_WINDOW_LAYERS_DEFAULT)
    if model_type in ("qwen2", "qwen3", "qwen2_moe") and (isinstance(first, bool) or not isinstance(first, int)):
        raise SpecError(where, f"must be a whole number of layers (got {first!r:.40})", field="max_window_layers")
    if model_type in ("qwen2", "qwen3"):
        return list(range(max(first, 0), layers))  # i >= max_window_layers (0: every layer)
    if model_type == "qwen2_moe":
        return list(range(0, min(first, layers), 2))  # even i below max_window_layers
    return "all"  # mistral, mixtral, phi3, qwen3_moe: every layer


def _sliding_window(data: dict[str, Any], model_type: str, layers: int, where: str) -> dict[str, Any] | None:
    window = data.get("sliding_window")
    if model_type in _QWEN and not data.get("use_sliding_window"):
        return None
    if not window or model_type in ("llama", "deepseek_v3"):
        return None
    sliding = _sliding_layers(data, model_type, layers, where)
    if isinstance(sliding, list) and len(sliding) == layers:
        sliding = "all"
    return {"window_tokens": window, "layers": sliding} if sliding else None


def _moe(data: dict[str, Any], model_type: str, where: str) -> dict[str, Any] | None:
    if model_type not in _MOE:
        return None
    every_layer = data.get("decoder_sparse_step", 1) == 1 and not data.get("mlp_only_layers")
    if model_type in ("qwen2_moe", "qwen3_moe") and not every_layer:
        raise SpecError(where, "only every-layer MoE is supported (decoder_sparse_step 1, no mlp_only_layers)",
                        field="decoder_sparse_step")  # fmt: skip
    return {**_copy(data, _EXPERTS | _MOE[model_type]), **({"shared_experts": 1} if model_type == "qwen2_moe" else {})}


def _clean_name(value: Any) -> str | None:
    """A name on one line: the last part of a path or repo id, whitespace runs as one space, at most 200."""
    if not isinstance(value, str):
        return None
    flat = " ".join(value.rstrip("/").rpartition("/")[2].split())
    return "".join(c for c in flat if c.isprintable())[:200] or None


def from_hf_config(data: dict[str, Any], where: str, name: str | None = None) -> ModelSpec:
    """A ModelSpec from a parsed config.json; unsupported types and bad values raise SpecError naming the key."""
    model_type = data.get("model_type")
    if model_type not in SUPPORTED:
        what = "missing" if model_type is None else f"unsupported ({model_type!r:.40})"
        raise SpecError(where, f"{what}; supported: {', '.join(SUPPORTED)}", field="model_type")
    spec: dict[str, Any] = {
        "name": _clean_name(name) or _clean_name(data.get("_name_or_path")) or model_type,
        "source": where.encode("utf-8", "backslashreplace").decode()[:2000],  # a path's undecodable bytes as \udcxx
        "kv_heads": data.get("num_attention_heads"),  # default: one KV head per query head
        "tied_embeddings": model_type in _TIED_BY_DEFAULT,
        **_copy(data, _SHAPES),
        "moe": _moe(data, model_type, where),
    }
    if model_type in _QKV_BIAS:
        spec["attention_bias"] = True
    if model_type == "deepseek_v3":
        spec["kv_heads"] = spec.get("attention_heads")  # MLA caches one latent per token; kv heads play no part
        spec["mla"] = _copy(data, _MLA)
    keys = _SHAPES | {f"moe.{k}": v for k, v in (_EXPERTS | _MOE.get(model_type, {})).items()}
    keys |= {f"mla.{k}": v for k, v in _MLA.items()} | {"sliding_window.layers": "layer_types", "dtype": "torch_dtype"}
    keys |= dict.fromkeys(("weights_dtype", "compute_dtype", "moe.expert_dtype"), "quantization_config")
    model = _validated(spec, where, keys)  # shapes first: the window and formats below need valid counts
    spec["sliding_window"] = _sliding_window(data, model_type, model.layers, where)
    formats = shipped(data, where, model.hidden_size, moe=model.moe is not None)
    if "expert_dtype" in formats:
        spec["moe"] = {**spec["moe"], "expert_dtype": formats.pop("expert_dtype")}
    return _validated({**spec, **formats}, where, keys)


def _validated(spec: dict[str, Any], where: str, keys: dict[str, str]) -> ModelSpec:
    """ModelSpec.model_validate, with the error's key and message in config.json's names."""
    try:
        return ModelSpec.model_validate(spec)
    except ValidationError as exc:
        error = validation_error(where, exc, ModelSpec)
        # a message names keys without their prefix (moe.experts -> experts); top-level keys take precedence
        ordered = sorted(keys.items(), key=lambda k: "." not in k[0])
        names = {ours.rpartition(".")[2]: theirs for ours, theirs in ordered}
        # "kv_heads (5) must divide attention_heads (32)" -> "num_key_value_heads (5) ... num_attention_heads (32)"
        message = re.sub(r"\b(?:moe\.|mla\.)?([a-z_]+)(?= \(\d)", lambda m: names.get(m[1], m[0]), error.message)
        raise SpecError(where, message, field=keys.get(error.field or "")) from None  # no such key: none named
