"""The config.json keys tokcost reads, with the type each must have: checked before transformers sees them.

transformers' configuration classes keep a value of the wrong type as it is (a text "false" is truthy, and
applied a sliding window: issue 22). Here a key of the wrong type is a one-line error naming the key and
what it allows; a key that becomes a ModelSpec field takes that field's type and bounds, so that both say
the same thing.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from tokcost.errors import SpecError
from tokcost.models.mixers import GatedDeltaNetSpec, MambaSpec
from tokcost.models.spec import MlaSpec, ModelSpec, MoeSpec, SparseAttentionSpec
from tokcost.spec_errors import validation_error

# config.json key -> (the spec class, the field whose type and bounds the key takes)
FROM_SPEC: dict[str, tuple[type[BaseModel], str]] = {
    "num_hidden_layers": (ModelSpec, "layers"), "hidden_size": (ModelSpec, "hidden_size"),
    "num_attention_heads": (ModelSpec, "attention_heads"), "num_key_value_heads": (ModelSpec, "kv_heads"),
    "head_dim": (ModelSpec, "head_dim_stated"), "intermediate_size": (ModelSpec, "intermediate_size"),
    "vocab_size": (ModelSpec, "vocab_size"), "max_position_embeddings": (ModelSpec, "max_context"),
    "tie_word_embeddings": (ModelSpec, "tied_embeddings"), "attention_bias": (ModelSpec, "attention_bias"),
    "attention_chunk_size": (ModelSpec, "chunk_tokens"),
    "num_local_experts": (MoeSpec, "experts"), "num_experts": (MoeSpec, "experts"),
    "n_routed_experts": (MoeSpec, "experts"), "num_experts_per_tok": (MoeSpec, "experts_per_token"),
    "moe_intermediate_size": (MoeSpec, "expert_intermediate_size"), "n_shared_experts": (MoeSpec, "shared_experts"),
    "moe_num_experts": (MoeSpec, "experts"), "moe_k": (MoeSpec, "experts_per_token"),  # ERNIE-4.5's names
    "moe_num_shared_experts": (MoeSpec, "shared_experts"),
    "first_k_dense_replace": (MoeSpec, "dense_layers"), "intermediate_size_mlp": (MoeSpec, "dense_intermediate_size"),
    "kv_lora_rank": (MlaSpec, "kv_lora_rank"), "q_lora_rank": (MlaSpec, "q_lora_rank"),
    "qk_rope_head_dim": (MlaSpec, "rope_head_dim"), "qk_nope_head_dim": (MlaSpec, "nope_head_dim"),
    "v_head_dim": (MlaSpec, "v_head_dim"),
    "linear_num_key_heads": (GatedDeltaNetSpec, "key_heads"),
    "linear_num_value_heads": (GatedDeltaNetSpec, "value_heads"),
    "linear_key_head_dim": (GatedDeltaNetSpec, "key_head_dim"),
    "linear_value_head_dim": (GatedDeltaNetSpec, "value_head_dim"),
    "linear_conv_kernel_dim": (GatedDeltaNetSpec, "conv_kernel"),
    "mamba_num_heads": (MambaSpec, "heads"), "mamba_head_dim": (MambaSpec, "head_dim"),
    "ssm_state_size": (MambaSpec, "state_size"), "n_groups": (MambaSpec, "groups"),
    "conv_kernel": (MambaSpec, "conv_kernel"), "use_conv_bias": (MambaSpec, "conv_bias"),
    "mamba_proj_bias": (MambaSpec, "proj_bias"), "chunk_size": (MambaSpec, "chunk_tokens"),
    "index_topk": (SparseAttentionSpec, "top_k_tokens"), "index_n_heads": (SparseAttentionSpec, "index_heads"),
    "index_head_dim": (SparseAttentionSpec, "index_head_dim"),  # DeepSeek-V3.2's sparse attention
}  # fmt: skip
_Count = Annotated[int, Field(ge=0, le=10_000)]
# keys that decide which layers are which, read by tokcost or by transformers on the way
OWN: dict[str, Any] = {
    "model_type": str, "architectures": list[str], "use_sliding_window": bool,
    "sliding_window": Annotated[int, Field(ge=0, le=100_000_000)] | None,
    "max_window_layers": _Count, "sliding_window_pattern": Annotated[int, Field(ge=1, le=10_000)],
    "layer_types": list[str], "no_rope_layers": list[int], "no_rope_layer_interval": _Count,
    "interleave_moe_layer_step": Annotated[int, Field(ge=1, le=10_000)], "moe_layers": list[int],
    "decoder_sparse_step": Annotated[int, Field(ge=1, le=10_000)], "mlp_only_layers": list[int],
    "full_attention_interval": Annotated[int, Field(ge=1, le=10_000)], "hybrid_override_pattern": str,
    "use_qk_norm": bool, "mlp_bias": bool, "use_bias": bool, "text_config": dict[str, Any],
    "vision_config": dict[str, Any], "quantization_config": dict[str, Any],
    # 0 says there is no shared expert (Qwen3-Coder-480B's config), as transformers' Qwen3-MoE reads it
    "shared_expert_intermediate_size": Annotated[int, Field(ge=0, le=1_000_000)],
    # ERNIE-4.5: its MoE layers are every interval-th from start to end (-1: the last)
    "moe_layer_start_index": _Count, "moe_layer_end_index": Annotated[int, Field(ge=-1, le=10_000)],
    "moe_layer_interval": Annotated[int, Field(ge=1, le=10_000)],
}  # fmt: skip
REQUIRED = ("num_hidden_layers", "hidden_size", "num_attention_heads")


def _field(spec: type[BaseModel], name: str) -> Any:
    info = spec.model_fields[name]  # its type and bounds, not its alias or default
    bounds = {k: getattr(m, k) for m in info.metadata for k in ("ge", "le") if getattr(m, k, None) is not None}
    return (info.annotation | None, Field(None, **bounds))


RawKeys: type[BaseModel] = create_model(  # type: ignore[call-overload]
    "RawKeys",
    __config__=ConfigDict(extra="ignore", strict=True, frozen=True),
    **{key: _field(*target) for key, target in FROM_SPEC.items()},
    **{key: (kind | None, None) for key, kind in OWN.items()},
)


def check_types(data: dict[str, Any], where: str, prefix: str = "") -> None:
    """Every key tokcost reads has its type and range; else SpecError naming `prefix` + the key."""
    try:
        RawKeys.model_validate(data)
    except ValidationError as exc:
        error = validation_error(where, exc, RawKeys)
        raise SpecError(where, error.message, field=prefix + (error.field or "")) from None
