"""Every built-in spec loads, has a source, and its derived counts match the published ones."""

from __future__ import annotations

from importlib import resources

import pytest
import yaml

from tokcost.catalog import builtin_names
from tokcost.hardware.library import load_gpu, match_device_name
from tokcost.models.library import load_model

REQUIRED_MODELS = [
    "llama-2-7b",
    "llama-2-13b",
    "llama-2-70b",
    "llama-3-8b",
    "llama-3.1-8b",
    "llama-3.1-70b",
    "llama-3.1-405b",
    "llama-3.3-70b",
    "llama-3.2-1b",
    "llama-3.2-3b",
    "mistral-7b",
    "mixtral-8x7b",
    "mixtral-8x22b",
    "qwen2.5-7b",
    "qwen2.5-72b",
    "qwen3-8b",
    "qwen3-32b",
    "qwen3-30b-a3b",
    "qwen3-235b-a22b",
    "deepseek-v3",
    "gemma-2-9b",
    "gemma-2-27b",
    "phi-3-mini",
    "gpt-oss-20b",
    "gpt-oss-120b",
]
REQUIRED_GPUS = [
    "h100-sxm",
    "h100-pcie",
    "h100-nvl",
    "h200",
    "a100-40gb-sxm",
    "a100-80gb-sxm",
    "a100-80gb-pcie",
    "l40s",
    "l4",
    "a10g",
    "a10",
    "rtx-4090",
    "mi300x",
    "b200",
]


def test_required_names_are_built_in():
    assert set(REQUIRED_MODELS) <= set(builtin_names("models"))
    assert set(REQUIRED_GPUS) <= set(builtin_names("gpus"))


@pytest.mark.parametrize("name", REQUIRED_MODELS)
def test_model_params_match_published_within_1_percent(name):
    m = load_model(name)
    assert m.source.startswith("https://"), "every model cites its config.json"
    assert m.params_total_stated is not None, "the published count is recorded to check the shapes against"
    assert abs(m.params_total / m.params_total_stated - 1) < 0.01


# Published counts, exact where HF safetensors give them (model cards and config.json of each model).
@pytest.mark.parametrize(
    ("name", "total"),
    [
        ("llama-2-7b", 6_738_415_616),  # HF safetensors metadata
        ("llama-3.1-8b", 8_030_261_248),  # "8.03B" on the model card
        ("llama-3.1-70b", 70_553_706_496),  # "70.55B"
    ],
)
def test_exact_parameter_counts(name, total):
    assert load_model(name).params_total == total


@pytest.mark.parametrize(
    ("name", "total_b", "active_b", "active_includes_embedding"),
    [
        ("mixtral-8x7b", 46.7, 12.9, True),  # Mistral AI blog: 46.7B total, 12.9B per token
        ("deepseek-v3", 671.0, 37.0, True),  # DeepSeek-V3 report: 671B total, 37B activated
        ("qwen3-30b-a3b", 30.5, 3.3, True),  # Qwen3 model card
        ("qwen3-235b-a22b", 235.0, 22.0, True),  # Qwen3 model card
        ("gpt-oss-120b", 116.8, 5.1, False),  # gpt-oss model card: active count excludes the embedding
        ("gpt-oss-20b", 20.9, 3.6, False),
    ],
)
def test_moe_total_and_active(name, total_b, active_b, active_includes_embedding):
    m = load_model(name)
    active = m.params_active if active_includes_embedding else m.params_active - m.params_embedding
    assert m.params_total / 1e9 == pytest.approx(total_b, rel=0.01)
    assert active / 1e9 == pytest.approx(active_b, rel=0.02)


def test_moe_active_is_attention_shared_topk_and_dense_parts():
    m = load_model("deepseek-v3")
    expected = (
        m.layers * m.params_attention_per_layer
        + m.dense_mlp_layers * m.params_dense_mlp_per_layer
        + m.moe_layers * (8 * m.params_per_expert + m.params_shared_experts_per_layer + m.params_router_per_layer)
        + m.params_norms
        + m.params_embedding
        + m.params_lm_head
    )
    assert m.params_active == expected


@pytest.mark.parametrize("name", REQUIRED_GPUS)
def test_gpu_specs_have_sources_and_dense_peaks(name):
    g = load_gpu(name)
    assert g.source.strip()
    assert all(isinstance(v, float | int) and v > 0 for v in g.peak_tflops.values())
    assert g.memory_bandwidth_gb_s > 0 and g.memory_gb > 0


def test_datasheet_figures():
    # NVIDIA H100 datasheet, SXM: 3.35 TB/s, 1,979 TFLOPS bf16 with sparsity -> 989.4 dense
    h100 = load_gpu("h100-sxm")
    assert h100.memory_bandwidth_gb_s == 3350
    assert h100.peak_tflops["bf16"] == pytest.approx(989.4)
    # H200: same compute, 4.8 TB/s HBM3e
    assert load_gpu("h200").memory_bandwidth_gb_s == 4800
    # RTX 4090: the FP32-accumulate rate (what PyTorch matmuls use), not the FP16-accumulate 330
    assert load_gpu("rtx-4090").peak_tflops["bf16"] == pytest.approx(165.2)


@pytest.mark.parametrize("kind", ["models", "gpus"])
def test_every_yaml_loads_to_numbers(kind):
    """The PyYAML 1.1 trap: `3.35e12` loads as a string. Every numeric leaf must be a number."""
    folder = resources.files("tokcost") / "specs" / kind
    for entry in folder.iterdir():
        data = yaml.safe_load(entry.read_text())
        for key, value in _leaves(data):
            if isinstance(value, str):
                assert not _looks_numeric(value), f"{entry.name}: {key} is the string {value!r}"


def _leaves(data, prefix=""):
    if isinstance(data, dict):
        for k, v in data.items():
            yield from _leaves(v, f"{prefix}{k}.")
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield from _leaves(v, f"{prefix}{i}.")
    else:
        yield prefix, data


def _looks_numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize(
    ("runtime_name", "spec"),
    [
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("NVIDIA L40S", "l40s"),
        ("NVIDIA L4", "l4"),
        ("NVIDIA A100-SXM4-80GB", "a100-80gb-sxm"),
        ("NVIDIA A10G", "a10g"),
        ("Intel Xeon", None),
    ],
)
def test_runtime_names_match_the_right_spec(runtime_name, spec):
    assert match_device_name(runtime_name) == spec
