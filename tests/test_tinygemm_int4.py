"""torch.compile's int4 is PyTorch's tinygemm: a dequantizing GEMV of its own, never pooled with other engines' int4.

gpt-fast's and torchao's int4 weight-only paths call `aten._weight_int4pack_mm` (tinygemm), not the Marlin, AWQ or
GPTQ kernels of the serving engines. At batch 1 it streams 0.55-0.62 of what fp16 torch.matmul streams at LLM shapes
on an A100 and an H100 (gemlite's README plots, priors.py): that is its prior, and the fit never hands it another
engine's int4 value. Before, it sat at the generic centre (a copy's rate) and the six int4 rows of gpt-fast and
torchao came out 17-57% faster than measured.
"""

from __future__ import annotations

import math

import pytest

from tokcost.cli.validate_cmd import load_specs
from tokcost.engine.estimate import estimate
from tokcost.engine.workload import Workload
from tokcost.hardware.library import load_gpu
from tokcost.models.library import load_model
from tokcost.profiles import load_engine
from tokcost.validation.cases import Pricer, prepare
from tokcost.validation.data import parse_rows
from tokcost.validation.priors import EFFICIENCY_PRIORS, TINYGEMM_INT4, engine_efficiency_prior, unpooled
from tokcost.validation.run import shipped_profiles
from tokcost.validation.space import Space
from tokcost.validation.writeback import resolved

INT4_BYTES_RATIO = (0.5 + 4 / 128) / 2  # 4 bits plus a bf16 scale and zero per 128 weights, against 16 bits
GEMLITE_M1_SPEEDUPS = (2.06, 2.33, 2.32, 2.26)  # tinygemm / fp16 torch.matmul at M=1: A100 4096^2, 8192^2; H100


def test_the_tinygemm_centre_is_gemlites_measured_ratio():
    shares = [INT4_BYTES_RATIO * s for s in GEMLITE_M1_SPEEDUPS]
    assert min(shares) == pytest.approx(0.548, abs=0.001) and max(shares) == pytest.approx(0.619, abs=0.001)
    assert TINYGEMM_INT4.centre == pytest.approx(math.sqrt(min(shares) * max(shares)), abs=0.005)  # log-middle
    generic = EFFICIENCY_PRIORS["m.wo"]
    assert (TINYGEMM_INT4.low, TINYGEMM_INT4.high) == (generic.low, generic.high)  # one range; the family's centre
    assert engine_efficiency_prior("torch-compile", "m.wo.int4") == TINYGEMM_INT4
    assert engine_efficiency_prior("vllm", "m.wo.int4") == generic  # Marlin and AWQ kernels: the generic centre
    assert unpooled("torch-compile", "m.wo.int4") and not unpooled("vllm", "m.wo.int4")
    assert not unpooled("torch-compile", "m.wo.int8")  # no published figure for its int8 path: it pools as before


def _row(i: int, *, source: str, framework: str, engine: str, version: str, gpu: str) -> dict:
    return {"id": f"r{i}", "source_id": source, "source": "somewhere", "quote": "| 1 |", "model": "llama-3.1-8b",
            "gpu": gpu, "gpus": 1, "weights": "int4-g128", "kv": "bf16", "compute": "bf16", "batch": 1,
            "prompt_tokens": 16, "output_tokens": 128, "framework": framework, "engine": engine,
            "engine_version": version, "graphs": True, "measured_at": "server", "metric": "tpot_ms",
            "value": 5.0}  # fmt: skip


def test_other_engines_int4_rows_never_reach_torch_compiles_tinygemm():
    # vLLM int4 rows from 3 sources on GPUs 2x apart in bandwidth: every engine's int4 value is identified; one
    # torchao source is not, and must keep tinygemm's figure, not the pooled Marlin-class value
    rows = [_row(i, source=s, framework="vllm", engine="vllm", version="0.10.0", gpu=g)
            for i, (s, g) in enumerate((("a", "h100-sxm"), ("b", "a100-40gb-sxm"), ("c", "l40s")))]  # fmt: skip
    rows.append(_row(9, source="d", framework="torchao", engine="torch-compile", version="0.8.0", gpu="a100-80gb-sxm"))
    parsed = parse_rows({"rows": rows}, "t.yaml")
    models, gpus = load_specs(parsed, "t.yaml")
    cases = prepare(parsed, models, gpus, shipped_profiles())
    space = Space(cases)
    space.gate(cases, Pricer())
    assert "all.m.wo.int4" in space.free  # the serving engines' int4 rows pool (3 sources, 2x in work)
    assert space.params["torch-compile.m.wo.int4"].parent is None  # tinygemm has no all-engines parent
    values = {**space.centres(), "all.m.wo.int4": 0.93, "vllm.m.wo.int4": 0.93, "vllm.v1.m.wo.int4": 0.93}
    assert resolved(space, values, "vllm", "v1", "m.wo.int4")[0] == 0.93  # the Marlin-class rows set it
    assert resolved(space, values, "torch-compile", "main", "m.wo.int4") == (TINYGEMM_INT4.centre, "prior")


def test_the_shipped_torch_compile_era_streams_int4_at_tinygemms_share():
    profile = load_engine("torch-compile")
    assert profile.kernels.memory.weight_only.int4 == pytest.approx(TINYGEMM_INT4.centre)
    assert profile.basis["m.wo.int4"] == "prior"
    # gpt-fast's Llama-2-7B int4 on an A100: the weights' stream at tinygemm's share, by hand from the spec
    model, gpu = load_model("llama-2-7b"), load_gpu("a100-80gb-sxm")
    work = Workload(weights_dtype="int4-g32-sym", prompt_tokens=6, output_tokens=200)
    memory = profile.kernels.memory
    plain = profile.model_copy(update={"kernels": profile.kernels.model_copy(update={"memory": memory.model_copy(
        update={"weight_only": memory.weight_only.model_copy(update={"int4": 1.0})})})})  # fmt: skip
    ratio = (
        estimate(model, gpu, work, engine=profile).expected.tpot_s
        / estimate(model, gpu, work, engine=plain).expected.tpot_s
    )
    # the int4 stream is most of a batch-1 step: the step grows by nearly the share's inverse, never more
    assert 1.3 < ratio < 1 / TINYGEMM_INT4.centre
