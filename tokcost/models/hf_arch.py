"""What a config.json does not say but an architecture's weights have, and the vision towers' counts.

A config carries shapes; a few weights follow from the architecture alone (Qwen3's q/k norms, Gemma's
post-norms, gpt-oss's sinks and biases, Nemotron-H's ungated MLP). FACTS lists them per text model_type, as
transformers' modeling files build them; tests/test_hf_meta_counts.py holds each family's count equal to
`sum(p.numel())` of the model transformers builds on the meta device. A model_type not listed is counted
with Llama's layout, and the imported spec's notes say so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Facts:
    """Weights an architecture has whatever its config says (None: as the config's attention_bias)."""

    qkv_bias: bool | None = None
    output_bias: bool | None = None
    qk_norm: bool = False
    post_norms: bool = False
    attention_sinks: bool = False
    attention_gate: bool = False
    mlp_gated: bool = True
    router_bias: bool = False
    expert_bias: bool = False
    shared_expert_gate: bool = False
    shared_experts: int | None = None  # None: from n_shared_experts / shared_expert_intermediate_size


_QWEN2 = Facts(qkv_bias=True, output_bias=False)  # Qwen2Attention: q/k/v biases always, o_proj none
FACTS: dict[str, Facts] = {
    "llama": Facts(), "mistral": Facts(), "mixtral": Facts(), "phi3": Facts(), "deepseek_v3": Facts(),
    "qwen2": _QWEN2, "qwen2_moe": Facts(qkv_bias=True, output_bias=False, shared_expert_gate=True),
    "qwen3": Facts(qk_norm=True), "qwen3_moe": Facts(qk_norm=True),
    "qwen3_next": Facts(qk_norm=True, attention_gate=True, shared_expert_gate=True),
    "gemma2": Facts(post_norms=True), "gemma3_text": Facts(qk_norm=True, post_norms=True),
    "gpt_oss": Facts(attention_sinks=True, router_bias=True, expert_bias=True),
    "llama4_text": Facts(shared_experts=1),  # its q/k norm is an L2 norm without weights
    "nemotron_h": Facts(mlp_gated=False),  # squared-ReLU MLP: up and down projections only
}  # fmt: skip


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
