"""DeepSeek Sparse Attention (DeepSeek-V3.2): the indexer scores every cached key, attention reads the top k.

By hand from the spec (deepseek-v3.2.yaml: DeepSeek-V3's shapes; top k 2,048, 64 index heads of 128):
- KV per token and layer: the latent (512 + 64) x 2 B = 1,152 B at bf16, and the index key 128 + 4 B = 132 B;
- the indexer's weights a layer: 1,536 x 64 x 128 + 7,168 x 128 + 2 x 128 + 7,168 x 64 = 13,959,424;
- a decode step at c cached tokens reads min(c, 2,048) latents and c index keys per sequence and layer;
- a prompt of P tokens scores sum over i of min(i, 2,048) pairs in attention and P (P + 1) / 2 in the indexer.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokcost.engine.estimate import estimate
from tokcost.engine.features import FeatureSpace, Segment
from tokcost.engine.layout import Layout
from tokcost.engine.workload import Workload
from tokcost.hardware.library import load_gpu
from tokcost.models.hf_import import from_hf_config
from tokcost.models.library import load_model

V32, V3 = load_model("deepseek-v3.2"), load_model("deepseek-v3")
INDEXER = 1536 * 64 * 128 + 7168 * 128 + 2 * 128 + 7168 * 64
HF = Path(__file__).parent / "assets" / "hf"


def test_counts_by_hand():
    assert INDEXER == 13_959_424
    assert V32.params_total == V3.params_total + 61 * INDEXER
    assert V32.kv_bytes_per_token("bf16") == 61 * ((512 + 64) * 2 + 128 + 4) == 78_324
    # an FP8 cache is FlashMLA's sparse layout: the latent in FP8, a 4-byte scale per 128, the RoPE key at 16 bits
    # (vLLM's fp8_ds_mla: 656 B), beside the index key, FP8 whatever the cache
    assert V32.kv_bytes_per_token("fp8") == 61 * ((512 + 4 * 4 + 2 * 64) + 132) == 48_068
    assert V3.kv_bytes_per_token("fp8") == 61 * (512 + 64)  # dense MLA's FP8 cache: one byte an element


@pytest.mark.parametrize("cached", [100, 2047, 2048, 2049, 50_000])
def test_a_decode_step_reads_the_top_k_latents_and_every_index_key(cached):
    space = FeatureSpace.of(V32, Layout(tp=8))
    f = space.named(space.vector([Segment(4, cached, 1)]))
    assert f.kv_read["sparse"] == 4 * min(cached, 2048)
    assert f.kv_read["index"] == 4 * cached
    assert f.pairs_absorbed["sparse"] == 4 * min(cached + 1, 2048)  # itself included, at most the top k
    assert f.pairs_absorbed["index"] == 4 * (cached + 1)


def test_a_prompt_scores_at_most_the_top_k_per_query_and_the_indexer_all_of_its_keys():
    space = FeatureSpace.of(V32, Layout(tp=8))
    f = space.named(space.vector([Segment(1, 0, 4096)]))
    assert f.pairs_absorbed["sparse"] + f.pairs_heads["sparse"] == 2048 * 2049 / 2 + (4096 - 2048) * 2048
    assert f.pairs_absorbed["index"] == 4096 * 4097 / 2


def test_memory_keeps_every_token_and_its_index_key():
    wl = Workload(tp=8, batch=2, prompt_tokens=30_000, output_tokens=2_000)
    kv = estimate(V32, load_gpu("h200"), wl).memory.kv_cache_bytes_total
    assert kv == pytest.approx(8 * 2 * 32_000 * 78_324, rel=1e-9)  # the latent and index key whole on all 8 ranks
    dense = estimate(V3, load_gpu("h200"), wl).memory.kv_cache_bytes_total
    assert kv / dense == pytest.approx(78_324 / 70_272, rel=1e-9)


def test_past_the_top_k_decode_is_cheaper_than_dense_and_before_it_dearer():
    gpu = load_gpu("h200")
    long, short = Workload(tp=8, batch=8, prompt_tokens=100_000), Workload(tp=8, batch=8, prompt_tokens=1_000)
    assert estimate(V32, gpu, long).ceiling.tpot_s < 0.5 * estimate(V3, gpu, long).ceiling.tpot_s
    assert estimate(V32, gpu, short).ceiling.tpot_s > estimate(V3, gpu, short).ceiling.tpot_s  # the indexer's cost


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 200_000), st.integers(1, 64))
def test_sparse_reads_never_exceed_dense_and_tpot_grows_with_the_context(prompt, batch):
    gpu = load_gpu("h200")
    wl = Workload(tp=8, batch=batch, prompt_tokens=prompt, output_tokens=64)
    longer = Workload(tp=8, batch=batch, prompt_tokens=prompt + 1_000, output_tokens=64)
    sparse, dense = estimate(V32, gpu, wl).ceiling, estimate(V3, gpu, wl).ceiling

    def attention_kv(scenario):
        priced = scenario.decode_step.stages
        return sum(p.stage.count * p.stage.kv_bytes for p in priced if p.stage.name == "attention (KV cache read)")

    assert attention_kv(sparse) <= attention_kv(dense) * (1 + 1e-12)
    assert estimate(V32, gpu, longer).ceiling.tpot_s >= sparse.tpot_s * (1 - 1e-12)  # flat past the top-k: rounding


def test_hf_import_reads_the_indexer_keys():
    data = json.loads((HF / "deepseek_v3.json").read_text())
    data.update(model_type="deepseek_v32", architectures=["DeepseekV32ForCausalLM"], index_topk=2048,
                index_head_dim=128, index_n_heads=64)  # fmt: skip
    spec = from_hf_config(data, "v3.2")
    assert {k.mixer for k in spec.plan.kinds} == {"sparse"}
    assert (spec.sparse_attention.top_k_tokens, spec.sparse_attention.index_heads) == (2048, 64)
    assert spec.params_total == V32.params_total and spec.kv_bytes_per_token("bf16") == 78_324


def test_the_readmes_sparse_attention_figures_are_the_tools():
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    gpu = load_gpu("h200")

    def tpot_ms(model, prompt, scenario):
        e = estimate(model, gpu, Workload(tp=8, batch=8, prompt_tokens=prompt))
        return f"{getattr(e, scenario).tpot_s * 1e3:.2f}"

    said = (f"ceiling TPOT at a 100,000-token context is {tpot_ms(V32, 100_000, 'ceiling')} ms against "
            f"{tpot_ms(V3, 100_000, 'ceiling')} ms for DeepSeek-V3's dense MLA (expected "
            f"{tpot_ms(V32, 100_000, 'expected')}\nagainst {tpot_ms(V3, 100_000, 'expected')} ms); at 1,000 tokens the "
            f"indexer makes it a little dearer ({tpot_ms(V32, 1_000, 'ceiling')} against "
            f"{tpot_ms(V3, 1_000, 'ceiling')} ms)")  # fmt: skip
    assert " ".join(said.split()) in " ".join(text.split())


def test_glm_5_imports_as_sparse_and_index_sharing_is_said_to_be_an_upper_bound():
    data = json.loads((HF / "new" / "glm-5.json").read_text())
    glm = from_hf_config(data, "glm-5")
    assert {k.mixer for k in glm.plan.kinds} == {"sparse"} and glm.sparse_attention.index_heads == 32
    assert 740e9 < glm.params_total < 748e9  # zai-org's 744B
    assert "reuse another layer's top-k" not in glm.notes
    shared = from_hf_config({**data, "index_topk_freq": 4, "index_skip_topk_offset": 3}, "glm-5.2-like")
    assert "57 of 78 sparse layers reuse another layer's top-k selection" in shared.notes


def _indexer_prefill_s(gpu: str, weights: str, scenario: str = "ceiling") -> float:
    e = estimate(V32, load_gpu(gpu), Workload(tp=8, batch=4, prompt_tokens=16_000, weights_dtype=weights))
    priced = getattr(e, scenario).prefill.stages
    return sum(p.seconds for p in priced if p.stage.name == "indexer (scores every cached key)")


def test_the_indexer_scores_at_fp8_whatever_the_matmuls_run_at():
    # its keys and queries are FP8 in every engine (fp8_mqa_logits): bf16 weights had priced it at the 16-bit rate,
    # twice the FP8 time on an H200; an A100, with no FP8 peak, runs it at 16 bits
    assert _indexer_prefill_s("h200", "bf16") == pytest.approx(_indexer_prefill_s("h200", "fp8"), rel=1e-9)
    assert _indexer_prefill_s("h200", "bf16", "expected") == pytest.approx(
        _indexer_prefill_s("h200", "fp8", "expected"), rel=1e-9)  # fmt: skip
    assert _indexer_prefill_s("a100-80gb-sxm", "bf16") > 1.9 * _indexer_prefill_s("h200", "bf16") * 989.4 / 312
