"""Decode attention by architecture: MLA's latent-cache kernel is a class of its own, apart from paged GQA.

The engine prices each KV-reading kernel with its class's memory-side efficiency (roofline.kernel_class), the
profile states one per class (an old file without `attention_mla` prices MLA with `attention`'s), the fit reads
the class a row's model uses and frees it only on 3 sources spanning 2x in work (space.py), and --explain names it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tokcost.cli.validate_cmd import load_specs
from tokcost.engine.estimate import estimate
from tokcost.engine.explain import explanation_lines
from tokcost.engine.workload import Workload
from tokcost.hardware.library import load_gpu
from tokcost.models.library import load_model
from tokcost.profiles import GENERIC, KernelEfficiency, MemorySide, load_engine
from tokcost.validation.cases import Pricer, prepare
from tokcost.validation.data import load_rows, parse_rows
from tokcost.validation.run import shipped_profiles
from tokcost.validation.space import Space

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tokcost" / "validation" / "published.yaml"
GQA, MLA = 0.9, 0.3  # two efficiencies far apart, so that a kernel priced with the wrong one cannot pass
SPLIT = GENERIC.model_copy(update={"kernels": KernelEfficiency(memory=MemorySide(attention=GQA, attention_mla=MLA))})


def _attention_rows(model_name: str, engine=SPLIT, *, cached: int = 4000, tp: int = 8):
    """(ceiling, expected) priced attention rows of one decode step at batch 1, `cached` tokens, and the GPU."""
    model, gpu = load_model(model_name), load_gpu("h200")
    e = estimate(model, gpu, Workload(batch=1, prompt_tokens=cached, output_tokens=2, tp=tp), engine=engine)
    d = e.deployment
    ceiling, expected = (d.decode(d.rates(s), batch=1, cached=cached) for s in ("ceiling", "expected"))
    pick = [i for i, p in enumerate(ceiling.stages) if p.stage.name == "attention (KV cache read)"]
    return [(ceiling.stages[i], expected.stages[i]) for i in pick], gpu


def test_an_mla_models_decode_attention_streams_at_the_mla_efficiency():
    # DeepSeek-V3: one latent row of kv_lora_rank + rope_head_dim = 512 + 64 elements per token and layer, bf16
    # (DeepSeek-V3 report, section 2.1.1), whole on every TP rank: a step at 4,000 cached tokens reads
    # 4,000 x 576 x 2 B = 4,608,000 B of cache per layer, at the copy rate x MLA's efficiency
    rows, gpu = _attention_rows("deepseek-v3")
    copy = gpu.hardware.copy_bandwidth.fraction
    assert rows and all(c.stage.kind == "attention_mla" for c, _ in rows)
    for c, x in rows:
        assert c.stage.kv_bytes == 4000 * (512 + 64) * 2
        assert c.memory_s == pytest.approx(c.stage.count * c.stage.bytes / gpu.bandwidth_bytes_per_s)
        assert x.memory_s == pytest.approx(c.memory_s / (copy * MLA))  # not GQA's 0.9


def test_a_gqa_models_decode_attention_streams_at_the_paged_efficiency():
    # Llama-3.1-70B at TP 8: 1 of its 8 KV heads of 128 per rank, K and V, bf16: 4,000 x 2 x 128 x 2 B per layer
    rows, gpu = _attention_rows("llama-3.1-70b")
    copy = gpu.hardware.copy_bandwidth.fraction
    assert rows and all(c.stage.kind == "attention" for c, _ in rows)
    for c, x in rows:
        assert c.stage.kv_bytes == 4000 * 2 * 128 * 2
        assert x.memory_s == pytest.approx(c.memory_s / (copy * GQA))  # not MLA's 0.3
    sliding, _ = _attention_rows("mistral-7b", tp=1)  # a sliding window is a paged GQA kernel too
    assert sliding and all(c.stage.kind == "attention" for c, _ in sliding)


OLD_FILE = """name: old
source: a profile written before MLA had a class of its own, 2026-11
newest: main
eras:
  main:
    kernels:
      memory:
        attention: 0.6
