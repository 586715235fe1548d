"""HuggingFace `config.json` -> ModelSpec for the decoder families tokcost knows.

Key names follow transformers' configuration classes (LlamaConfig, MixtralConfig, Qwen2Config,
Qwen2MoeConfig, Qwen3Config, Qwen3MoeConfig, DeepseekV3Config, Gemma2Config, Phi3Config, GptOssConfig).
"""

from __future__ import annotations

import builtins
import math
from typing import Any

from pydantic import ValidationError

from tokcost.errors import SpecError
from tokcost.models.spec import ModelSpec
from tokcost.spec_errors import validation_error

SUPPORTED = (
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe",
    "deepseek_v3", "gemma2", "phi3", "gpt_oss",
)  # fmt: skip

_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "bf16": "bf16", "fp16": "fp16"}
# qwen2 and qwen2_moe always carry q/k/v biases (no config flag); gpt-oss states attention_bias.
_QKV_BIAS = ("qwen2", "qwen2_moe")
_TIED_BY_DEFAULT = ("gemma2",)


class _Config:
    """Typed access to a config mapping, with errors that name the file and the key."""

    def __init__(self, data: dict[str, Any], where: str) -> None:
        self.data, self.where = data, where

    def int(self, key: str, default: int | None = None) -> int:
        value = self.data.get(key, default)
        if value is None:
            raise SpecError(self.where, "required key is missing", field=key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise SpecError(self.where, f"must be a positive integer (got {value!r:.40})", field=key)
        if value != int(value) or value < 1:
            raise SpecError(self.where, f"must be a positive integer (got {value!r:.40})", field=key)
        return int(value)

    def count(self, key: str) -> builtins.int:  # `int` is the method above, in this class
        """A non-negative integer that defaults to 0 (e.g. first_k_dense_replace)."""
        value = self.data.get(key) or 0
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise SpecError(self.where, f"must be a whole number, 0 or more (got {value!r:.40})", field=key)
        return value

    def optional_int(self, key: str) -> builtins.int | None:
        return self.int(key) if self.data.get(key) is not None else None

    def flag(self, key: str, default: bool) -> bool:
        value = self.data.get(key, default)
        if not isinstance(value, bool):
            raise SpecError(self.where, f"must be true or false (got {value!r:.40})", field=key)
        return value


def _moe(cfg: _Config, model_type: str) -> dict[str, Any] | None:
    data = cfg.data
    if model_type in ("mixtral", "gpt_oss"):
        moe: dict[str, Any] = {
            "experts": cfg.int("num_local_experts"),
            "experts_per_token": cfg.int("num_experts_per_tok"),
            "expert_intermediate_size": cfg.int("intermediate_size"),
        }
        quant = data.get("quantization_config") or {}
        if isinstance(quant, dict) and quant.get("quant_method") == "mxfp4":
            moe["expert_dtype"] = "fp4"  # gpt-oss ships its experts in MXFP4
        return moe
    if model_type in ("qwen2_moe", "qwen3_moe"):
        if cfg.int("decoder_sparse_step", 1) != 1 or data.get("mlp_only_layers"):
            raise SpecError(cfg.where, "only every-layer MoE is supported (decoder_sparse_step 1, no mlp_only_layers)")
        moe = {
            "experts": cfg.int("num_experts"),
            "experts_per_token": cfg.int("num_experts_per_tok"),
            "expert_intermediate_size": cfg.int("moe_intermediate_size"),
        }
        if model_type == "qwen2_moe":
            moe["shared_experts"] = 1
            moe["shared_expert_intermediate_size"] = cfg.int("shared_expert_intermediate_size")
        return moe
    if model_type == "deepseek_v3":
        return {
            "experts": cfg.int("n_routed_experts"),
            "experts_per_token": cfg.int("num_experts_per_tok"),
            "shared_experts": cfg.int("n_shared_experts", 0) if data.get("n_shared_experts") else 0,
            "expert_intermediate_size": cfg.int("moe_intermediate_size"),
            "dense_layers": cfg.count("first_k_dense_replace"),
            "dense_intermediate_size": cfg.int("intermediate_size"),
        }
    return None


def _sliding_window(cfg: _Config, model_type: str, layers: int) -> dict[str, Any] | None:
    data = cfg.data
    window = data.get("sliding_window")
    qwen = model_type in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe")
    if not window or (qwen and not data.get("use_sliding_window")):
        return None
    window = cfg.int("sliding_window")
    types = data.get("layer_types")
    if isinstance(types, list):
        sliding = [i for i, kind in enumerate(types) if kind == "sliding_attention"]
        return {"window_tokens": window, "layers": sliding} if sliding else None
    if model_type == "gemma2":
        return {"window_tokens": window, "layers": "even"}  # Gemma2: is_sliding = not bool(layer_idx % 2)
    if model_type in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe"):
        first = cfg.int("max_window_layers", layers) if data.get("max_window_layers") else layers
        return {"window_tokens": window, "layers": list(range(first, layers))} if first < layers else None
    return {"window_tokens": window, "layers": "all"}


def from_hf_config(data: dict[str, Any], where: str, name: str | None = None) -> ModelSpec:
    """A ModelSpec from a parsed config.json; unsupported types and missing keys raise SpecError."""
    model_type = data.get("model_type")
    if model_type not in SUPPORTED:
        what = "missing" if model_type is None else f"unsupported ({model_type!r:.40})"
        raise SpecError(where, f"{what}; supported: {', '.join(SUPPORTED)}", field="model_type")
    cfg = _Config(data, where)
    heads = cfg.int("num_attention_heads")
    layers = cfg.int("num_hidden_layers")
    spec: dict[str, Any] = {
        "name": name or _path_name(data.get("_name_or_path")) or model_type,
        "source": where,
        "layers": layers,
        "hidden_size": cfg.int("hidden_size"),
        "attention_heads": heads,
        "kv_heads": cfg.int("num_key_value_heads", heads),
        "intermediate_size": cfg.int("intermediate_size"),
        "vocab_size": cfg.int("vocab_size"),
        "tied_embeddings": cfg.flag("tie_word_embeddings", model_type in _TIED_BY_DEFAULT),
        "attention_bias": model_type in _QKV_BIAS or cfg.flag("attention_bias", False),
        "dtype": _DTYPES.get(str(data.get("torch_dtype") or data.get("dtype") or "bfloat16"), "bf16"),
        "max_context": cfg.int("max_position_embeddings"),
        "moe": _moe(cfg, model_type),
        "sliding_window": _sliding_window(cfg, model_type, layers),
    }
    if data.get("head_dim") is not None:
        spec["head_dim"] = cfg.int("head_dim")
    if model_type == "deepseek_v3":
        spec["kv_heads"] = heads  # MLA caches one latent per token; kv heads play no part
        spec["mla"] = {
            "kv_lora_rank": cfg.int("kv_lora_rank"),
            "rope_head_dim": cfg.int("qk_rope_head_dim"),
            "q_lora_rank": cfg.optional_int("q_lora_rank"),
            "nope_head_dim": cfg.int("qk_nope_head_dim"),
            "v_head_dim": cfg.int("v_head_dim"),
        }
    try:
        return ModelSpec.model_validate(spec)
    except ValidationError as exc:
        error = validation_error(where, exc, ModelSpec)
        key = _HF_KEY.get(error.field or "")  # name the key the user wrote in config.json
        raise SpecError(where, error.message, field=key or error.field) from None


# tokcost keys -> the config.json keys they come from, for error messages
_HF_KEY = {
    "layers": "num_hidden_layers", "hidden_size": "hidden_size", "attention_heads": "num_attention_heads",
    "kv_heads": "num_key_value_heads", "head_dim": "head_dim", "intermediate_size": "intermediate_size",
    "vocab_size": "vocab_size", "max_context": "max_position_embeddings",
    "sliding_window.window_tokens": "sliding_window",
}  # fmt: skip


def _path_name(value: Any) -> str | None:
    """The last part of `_name_or_path` (`meta-llama/Llama-3.1-8B` -> `Llama-3.1-8B`), when it is a name."""
    if not isinstance(value, str) or not value.strip():
        return None
    return value.rstrip("/").rpartition("/")[2][:200] or None


def is_hf_config(data: dict[str, Any]) -> bool:
    """Whether a mapping looks like a HuggingFace config rather than a tokcost spec."""
    return "model_type" in data or "num_hidden_layers" in data
