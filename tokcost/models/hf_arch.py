"""What a config.json does not say but an architecture's weights have, and the vision towers' counts.

A config carries shapes; a few weights follow from the architecture alone (Qwen3's q/k norms, Gemma's
post-norms, gpt-oss's sinks and biases, the ungated GELU MLPs and LayerNorms of StarCoder2, Phi-2, Falcon and
GPT-NeoX). FACTS lists them per text model_type, as transformers' modeling files build them, and READERS the
fields a family names its own way (Falcon's ffn_hidden_size, its multi-query KV head);
tests/test_hf_meta_counts.py holds each family's count equal to `sum(p.numel())` of the model transformers
builds on the meta device. A model_type not listed is counted with Llama's layout (a gated MLP, RMSNorms, no
MLP biases), and the import says so where it prints the count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Facts:
    """Weights an architecture has whatever its config says (None: as the config's `bias_key`)."""

    qkv_bias: bool | None = None
    output_bias: bool | None = None
    bias_key: str = "attention_bias"  # the config key that switches the projections' biases
    mlp_bias: bool | str = "mlp_bias"  # or the config key that switches the MLP's biases (Llama's mlp_bias)
    norm_bias: bool = False  # LayerNorms (a bias beside each scale)
    shared_norm: bool = False  # a parallel block's one input norm
    qk_norm: bool = False
    post_norms: bool = False
    attention_sinks: bool = False
    attention_gate: bool = False
    mlp_gated: bool = True
    router_bias: bool = False
    expert_bias: bool = False
    shared_expert_gate: bool = False
    shared_experts: int | None = None  # None: from n_shared_experts / shared_expert_intermediate_size
    lm_head_bias: bool = False


_QWEN2 = Facts(qkv_bias=True, output_bias=False)  # Qwen2Attention: q/k/v biases always, o_proj none
FACTS: dict[str, Facts] = {
    "llama": Facts(), "mistral": Facts(), "mixtral": Facts(), "phi3": Facts(), "deepseek_v3": Facts(),
    "deepseek_v32": Facts(),  # V3's weights, and its indexer's (spec.SparseAttentionSpec.params)
    "glm_moe_dsa": Facts(),  # GLM-5: DeepSeek-V3.2's layout (MLA, sparse attention, shared expert) at its own widths
    "glm4_moe_lite": Facts(),  # GLM-4.7-Flash: DeepSeek-V3's layout (MLA, a first dense layer, a shared expert)
    "deepseek_v2": Facts(),  # MLA and shared experts as V3's; its greedy softmax gate has no score bias either
    "qwen2": _QWEN2, "qwen2_vl_text": _QWEN2, "qwen2_5_vl_text": _QWEN2,
    "qwen2_moe": Facts(qkv_bias=True, output_bias=False, shared_expert_gate=True),
    "qwen3": Facts(qk_norm=True), "qwen3_moe": Facts(qk_norm=True),
    "qwen3_next": Facts(qk_norm=True, attention_gate=True, shared_expert_gate=True),
    # Qwen3.5: Qwen3-Next's layout (gated DeltaNet and gated attention with q/k norms; the MoE's gated shared expert)
    "qwen3_5_text": Facts(qk_norm=True, attention_gate=True),
    "qwen3_5_moe_text": Facts(qk_norm=True, attention_gate=True, shared_expert_gate=True),
    "gemma2": Facts(post_norms=True), "gemma3_text": Facts(qk_norm=True, post_norms=True),
    "gpt_oss": Facts(attention_sinks=True, router_bias=True, expert_bias=True),
    "llama4_text": Facts(shared_experts=1),  # its q/k norm is an L2 norm without weights
    "nemotron_h": Facts(mlp_gated=False),  # squared-ReLU MLP: up and down projections only
    "nemotron": Facts(mlp_gated=False, norm_bias=True),  # squared ReLU (up, down); LayerNorm1P has a bias
    # GELU MLPs (up, down) and LayerNorms with biases
    "starcoder2": Facts(bias_key="use_bias", mlp_bias="use_bias", mlp_gated=False, norm_bias=True),
    "phi": Facts(qkv_bias=True, output_bias=True, mlp_bias=True, mlp_gated=False, norm_bias=True, shared_norm=True,
                 lm_head_bias=True),  # Phi-2: one LayerNorm before attention and MLP side by side
    "gpt_neox": Facts(mlp_bias=True, mlp_gated=False, norm_bias=True),  # two LayerNorms even in parallel
    "falcon": Facts(bias_key="bias", mlp_bias="bias", mlp_gated=False, norm_bias=True),
    # ERNIE-4.5's one use_bias switches every projection's and MLP's biases (transformers' Ernie4_5_Moe modeling)
    # and its router keeps a score-correction bias per expert (moe_statics.e_score_correction_bias, a parameter)
    "ernie4_5_moe": Facts(bias_key="use_bias", mlp_bias="use_bias", router_bias=True),
    "ernie4_5": Facts(bias_key="use_bias", mlp_bias="use_bias"),
}  # fmt: skip


def _falcon(text: Any) -> dict[str, Any]:
    """Falcon's own names: the MLP width, one KV head under multi-query (before its new decoder architecture),
    and one input LayerNorm for a parallel block unless it has two (transformers' FalconDecoderLayer)."""
    new = bool(text.new_decoder_architecture)
    norms = text.num_ln_in_parallel_attn or (2 if new else 1)
    return {
        "intermediate_size": text.ffn_hidden_size,
        "kv_heads": text.num_kv_heads if new or not text.multi_query else 1,
        "shared_norm": bool(text.parallel_attn) and norms != 2,
    }


# text model_type -> the ModelSpec fields it names its own way (read from transformers' config object)
READERS = {"falcon": _falcon}


def _siglip(v: Any) -> int:
    """SigLIP vision transformer without its pooling head (Gemma-3): LayerNorms and linears with biases."""
    d, i, c, p = v.hidden_size, v.intermediate_size, v.num_channels, v.patch_size
    patches = (v.image_size // p) ** 2
    layer = 4 * (d * d + d) + (d * i + i) + (i * d + d) + 2 * 2 * d  # q, k, v, o; fc1, fc2; two LayerNorms
    return c * p * p * d + d + patches * d + v.num_hidden_layers * layer + 2 * d  # patch conv, positions, post-LN


def _pixtral(v: Any) -> int:
    """Pixtral vision transformer (Mistral-3): RMSNorms, gated MLP, no biases, rotary positions."""
    d, i = v.hidden_size, v.intermediate_size
    layer = 4 * d * d + 3 * d * i + 2 * d  # q, k, v, o; gate, up, down; two RMSNorms
    return v.num_channels * v.patch_size**2 * d + d + v.num_hidden_layers * layer  # patch conv, ln_pre


def _llama4_vision(v: Any) -> int:
    """Llama-4's vision encoder: a CLIP-style ViT with biases, then its pixel-shuffle MLP adapter."""
    d, i, p = v.hidden_size, v.intermediate_size, v.patch_size
    positions = (v.image_size // p) ** 2 + 1  # patches and the class token
    layer = 4 * (d * d + d) + (d * i + i) + (i * d + d) + 2 * 2 * d
    stem = d + positions * d + v.num_channels * p * p * d + 2 * 2 * d  # class token, positions, patches, two LNs
    adapter = i * v.projector_input_dim + v.projector_input_dim * v.projector_output_dim  # fc1, fc2, no biases
    return stem + v.num_hidden_layers * layer + adapter


def _gemma3_projector(config: Any) -> int:
    d = config.vision_config.hidden_size  # the soft-embedding RMSNorm, then vision -> text width
    return d + d * config.text_config.hidden_size


def _mistral3_projector(config: Any) -> int:
    d, h, s = config.vision_config.hidden_size, config.text_config.hidden_size, config.spatial_merge_size
    bias = config.multimodal_projector_bias
    merge = d * s * s * d  # patch merger: s x s patches -> one
    return d + merge + (d * h + (h if bias else 0)) + (h * h + (h if bias else 0))  # norm, merge, linear_1, linear_2


def _llama4_projector(config: Any) -> int:
    return config.vision_config.vision_output_dim * config.text_config.hidden_size  # linear_1, no bias


# top-level model_type -> (vision tower, projector)
TOWERS = {
    "gemma3": (_siglip, _gemma3_projector),
    "mistral3": (_pixtral, _mistral3_projector),
    "llama4": (_llama4_vision, _llama4_projector),
}


def encoder_params(config: Any) -> tuple[int, str]:
    """(vision tower + projector parameters, a note) of a multimodal config; (0, '') for a text-only one."""
    vision = getattr(config, "vision_config", None)
    if vision is None:
        return 0, ""
    counters = TOWERS.get(config.model_type)
    if counters is None:
        return 0, f"its {vision.model_type} vision tower is not counted (tokcost knows those of {', '.join(TOWERS)})"
    tower, projector = counters
    return tower(vision) + projector(config), ""