"""


def test_an_engine_file_without_the_mla_key_prices_mla_as_attention(tmp_path):
    path = tmp_path / "old.yaml"
    path.write_text(OLD_FILE, encoding="utf-8")
    old = load_engine(str(path))
    assert old.kernels.memory.attention_mla is None
    assert old.kernels.memory_of("attention_mla") == old.kernels.memory_of("attention") == 0.6
    rows, gpu = _attention_rows("deepseek-v3", engine=old)
    copy = gpu.hardware.copy_bandwidth.fraction
    assert all(x.memory_s == pytest.approx(c.memory_s / (copy * 0.6)) for c, x in rows)


def test_every_builtin_era_states_its_mla_efficiency():
    for (engine, era), p in shipped_profiles().items():
        if engine not in ("generic", "lmdeploy"):  # generic: the identity; lmdeploy: no published row yet
            assert p.kernels.memory.attention_mla is not None, f"{engine}@{era}"
            assert "m.attention_mla" in p.basis, f"{engine}@{era}"


def _mla_cases(sources: tuple[str, ...]):
    """DeepSeek-V3 decode rows on 8 x H200 (TPOT under SGLang) whose KV reads are a fifth to a half of the step,
    their work per step spanning 3x (batch 8 at 32K tokens to batch 128 at 4K), one source each as given."""
    shapes = ((8, 32_000), (64, 8_000), (128, 4_000))
    rows = [{"id": f"r{i}", "source_id": source, "source": "somewhere", "quote": "| 1 |", "model": "deepseek-v3",
             "gpu": "h200", "gpus": 8, "weights": "fp8", "kv": "bf16", "compute": "fp8", "batch": batch,
             "prompt_tokens": prompt, "output_tokens": 64, "framework": "sglang", "engine": "sglang",
             "engine_version": "0.4.3", "graphs": True, "measured_at": "server", "metric": "tpot_ms", "value": 50.0}
            for i, ((batch, prompt), source) in enumerate(zip(shapes, sources, strict=True))]  # fmt: skip
    parsed = parse_rows({"rows": rows}, "t.yaml")
    models, gpus = load_specs(parsed, "t.yaml")
    return prepare(parsed, models, gpus, shipped_profiles())


def _free(cases) -> tuple[str, ...]:
    space = Space(cases)
    space.gate(cases, Pricer())
    return space.free


def test_the_fit_reads_mla_apart_and_frees_it_only_on_three_sources_spanning_twice_the_work():
    cases = _mla_cases(("a", "b", "c"))
    assert all("m.attention_mla" in c.keys and "m.attention" not in c.keys for c in cases)
    assert max(c.work_s for c in cases) >= 2 * min(c.work_s for c in cases)
    assert "sglang.m.attention_mla" in _free(cases)  # an engine's own value: never pooled across engines
    assert "sglang.m.attention_mla" not in _free(_mla_cases(("a", "b", "b")))  # two sources
    assert "sglang.m.attention_mla" not in _free(_mla_cases(("a", "a", "a")))  # one (the published MLA rows: dstack)
    published = {r.source_id for r in load_rows(DATA) if load_model(r.model).mla is not None}
    assert len(published) < 3  # so MLA's efficiency ships at its prior, and says so


@pytest.mark.parametrize(("model", "named"), [("deepseek-r1", "MLA latent cache: attention_mla"),
                                              ("llama-3.1-8b", "paged GQA / MHA: attention")])  # fmt: skip
def test_explain_names_the_attention_class(model, named):
    e = estimate(load_model(model), load_gpu("h200"), Workload(batch=1, prompt_tokens=100, output_tokens=2, tp=8),
                 engine=load_engine("sglang"))  # fmt: skip
    memory = [line for line in explanation_lines(e) if "memory side:" in line]
    assert len(memory) == 1 and f"decode attention ({named})" in memory[0]
