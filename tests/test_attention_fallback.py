"""Decode attention is never pooled across engines: an engine its rows do not pin takes its kernel family's prior.

The engines run different decode-attention kernels (XQA, FlashInfer, vLLM's PagedAttention, FlashAttention's paged
decode), 2-3x apart at one shape (priors.py cites the microbenchmarks), so the fit has no all-engines value for
`m.attention`: an engine's value is its own rows' where they identify it (3 sources, 2x in work: space.py), else its
family's prior centre, labelled "prior" in the profile; never the engine with most rows' value.
"""

from __future__ import annotations

import math

import pytest

from tokcost.cli.validate_cmd import load_specs
from tokcost.profiles import EFFICIENCY_RANGE
from tokcost.validation.cases import Pricer, prepare
from tokcost.validation.data import parse_rows
from tokcost.validation.priors import (
    ATTENTION_BY_ENGINE,
    ATTENTION_BY_ERA,
    EFFICIENCY_PRIORS,
    engine_efficiency_prior,
)
from tokcost.validation.run import shipped_profiles
from tokcost.validation.space import Space, param_prior
from tokcost.validation.writeback import resolved

FITTED = 0.62  # a value the fit might find for TensorRT-LLM's rows: far from every family's centre


def _row(i: int, *, source: str, engine: str, version: str, batch: int, prompt: int) -> dict:
    return {"id": f"r{i}", "source_id": source, "source": "somewhere", "quote": "| 1 |", "model": "llama-3.1-70b",
            "gpu": "h200", "gpus": 4, "weights": "bf16", "kv": "bf16", "compute": "bf16", "batch": batch,
            "prompt_tokens": prompt, "output_tokens": 64, "framework": engine, "engine": engine,
            "engine_version": version, "graphs": True, "measured_at": "server", "metric": "tpot_ms",
            "value": 40.0}  # fmt: skip


def _space() -> Space:
    """TensorRT-LLM in-flight rows from 3 sources whose KV reads span 3x in work (its attention identified), and
    one SGLang source: Llama-3.1-70B decode on 4 x H200, at long contexts where attention is most of a step."""
    shapes = ((32, 8_000), (64, 8_000), (128, 8_000))
    rows = [_row(i, source=s, engine="tensorrt-llm", version="0.17.0", batch=b, prompt=p)
            for i, ((b, p), s) in enumerate(zip(shapes, ("a", "b", "c"), strict=True))]  # fmt: skip
    rows += [_row(9 + i, source="d", engine="sglang", version="0.4.0", batch=b, prompt=p)
             for i, (b, p) in enumerate(shapes)]  # fmt: skip
    parsed = parse_rows({"rows": rows}, "t.yaml")
    models, gpus = load_specs(parsed, "t.yaml")
    cases = prepare(parsed, models, gpus, shipped_profiles())
    space = Space(cases)
    space.gate(cases, Pricer())
    return space


def test_an_engine_without_its_own_attention_takes_its_kernel_familys_prior_not_another_engines_rows():
    space = _space()
    assert "tensorrt-llm.m.attention" in space.free  # 3 sources spanning 2x: identified
    assert "sglang.m.attention" not in space.free  # one source
    assert "all.m.attention" not in space.params  # no pool across engines for decode attention
    assert "all.m.gemv" in space.params  # the weight stream still pools (one kind of kernel everywhere)
    assert "tensorrt-llm.inflight.m.attention" in space.free
    values = {**space.centres(), "tensorrt-llm.m.attention": FITTED, "tensorrt-llm.inflight.m.attention": FITTED}
    assert resolved(space, values, "tensorrt-llm", "inflight", "m.attention") == (FITTED, "fitted")
    assert resolved(space, values, "tensorrt-llm", "static", "m.attention") == (FITTED, "engine")  # no rows of its own
    # SGLang runs FlashInfer on CUDA: a copy's rate (priors.py), whatever TensorRT-LLM's rows say
    assert resolved(space, values, "sglang", "main", "m.attention") == (1.0, "prior")
    # TGI's ROCm builds run vLLM's paged kernels: a copy's rate over 2-3 (FlashInfer's blog, figure 9)
    assert resolved(space, values, "tgi", "main", "m.attention") == (ATTENTION_BY_ENGINE["tgi"].centre, "prior")


def test_every_shipped_era_without_its_own_attention_states_its_familys_centre():
    for (engine, era), p in shipped_profiles().items():
        basis = p.basis.get("m.attention")
        if engine in ("generic", "lmdeploy") or basis is None:
            continue
        assert basis != "all engines", f"{engine}@{era}"
        if basis == "prior":
            assert p.kernels.memory.attention == param_prior(engine, era, "m.attention").centre, f"{engine}@{era}"


@pytest.mark.parametrize("engine", sorted(ATTENTION_BY_ENGINE) + ["sglang", "mlc", "llama.cpp"])
def test_attention_priors_are_physical(engine):
    prior = engine_efficiency_prior(engine, "m.attention")
    generic = EFFICIENCY_PRIORS["m.attention"]
    assert EFFICIENCY_RANGE[0] <= prior.low <= prior.centre <= prior.high <= EFFICIENCY_RANGE[1]
    assert (prior.low, prior.high) == (generic.low, generic.high)  # one physical range; the family sets the centre
    if engine in ATTENTION_BY_ENGINE:
        # FlashInfer's tensor-core GQA decode is 2-3x vLLM's PagedAttention (flashinfer.ai, 2024-02-02, figure 9)
        assert 2.0 <= generic.centre / prior.centre <= 3.0


def test_vllm_before_v1_takes_its_paged_kernels_figure_never_its_engines_pooled_value():
    # V1 rows from 3 sources identify vLLM's decode attention; a V0 row of its own still reads PagedAttention's 0.41
    shapes = ((32, 8_000), (64, 8_000), (128, 8_000))
    rows = [_row(i, source=s, engine="vllm", version="0.10.0", batch=b, prompt=p)
            for i, ((b, p), s) in enumerate(zip(shapes, ("a", "b", "c"), strict=True))]  # fmt: skip
    rows.append(_row(9, source="d", engine="vllm", version="0.6.3", batch=64, prompt=8_000))
    parsed = parse_rows({"rows": rows}, "t.yaml")
    models, gpus = load_specs(parsed, "t.yaml")
    cases = prepare(parsed, models, gpus, shipped_profiles())
    space = Space(cases)
    space.gate(cases, Pricer())
    assert space.params["vllm.v0.m.attention"].parent is None  # its own kernel family: no engine value above it
    assert space.params["vllm.v1.m.attention"].parent == "vllm.m.attention"
    assert "vllm.m.attention" in space.free and "vllm.v0.m.attention" not in space.free  # one source
    values, _ = space.resolve({"vllm.m.attention": math.log(FITTED)})
    paged = ATTENTION_BY_ERA[("vllm", "v0")].centre
    assert paged == pytest.approx(0.41) and values["vllm.v0.m.attention"] == pytest.approx(paged)
    assert values["vllm.v1.m.attention"] == pytest.approx(FITTED)
    assert resolved(space, values, "vllm", "v0", "m.attention") == (paged, "prior")
    assert resolved(space, values, "vllm", "eager", "m.attention") == (paged, "prior")  # no rows: its family too
    assert resolved(space, values, "vllm", "v1", "m.attention")[1] in ("fitted", "engine")
