"""Every norm weight a model holds is read by its decode step, once: one before each mixer and MLP (one for both in
a parallel block), one after each too with Gemma's post-norms, a LayerNorm's bias beside each scale, and the
final norm (models/counts.py: norm_vectors, the one count the engine's norm stages and the memory table share)."""

from __future__ import annotations

import pytest

from tokcost import Workload, load_gpu, load_model
from tokcost.engine.estimate import estimate
from tokcost.models.spec import ModelSpec

VARIANTS = [
    ("gemma-3-12b", {}),  # post-norms: 4 a layer
    ("gemma-2-9b", {}),
    ("llama-3.1-8b", {}),  # 2 a layer
    ("llama-3.1-8b", {"norm_bias": True}),  # LayerNorm: scale and bias
    ("llama-3.1-8b", {"shared_norm": True}),  # a parallel block: 1 a layer
    ("llama-3.1-8b", {"shared_norm": True, "norm_bias": True}),
]


def _variant(name: str, update: dict) -> ModelSpec:
    return ModelSpec.model_validate({**load_model(name).model_dump(), **update})


@pytest.mark.parametrize(("name", "update"), VARIANTS)
def test_the_decode_step_reads_every_norm_weight_the_model_holds(name, update):
    model = _variant(name, update)
    est = estimate(model, load_gpu("h100-sxm"), Workload(prompt_tokens=128, output_tokens=8))
    norms = [p.stage for p in est.ceiling.decode_step.stages if p.stage.name.endswith("norm")]
    read = sum(s.count * s.weight_bytes for s in norms)
    assert read == pytest.approx(model.params_norms * 2)  # bf16 vectors


@pytest.mark.parametrize(
    ("update", "per_layer"),
    [({}, 2), ({"norm_bias": True}, 4), ({"shared_norm": True}, 1), ({"post_norms": True}, 4)],
)
def test_a_layer_s_norm_vectors_by_hand(update, per_layer):
    model = _variant("llama-3.1-8b", update)
    h, layers = 4096, 32
    assert model.params_norms_per_layer("attention", "dense") == per_layer * h
    final = 2 if update.get("norm_bias") else 1
    assert model.params_norms == (layers * per_layer + final) * h


def test_gemma_2_s_shapes_give_its_published_count():
    # Gemma 2 has four RMSNorms a layer (pre/post attention, pre/post MLP): with them the shapes give the HF
    # safetensors count stated in its spec exactly (9,241,705,984 and 27,227,128,320)
    assert load_model("gemma-2-9b").params_total == 9_241_705_984
    assert load_model("gemma-2-27b").params_total == 27_227_128_320


@pytest.mark.parametrize(("name", "update"), VARIANTS)
def test_the_memory_table_holds_every_norm_the_count_has(name, update):
    # one GPU holds the whole model: its weights are params_total x 2 bytes (bf16 and fp16 models; a tied table once)
    from tokcost.engine.memory import ReplicaMemory

    model = _variant(name, update)
    est = estimate(model, load_gpu("h200"), Workload(prompt_tokens=128, output_tokens=8))
    held = ReplicaMemory(model, est.gpu, est.precision, est.layout).weights[0]
    assert held == pytest.approx((model.params_total + model.encoder_params) * 2, rel=1e-12)
