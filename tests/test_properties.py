"""Properties over Hypothesis-generated specs and workloads: finite output, JSON round trips, the engine's laws.

Laws (roofline: time = max(FLOPs / peak, bytes / bandwidth) per term, terms add): more bandwidth or FLOPs is
never slower; TPOT never falls as batch or context grows; "expected" is never faster than "ceiling"; the
largest batch that fits never grows with the context; more GPUs never hold more weight bytes each. The HF
importer, fed arbitrary JSON objects, returns a valid spec or raises tokcost's own SpecError.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from tiers import examples

from tokcost.engine.estimate import Estimate
from tokcost.engine.estimate import estimate as _estimate
from tokcost.engine.layout import tp_degrees
from tokcost.engine.report import estimate_dict
from tokcost.engine.workload import Workload
from tokcost.errors import SpecError
from tokcost.hardware.spec import GpuSpec, Link
from tokcost.models.hf_import import from_hf_config
from tokcost.models.spec import ModelSpec

PROPERTY = settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
STORAGE = ["fp32", "bf16", "fp16", "fp8", "int8", "int4", "fp4", "int4-g32-z16", "nf4", "q4_k_m", "q8_0", "nvfp4"]
NETWORK = Link(kind="infiniband", gb_s=50, latency_us=25, source="test")


def with_valid_tp(model: ModelSpec, wl: Workload) -> Workload:
    """The workload at the largest tensor-parallel degree the model allows, up to the one asked for."""
    tp = max(d for d in tp_degrees(model, limit=wl.tp))
    return wl.model_copy(update={"tp": tp})


def estimate(model: ModelSpec, gpu: GpuSpec, wl: Workload) -> Estimate:
    """estimate() at a valid layout, with a network for layouts that span nodes."""
    return _estimate(model, gpu, with_valid_tp(model, wl), NETWORK)


HF_CONFIGS = sorted((Path(__file__).parent / "assets" / "hf").glob("*.json"))


@st.composite
def models(draw) -> ModelSpec:
    """Small but varied decoders: GQA, optional MoE, MLA and sliding windows, any storage dtype."""
    layers = draw(st.integers(1, 8))
    heads = draw(st.sampled_from([1, 2, 4, 8, 16, 32]))
    kv_heads = draw(st.sampled_from([d for d in range(1, heads + 1) if heads % d == 0]))
    head_dim = draw(st.sampled_from([16, 32, 64, 128]))
    spec: dict[str, Any] = {
        "name": "generated",
        "layers": layers,
        "hidden_size": heads * head_dim,
        "attention_heads": heads,
        "kv_heads": kv_heads,
        "intermediate_size": draw(st.integers(1, 20_000)),
        "vocab_size": draw(st.integers(1, 200_000)),
        "tied_embeddings": draw(st.booleans()),
        "attention_bias": draw(st.booleans()),
        "dtype": draw(st.sampled_from(["fp32", "bf16", "fp16"])),
        "max_context": draw(st.integers(1, 1_000_000)),
    }
    if draw(st.booleans()):  # head_dim stated, unrelated to hidden / heads (Gemma-2, Qwen3)
        spec["hidden_size"] = draw(st.integers(1, 8192))
        spec["head_dim"] = head_dim
    if draw(st.booleans()):
        experts = draw(st.integers(1, 64))
        spec["moe"] = {
            "experts": experts,
            "experts_per_token": draw(st.integers(1, experts)),
            "shared_experts": draw(st.integers(0, 2)),
            "expert_intermediate_size": draw(st.integers(1, 8192)),
            "dense_layers": draw(st.integers(0, layers)),
            "expert_dtype": draw(st.sampled_from([None, "fp4", "int4", "fp8"])),
        }
    if draw(st.integers(0, 4)) == 0:
        spec["mla"] = {
            "kv_lora_rank": draw(st.integers(1, 1024)),
            "rope_head_dim": draw(st.integers(0, 128)),
            "q_lora_rank": draw(st.sampled_from([None, 64, 1536])),
            "nope_head_dim": draw(st.integers(1, 256)),
            "v_head_dim": draw(st.integers(1, 256)),
        }
    if draw(st.booleans()):
        which = draw(st.sampled_from(["all", "even", "odd", "list"]))
        chosen = draw(st.lists(st.integers(0, layers - 1), min_size=1, unique=True)) if which == "list" else which
        spec["sliding_window"] = {"window_tokens": draw(st.integers(1, 10_000)), "layers": chosen}
    return ModelSpec.model_validate(spec)


@st.composite
def gpus(draw) -> GpuSpec:
    """Accelerators from a phone-class chip to past a B200, always with a link so any --gpus prices."""
    bf16 = draw(st.floats(1, 5000))
    return GpuSpec.model_validate(
        {
            "name": "generated",
            "source": "hypothesis",
            "memory_gb": draw(st.floats(1, 300)),
            "memory_bandwidth_gb_s": draw(st.floats(10, 20_000)),
            "peak_tflops": {"bf16": bf16, "fp16": bf16, "fp32": bf16 / 8, "fp8": 2 * bf16, "int8": 2 * bf16},
            "tdp_w": draw(st.floats(1, 2000)),
            "link": {
                "kind": "nvlink",
                "gb_s": draw(st.floats(1, 2000)),
                "latency_us": draw(st.floats(0, 20)),
                "source": "hypothesis",
            },
            "price_per_hour_usd": draw(st.one_of(st.none(), st.floats(0, 100))),
            "achievable": {
                "bandwidth": draw(st.floats(0.05, 1)),
                "compute": draw(st.floats(0.05, 1)),
                "step_overhead_us": draw(st.floats(0, 100)),
                "weight_only_quant_bandwidth": draw(st.one_of(st.none(), st.floats(0.05, 1))),
            },
        }
    )


@st.composite
def workloads(draw) -> Workload:
    prompt = draw(st.integers(1, 32_768))
    return Workload(
        batch=draw(st.integers(1, 512)),
        prompt_tokens=prompt,
        output_tokens=draw(st.integers(1, 4096)),
        tp=draw(st.sampled_from([1, 2, 4, 8])),
        weights_dtype=draw(st.sampled_from([None, *STORAGE])),
        kv_dtype=draw(st.sampled_from([None, "bf16", "fp8", "fp32"])),
        cached_prefix_tokens=draw(st.integers(0, prompt - 1)),
        price_per_hour_usd=draw(st.one_of(st.none(), st.floats(0, 100))),
    )


def _numbers(value: Any):
    """Every number inside a nested dict / list."""
    if isinstance(value, dict):
        for v in value.values():
            yield from _numbers(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _numbers(v)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield value


TIMES = ("ttft_s", "tpot_s", "e2e_s")


def _times(e: Estimate) -> list[float]:
    return [getattr(s, t) or 0.0 for s in (e.ceiling, e.expected) for t in TIMES]


def _not_slower(faster: Estimate, slower: Estimate) -> None:
    for a, b in zip(_times(faster), _times(slower), strict=True):
        assert a <= b * (1 + 1e-9), (a, b)


@PROPERTY
@given(models(), gpus(), workloads())
def test_output_is_finite_and_json_round_trips(model, gpu, wl):
    data = estimate_dict(estimate(model, gpu, wl))
    assert all(math.isfinite(x) for x in _numbers(data))
    text = json.dumps(data, allow_nan=False)
    assert json.loads(text) == data


@PROPERTY
@given(models(), gpus(), workloads(), st.floats(1, 10), st.sampled_from(["bandwidth", "flops"]))
def test_more_bandwidth_or_flops_is_never_slower(model, gpu, wl, factor, which):
    if which == "bandwidth":
        update = {"memory_bandwidth_gb_s": min(gpu.memory_bandwidth_gb_s * factor, 1_000_000)}
    else:
        update = {"peak_tflops": {k: min(v * factor, 1e6) for k, v in gpu.peak_tflops.items()}}
    faster = GpuSpec.model_validate({**gpu.model_dump(), **update})
    _not_slower(estimate(model, faster, wl), estimate(model, gpu, wl))


@PROPERTY
@given(models(), gpus(), workloads(), st.integers(1, 512))
def test_tpot_never_falls_as_batch_grows(model, gpu, wl, more):
    small, large = estimate(model, gpu, wl), estimate(model, gpu, wl.model_copy(update={"batch": wl.batch + more}))
    assume(wl.output_tokens > 1)
    for scenario in ("ceiling", "expected"):
        a, b = getattr(small, scenario).tpot_s, getattr(large, scenario).tpot_s
        assert b >= a * (1 - 1e-9), (scenario, a, b)


@PROPERTY
@given(models(), gpus(), workloads(), st.integers(1, 32_768))
def test_tpot_never_falls_and_max_batch_never_grows_as_context_grows(model, gpu, wl, more):
    short = estimate(model, gpu, wl)
    long = estimate(model, gpu, wl.model_copy(update={"prompt_tokens": wl.prompt_tokens + more}))
    assume(wl.output_tokens > 1)
    for scenario in ("ceiling", "expected"):
        a, b = getattr(short, scenario).tpot_s, getattr(long, scenario).tpot_s
        assert b >= a * (1 - 1e-9), (scenario, a, b)
    assert long.memory.max_batch <= short.memory.max_batch


@PROPERTY
@given(models(), gpus(), workloads())
def test_expected_is_never_faster_than_ceiling(model, gpu, wl):
    e = estimate(model, gpu, wl)
    for t in TIMES:
        assert (getattr(e.expected, t) or 0.0) >= (getattr(e.ceiling, t) or 0.0) * (1 - 1e-9), t
    assert (e.expected.decode_tokens_per_s or 0.0) <= (e.ceiling.decode_tokens_per_s or 0.0) * (1 + 1e-9)


@PROPERTY
@given(models(), gpus(), workloads())
def test_doubling_gpus_never_adds_weight_bytes_per_gpu(model, gpu, wl):
    wl = with_valid_tp(model, wl)
    assume(wl.tp * 2 in tp_degrees(model, limit=wl.tp * 2))
    one = estimate(model, gpu, wl)
    two = estimate(model, gpu, wl.model_copy(update={"tp": wl.tp * 2}))
    assert two.memory.per_gpu.weights <= one.memory.per_gpu.weights * (1 + 1e-9)
    assert two.ceiling.prefill.part("weights").bytes <= one.ceiling.prefill.part("weights").bytes * (1 + 1e-9)


@PROPERTY
@given(models(), st.integers(1, 8))
def test_truncated_counts_follow_the_fields(model, layers):
    assume(layers < model.layers)
    model.params_total, model.kv_bytes_per_token()  # noqa: B018 - fill any cache first, as a real caller would
    short = model.truncated(layers)
    fresh = ModelSpec.model_validate(short.model_dump(by_alias=True))
    assert (short.params_total, short.params_active) == (fresh.params_total, fresh.params_active)


# ---- the HF importer never fails with anything but SpecError --------------------------------

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=10,
)


def _import_or_spec_error(config: dict[str, Any]) -> None:
    try:
        spec = from_hf_config(config, "config.json")
    except SpecError as exc:
        assert str(exc).startswith("config.json: ") and "\n" not in str(exc)
        return
    assert isinstance(spec, ModelSpec) and spec.params_total > 0


@settings(max_examples=examples(100), deadline=None)
@given(st.sampled_from(HF_CONFIGS), st.data())
def test_hf_import_of_a_mutated_real_config(path, data):
    config = json.loads(path.read_text())
    for key in data.draw(st.lists(st.sampled_from(sorted(config)), max_size=3, unique=True)):
        if data.draw(st.booleans()):
            del config[key]
        else:
            config[key] = data.draw(JSON_VALUES)
    _import_or_spec_error(config)


@settings(max_examples=examples(100), deadline=None)
@given(st.sampled_from(HF_CONFIGS), st.dictionaries(st.text(max_size=30), JSON_VALUES, max_size=8))
def test_hf_import_of_arbitrary_objects(path, extra):
    _import_or_spec_error(extra)  # arbitrary keys alone
    model_type = json.loads(path.read_text())["model_type"]
    _import_or_spec_error({"model_type": model_type, **extra})  # a supported type, arbitrary keys


@st.composite
def corners(draw) -> tuple[ModelSpec, GpuSpec, Workload]:
    """Every field at an end of its allowed range: the output must still be finite."""

    def end(low: float, high: float) -> float:
        return draw(st.sampled_from([low, high]))

    heads = end(1, 10_000)
    model = ModelSpec.model_validate(
        {
            "name": "corner",
            "layers": end(1, 10_000),
            "hidden_size": end(1, 1_000_000),
            "attention_heads": heads,
            "kv_heads": end(1, heads),
            "head_dim": end(1, 100_000),
            "intermediate_size": end(1, 10_000_000),
            "vocab_size": end(1, 100_000_000),
            "max_context": end(1, 1_000_000_000),
            "moe": draw(
                st.sampled_from(
                    [None, {"experts": 4096, "experts_per_token": 4096, "expert_intermediate_size": 1_000_000}]
                )
            ),
        }
    )
    low = draw(st.booleans())
    gpu = GpuSpec.model_validate(
        {
            "name": "corner",
            "source": "schema bounds",
            "memory_gb": 0.1 if low else 100_000,
            "memory_bandwidth_gb_s": 1 if low else 1_000_000,
            "peak_tflops": {"bf16": 0.001 if low else 1e6},
            "tdp_w": end(1, 100_000),
            "link": {"kind": "nvlink", "gb_s": 0.1 if low else 1_000_000, "latency_us": end(0, 1_000_000),
                     "source": "schema bounds"},
            "price_per_hour_usd": end(0, 100_000),
            "achievable": {"bandwidth": 0.01 if low else 1, "compute": 0.01 if low else 1,
                           "step_overhead_us": end(0, 1_000_000)},
        }
    )  # fmt: skip
    prompt = end(1, 100_000_000)
    wl = Workload(
        batch=end(1, 1_000_000),
        prompt_tokens=prompt,
        output_tokens=end(1, 100_000_000),
        tp=end(1, 4096),
        cached_prefix_tokens=end(0, prompt - 1),
        price_per_hour_usd=draw(st.sampled_from([None, 0, 100_000])),
    )
    return model, gpu, wl


@settings(max_examples=examples(30), deadline=None)
@given(corners())
def test_output_is_finite_at_the_corners_of_the_schema(case):
    model, gpu, wl = case
    assert all(math.isfinite(x) for x in _numbers(estimate_dict(estimate(model, gpu, wl))))


@PROPERTY
@given(models(), gpus(), workloads(), st.integers(1, 512))
def test_cost_per_output_token_never_rises_with_batch_while_memory_bound(model, gpu, wl, more):
    priced = wl.model_copy(update={"price_per_hour_usd": 2.0})
    small = estimate(model, gpu, priced)
    large = estimate(model, gpu, priced.model_copy(update={"batch": wl.batch + more}))
    assume(wl.output_tokens > 1 and large.ceiling.decode_bound == "memory")
    for scenario in ("ceiling", "expected"):
        a = getattr(small, scenario).usd_per_million_output_tokens
        b = getattr(large, scenario).usd_per_million_output_tokens
        assert b <= a * (1 + 1e-9), (scenario, a, b)


_LIMIT_CASES = [("llama-3.1-70b", "b200", 1), ("qwen2.5-72b", "mi300x", 1), ("deepseek-v3", "h20", 8),
                ("llama-3.1-8b", "l4", 1)]  # fmt: skip


@settings(max_examples=examples(30), deadline=None)
@given(st.sampled_from(_LIMIT_CASES), st.integers(1, 8), st.floats(0.0, 1.0))
def test_max_context_fits_however_it_splits_into_prompt_and_output(case, batch, share):
    # the invariants audit of 2026-12-05: at -p 1024 llama-3.1-70b on a B200 said 96,883, and a 96,627-token
    # prompt (96,883 in all) did not fit: the workspace had been the short prompt's
    from tokcost.hardware.library import load_gpu
    from tokcost.models.library import load_model

    name, gpu_name, tp = case
    model, gpu = load_model(name), load_gpu(gpu_name)
    limit = _estimate(model, gpu, Workload(tp=tp, batch=batch)).memory.max_context
    assume(2 <= limit < model.max_context)
    prompt = max(1, min(limit - 1, round(limit * share)))
    at = _estimate(model, gpu, Workload(tp=tp, batch=batch, prompt_tokens=prompt, output_tokens=limit - prompt))
    assert at.memory.fits and at.memory.max_context == limit  # the same limit whatever the prompt it is asked at
    past = _estimate(model, gpu, Workload(tp=tp, batch=batch, prompt_tokens=limit, output_tokens=1))
    assert not past.memory.fits
